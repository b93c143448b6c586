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
#include "../unit/SplitKeysCase.h"
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;
using test::SplitCase;

namespace {

class SplitKeysOnGpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitKeysOnGpu, MatchesFp64Reference) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule needs sm_90a";
  const SplitCase &c = GetParam();
  test::SplitTensors t(c);
  DeviceTensors dt;
  for (auto [name, tensor, output] : t.named())
    dt.add(name, *tensor, output);
  for (const Kernel &kernel : kernels::attentionForwardKernels(
           c.shape(), {.splitKeys = int(c.ranges)})) {
    std::map<std::string, TensorRef> in = kernel.tensorsIn(dt.refs);
    std::shared_ptr<GpuKernel> g = jitKernel(kernel, in);
    g->launch(kernel.bind(in));
  }
  cuda::synchronize();
  dt.download("O", t.o);
  dt.download("LSE", t.lse);
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SplitKeysOnGpu,
    ::testing::Values(SplitCase{2, 3, 1, 4097, 64, 8},  // decoding, ragged
                      SplitCase{1, 4, 1, 4096, 128, 8}, // decoding, whole
                      SplitCase{1, 2, 100, 3001, 64, 4},
                      SplitCase{1, 2, 130, 2049, 128, 3},
                      SplitCase{1, 2, 16, 300, 64, 4}, // a range with no keys
                      SplitCase{1, 1, 64, 200, 128, 4}),
    [](const auto &info) { return info.param.name(); });

} // namespace
