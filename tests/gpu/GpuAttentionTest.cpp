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
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

using namespace kiln;
using test::DeviceTensors;
using test::runOnGpu;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

/// Attention's tensors on the device: Q, K, V as inputs, O and LSE poisoned.
DeviceTensors attentionOnDevice(HostTensor &q, HostTensor &k, HostTensor &v,
                                HostTensor &o, HostTensor &lse) {
  DeviceTensors dt;
  dt.add("Q", q, false);
  dt.add("K", k, false);
  dt.add("V", v, false);
  dt.add("O", o, true);
  dt.add("LSE", lse, true);
  return dt;
}

struct AttnCase {
  int64_t B, H, N, D;
  bool causal;
  DType dtype;
  bool bshd;
  bool wgmma = false; ///< the Hopper schedule: wgmma, 8 warps
  int tma = -1;       ///< under wgmma: 0 K/V by cp.async, -1 the default (TMA)
  int warpSpecialize = -1; ///< 1: a producer warpgroup issues the TMA copies
  int pingpong = -1;       ///< 1: the compute warpgroups take turns on Q·Kᵀ
  int overlap = -1;        ///< 1: P·V one iteration behind, after Q·Kᵀ
  int persistent = -1;     ///< 1: CTAs loop over the row blocks
  int dynamicTiles = -1;   ///< 1: row blocks handed out as CTAs free up
  int64_t headGroup = 0;   ///< causal: heads per longest-first group
  int tmaStore = -1;       ///< 0: O by st.global, not staged for TMA
  int staticShapes = -1;   ///< 1: B, H and N compiled in
  int narrowInDiagonal = -1; ///< 0: rows aligned to the end, narrow step apart
  int alignRowsToEnd = -1;   ///< 1: causal rows aligned to the end
  int maskedFirst = -1;  ///< 0: the masked key block after the others; 1: first
  int oneShotLoads = -1; ///< 1: Q by TMA once (no producer warpgroup)
};

void PrintTo(const AttnCase &c, std::ostream *os) {
  *os << c.B << "x" << c.H << " N=" << c.N << " D=" << c.D
      << (c.causal ? " causal " : " full ") << dtypeName(c.dtype)
      << (c.bshd ? " bshd" : "") << (c.wgmma ? " wgmma" : "")
      << (c.tma == 0 ? " cp.async" : "")
      << (c.warpSpecialize > 0 ? " producer warpgroup" : "")
      << (c.pingpong > 0 ? " ping-pong" : "")
      << (c.overlap > 0 ? " overlap" : "")
      << (c.persistent > 0 ? " persistent" : "")
      << (c.dynamicTiles > 0 ? " dynamic" : "")
      << (c.headGroup > 0 ? " groups of " + std::to_string(c.headGroup) : "")
      << (c.tmaStore == 0 ? " st.global" : "")
      << (c.staticShapes > 0 ? " static" : "")
      << (c.narrowInDiagonal == 0 ? " narrow step apart" : "")
      << (c.alignRowsToEnd > 0 ? " rows to end" : "")
      << (c.maskedFirst == 0  ? " masked block last"
          : c.maskedFirst > 0 ? " masked block first"
                              : "")
      << (c.oneShotLoads > 0 ? " one-shot loads" : "");
}

std::string caseName(const AttnCase &c) {
  return std::to_string(c.B) + "x" + std::to_string(c.H) + "_n" +
         std::to_string(c.N) + "_d" + std::to_string(c.D) +
         (c.causal ? "_causal_" : "_full_") + dtypeName(c.dtype) +
         (c.bshd ? "_bshd" : "") + (c.tma == 0 ? "_cpasync" : "") +
         (c.warpSpecialize > 0 ? "_producer" : "") +
         (c.pingpong > 0 ? "_pingpong" : "") +
         (c.overlap > 0 ? "_overlap" : "") +
         (c.persistent > 0 ? "_persistent" : "") +
         (c.dynamicTiles > 0 ? "_dynamic" : "") +
         (c.headGroup > 0 ? "_group" + std::to_string(c.headGroup) : "") +
         (c.tmaStore == 0 ? "_stglobal" : "") +
         (c.staticShapes > 0 ? "_static" : "") +
         (c.narrowInDiagonal == 0 ? "_narrowapart" : "") +
         (c.alignRowsToEnd > 0 ? "_rowstoend" : "") +
         (c.maskedFirst == 0  ? "_maskedlast"
          : c.maskedFirst > 0 ? "_maskedfirst"
                              : "") +
         (c.oneShotLoads > 0 ? "_oneshot" : "");
}

