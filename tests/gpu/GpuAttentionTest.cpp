//===- GpuAttentionTest.cpp - attention's kernels on the GPU vs NVRTC's ---===//
//
// Attention's forward kernels (every schedule and shape class) against the
// NVRTC reference (plain CUDA C++, fp32 math). Fresh random inputs per
// case, outputs poisoned with NaN on the device before the launch, every
// element compared. Skips, saying why, without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/CodegenUtil.h"
#include "../unit/TestUtil.h"
#include "AttentionCase.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;
using test::runOnGpu;
using ::testing::HasSubstr;
using ::testing::Not;

using test::attentionOnDevice;
using test::AttentionOnGpu;
using test::AttnCase;
using test::bf16;
using test::caseName;
using test::f16;

namespace {

TEST_P(AttentionOnGpu, MatchesNvrtcReference) {
  REQUIRE_GPU();
  const AttnCase &c = GetParam();
  kernels::AttentionShape s{c.B,      c.H,     c.N, c.N,      c.D,
                            c.causal, c.dtype, 0,   c.kvHeads};
  kernels::AttentionConfig config;
  config.wgmma = 0; // the Shapes suite: mma.sync (on every GPU)
  config.persistent = c.persistent;
  config.dynamicTiles = c.dynamicTiles;
  config.headGroup = c.headGroup;
  config.tmaStore = c.tmaStore;
  config.staticShapes = c.staticShapes;
  config.narrowStepInDiagonal = c.narrowInDiagonal;
  config.alignRowsToEnd = c.alignRowsToEnd;
  config.maskedBlockFirst = c.maskedFirst;
  config.oneShotLoads = c.oneShotLoads;
  if (c.wgmma) {
    if (cuda::device().arch() != "sm_90a")
      GTEST_SKIP() << "SKIPPED: the wgmma schedule needs sm_90a, this GPU is "
                   << cuda::device().arch();
    config.wgmma = -1; // the default schedule: wgmma, 8 warps, TMA
    config.tma = c.tma;
    config.warpSpecialize = c.warpSpecialize;
    config.pingpong = c.pingpong;
    config.overlap = c.overlap;
    // Both pipelines: 3 stages keep P·V in flight into the next iteration
    // (fetching 1 ahead), 2 wait for it in its own.
    // (The masked block first, asked for, takes the default's 2: 3 leave
    // no room for overlap's V buffer, without which it does not apply.)
    config.stages = c.N % 2 || c.maskedFirst > 0 ? 2 : 3;
  }
  auto make = [&](uint64_t seed, bool rand, int64_t H) {
    HostTensor t = c.bshd ? HostTensor(c.dtype, {c.B, H, c.N, c.D},
                                       {c.N * H * c.D, c.D, H * c.D, 1})
                          : HostTensor(c.dtype, {c.B, H, c.N, c.D});
    if (rand)
      t.fillRandom(seed, -2, 2);
    return t;
  };
  const int64_t Hk = c.kvHeads > 0 ? c.kvHeads : c.H;
  uint64_t seed = uint64_t(c.N * 131 + c.D * 7 + c.causal);
  HostTensor q = make(seed, true, c.H), k = make(seed + 1, true, Hk),
             v = make(seed + 2, true, Hk);
  HostTensor o = make(0, false, c.H), lse(DType::f32, {c.B, c.H, c.N});
  DeviceTensors dt = attentionOnDevice(q, k, v, o, lse);
  Kernel kernel = kernels::attentionForward(s, config);
  CompiledKernel compiled = runOnGpu(kernel, dt, c.dynamicTiles > 0 ? 3 : 1);
  // Paths per tensor: at N % 4 != 0 LSE's rows (N fp32) are not 16-byte
  // aligned, and only LSE takes element accesses; K and V keep TMA. With
  // run-time shapes LSE is never specialised (one variant for every N).
  EXPECT_EQ(unalignedTensors(kernel, dt.refs),
            c.N % 4 && c.staticShapes > 0 ? std::vector<std::string>{"LSE"}
                                          : std::vector<std::string>{});
  std::string report;
  for (const std::string &line : compiled.report)
    report += line + "\n";
  if (c.wgmma && c.tma != 0)
    EXPECT_THAT(report, HasSubstr(": TMA (cp.async.bulk.tensor")) << report;
  if (c.oneShotLoads > 0)
    EXPECT_THAT(report, HasSubstr("once, issued where it stands")) << report;
  EXPECT_THAT(report, Not(HasSubstr("tensor Q is not specialised")));
  EXPECT_THAT(report, Not(HasSubstr("tensor K is not specialised")));
  dt.download("O", o);
  dt.download("LSE", lse);

  HostTensor oRef(DType::f32, {c.B, c.H, c.N, c.D}),
      lseRef(DType::f32, lse.shape());
  cuda::Buffer ro(oRef.storageBytes()), rl(lseRef.storageBytes());
  kernels::attentionReferenceGpu(s, dt.refs["Q"], dt.refs["K"], dt.refs["V"],
                                 ro.data(), rl.data());
  ro.download(oRef.data(), oRef.storageBytes());
  rl.download(lseRef.data(), lseRef.storageBytes());

  ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
  EXPECT_EQ(eo.nonFinite, 0) << "unwritten or NaN outputs";
  EXPECT_LE(eo.relative, c.dtype == DType::bf16 ? 1e-2 : 5e-3)
      << "max abs " << eo.maxAbs;
  EXPECT_LE(el.relative, 1e-4) << "max abs " << el.maxAbs;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionOnGpu,
    ::testing::Values(AttnCase{1, 2, 1, 64, false, bf16, false},
                      AttnCase{1, 2, 1, 128, true, f16, false},
                      AttnCase{2, 2, 17, 64, true, bf16, false},
                      AttnCase{1, 3, 17, 128, false, f16, true},
                      AttnCase{2, 2, 128, 64, false, f16, false},
                      AttnCase{1, 2, 128, 128, true, bf16, false},
                      AttnCase{1, 2, 1000, 64, true, f16, true},
                      AttnCase{2, 1, 1000, 128, false, bf16, false},
                      AttnCase{1, 2, 4096, 64, false, bf16, false},
                      AttnCase{1, 2, 4096, 128, true, f16, false},
                      AttnCase{1, 1, 8191, 128, false, bf16, true},
                      AttnCase{1, 2, 8191, 64, true, bf16, false},
                      AttnCase{1, 1, 8191, 128, true, f16, false},
                      // B·H past the GPU's 65535 grid y (folded into z).
                      AttnCase{4100, 16, 9, 64, false, bf16, false}),
    [](const auto &info) { return caseName(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Wgmma, AttentionOnGpu,
    ::testing::Values(AttnCase{1, 2, 1, 64, false, bf16, false, true},
                      AttnCase{2, 2, 17, 128, true, f16, false, true},
                      AttnCase{1, 3, 17, 64, false, f16, true, true},
                      AttnCase{1, 2, 128, 128, true, bf16, false, true},
                      AttnCase{1, 2, 1000, 64, true, f16, true, true},
                      AttnCase{2, 1, 1000, 128, false, bf16, false, true},
                      AttnCase{1, 2, 4096, 128, true, bf16, false, true},
                      AttnCase{1, 1, 8191, 128, false, f16, true, true},
                      AttnCase{1, 2, 8191, 64, true, bf16, false, true},
                      AttnCase{4100, 16, 9, 64, false, bf16, false, true}),
    [](const auto &info) { return caseName(info.param); });

// The Hopper schedule with K and V by cp.async instead of TMA.
INSTANTIATE_TEST_SUITE_P(
    WgmmaCpAsync, AttentionOnGpu,
    ::testing::Values(AttnCase{2, 2, 17, 128, true, f16, false, true, 0},
                      AttnCase{1, 2, 1000, 64, true, f16, true, true, 0},
                      AttnCase{1, 1, 8191, 128, false, bf16, false, true, 0}),
    [](const auto &info) { return caseName(info.param); });

// Warp roles: a producer warpgroup issues the TMA copies, 8 warps compute.
// Causal runs two loops over the same buffers, one after the other.
INSTANTIATE_TEST_SUITE_P(
    WarpSpecialized, AttentionOnGpu,
    ::testing::Values(AttnCase{1, 2, 1, 64, false, bf16, false, true, -1, 1},
                      AttnCase{2, 2, 17, 128, true, f16, false, true, -1, 1},
                      AttnCase{1, 2, 1000, 64, true, f16, true, true, -1, 1},
                      AttnCase{2, 1, 1000, 128, false, bf16, false, true, -1,
                               1},
                      AttnCase{1, 2, 4096, 128, true, bf16, false, true, -1, 1},
                      AttnCase{1, 1, 8191, 128, false, f16, true, true, -1, 1}),
    [](const auto &info) { return caseName(info.param); });

// Ping-pong: the two compute warpgroups take turns issuing Q·Kᵀ (named
// barriers); one iteration, ragged ends, two loops (causal), both stage
// counts.
INSTANTIATE_TEST_SUITE_P(
    Pingpong, AttentionOnGpu,
    ::testing::Values(
        AttnCase{1, 2, 1, 128, false, bf16, false, true, -1, 1, 1},
        AttnCase{2, 2, 17, 128, true, f16, false, true, -1, 1, 1},
        AttnCase{1, 2, 1000, 64, true, f16, true, true, -1, 1, 1},
        AttnCase{2, 1, 1000, 128, false, bf16, false, true, -1, 1, 1},
        AttnCase{1, 2, 4096, 128, true, bf16, false, true, -1, 1, 1},
        AttnCase{1, 1, 8191, 128, false, f16, true, true, -1, 1, 1}),
    [](const auto &info) { return caseName(info.param); });

// P·V one iteration behind Q·Kᵀ (kiln-overlap-dots): loops of one
// iteration, none (causal's first row block has no unmasked key block),
// ragged ends, with and without the producer warpgroup, both stage counts.
INSTANTIATE_TEST_SUITE_P(
    Overlap, AttentionOnGpu,
    ::testing::Values(
        AttnCase{1, 2, 1, 128, false, bf16, false, true, -1, -1, -1, 1},
        AttnCase{2, 2, 17, 128, true, f16, false, true, -1, -1, -1, 1},
        AttnCase{1, 2, 1000, 64, true, f16, true, true, -1, -1, -1, 1},
        AttnCase{2, 1, 1001, 128, false, bf16, false, true, -1, -1, -1, 1},
        AttnCase{1, 2, 4095, 128, true, bf16, false, true, -1, -1, -1, 1},
        AttnCase{1, 1, 8191, 128, false, f16, true, true, -1, -1, -1, 1},
        AttnCase{1, 2, 1001, 128, false, bf16, true, true, -1, 1, 1, 1},
        AttnCase{1, 1, 8191, 64, false, bf16, false, true, 0, -1, -1, 1}),
    [](const auto &info) { return caseName(info.param); });

// Persistent CTAs looping over the row blocks: fewer programs than SMs, and
// 2 to 8 per CTA (132 SMs); with the producer warpgroup (its stage ring runs
// on across them), ping-pong and overlap; by cp.async; TMA without a
// producer (persistence refused, as the report says); mma.sync.
INSTANTIATE_TEST_SUITE_P(
    Persistent, AttentionOnGpu,
    ::testing::Values(
        AttnCase{2, 2, 17, 128, true, f16, false, true, -1, 1, 1, -1, 1},
        AttnCase{4, 8, 1000, 128, false, bf16, false, true, -1, 1, 1, -1, 1},
        AttnCase{4, 8, 4095, 128, true, bf16, false, true, -1, 1, 1, 1, 1},
        AttnCase{4, 8, 2049, 128, false, f16, false, true, -1, 1, 1, 1, 1},
        AttnCase{2, 16, 2048, 128, true, f16, true, true, -1, 1, 1, -1, 1},
        AttnCase{4, 8, 1000, 64, true, bf16, false, true, 0, -1, -1, -1, 1},
        AttnCase{4, 8, 1000, 64, false, bf16, false, true, -1, 0, -1, -1, 1},
        AttnCase{4, 8, 1000, 64, true, f16, false, false, -1, -1, -1, -1, 1}),
    [](const auto &info) { return caseName(info.param); });

// Dynamic tiles (three launches of one module each, the outputs poisoned
// before every one): fewer programs than SMs; many per CTA, causal in groups
// of 3 of 40 heads (the last group ragged) and of every head; non-causal;
// D=64; with the default overlap and without.
INSTANTIATE_TEST_SUITE_P(
    DynamicTiles, AttentionOnGpu,
    ::testing::Values(
        AttnCase{2, 2, 17, 128, true, f16, false, true, -1, 1, 1, -1, 1, 1},
        AttnCase{4, 10, 1000, 128, true, bf16, false, true, -1, 1, 1, -1, 1, 1,
                 3},
        AttnCase{2, 8, 4095, 128, true, bf16, false, true, -1, 1, 1, 1, 1, 1},
        AttnCase{4, 8, 2049, 128, false, f16, true, true, -1, 1, 1, 1, 1, 1},
        AttnCase{4, 8, 1000, 64, true, bf16, false, true, -1, 1, 1, -1, 1, 1,
                 5}),
    [](const auto &info) { return caseName(info.param); });

// Non-causal with a ragged end (the default schedule): from 16 key blocks
// on, unmasked blocks, then a masked loop over the last whole block and the
// ragged one (64-key blocks at D=64); fewer, one masked loop; mma.sync.
INSTANTIATE_TEST_SUITE_P(
    RaggedKeys, AttentionOnGpu,
    ::testing::Values(AttnCase{1, 2, 385, 64, false, bf16, false, true},
                      AttnCase{2, 3, 383, 128, false, f16, false, true},
                      AttnCase{1, 2, 4097, 64, false, bf16, true, true},
                      AttnCase{3, 4, 3001, 128, false, bf16, false, true},
                      AttnCase{2, 2, 2049, 64, false, f16, false, true},
                      AttnCase{1, 2, 641, 128, false, f16, true, false}),
    [](const auto &info) { return caseName(info.param); });

// Grouped heads (G query heads per K/V head) under the default schedule:
// causal or not, D=64 and 128, ragged N, bshd, one K/V head for all.
INSTANTIATE_TEST_SUITE_P(GroupedHeads, AttentionOnGpu,
                         ::testing::Values(AttnCase{.B = 2,
                                                    .H = 8,
                                                    .N = 1000,
                                                    .D = 64,
                                                    .causal = true,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = true,
                                                    .kvHeads = 2},
                                           AttnCase{.B = 1,
                                                    .H = 8,
                                                    .N = 2049,
                                                    .D = 128,
                                                    .causal = false,
                                                    .dtype = bf16,
                                                    .bshd = true,
                                                    .wgmma = true,
                                                    .kvHeads = 1},
                                           AttnCase{.B = 2,
                                                    .H = 6,
                                                    .N = 777,
                                                    .D = 128,
                                                    .causal = true,
                                                    .dtype = f16,
                                                    .bshd = false,
                                                    .wgmma = true,
                                                    .kvHeads = 2},
                                           AttnCase{.B = 1,
                                                    .H = 4,
                                                    .N = 300,
                                                    .D = 64,
                                                    .causal = false,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = false,
                                                    .kvHeads = 2}),
                         [](const auto &info) { return caseName(info.param); });

} // namespace
