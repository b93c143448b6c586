//===- BadInputTest.cpp - sizes that once crashed kiln get clear errors ---===//
//
// Issue 23's API cases: every size is checked before arithmetic uses it, so
// out-of-range shapes and configs throw kiln::Error naming the problem
// instead of dividing by zero, overflowing, hanging or allocating nothing.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/AttentionFields.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Softmax.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
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

// An attention Config's switches are 1, 0 or -1 (the default); another
// value is refused by name, forward and backward, before anything is built.
TEST(BadInput, AttentionSwitchesAreOneZeroOrDefault) {
  const kernels::AttentionShape s{1, 2, 256, 256, 64, false, DType::bf16, 0};
  EXPECT_THAT(errorOf([&] { kernels::attentionForward(s, {.wgmma = 2}); }),
              HasSubstr("attention: wgmma is 1 (yes), 0 (no) or -1 (the "
                        "default), got 2"));
  EXPECT_THAT(errorOf([&] { kernels::resolveConfig(s, {.smallTiles = -3}); }),
              HasSubstr("smallTiles is 1 (yes), 0 (no) or -1"));
  EXPECT_THAT(
      errorOf([&] { kernels::attentionBackward(s, {.deterministic = 5}); }),
      HasSubstr("attention backward: deterministic is 1 (yes), 0 "
                "(no) or -1 (the default), got 5"));
  EXPECT_NO_THROW(kernels::resolveConfig(s, {.wgmma = 0, .tma = 0}));
}

// Every switch of the fields' tables (the CLI's flags) is checked by the
// library, forward and backward, by its field's name.
TEST(BadInput, EverySwitchOfTheFieldTablesIsChecked) {
  const kernels::AttentionShape s{1, 2, 256, 256, 64, false, DType::bf16, 0};
  int forward = 0, backward = 0;
  for (const auto &f : kernels::attentionConfigFields()) {
    if (f.kind != kernels::FieldKind::Switch)
      continue;
    kernels::AttentionConfig c;
    std::visit([&](auto member) { c.*member = 2; }, f.member);
    EXPECT_THAT(errorOf([&] { kernels::resolveConfig(s, c); }),
                HasSubstr(std::string("attention: ") + f.name +
                          " is 1 (yes), 0 (no) or -1 (the default), got 2"))
        << f.flag;
    ++forward;
  }
  for (const auto &f : kernels::attentionBackwardConfigFields()) {
    if (f.kind != kernels::FieldKind::Switch)
      continue;
    kernels::AttentionBackwardConfig c;
    std::visit([&](auto member) { c.*member = -2; }, f.member);
    EXPECT_THAT(errorOf([&] { kernels::resolveBackwardConfig(s, c); }),
                HasSubstr(std::string("attention backward: ") + f.name +
                          " is 1 (yes), 0 (no) or -1 (the default), got -2"))
        << f.flag;
    ++backward;
  }
  EXPECT_EQ(forward, 20);
  EXPECT_EQ(backward, 18);
}

// A bound tensor whose last element lies past 64-bit byte offsets (shape
// and strides each in range) is refused before any launch.
TEST(BadInput, BoundTensorExtentsAreChecked) {
  Kernel k = [] {
    dsl::KernelBuilder b("wide", {1});
    auto X = b.tensorArg("X", DType::f32, {1 << 30, 1 << 30, 1 << 30, 4});
    dsl::store(X[0][0][0].block({0}, {4}), dsl::zeros({4}, DType::f32));
    return b.finish();
  }();
  float x = 0;
  const int64_t big = (int64_t(1) << 31) - 1;
  TensorRef r{&x, DType::f32, {1 << 30, 1 << 30, 1 << 30, 4}, {big, big, big, 1}};
  std::string error = errorOf([&] { k.bind({{"X", r}}); });
  EXPECT_THAT(error, HasSubstr("kernel wide, tensor X: "));
  EXPECT_THAT(error, HasSubstr("overflows 64-bit integers"));
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

  // A dot the tensor cores cannot take (N = 4): refused on the CPU as well.
  Kernel thin = [&] {
    dsl::KernelBuilder b("thin", {1});
    auto A = b.tensorArg("A", DType::bf16, {16, 16});
    auto B = b.tensorArg("B", DType::bf16, {16, 4});
    auto C = b.tensorArg("C", DType::f32, {16, 4});
    dsl::Tile a = dsl::load(A.block({0, 0}, {16, 16}));
    dsl::Tile bt = dsl::load(B.block({0, 0}, {16, 4}));
    line = __LINE__ + 1;
    dsl::store(C.block({0, 0}), dsl::dot(a, bt));
    return b.finish();
  }();
  HostTensor a(DType::bf16, {16, 16}), bm(DType::bf16, {16, 4}),
      c(DType::f32, {16, 4});
  std::string dotError = errorOf([&] {
    runOnCpu(thin, thin.bind({{"A", a.ref()}, {"B", bm.ref()}, {"C", c.ref()}}));
  });
  EXPECT_THAT(dotError, HasSubstr("BadInputTest.cpp:" + std::to_string(line) +
                                  ": dot 16x4x16 (MxNxK)"));
  EXPECT_THAT(dotError, HasSubstr("multiples of 16x8x16"));
}

} // namespace