class AttentionOnGpu : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionOnGpu, MatchesNvrtcReference) {
  REQUIRE_GPU();
  const AttnCase &c = GetParam();
  kernels::AttentionShape s{c.B, c.H, c.N, c.N, c.D, c.causal, c.dtype, 0};
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
  auto make = [&](uint64_t seed, bool rand) {
    HostTensor t = c.bshd ? HostTensor(c.dtype, {c.B, c.H, c.N, c.D},
                                       {c.N * c.H * c.D, c.D, c.H * c.D, 1})
                          : HostTensor(c.dtype, {c.B, c.H, c.N, c.D});
    if (rand)
      t.fillRandom(seed, -2, 2);
    return t;
  };
  uint64_t seed = uint64_t(c.N * 131 + c.D * 7 + c.causal);
  HostTensor q = make(seed, true), k = make(seed + 1, true),
             v = make(seed + 2, true);
  HostTensor o = make(0, false), lse(DType::f32, {c.B, c.H, c.N});
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

constexpr DType bf16 = DType::bf16, f16 = DType::f16;

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

// O through TMA (the default wherever its staging tile fits): many row
// blocks per persistent CTA (the staging tile reused once the last copy has
// read it), ragged rows clipped by TMA, bshd (rows along the tensor's second
// dimension), without a producer warpgroup, causal with dynamic tiles where
// the V buffers after the loops are left out; and O by st.global.
INSTANTIATE_TEST_SUITE_P(TmaStores, AttentionOnGpu,
                         ::testing::Values(AttnCase{.B = 2,
                                                    .H = 20,
                                                    .N = 4096,
                                                    .D = 128,
                                                    .causal = false,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = true},
                                           AttnCase{.B = 3,
                                                    .H = 5,
                                                    .N = 1000,
                                                    .D = 128,
                                                    .causal = false,
                                                    .dtype = f16,
                                                    .bshd = true,
                                                    .wgmma = true},
                                           AttnCase{.B = 3,
                                                    .H = 5,
                                                    .N = 1000,
                                                    .D = 128,
                                                    .causal = false,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = true,
                                                    .warpSpecialize = 0},
                                           AttnCase{.B = 2,
                                                    .H = 20,
                                                    .N = 2047,
                                                    .D = 128,
                                                    .causal = true,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = true,
                                                    .overlap = 0},
                                           AttnCase{.B = 2,
                                                    .H = 20,
                                                    .N = 1000,
                                                    .D = 64,
                                                    .causal = false,
                                                    .dtype = f16,
                                                    .bshd = false,
                                                    .wgmma = true},
                                           AttnCase{.B = 3,
                                                    .H = 5,
                                                    .N = 1000,
                                                    .D = 128,
                                                    .causal = false,
                                                    .dtype = bf16,
                                                    .bshd = false,
                                                    .wgmma = true,
                                                    .tmaStore = 0}),
                         [](const auto &info) { return caseName(info.param); });

// Q by TMA once, waited for after the key loop's first copies
// (AttentionConfig::oneShotLoads), in the kernels without a producer
// warpgroup: D=64 non-causal at a ragged and a whole N, and past Nq inside
// one block (rows TMA fills with zeros), causal D=64 in 64-row programs and
// in 128-row blocks (bshd, fp16), D=128 without a producer.
AttnCase oneShot(AttnCase c) {
  c.oneShotLoads = 1;
  return c;
}
INSTANTIATE_TEST_SUITE_P(
    OneShotLoads, AttentionOnGpu,
    ::testing::Values(oneShot({2, 5, 1000, 64, false, bf16, false, true}),
                      oneShot({3, 4, 128, 64, false, bf16, false, true}),
                      oneShot({2, 3, 77, 64, false, f16, false, true}),
                      oneShot({2, 5, 1000, 64, true, bf16, false, true}),
                      oneShot({1, 3, 2049, 64, true, f16, true, true}),
                      // D=128, tma -1 (the default), no producer (0)
                      oneShot({2, 3, 1000, 128, false, bf16, false, true, -1,
                               0})),
    [](const auto &info) { return caseName(info.param); });

// Causal row blocks that end at Nq (AttentionConfig::alignRowsToEnd, asked
// for: the default nowhere since session 39; at D=128 with the diagonal
// block after the others): Nq 1 row past a multiple of the row block (the
// first block starts at row -127 and stores O by st.global, each other one
// takes the narrow keys left of its diagonal with the diagonal's first
// step, or in a step of its own), 33 rows past (not shifted), D=64 in
// 64-row blocks below N=2k (not shifted).
AttnCase rowsToEnd(AttnCase c) {
  c.alignRowsToEnd = 1;
  c.maskedFirst = 0;
  return c;
}
INSTANTIATE_TEST_SUITE_P(
    RowsAlignedToEnd, AttentionOnGpu,
    ::testing::Values(rowsToEnd({2, 4, 2049, 128, true, bf16, false, true}),
                      rowsToEnd({1, 3, 4097, 128, true, f16, true, true}),
                      rowsToEnd({2, 4, 2049, 64, true, bf16, false, true}),
                      rowsToEnd({.B = 2,
                                 .H = 4,
                                 .N = 2049,
                                 .D = 128,
                                 .causal = true,
                                 .dtype = bf16,
                                 .bshd = false,
                                 .wgmma = true,
                                 .narrowInDiagonal = 0}),
                      rowsToEnd({1, 4, 1025, 64, true, f16, true, true}),
                      rowsToEnd({3, 2, 161, 128, true, bf16, false, true}),
                      rowsToEnd({2, 2, 289, 64, true, bf16, false, true})),
    [](const auto &info) { return caseName(info.param); });

// D=128's default: the masked key block first (AttentionConfig::
// maskedBlockFirst), its P·V in the first iteration of the overlapped loop
// over the whole blocks: causal (the diagonal block, at ragged and whole N,
// short and long), non-causal with a ragged N (the blocks end at N, the
// first starts before key 0); and the masked block after the others, asked
// for.
AttnCase maskedFirst(AttnCase c) {
  c.maskedFirst = 1;
  return c;
}
INSTANTIATE_TEST_SUITE_P(
    MaskedBlockFirst, AttentionOnGpu,
    ::testing::Values(maskedFirst({2, 4, 2049, 128, true, bf16, false, true}),
                      maskedFirst({1, 3, 4097, 128, true, f16, true, true}),
                      maskedFirst({3, 5, 1000, 128, true, bf16, false, true}),
                      maskedFirst({2, 3, 512, 128, true, bf16, false, true}),
                      maskedFirst({3, 2, 161, 128, true, bf16, false, true}),
                      maskedFirst({2, 2, 100, 128, true, f16, false, true}),
                      maskedFirst({2, 4, 3001, 128, false, bf16, false, true}),
                      maskedFirst({1, 3, 4097, 128, false, f16, true, true}),
                      maskedFirst({2, 2, 130, 128, false, bf16, false, true}),
                      maskedFirst({2, 2, 100, 128, false, bf16, false, true}),
                      AttnCase{.B = 2,
                               .H = 3,
                               .N = 1000,
                               .D = 128,
                               .causal = false,
                               .dtype = bf16,
                               .bshd = false,
                               .wgmma = true,
                               .maskedFirst = 0},
                      AttnCase{.B = 2,
                               .H = 3,
                               .N = 1024,
                               .D = 128,
                               .causal = true,
                               .dtype = bf16,
                               .bshd = false,
                               .wgmma = true,
                               .maskedFirst = 0}),
    [](const auto &info) { return caseName(info.param); });

// Exact shapes compiled in (AttentionConfig::staticShapes): the default
// schedule's kernels with B, H and N constants, ragged and not, causal and
// not; the suites above run the default, run-time shapes.
AttnCase exactShapes(AttnCase c) {
  c.staticShapes = 1;
  return c;
}
INSTANTIATE_TEST_SUITE_P(
    StaticShapes, AttentionOnGpu,
    ::testing::Values(exactShapes({2, 4, 4097, 128, false, bf16, false, true}),
                      exactShapes({2, 4, 2048, 128, true, bf16, false, true}),
                      exactShapes({1, 3, 1000, 64, true, f16, true, true}),
                      exactShapes({1, 2, 333, 64, false, bf16, false, false})),
    [](const auto &info) { return caseName(info.param); });

// One compile serves every sequence length of a class (issue 18): N = 1000,
// 1001 and 1003 (ragged, LSE's rows unaligned at the last two) build the
// same kernel, compiled or read from disk once; Q, K and V through TMA at
// each; every element against the NVRTC reference.
TEST(GpuKernels, AttentionOneCompileServesRaggedLengths) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule needs sm_90a";
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    const CompileCacheStats before = compileCacheStats();
    for (int64_t n : {1000, 1001, 1003}) {
      kernels::AttentionShape s{2, 3, n, n, 128, causal, DType::bf16, 0};
      HostTensor q(s.dtype, {2, 3, n, 128}), k(s.dtype, {2, 3, n, 128}),
          v(s.dtype, {2, 3, n, 128}), o(s.dtype, {2, 3, n, 128}),
          lse(DType::f32, {2, 3, n});
      q.fillRandom(uint64_t(n), -2, 2);
      k.fillRandom(uint64_t(n + 1), -2, 2);
      v.fillRandom(uint64_t(n + 2));
      DeviceTensors dt = attentionOnDevice(q, k, v, o, lse);
      Kernel kernel = kernels::attentionForward(s);
      std::shared_ptr<GpuKernel> g = jitKernel(kernel, dt.refs);
      g->launch(kernel.bind(dt.refs));
      cuda::synchronize();
      std::string report;
      for (const std::string &line : g->spec().report)
        report += line + "\n";
      // Q, K and V (128x128 blocks at D=128) all by TMA.
      EXPECT_EQ(test::countOf(report, "load 128x128: TMA"),
                test::countOf(report, "load 128x128:"))
          << report;
      EXPECT_GE(test::countOf(report, "load 128x128: TMA"), 3u) << report;
      dt.download("O", o);
      dt.download("LSE", lse);
      HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
      cuda::Buffer ro(oRef.storageBytes()), rl(lseRef.storageBytes());
      kernels::attentionReferenceGpu(s, dt.refs["Q"], dt.refs["K"],
                                     dt.refs["V"], ro.data(), rl.data());
      ro.download(oRef.data(), oRef.storageBytes());
      rl.download(lseRef.data(), lseRef.storageBytes());
      ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
      EXPECT_EQ(eo.nonFinite, 0) << "N=" << n;
      EXPECT_LE(eo.relative, 1e-2) << "N=" << n;
      EXPECT_LE(el.relative, 1e-4) << "N=" << n;
    }
    const CompileCacheStats after = compileCacheStats();
    std::printf("%s: %lld compiled, %lld from disk, %lld in-process hits\n",
                causal ? "causal" : "non-causal",
                (long long)(after.misses - before.misses),
                (long long)(after.diskHits - before.diskHits),
                (long long)(after.hits - before.hits));
    EXPECT_EQ(
        (after.misses - before.misses) + (after.diskHits - before.diskHits), 1)
        << "one compile (or disk read) for the three lengths";
    EXPECT_EQ(after.hits - before.hits, 2);
  }
}

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

} // namespace
