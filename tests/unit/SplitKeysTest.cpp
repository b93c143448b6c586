//===- SplitKeysTest.cpp - the forward with its keys split across programs ===//
//
// attention_fwd_split then attention_fwd_combine (AttentionConfig::splitKeys)
// on the CPU executor against the fp64 reference: ragged Nk, a range with
// no keys, Nq != Nk, D 64 and 128; every output and workspace poisoned
// first. Then what the GPU lowering makes of them, and bad configs.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/Reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

struct SplitCase {
  int64_t B, H, Nq, Nk, D, ranges;
  int staticShapes = -1; ///< 1: B, H, Nq and Nk compiled in
};

void PrintTo(const SplitCase &c, std::ostream *os) {
  *os << c.B << "x" << c.H << "_q" << c.Nq << "_k" << c.Nk << "_d" << c.D
      << "_split" << c.ranges << (c.staticShapes > 0 ? "_static" : "");
}

class SplitKeysOnCpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitKeysOnCpu, MatchesFp64Reference) {
  const SplitCase &c = GetParam();
  kernels::AttentionShape s{c.B, c.H, c.Nq, c.Nk, c.D, false, DType::bf16, 0};
  // Small key blocks keep the executor quick and the ranges many.
  std::vector<Kernel> ks =
      kernels::attentionForwardKernels(s, {.blockM = 64,
                                           .blockN = 32,
                                           .staticShapes = c.staticShapes,
                                           .splitKeys = int(c.ranges)});
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name(), "attention_fwd_split");
  EXPECT_EQ(ks[1].name(), "attention_fwd_combine");
  HostTensor q(s.dtype, {c.B, c.H, c.Nq, c.D}), k(s.dtype, {c.B, c.H, c.Nk, c.D}),
      v(s.dtype, {c.B, c.H, c.Nk, c.D}), o(s.dtype, {c.B, c.H, c.Nq, c.D}),
      lse(DType::f32, {c.B, c.H, c.Nq}),
      oSplit(DType::f32, {c.ranges, c.B, c.H, c.Nq, c.D}),
      lseSplit(DType::f32, {c.ranges, c.B, c.H, c.Nq});
  const uint64_t seed = uint64_t(c.Nq * 7919 + c.Nk * 31 + c.D + c.ranges);
  q.fillRandom(seed, -2, 2);
  k.fillRandom(seed + 1, -2, 2);
  v.fillRandom(seed + 2);
  for (HostTensor *t : {&o, &lse, &oSplit, &lseSplit})
    t->poison();
  const std::map<std::string, TensorRef> refs{
      {"Q", q.ref()},           {"K", k.ref()},
      {"V", v.ref()},           {"O", o.ref()},
      {"LSE", lse.ref()},       {"OSplit", oSplit.ref()},
      {"LSESplit", lseSplit.ref()}};
  for (const Kernel &kernel : ks)
    runOnCpu(kernel, kernel.bind(kernel.tensorsIn(refs)));

  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, k, v, oRef, lseRef);
  ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
  EXPECT_EQ(eo.nonFinite, 0);
  EXPECT_EQ(el.nonFinite, 0);
  EXPECT_LE(eo.relative, 1e-2) << "max abs " << eo.maxAbs;
  EXPECT_LE(el.relative, 1e-5) << "max abs " << el.maxAbs;
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
    [](const auto &info) {
      const SplitCase &c = info.param;
      return "q" + std::to_string(c.Nq) + "_k" + std::to_string(c.Nk) + "_d" +
             std::to_string(c.D) + "_split" + std::to_string(c.ranges) +
             (c.staticShapes > 0 ? "_static" : "");
    });

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
