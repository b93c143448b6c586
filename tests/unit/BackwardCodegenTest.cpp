//===- BackwardCodegenTest.cpp - what the attention backward compiles to --===//
//
// The dK/dV kernel's schedule as the GPU compiler lowers it (no GPU needed):
// shared memory shared between its loops, warp-uniform descriptors, the
// persistent tile loop without spills, dK and dV by TMA, arrivals for an
// overlapped dq_convert.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/kernels/AttentionBackward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

using namespace kiln;
using test::countOf;
using test::reportOf;
using test::selfAttention;

/// The D=128 dK/dV kernel for N keys and queries (16 heads), non-causal
/// and causal, compiled for sm_90a.
static std::pair<CompiledKernel, CompiledKernel>
dkdvKernels(int64_t n, const kernels::AttentionBackwardConfig &config = {}) {
  kernels::AttentionShape s = selfAttention(n, 128, false);
  s.heads = 16;
  const GpuTarget hopper{"sm_90a", 0};
  CompiledKernel full =
      compileForGpu(kernels::attentionBackward(s, config)[1], hopper);
  s.causal = true;
  return {std::move(full),
          compileForGpu(kernels::attentionBackward(s, config)[1], hopper)};
}
using ::testing::HasSubstr;

// The causal backward's masked and unmasked loops repeat dQ's bulk reduction
// and dSᵀ's staging: the two reductions share one staging tile (they run one
// after the other), and the 32 KB that frees lets dSᵀ take a copy per stage
// in both loops, so neither loop waits for every warp before staging it.
TEST(Codegen, SequentialLoopsShareStagingTiles) {
  // Both on CTAs of one program each (the non-causal default is persistent),
  // so that they differ by the causal kernel's second loop alone.
  kernels::AttentionBackwardConfig onePerCta;
  onePerCta.persistent = 0;
  auto [full, causal] = dkdvKernels(4096, onePerCta);
  const std::string report = reportOf(causal);
  EXPECT_EQ(countOf(report, ": TMA reduction (cp.reduce.async.bulk.tensor"),
            2u);
  // (The second: dV's TMA store takes dK's staging tile.)
  EXPECT_EQ(countOf(report, "; the staging tile is the one of the write at "
                            "DkDvKernel.cpp:"),
            2u)
      << report;
  EXPECT_THAT(report, HasSubstr("(copies for stages 1-1, its 2 loops')"));
  EXPECT_EQ(causal.sharedBytes, full.sharedBytes) << report;
  // A loop's step has three barriers over the compute warps (after dSᵀ's
  // staging, before and after dQ's), none before dSᵀ's staging: the second
  // loop adds three.
  EXPECT_EQ(countOf(causal.ptx, "bar.sync \t1, 256"),
            countOf(full.ptx, "bar.sync \t1, 256") + 3)
      << reportOf(full);
}

// The warp index comes from lane 0 through a shuffle, which ptxas takes for
// warp-uniform: the wgmma descriptors derived from it live in uniform
// registers. Before, the D=128 backward's dK/dV kernels held them in
// ordinary registers and spilled 16 (64 causal) bytes in the loop.
TEST(Codegen, WarpIndexIsWarpUniform) {
  auto [full, causal] = dkdvKernels(4096);
  for (const CompiledKernel *c : {&full, &causal}) {
    const char *which = c == &full ? "non-causal" : "causal";
    EXPECT_GE(countOf(c->ptx, "shfl.sync.idx.b32"), 1u) << which;
    if (!findCudaTool("ptxas"))
      GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
    Assembled a = assembleWithPtxas(*c);
    EXPECT_EQ(a.spillStoreBytes, 0) << which;
    EXPECT_EQ(a.spillLoadBytes, 0) << which;
  }
}

