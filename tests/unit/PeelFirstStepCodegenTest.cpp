//===- PeelFirstStepCodegenTest.cpp - no dot of a zero tile --------------===//
//
// KernelBuilder::setPeelFirstIteration (AttentionConfig::peelFirstStep):
// under kiln-overlap-dots, a key loop with no masked block before it starts
// with its first step peeled, whose P·V runs in the loop's first iteration
// instead of the dot of a zero tile. The default, and what the compiler
// reports, from its report (no GPU needed).
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

static const char *kFirstIteration = "loop: the next loop's first iteration";

// Whole key blocks at D=128 (one key loop, overlapped): peeled, the report
// says the peeled loop is the overlapped one's first iteration; not peeled,
// neither loop says so.
TEST(PeelFirstStepCodegen, OneKeyLoopGetsItsFirstIteration) {
  auto report = [](int peel) {
    return test::reportOf(compileForGpu(
        kernels::attentionForward(test::selfAttention(1024, 128, false),
                                  {.peelFirstStep = peel}),
        {"sm_90a", 0}));
  };
  const std::string peeled = report(1), plain = report(0);
  EXPECT_THAT(peeled, HasSubstr(kFirstIteration));
  EXPECT_THAT(peeled, HasSubstr("its last dot runs one iteration behind"));
  EXPECT_THAT(plain, Not(HasSubstr(kFirstIteration)));
  EXPECT_THAT(plain, HasSubstr("its last dot runs one iteration behind"));
}

// The default: non-causal whole key blocks under overlap up to 2048 keys
// (where it measured faster); not past them, nor where a ragged block goes
// first already, nor causal, nor without overlap (D=64).
TEST(PeelFirstStepCodegen, DefaultUpTo2048WholeKeys) {
  auto resolved = [](int64_t n, int64_t d, bool causal) {
    return kernels::resolveConfig(test::selfAttention(n, d, causal), {})
        .peelFirstStep;
  };
  EXPECT_EQ(resolved(256, 128, false), 1);
  EXPECT_EQ(resolved(1024, 128, false), 1);
  EXPECT_EQ(resolved(2048, 128, false), 1);
  EXPECT_EQ(resolved(4096, 128, false), 0);
  EXPECT_EQ(resolved(2049, 128, false), 0); // ragged: its block goes first
  EXPECT_EQ(resolved(1000, 128, false), 0);
  EXPECT_EQ(resolved(1024, 128, true), 0);
  EXPECT_EQ(resolved(1024, 64, false), 0); // no overlap at D=64
}
