//===- BoundsProofTest.cpp - block accesses proven within their tensor ----===//
//
// The lowering drops a block access's bounds checks along a dimension when
// the IR proves the block inside it (IndexFacts.cpp): an offset that is a
// loop's induction variable from a lower bound >= 0, an upper bound the
// dimension is at least (KernelBuilder::requireAtLeast), both multiples of
// the block. Each premise removed keeps the checks.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "RowSumKernel.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

constexpr const char *kWithin = "no bounds checks along dimension(s) 1";

int64_t countOf(const std::string &text, const std::string &what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(BoundsProof, BlocksBelowABoundTheRowIsAtLeastTakeNoChecks) {
  Kernel k = test::rowPrefixSums();
  EXPECT_THAT(k.ir(), HasSubstr("kiln.at_least"));
  for (const char *arch : {"sm_80", "sm_90a"}) {
    CompiledKernel proven = compileForGpu(k, {arch});
    EXPECT_THAT(test::reportOf(proven), HasSubstr(kWithin)) << arch;
    // The rows' compares stay (a program id is no loop variable), the
    // columns' go: fewer compares than the same kernel without the bound.
    CompiledKernel checked =
        compileForGpu(test::rowPrefixSums(64, /*atLeast=*/false), {arch});
    EXPECT_THAT(test::reportOf(checked), Not(HasSubstr("bounds checks")));
    EXPECT_LT(countOf(proven.ptx, "setp."), countOf(checked.ptx, "setp."))
        << arch;
  }
}

TEST(BoundsProof, EveryPremiseIsNeeded) {
  // Rows of multiples of 16 only: a 64-column block below n may cross C.
  EXPECT_THAT(
      test::reportOf(compileForGpu(test::rowPrefixSums(16), {"sm_90a"})),
      Not(HasSubstr("bounds checks")));
  // A loop from column 32: its blocks are not multiples of 64 apart from 0.
  EXPECT_THAT(
      test::reportOf(compileForGpu(
          test::rowPrefixSums(64, true, /*startColumn=*/32), {"sm_90a"})),
      Not(HasSubstr("bounds checks")));
}

// The kernel's meaning does not change: the CPU executor (which checks every
// access) agrees with the host's sums, and bind refuses rows shorter than n.
TEST(BoundsProof, BindRefusesRowsShorterThanTheBound) {
  Kernel k = test::rowPrefixSums();
  HostTensor x(DType::f32, {32, 128}), y(DType::f32, {32});
  x.fillRandom(3);
  y.poison();
  runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}, {{"n", 100}}));
  for (int64_t r = 0; r < 32; ++r) {
    double want = 0;
    for (int64_t c = 0; c < 100; ++c)
      want += x.at(std::vector<int64_t>{r, c});
    EXPECT_NEAR(y.at(std::vector<int64_t>{r}), want, 1e-4) << r;
  }
  EXPECT_THAT(test::errorOf([&] {
                k.bind({{"X", x.ref()}, {"Y", y.ref()}}, {{"n", 129}});
              }),
              HasSubstr("C = 128 (from tensor X) must be at least n = 129"));
}

} // namespace