namespace {

// Cache entries with random bytes changed, cut short or grown (resealed, so
// that the record parser sees them past the checksum): decoding either gives
// a kernel or throws kiln::Error, never crashes or throws anything else.
TEST(Fuzz, CacheEntryBytes) {
  CompiledKernel k;
  k.name = "fuzz";
  k.arch = "sm_90a";
  k.params = {{"A", ParamInfo::Kind::Pointer, DType::bf16},
              {"A_stride0", ParamInfo::Kind::Scalar, DType::i32}};
  k.tensors = {{"A", DType::bf16, {64, 32}, 0, {1}, true}};
  k.tensorMaps = {
      TensorMapInfo::parse("ptr=0 elem=2 dims=64,32 strides=1,1 box=64,32")};
  k.report = {"a.cpp:1: load 64x32: TMA"};
  k.stages = {{"kiln", "", 1.5}, {"cse", "text", 0.5}};
  k.ptx = "// ptx\n";
  const std::string good = encodeCompiledKernel(k, std::string(64, 'f'));
  std::mt19937_64 rng(23);
  int decoded = 0, rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string bytes = good;
    switch (rng() % 4) {
    case 0: // flip a few bytes
      for (int j = 0, n = 1 + int(rng() % 4); j < n; ++j)
        bytes[rng() % bytes.size()] = char(rng());
      break;
    case 1: // cut short
      bytes.resize(rng() % bytes.size());
      break;
    case 2: // a digit of a length or number made huge
      for (char &c : bytes)
        if (c >= '0' && c <= '9' && rng() % 8 == 0)
          c = '9';
      break;
    default: // bytes inserted
      bytes.insert(rng() % bytes.size(), std::string(1 + rng() % 8, char(rng())));
    }
    bytes = resealCacheEntry(bytes);
    try {
      decodeCompiledKernel(bytes, {}, std::string(64, 'f'));
      ++decoded;
    } catch (const Error &) {
      ++rejected;
    }
  }
  EXPECT_EQ(decoded + rejected, 4000);
  EXPECT_GT(rejected, 1000);
}

// Random attention shapes and configs, extremes included: building the
// kernel gives one or a kiln::Error, never a crash, hang or other exception.
TEST(Fuzz, AttentionShapesAndConfigs) {
  const int64_t values[] = {0, -1, 1, 3, 16, 64, 100, 128, 1000, 4097,
                            int64_t(1) << 31, int64_t(1) << 40,
                            std::numeric_limits<int64_t>::max()};
  auto pick = [&](std::mt19937_64 &rng) {
    return values[rng() % (sizeof(values) / sizeof(values[0]))];
  };
  std::mt19937_64 rng(7);
  int built = 0;
  for (int i = 0; i < 400; ++i) {
    kernels::AttentionShape s;
    s.batch = rng() % 3 ? 1 + rng() % 4 : pick(rng);
    s.heads = rng() % 3 ? 1 + rng() % 8 : pick(rng);
    s.seqQ = rng() % 2 ? 1 + rng() % 5000 : pick(rng);
    s.seqK = rng() % 2 ? s.seqQ : pick(rng);
    s.headDim = rng() % 4 ? (rng() % 2 ? 64 : 128) : pick(rng);
    s.causal = rng() % 2;
    kernels::AttentionConfig c;
    if (rng() % 3 == 0)
      c.blockM = pick(rng);
    if (rng() % 3 == 0)
      c.blockN = pick(rng);
    if (rng() % 4 == 0)
      c.stages = int(rng() % 10);
    if (rng() % 4 == 0)
      c.warps = int(rng() % 40);
    try {
      Kernel k = kernels::attentionForward(s, c);
      EXPECT_GE(k.grid()[0].scale, 1);
      ++built;
    } catch (const Error &) {
    }
  }
  EXPECT_GT(built, 50);
}

} // namespace
