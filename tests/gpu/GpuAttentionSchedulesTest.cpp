//===- GpuAttentionSchedulesTest.cpp - attention's schedules on the GPU ---===//
//
// GpuAttentionTest.cpp's TEST_P (every element against the NVRTC reference)
// over the forward's schedule options: O by TMA stores or st.global, Q
// loaded once, rows aligned to the end, the masked block first or last,
// exact shapes; and one compile serving every length of a class.
//
//===----------------------------------------------------------------------===//
#include "../unit/TestUtil.h"
#include "AttentionCase.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace kiln;
using test::attentionOnDevice;
using test::AttentionOnGpu;
using test::AttnCase;
using test::bf16;
using test::caseName;
using test::DeviceTensors;
using test::f16;

namespace {

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

} // namespace