// Up to 2048 keys at D=128 the dK/dV CTAs are persistent. Each tile reads
// the thread id and the arguments afresh, so the addresses of its K/V loads
// and dK/dV stores are not held across its loops (before: 288 bytes of
// spills non-causal, 392 causal); the causal kernel's two loops share dSᵀ's
// staging bytes and copies as without persistent CTAs; dK and dV go out by
// TMA from one staging tile. The statistics' rows are whole query blocks:
// their loads in every loop take no bounds checks (where the dots do not add
// them: foldStatistics 0).
TEST(Codegen, PersistentBackwardTiles) {
  auto [full, causal] = dkdvKernels(2048);
  for (const CompiledKernel *c : {&full, &causal}) {
    const std::string report = reportOf(*c);
    EXPECT_THAT(report, HasSubstr("persistent: the grid's"));
    EXPECT_EQ(countOf(report, ": TMA (cp.async.bulk.tensor from a 128-byte "
                              "swizzled staging tile of 32 KB"),
              2u)
        << report;
  }
  EXPECT_THAT(reportOf(causal),
              HasSubstr("(copies for stages 1-1, its 2 loops')"));
  const char *within =
      "1 iteration ahead; within its tensor (no bounds checks)";
  kernels::AttentionBackwardConfig unfolded;
  unfolded.foldStatistics = 0;
  auto [fullUnfolded, causalUnfolded] = dkdvKernels(2048, unfolded);
  EXPECT_EQ(countOf(reportOf(fullUnfolded), within), 2u)
      << reportOf(fullUnfolded);
  EXPECT_EQ(countOf(reportOf(causalUnfolded), within), 4u)
      << reportOf(causalUnfolded);
  EXPECT_EQ(causal.sharedBytes, full.sharedBytes) << reportOf(causal);
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  EXPECT_LE(assembleWithPtxas(full).spillStoreBytes, 16);
  EXPECT_LE(assembleWithPtxas(causal).spillStoreBytes, 16);
}

