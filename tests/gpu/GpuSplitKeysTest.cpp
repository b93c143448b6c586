//===- GpuSplitKeysTest.cpp - the split-keys forward on the GPU -----------===//
//
// attention_fwd_split and attention_fwd_combine under the default schedule
// (D=64: every warp loads and computes; D=128: a producer warpgroup,
// persistent CTAs) against the fp64 host reference: decoding, few queries
// on many keys, ragged Nk, a range with no keys. Fresh random inputs, O,
// LSE and both workspaces poisoned before the launches, every element
// compared. Skips, saying why, without an sm_90a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;

namespace {

struct SplitCase {
  int64_t B, H, Nq, Nk, D, ranges;
};

void PrintTo(const SplitCase &c, std::ostream *os) {
  *os << c.B << "x" << c.H << "_q" << c.Nq << "_k" << c.Nk << "_d" << c.D
      << "_split" << c.ranges;
}

class SplitKeysOnGpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitKeysOnGpu, MatchesFp64Reference) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule needs sm_90a";
  const SplitCase &c = GetParam();
  kernels::AttentionShape s{c.B, c.H, c.Nq, c.Nk, c.D, false, DType::bf16, 0};
  HostTensor q(s.dtype, {c.B, c.H, c.Nq, c.D}), k(s.dtype, {c.B, c.H, c.Nk, c.D}),
      v(s.dtype, {c.B, c.H, c.Nk, c.D}), o(s.dtype, {c.B, c.H, c.Nq, c.D}),
      lse(DType::f32, {c.B, c.H, c.Nq}),
      oSplit(DType::f32, {c.ranges, c.B, c.H, c.Nq, c.D}),
      lseSplit(DType::f32, {c.ranges, c.B, c.H, c.Nq});
  const uint64_t seed = uint64_t(c.Nq * 7919 + c.Nk * 31 + c.D + c.ranges);
  q.fillRandom(seed, -2, 2);
  k.fillRandom(seed + 1, -2, 2);
  v.fillRandom(seed + 2);
  DeviceTensors dt;
  dt.add("Q", q, false);
  dt.add("K", k, false);
  dt.add("V", v, false);
  dt.add("O", o, true);
  dt.add("LSE", lse, true);
  dt.add("OSplit", oSplit, true);
  dt.add("LSESplit", lseSplit, true);
  for (const Kernel &kernel : kernels::attentionForwardKernels(
           s, {.splitKeys = int(c.ranges)})) {
    std::map<std::string, TensorRef> in = kernel.tensorsIn(dt.refs);
    std::shared_ptr<GpuKernel> g = jitKernel(kernel, in);
    g->launch(kernel.bind(in));
  }
  cuda::synchronize();
  dt.download("O", o);
  dt.download("LSE", lse);
  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, k, v, oRef, lseRef);
  ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
  EXPECT_EQ(eo.nonFinite, 0);
  EXPECT_EQ(el.nonFinite, 0);
  EXPECT_LE(eo.relative, 1e-2) << "max abs " << eo.maxAbs;
  EXPECT_LE(el.relative, 1e-5) << "max abs " << el.maxAbs;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SplitKeysOnGpu,
    ::testing::Values(SplitCase{2, 3, 1, 4097, 64, 8},  // decoding, ragged
                      SplitCase{1, 4, 1, 4096, 128, 8}, // decoding, whole
                      SplitCase{1, 2, 100, 3001, 64, 4},
                      SplitCase{1, 2, 130, 2049, 128, 3},
                      SplitCase{1, 2, 16, 300, 64, 4}, // a range with no keys
                      SplitCase{1, 1, 64, 200, 128, 4}),
    [](const auto &info) {
      const SplitCase &c = info.param;
      return "q" + std::to_string(c.Nq) + "_k" + std::to_string(c.Nk) + "_d" +
             std::to_string(c.D) + "_split" + std::to_string(c.ranges);
    });

} // namespace
