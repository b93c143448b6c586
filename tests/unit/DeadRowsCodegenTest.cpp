//===- DeadRowsCodegenTest.cpp - warpgroups with no rows to compute -------===//
//
// Where a loop's results are split by rows over the compute warpgroups and
// reach only row-local ops and stores, a warpgroup whose rows every store
// drops runs only the loop's pipeline (SkipDeadRows.cpp). What the compiler
// decides, from its report (no GPU needed); the GPU suites run the kernels.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "GemmColumnSums.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

static const char *kSkips = "rows all fall outside what the stores to ";

// Any kernel, not attention's alone: a GEMM's key loop over K, whose
// accumulator only C's store reads, at a run-time M that may end inside a
// 128-row block.
TEST(DeadRowsCodegen, GemmWarpgroupSkipsRowsPastM) {
  GpuTarget target{.arch = "sm_90a"};
  for (const char *dim : {"M", "N", "K"})
    target.scalarClasses[dim] = ScalarClass::DivisibleBy16;
  for (bool persistent : {false, true})
    for (bool tmaStore : {false, true}) {
      const std::string plain = test::reportOf(compileForGpu(
          test::gemmWithColumnSums(false, tmaStore, persistent), target));
      EXPECT_THAT(plain, HasSubstr("a warpgroup whose 64 rows all fall outside "
                                   "what the stores to C keep (past the end or "
                                   "before row 0) runs none of its work"))
          << persistent << tmaStore;
    }
  // Column sums add every row of the accumulator (a reduction across the
  // warpgroups' rows), and a transposed C stores rows as columns: the
  // stale rows of a skipping warpgroup would reach kept results.
  const std::string sums = test::reportOf(
      compileForGpu(test::gemmWithColumnSums(true, false), target));
  EXPECT_THAT(sums, Not(HasSubstr(kSkips)));
  const std::string transposed = test::reportOf(compileForGpu(
      test::gemmWithColumnSums(false, false, false, 3, false, true), target));
  EXPECT_THAT(transposed, Not(HasSubstr(kSkips)));
}

static std::string forwardReport(int64_t n, int64_t d, bool causal,
                                 kernels::AttentionConfig c = {}) {
  return test::reportOf(
      compileForGpu(kernels::attentionForward(test::selfAttention(n, d, causal),
                                              c),
                    {"sm_90a", 0}));
}

// Attention's forward at run-time Nq: every key loop, by default where it
// measured faster (not D=128 non-causal), and not where the schedule says
// no. Compiled-in Nq a multiple of the row block: no block is partly past
// the end, nothing to decide.
TEST(DeadRowsCodegen, AttentionForwardKeyLoops) {
  for (bool causal : {false, true})
    EXPECT_THAT(forwardReport(2049, 64, causal), HasSubstr("to O, LSE keep"))
        << causal;
  EXPECT_THAT(forwardReport(2049, 128, true), HasSubstr(kSkips));
  // Its pipeline keeps the ping-pong: each of the two key loops takes and
  // passes a turn in it too (twice the syncs and arrivals of the schedule
  // without the skip), and releases each stage.
  auto ptx = [](int skip) {
    return compileForGpu(kernels::attentionForward(
                             test::selfAttention(2049, 128, true),
                             {.skipDeadRows = skip}),
                         {"sm_90a", 0})
        .ptx;
  };
  const std::string with = ptx(1), without = ptx(0);
  EXPECT_EQ(test::countOf(without, "bar.sync \t%r"), 2u);
  EXPECT_EQ(test::countOf(with, "bar.sync \t%r"), 4u);
  EXPECT_EQ(test::countOf(with, "bar.arrive %r"), 4u);
  EXPECT_EQ(test::countOf(with, "mbarrier.arrive.shared.b64"),
            test::countOf(without, "mbarrier.arrive.shared.b64") + 2);
  EXPECT_THAT(forwardReport(2049, 128, false), Not(HasSubstr(kSkips)));
  EXPECT_THAT(forwardReport(2049, 128, false, {.skipDeadRows = 1}),
              HasSubstr(kSkips));
  EXPECT_THAT(forwardReport(2049, 64, false, {.skipDeadRows = 0}),
              Not(HasSubstr(kSkips)));
  EXPECT_THAT(forwardReport(2048, 64, true, {.staticShapes = 1}),
              Not(HasSubstr(kSkips)));
  EXPECT_THAT(forwardReport(2049, 64, true, {.staticShapes = 1}),
              HasSubstr(kSkips));
}
