//===- BadInputTest.cpp - sizes that once crashed kiln get clear errors ---===//
//
// Issue 23's API cases: every size is checked before arithmetic uses it, so
// out-of-range shapes and configs throw kiln::Error naming the problem
// instead of dividing by zero, overflowing, hanging or allocating nothing.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Softmax.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

using namespace kiln;
using kiln::test::errorOf;
using ::testing::HasSubstr;

namespace {

kernels::AttentionShape attention(int64_t seq, int64_t d) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = seq;
  s.headDim = d;
  return s;
}

TEST(BadInput, AttentionShapesAreCheckedBeforeUse) {
  constexpr int64_t huge = int64_t(1) << 62;
  // Each of these divided by zero, overflowed or looped forever.
  EXPECT_THAT(errorOf([] { kernels::attentionForward(attention(64, 0)); }),
              HasSubstr("head dim 0 is not supported"));
  EXPECT_THAT(errorOf([] { kernels::resolveConfig(attention(64, 0), {}); }),
              HasSubstr("head dim 0 is not supported"));
  kernels::AttentionShape noKeys = attention(64, 64);
  noKeys.seqK = 0;
  EXPECT_THAT(errorOf([&] { kernels::attentionForward(noKeys); }),
              HasSubstr("sequence lengths must be >= 1"));
  EXPECT_THAT(errorOf([&] { kernels::attentionForward(attention(huge, 64)); }),
              HasSubstr("overflows 64-bit integers"));
  EXPECT_THAT(errorOf([] {
                kernels::attentionTuneBucket(
                    attention(std::numeric_limits<int64_t>::max(), 64));
              }),
              HasSubstr("overflows 64-bit integers"));
  EXPECT_THAT(errorOf([] { kernels::attentionForward(attention(1 << 25, 128)); }),
              HasSubstr("exceed kiln's 32-bit index width"));
}

TEST(BadInput, BlockSizesAreCheckedBeforeUse) {
  for (int64_t bad : {int64_t(0), int64_t(-16), int64_t(3)}) {
    kernels::GemmConfig g;
    g.blockN = bad;
    EXPECT_THAT(errorOf([&] { kernels::gemm({64, 64, 64}, g); }),
                HasSubstr("must be powers of two in [1, 1024], got " +
                          std::to_string(bad)));
    kernels::SoftmaxConfig sm;
    sm.blockRows = bad;
    EXPECT_THAT(errorOf([&] { kernels::softmax({64, 64}, sm); }),
                HasSubstr("must be powers of two in [1, 4096], got " +
                          std::to_string(bad)));
  }
}

TEST(BadInput, HostTensorSizesAreChecked) {
  EXPECT_THAT(errorOf([] { HostTensor(DType::f32, {int64_t(1) << 62}); }),
              HasSubstr("overflows 64-bit integers"));
  EXPECT_THAT(errorOf([] {
                HostTensor(DType::f32, {int64_t(1) << 40, int64_t(1) << 40},
                           {0, 0});
              }),
              HasSubstr("overflows 64-bit integers"));
  EXPECT_THAT(errorOf([] { HostTensor(DType::f32, {int64_t(1) << 58}); }),
              HasSubstr("cannot allocate"));
  HostTensor fine(DType::f32, {3, 5});
  EXPECT_EQ(fine.numel(), 15);
}

// A tile of 100 elements: the CPU executor refuses it as the GPU compile
// does, naming the user's line, instead of running a kernel no GPU runs.
TEST(BadInput, TileShapesAreCheckedOnTheCpuToo) {
  int line = 0;
  Kernel k = [&] {
    dsl::KernelBuilder b("odd", {1});
    auto X = b.tensorArg("X", DType::f32, {100});
    line = __LINE__ + 1;
    dsl::store(X.block({0}, {100}), dsl::arange(100).to(DType::f32));
    return b.finish();
  }();
  HostTensor x(DType::f32, {100});
  std::string where = "BadInputTest.cpp:" + std::to_string(line) +
                      ": tile dimension 100 of tensor<100x";
  EXPECT_THAT(errorOf([&] { runOnCpu(k, k.bind({{"X", x.ref()}})); }),
              HasSubstr(where));
  EXPECT_THAT(errorOf([&] { compileForGpu(k); }), HasSubstr(where));
}

} // namespace
