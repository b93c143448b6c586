//===- SplitKeysTest.cpp - the forward with its keys split across programs ===//
//
// attention_fwd_split then attention_fwd_combine (AttentionConfig::splitKeys)
// on the CPU executor against the fp64 reference: ragged Nk, a range with
// no keys, Nq != Nk, D 64 and 128; every output and workspace poisoned
// first. Then what the GPU lowering makes of them, and bad configs.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "SplitKeysCase.h"
#include "TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::SplitCase;
using ::testing::HasSubstr;

namespace {

class SplitKeysOnCpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitKeysOnCpu, MatchesFp64Reference) {
  const SplitCase &c = GetParam();
  // Small key blocks keep the executor quick and the ranges many.
  std::vector<Kernel> ks = kernels::attentionForwardKernels(
      c.shape(), {.blockM = 64,
                  .blockN = 32,
                  .staticShapes = c.staticShapes,
                  .splitKeys = int(c.ranges)});
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name(), "attention_fwd_split");
  EXPECT_EQ(ks[1].name(), "attention_fwd_combine");
  test::SplitTensors t(c);
  std::map<std::string, TensorRef> refs{{"Q", t.q.ref()},
                                        {"K", t.k.ref()},
                                        {"V", t.v.ref()},
                                        {"O", t.o.ref()},
                                        {"LSE", t.lse.ref()}};
  for (auto &[name, w] : t.workspace)
    refs[name] = w.ref();
  for (const Kernel &kernel : ks)
    runOnCpu(kernel, kernel.bind(kernel.tensorsIn(refs)));
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SplitKeysOnCpu,
    ::testing::Values(
        // 1000 keys: 32 blocks of 32 in 3 ranges of 11 blocks, the last
        // ending at the ragged Nk.
        SplitCase{1, 2, 70, 1000, 64, 3},
        // Decoding: one query; 3 blocks in 4 ranges: the last has no keys.
        SplitCase{2, 1, 1, 90, 64, 4},
        // More queries than keys, whole key blocks, D=128.
        SplitCase{1, 1, 130, 256, 128, 2},
        // B, H, Nq and Nk compiled in: the ragged end's mask as well.
        SplitCase{1, 2, 33, 500, 64, 3, 1}),
    [](const auto &info) { return info.param.name(); });

// The Hopper lowering of both kernels under the defaults: the split kernel
// loads K and V by TMA and runs its dots on wgmma; O's ranges leave by
// st.global (fp32, no TMA staging tile).
TEST(SplitKeysCodegen, LowersOnHopperWithTheDefaults) {
  for (int64_t d : {64, 128}) {
    kernels::AttentionShape s = test::selfAttention(4097, d, false);
    s.seqQ = 1;
    std::vector<Kernel> ks =
        kernels::attentionForwardKernels(s, {.splitKeys = 8});
    ASSERT_EQ(ks.size(), 2u);
    CompiledKernel split = compileForGpu(ks[0], {"sm_90a", 0});
    CompiledKernel combine = compileForGpu(ks[1], {"sm_90a", 0});
    const std::string report = test::reportOf(split);
    EXPECT_THAT(report, HasSubstr("wgmma")) << report;
    EXPECT_GE(test::countOf(report, ": TMA (cp.async.bulk.tensor"), 2u)
        << report;
    EXPECT_FALSE(combine.ptx.empty());
  }
}

TEST(SplitKeysErrors, CausalAndTheOneKernelEntryAreRefused) {
  kernels::AttentionShape s = test::selfAttention(1000, 64, true);
  try {
    kernels::attentionForwardKernels(s, {.splitKeys = 4});
    ADD_FAILURE() << "causal with split keys was accepted";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), HasSubstr("non-causal attention only"));
  }
  s.causal = false;
  try {
    kernels::attentionForward(s, {.splitKeys = 4});
    ADD_FAILURE() << "attentionForward built one of two kernels";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), HasSubstr("attentionForwardKernels"));
  }
  EXPECT_EQ(kernels::attentionForwardKernels(s, {.splitKeys = 1}).size(), 1u);
}

} // namespace