namespace {

// Persistent CTAs keep the producer's buffers live across tiles; where that
// leaves a staged operand without its copies (D=64's scores by queries: the
// stage ring, P and dS staged, dQ's reduction tile and dK/dV's staging tile),
// the compute warps' own buffers are placed by liveness within a tile: the
// epilogue's staging tile takes a staged operand's bytes and P keeps a copy
// per stage, in the bytes a one-program CTA has. The report says so.
TEST(Codegen, PersistentTilesPlaceComputeBuffersWithinATile) {
  kernels::AttentionShape s = selfAttention(2048, 64, false);
  s.heads = 32;
  const GpuTarget hopper{"sm_90a", 0};
  kernels::AttentionBackwardConfig persistent, onePerCta;
  persistent.persistent = 1;
  onePerCta.persistent = 0;
  persistent.scoresByQueries = onePerCta.scoresByQueries = 1;
  CompiledKernel p =
      compileForGpu(kernels::attentionBackward(s, persistent)[1], hopper);
  CompiledKernel one =
      compileForGpu(kernels::attentionBackward(s, onePerCta)[1], hopper);
  const std::string report = reportOf(p);
  EXPECT_THAT(report, HasSubstr("persistent: the grid's"));
  EXPECT_THAT(report, HasSubstr("persistent: the compute warps' own buffers "
                                "(staged operands, their copies, TMA staging "
                                "tiles) placed by liveness within a tile"));
  EXPECT_EQ(countOf(report, "(copies for stages 1-1)"), 1u) << report;
  EXPECT_EQ(countOf(report, ": TMA (cp.async.bulk.tensor from a 128-byte "),
            2u)
      << report; // dK and dV's store (sharing one tile)
  EXPECT_THAT(report, HasSubstr("TMA reduction (cp.reduce.async.bulk.tensor"));
  EXPECT_EQ(p.sharedBytes, one.sharedBytes) << report;
  EXPECT_THAT(reportOf(one), ::testing::Not(HasSubstr("within a tile")));
  // The non-persistent kernel has the copy too: same buffers, one CTA each.
  EXPECT_EQ(countOf(reportOf(one), "(copies for stages 1-1)"), 1u);
}

// The causal kernel's two loops stage P in the same bytes: placed by
// liveness within a tile, those bytes stay taken through the second loop
// (before, the plan ended them with the first loop's last reader, so that a
// buffer placed later could take them while the second loop staged P).
TEST(Codegen, StagedOperandOfTwoLoopsLivesThroughBoth) {
  kernels::AttentionShape s = selfAttention(2048, 64, true);
  s.heads = 32;
  kernels::AttentionBackwardConfig config;
  config.persistent = 1;
  config.scoresByQueries = 1;
  const std::string report = reportOf(
      compileForGpu(kernels::attentionBackward(s, config)[1], {"sm_90a", 0}));
  ASSERT_THAT(report, HasSubstr("placed by liveness within a tile"));
  // "staged operand DkDvKernel.cpp:L [a, b) until DkDvKernel.cpp:U;" for P, and
  // its copies "(copies for stages 1-1, its 2 loops') [c, d) until ...U;".
  auto untilOf = [&](const std::string &prefix) {
    size_t at = report.find(prefix);
    if (at == std::string::npos)
      return std::string("missing: ") + prefix;
    size_t from = report.find(" until ", at), end = report.find(';', at);
    return from < end ? report.substr(from, end - from) : std::string("none");
  };
  const size_t copies = report.find(" (copies for stages 1-1, its 2 loops')");
  ASSERT_NE(copies, std::string::npos) << report;
  const size_t line = report.rfind("staged operand DkDvKernel.cpp:", copies);
  const std::string p = report.substr(line, copies - line) + " [";
  EXPECT_EQ(untilOf(p), untilOf(p.substr(0, p.size() - 2) +
                                " (copies for stages 1-1, its 2 loops')"))
      << report;
}

// dq_convert overlapping the dK/dV kernel: the persistent dK/dV CTAs hand
// each program's arrival to an idle producer thread (one red, no atom, no
// barrier added on the compute warps), and start with launch_dependents;
// dq_convert polls its head's counter and is launched to overlap.
TEST(Codegen, OverlappedDqConvertArrivesFromTheProducer) {
  kernels::AttentionShape s = selfAttention(2048, 128, false);
  s.heads = 16;
  const GpuTarget hopper{"sm_90a", 0};
  kernels::AttentionBackwardConfig config;
  config.overlapDqConvert = 1;
  kernels::AttentionBackwardKernels ks = kernels::attentionBackward(s, config);
  ASSERT_EQ(ks.size(), 3u);
  CompiledKernel dkdv = compileForGpu(ks[1], hopper);
  CompiledKernel convert = compileForGpu(ks[2], hopper);
  EXPECT_THAT(reportOf(dkdv), HasSubstr("hands the counter to a "
                                        "producer-warpgroup thread"));
  EXPECT_EQ(countOf(dkdv.ptx, "red.relaxed.gpu.global.add.u32"), 1u);
  EXPECT_EQ(countOf(dkdv.ptx, "atom.add.acq_rel"), 0u);
  EXPECT_EQ(countOf(dkdv.ptx, "griddepcontrol.launch_dependents"), 1u);
  EXPECT_FALSE(dkdv.overlapPrevious);
  EXPECT_TRUE(convert.overlapPrevious);
  EXPECT_EQ(countOf(convert.ptx, "ld.acquire.gpu.global.b32"), 1u);
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  EXPECT_EQ(assembleWithPtxas(dkdv).spillStoreBytes, 0);
}

// LSE and Delta folded into the Sᵀ and dPᵀ dots (the default with dQ by
// atomics): the dK/dV loop reads them as one 16-row tile through the stage
// ring, and each of the two dots takes one more k16 step whose left operand
// (a selector of constants) is in registers; no thread loads a statistic.
// At D=64 the default's 128x128 steps then take Sᵀ without a spill.
TEST(Codegen, FoldedStatisticsAreDotSteps) {
  const GpuTarget hopper{"sm_90a", 0};
  for (int64_t D : {64, 128}) {
    kernels::AttentionShape s = selfAttention(2048, D, false);
    CompiledKernel k = compileForGpu(kernels::attentionBackward(s)[1], hopper);
    const std::string report = reportOf(k);
    const std::string rows = D == 64 ? "128" : "64";
    EXPECT_THAT(report,
                HasSubstr("load 16x" + rows + ": TMA (cp.async.bulk.tensor, "))
        << report;
    EXPECT_EQ(countOf(report, "dot 128x" + rows + "x16: wgmma m64n" + rows +
                                  "k16 x1 per warpgroup (2 warpgroups), A "
                                  "in registers"),
              2u)
        << report;
    EXPECT_EQ(countOf(report, "vector loads to registers"), 0u) << report;
    if (!findCudaTool("ptxas"))
      GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
    EXPECT_EQ(assembleWithPtxas(k).spillStoreBytes, 0) << D;
  }
}
} // namespace
