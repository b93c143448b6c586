//===- OneShotLoadCodegenTest.cpp - dot operands copied once by TMA -------===//
//
// KernelBuilder::setOneShotLoads (AttentionConfig::oneShotLoads): without a
// producer warpgroup, a dot operand loaded outside the loops is copied by TMA
// where the load stands and waited for only after the first loop's prologue
// has issued its copies, so that the two latencies overlap. What the
// compiler emits, from its report and PTX (no GPU needed).
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

static CompiledKernel forward(int64_t n, int64_t d, bool causal,
                              kernels::AttentionConfig c) {
  return compileForGpu(
      kernels::attentionForward(test::selfAttention(n, d, causal), c),
      {"sm_90a", 0});
}

/// TMA copies into shared memory issued before the first mbarrier wait.
static size_t copiesBeforeFirstWait(const std::string &ptx) {
  const size_t wait = ptx.find("mbarrier.try_wait");
  return test::countOf(ptx.substr(0, wait),
                       "cp.async.bulk.tensor.4d.shared::cluster");
}

static const char *kOnce = "once, issued where it stands by one thread";

// D=64 (no producer warpgroup): Q by TMA, issued before the key loop's
// prologue (K and V of the first block) and waited for after it.
TEST(OneShotLoadCodegen, AttentionQOverlapsTheKeyLoopsFirstCopies) {
  for (bool causal : {false, true}) {
    CompiledKernel plain = forward(1000, 64, causal, {.oneShotLoads = 0});
    CompiledKernel once = forward(1000, 64, causal, {.oneShotLoads = 1});
    const std::string plainReport = test::reportOf(plain),
                      onceReport = test::reportOf(once);
    EXPECT_THAT(plainReport, HasSubstr("vector loads to registers, stored to "
                                       "shared memory (not pipelined"));
    EXPECT_THAT(plainReport, Not(HasSubstr(kOnce)));
    EXPECT_THAT(onceReport, HasSubstr(std::string(": TMA (cp.async.bulk.tensor"
                                                  ", 1 box(es) of ") +
                                      (causal ? "64" : "128") +
                                      "x64, 128-byte swizzle, mbarrier "
                                      "completion) into shared memory, " +
                                      kOnce));
    EXPECT_EQ(once.tensorMaps.size(), plain.tensorMaps.size() + 1) << causal;
    EXPECT_EQ(copiesBeforeFirstWait(plain.ptx), 2u) << causal; // K, V
    EXPECT_EQ(copiesBeforeFirstWait(once.ptx), 3u) << causal;  // Q, K, V
    EXPECT_EQ(test::countOf(once.ptx, "ld.global.v4"), 0u) << causal;
  }
}

// Under a producer warpgroup (D=128's default) Q is already the producer's,
// once per tile: the option changes nothing.
TEST(OneShotLoadCodegen, ProducerWarpgroupKeepsItsOwnLoads) {
  CompiledKernel plain = forward(4096, 128, false, {});
  CompiledKernel once = forward(4096, 128, false, {.oneShotLoads = 1});
  EXPECT_EQ(plain.ptx, once.ptx);
  EXPECT_THAT(test::reportOf(once), Not(HasSubstr(kOnce)));
}

// The default: on without a producer warpgroup where it measured faster
// (causal at every N, non-causal up to 1024 keys), off elsewhere.
TEST(OneShotLoadCodegen, DefaultOnCausalAndShortKeysWithoutProducer) {
  auto resolved = [](int64_t n, int64_t d, bool causal) {
    return kernels::resolveConfig(test::selfAttention(n, d, causal), {})
        .oneShotLoads;
  };
  EXPECT_EQ(resolved(128, 64, false), 1);
  EXPECT_EQ(resolved(1024, 64, false), 1);
  EXPECT_EQ(resolved(1025, 64, false), 0);
  EXPECT_EQ(resolved(4096, 64, false), 0);
  EXPECT_EQ(resolved(1000, 64, true), 1);
  EXPECT_EQ(resolved(8192, 64, true), 1);
  EXPECT_EQ(resolved(1000, 128, false), 0); // producer warpgroup
  EXPECT_EQ(resolved(1000, 128, true), 0);
}
