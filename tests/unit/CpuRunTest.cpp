//===- CpuRunTest.cpp - kernels on the CPU executor vs fp64 references ----===//
//
// Fresh random inputs for every case (seeded by the case), outputs poisoned
// with NaN before the run so that an element the kernel forgets to write
// fails the comparison, every element compared.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

double tolerance(DType t) {
  return t == DType::bf16 ? 1e-2 : t == DType::f16 ? 5e-3 : 1e-5;
}

struct AttentionCase {
  int64_t batch, heads, seqQ, seqK, headDim;
  bool causal;
  DType dtype;
  bool interleavedHeads; ///< (B,N,H,D) memory: non-contiguous strides
};

std::string caseName(const AttentionCase &c) {
  return std::to_string(c.batch) + "x" + std::to_string(c.heads) + "_q" +
         std::to_string(c.seqQ) + "_k" + std::to_string(c.seqK) + "_d" +
         std::to_string(c.headDim) + (c.causal ? "_causal_" : "_full_") +
         dtypeName(c.dtype) + (c.interleavedHeads ? "_bshd" : "");
}

// Readable names in gtest's and ctest's listings.
void PrintTo(const AttentionCase &c, std::ostream *os) { *os << caseName(c); }

HostTensor makeBHND(DType t, int64_t B, int64_t H, int64_t N, int64_t D,
                    bool interleaved) {
  if (!interleaved)
    return HostTensor(t, {B, H, N, D});
  return HostTensor(t, {B, H, N, D}, {N * H * D, D, H * D, 1});
}

class AttentionOnCpu : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionOnCpu, MatchesFp64Reference) {
  const AttentionCase &c = GetParam();
  kernels::AttentionShape s{c.batch,   c.heads,  c.seqQ,  c.seqK,
                            c.headDim, c.causal, c.dtype, 0};
  Kernel k = kernels::attentionForward(s);
  uint64_t seed = std::hash<std::string>()(caseName(c));
  HostTensor q = makeBHND(c.dtype, c.batch, c.heads, c.seqQ, c.headDim,
                          c.interleavedHeads);
  HostTensor kk = makeBHND(c.dtype, c.batch, c.heads, c.seqK, c.headDim,
                           c.interleavedHeads);
  HostTensor v = makeBHND(c.dtype, c.batch, c.heads, c.seqK, c.headDim,
                          c.interleavedHeads);
  HostTensor o = makeBHND(c.dtype, c.batch, c.heads, c.seqQ, c.headDim,
                          c.interleavedHeads);
  HostTensor lse(DType::f32, {c.batch, c.heads, c.seqQ});
  q.fillRandom(seed, -2, 2);
  kk.fillRandom(seed + 1, -2, 2);
  v.fillRandom(seed + 2);
  o.poison();
  lse.poison();

  auto args = k.bind({{"Q", q.ref()},
                      {"K", kk.ref()},
                      {"V", v.ref()},
                      {"O", o.ref()},
                      {"LSE", lse.ref()}});
  runOnCpu(k, args);

  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, kk, v, oRef, lseRef);
  ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
  EXPECT_EQ(eo.nonFinite, 0);
  EXPECT_EQ(el.nonFinite, 0);
  EXPECT_LE(eo.relative, tolerance(c.dtype)) << "max abs " << eo.maxAbs;
  EXPECT_LE(el.relative, 1e-5) << "max abs " << el.maxAbs;
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32;

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionOnCpu,
    ::testing::Values(
        // Ragged N (not a multiple of the 64-row block), both masks.
        AttentionCase{1, 2, 1, 1, 64, false, bf16, false},
        AttentionCase{1, 2, 1, 1, 64, true, bf16, false},
        AttentionCase{1, 2, 17, 17, 64, false, bf16, false},
        AttentionCase{1, 2, 17, 17, 64, true, f16, false},
        AttentionCase{2, 1, 100, 100, 64, true, bf16, false},
        AttentionCase{1, 2, 100, 100, 128, false, f16, true},
        AttentionCase{1, 2, 257, 257, 64, true, bf16, true},
        AttentionCase{1, 1, 257, 257, 128, false, bf16, false},
        // Exact multiples, B·H > 1, fp32 with a tight tolerance.
        AttentionCase{2, 2, 128, 128, 64, false, f32, false},
        AttentionCase{1, 2, 256, 256, 64, true, f32, false},
        AttentionCase{1, 2, 256, 256, 128, true, bf16, false},
        // Queries and keys of different lengths.
        AttentionCase{1, 2, 50, 130, 64, false, bf16, false},
        AttentionCase{1, 2, 130, 50, 64, true, f16, false}),
    [](const auto &info) { return caseName(info.param); });

struct GemmCase {
  int64_t M, N, K;
  DType dtype;
  int64_t groupM = 0; ///< launch order in groups of row blocks
};

void PrintTo(const GemmCase &c, std::ostream *os) {
  *os << c.M << "x" << c.N << "x" << c.K << " " << dtypeName(c.dtype);
  if (c.groupM)
    *os << " groupM=" << c.groupM;
}

class GemmOnCpu : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmOnCpu, MatchesFp64Reference) {
  const GemmCase &c = GetParam();
  kernels::GemmConfig config;
  config.groupM = c.groupM;
  Kernel k = kernels::gemm({c.M, c.N, c.K, c.dtype, DType::f32}, config);
  HostTensor a(c.dtype, {c.M, c.K}), b(c.dtype, {c.K, c.N});
  HostTensor out(DType::f32, {c.M, c.N}), ref(DType::f32, {c.M, c.N});
  a.fillRandom(c.M * 7 + c.K);
  b.fillRandom(c.N * 13 + c.K);
  out.poison();
  runOnCpu(k, k.bind({{"A", a.ref()}, {"B", b.ref()}, {"C", out.ref()}}));
  kernels::gemmReference(a, b, ref);
  ErrorStats e = compareTensors(out, ref);
  // Inputs are exact in every dtype and products are summed in fp32.
  EXPECT_LE(e.relative, 1e-5) << "max abs " << e.maxAbs;
  EXPECT_EQ(e.nonFinite, 0);
}

// The epilogue: a bias row, then ReLU or GELU (tanh form), fp32, on ragged
// shapes (rows and columns past the blocks).
TEST(GemmOnCpu, EpilogueMatchesFp64Reference) {
  for (auto act : {kernels::GemmActivation::None, kernels::GemmActivation::Relu,
                   kernels::GemmActivation::GeluTanh}) {
    const bool residual = act == kernels::GemmActivation::GeluTanh;
    kernels::GemmShape s{100, 70, 33, bf16, DType::f32, true, act, residual};
    Kernel k = kernels::gemm(s);
    HostTensor a(bf16, {100, 33}), b(bf16, {33, 70}), bias(bf16, {70}),
        r(bf16, {100, 70});
    HostTensor out(DType::f32, {100, 70}), ref(DType::f32, {100, 70});
    a.fillRandom(1);
    b.fillRandom(2);
    bias.fillRandom(3, -4, 4);
    r.fillRandom(4);
    out.poison();
    std::map<std::string, TensorRef> t{
        {"A", a.ref()}, {"B", b.ref()}, {"Bias", bias.ref()}, {"C", out.ref()}};
    if (residual)
      t["R"] = r.ref();
    runOnCpu(k, k.bind(t));
    kernels::gemmReference(a, b, ref, &bias, act, residual ? &r : nullptr);
    ErrorStats e = compareTensors(out, ref);
    // GELU on the CPU executor is tanh in fp32 (MathMode::Fast is the GPU's
    // tanh.approx; the executor computes it exactly).
    EXPECT_LE(e.relative, 1e-5) << kernels::gemmActivationName(act);
    EXPECT_EQ(e.nonFinite, 0);
  }
}

// B given as BT (N x K, nn.Linear's weight layout), read as stored: ragged
// M, N and K, with the bias and GELU, against fp64 on B = BT's transpose.
TEST(GemmOnCpu, TransposedWeightMatchesFp64Reference) {
  kernels::GemmShape s{
      100, 70, 33, bf16, DType::f32, true, kernels::GemmActivation::GeluTanh};
  s.bTransposed = true;
  Kernel k = kernels::gemm(s);
  HostTensor a(bf16, {100, 33}), bt(bf16, {70, 33}), bias(bf16, {70});
  HostTensor out(DType::f32, {100, 70}), ref(DType::f32, {100, 70});
  a.fillRandom(1);
  bt.fillRandom(2);
  bias.fillRandom(3, -4, 4);
  out.poison();
  runOnCpu(k, k.bind({{"A", a.ref()},
                      {"BT", bt.ref()},
                      {"Bias", bias.ref()},
                      {"C", out.ref()}}));
  kernels::gemmReference(a, kernels::transposeMatrix(bt), ref, &bias,
                         kernels::GemmActivation::GeluTanh);
  ErrorStats e = compareTensors(out, ref);
  EXPECT_LE(e.relative, 1e-5);
  EXPECT_EQ(e.nonFinite, 0);
  // Given as B (K x N) it is refused by name.
  EXPECT_ANY_THROW(k.bind({{"A", a.ref()},
                           {"B", bt.ref()},
                           {"Bias", bias.ref()},
                           {"C", out.ref()}}));
}

// A given as AT (K x M: a weight gradient's X^T read as X is stored), B as
// BT, and Z (the pre-activation a GELU's gradient needs) written beside C.
TEST(GemmOnCpu, TransposedInputAndPreActivation) {
  kernels::GemmShape s{
      100, 70, 33, bf16, DType::f32, true, kernels::GemmActivation::GeluTanh};
  s.aTransposed = s.bTransposed = s.preActivation = true;
  Kernel k = kernels::gemm(s);
  HostTensor at(bf16, {33, 100}), bt(bf16, {70, 33}), bias(bf16, {70});
  HostTensor c(DType::f32, {100, 70}), z(DType::f32, {100, 70});
  HostTensor cRef(DType::f32, {100, 70}), zRef(DType::f32, {100, 70});
  at.fillRandom(1);
  bt.fillRandom(2);
  bias.fillRandom(3, -4, 4);
  c.poison();
  z.poison();
  runOnCpu(k, k.bind({{"AT", at.ref()},
                      {"BT", bt.ref()},
                      {"Bias", bias.ref()},
                      {"C", c.ref()},
                      {"Z", z.ref()}}));
  HostTensor a = kernels::transposeMatrix(at), b = kernels::transposeMatrix(bt);
  kernels::gemmReference(a, b, cRef, &bias, kernels::GemmActivation::GeluTanh);
  kernels::gemmReference(a, b, zRef, &bias);
  for (auto [out, ref] : {std::pair{&c, &cRef}, std::pair{&z, &zRef}}) {
    ErrorStats e = compareTensors(*out, *ref);
    EXPECT_LE(e.relative, 1e-5);
    EXPECT_EQ(e.nonFinite, 0);
  }
}

// Split-K: each range of K steps adds its product into C by atomics, so C
// ends as its starting values plus A·B; K = 333 in blocks of 32 (11 steps:
// ranges of 4, 4 and 3, and with 16 ranges five empty ones), grouped launch
// order or not, A as AT too. An epilogue, or a C other than fp32, is refused.
TEST(GemmOnCpu, SplitKAddsEveryRangeIntoC) {
  const int64_t M = 100, N = 70, K = 333;
  HostTensor a(bf16, {M, K}), b(bf16, {K, N}), start(DType::f32, {M, N});
  a.fillRandom(1);
  b.fillRandom(2);
  start.fillRandom(3, -4, 4);
  HostTensor ref(DType::f32, {M, N});
  kernels::gemmReference(a, b, ref);
  for (int64_t i = 0; i < M * N; ++i)
    ref.flatSet(i, ref.flatAt(i) + start.flatAt(i));
  HostTensor at = kernels::transposeMatrix(a);
  for (int64_t splits : {3, 16})
    for (int64_t groupM : {0, 4})
      for (bool aT : {false, true}) {
        SCOPED_TRACE(std::to_string(splits) + " ranges, groupM " +
                     std::to_string(groupM) + (aT ? ", AT" : ""));
        kernels::GemmShape s{M, N, K, bf16, DType::f32};
        s.aTransposed = aT;
        kernels::GemmConfig c{.blockM = 32,
                              .blockN = 32,
                              .blockK = 32,
                              .groupM = groupM,
                              .splitK = splits};
        Kernel k = kernels::gemm(s, c);
        HostTensor out = start;
        runOnCpu(k, k.bind({{aT ? "AT" : "A", aT ? at.ref() : a.ref()},
                            {"B", b.ref()},
                            {"C", out.ref()}}));
        ErrorStats e = compareTensors(out, ref);
        EXPECT_LE(e.relative, 1e-5);
        EXPECT_EQ(e.nonFinite, 0);
      }
  kernels::GemmConfig c{.splitK = 2};
  EXPECT_THROW(kernels::gemm({M, N, K, bf16, DType::f32, true}, c), Error);
  EXPECT_THROW(kernels::gemm({M, N, K, bf16, bf16}, c), Error);
  c.splitK = 0;
  EXPECT_THROW(kernels::gemm({M, N, K, bf16, DType::f32}, c), Error);
  c.splitK = 100000; // past a grid dimension's 65535
  EXPECT_THAT(test::errorOf([&] {
                kernels::gemm({M, N, K, bf16, DType::f32}, c);
              }),
              ::testing::HasSubstr("splitK must be in [1, 65535]"));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmOnCpu,
    ::testing::Values(GemmCase{64, 64, 32, bf16}, GemmCase{1, 1, 1, bf16},
                      GemmCase{100, 70, 33, f16}, GemmCase{129, 65, 257, f32},
                      GemmCase{17, 200, 64, bf16},
                      // 7 row blocks in groups of 3 (the last of 1), of 2
                      // (the last of 1), and one group of all.
                      GemmCase{400, 300, 40, bf16, 3},
                      GemmCase{400, 129, 40, f16, 2},
                      GemmCase{400, 300, 40, bf16, 16}),
    [](const auto &info) {
      const GemmCase &c = info.param;
      return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" +
             std::to_string(c.K) + "_" + dtypeName(c.dtype) +
             (c.groupM ? "_group" + std::to_string(c.groupM) : "");
    });

struct SoftmaxCase {
  int64_t rows, cols;
  DType dtype;
};

void PrintTo(const SoftmaxCase &c, std::ostream *os) {
  *os << c.rows << "x" << c.cols << " " << dtypeName(c.dtype);
}

class SoftmaxOnCpu : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxOnCpu, MatchesFp64Reference) {
  const SoftmaxCase &c = GetParam();
  Kernel k = kernels::softmax({c.rows, c.cols, c.dtype});
  HostTensor x(c.dtype, {c.rows, c.cols}), y(c.dtype, {c.rows, c.cols});
  HostTensor ref(DType::f32, {c.rows, c.cols});
  x.fillRandom(c.rows * 31 + c.cols, -5, 5);
  y.poison();
  runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}));
  kernels::softmaxReference(x, ref);
  ErrorStats e = compareTensors(y, ref);
  EXPECT_LE(e.relative, tolerance(c.dtype)) << "max abs " << e.maxAbs;
  EXPECT_EQ(e.nonFinite, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxOnCpu,
                         ::testing::Values(SoftmaxCase{1, 1, f32},
                                           SoftmaxCase{17, 100, f32},
                                           SoftmaxCase{16, 128, f32},
                                           SoftmaxCase{33, 1000, bf16},
                                           SoftmaxCase{5, 257, f16}),
                         [](const auto &info) {
                           const SoftmaxCase &c = info.param;
                           return std::to_string(c.rows) + "x" +
                                  std::to_string(c.cols) + "_" +
                                  dtypeName(c.dtype);
                         });

} // namespace

// Stores outside the tensor are skipped; a kernel writes only its tensor even
// when the tensor is a strided view inside a larger buffer.
TEST(CpuExecutor, StoresStayInsideTheTensor) {
  using namespace kiln::dsl;
  KernelBuilder b("copy", {2, 2});
  auto X = b.tensorArg("X", DType::f32, {20, 10});
  auto Y = b.tensorArg("Y", DType::f32, {20, 10});
  Index r0 = programId(0) * 16, c0 = programId(1) * 8;
  store(Y.block({r0, c0}), load(X.block({r0, c0}, {16, 8}), -7.0) + 1.0);
  Kernel k = b.finish();

  HostTensor x(DType::f32, {20, 10});
  x.fillRandom(3);
  HostTensor y(DType::f32, {20, 10}, {13, 1}); // 3 unused elements per row
  y.poison();
  runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}));
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t c = 0; c < 10; ++c)
      ASSERT_EQ(y.at(std::vector<int64_t>{r, c}),
                float(x.at(std::vector<int64_t>{r, c}) + 1.0));
  // The gaps between rows were never written: still the NaN poison.
  const float *raw = static_cast<const float *>(y.data());
  for (int64_t r = 0; r + 1 < 20; ++r)
    for (int64_t g = 10; g < 13; ++g)
      ASSERT_TRUE(std::isnan(raw[r * 13 + g])) << r << "," << g;
}

// Integer tiles, comparisons, where, min/max and padding of loads.
TEST(CpuExecutor, IntegerAndMaskSemantics) {
  using namespace kiln::dsl;
  KernelBuilder b("ints", {3});
  auto Y = b.tensorArg("Y", DType::i32, {40});
  auto X = b.tensorArg("X", DType::f32, {40});
  auto Z = b.tensorArg("Z", DType::f32, {40});
  Index base = programId(0) * 16;
  Tile idx = arange(16) + base; // global index
  Tile v = where(idx % 1 == 0 && idx >= 10, idx * 3 - 7, min(idx, 4));
  store(Y.block({base}), v);
  // Elements past 40 read the padding 100; the store of them is skipped.
  Tile xt = load(X.block({base}, {16}), 100.0);
  store(Z.block({base}), max(xt, 0.5) + reduceSum(xt, 0) * 0.0);
  Kernel k = b.finish();

  HostTensor y(DType::i32, {40}), x(DType::f32, {40}), z(DType::f32, {40});
  x.fillRandom(9);
  y.poison();
  z.poison();
  runOnCpu(k, k.bind({{"Y", y.ref()}, {"X", x.ref()}, {"Z", z.ref()}}));
  for (int64_t i = 0; i < 40; ++i) {
    int64_t want = i >= 10 ? i * 3 - 7 : std::min<int64_t>(i, 4);
    ASSERT_EQ(y.flatAt(i), double(want)) << i;
    ASSERT_EQ(z.flatAt(i), std::max(x.flatAt(i), 0.5)) << i;
  }
}

// One run-time-shape GEMM and one softmax (the defaults) serve other sizes:
// M, N, K and rows, cols bound from the tensors, every element against the
// fp64 reference on fresh inputs, outputs poisoned.
TEST(CpuExecutor, GemmAndSoftmaxServeEverySize) {
  Kernel gemm = kernels::gemm({64, 64, 64, DType::bf16, DType::f32});
  for (auto [m, n, k] : {std::array<int64_t, 3>{64, 64, 64},
                         {1, 1, 1},
                         {33, 70, 5},
                         {130, 17, 200}}) {
    HostTensor a(DType::bf16, {m, k}), b(DType::bf16, {k, n}),
        c(DType::f32, {m, n}), ref(DType::f32, {m, n});
    a.fillRandom(uint64_t(m + k));
    b.fillRandom(uint64_t(n + k + 1));
    c.poison();
    kernels::gemmReference(a, b, ref);
    runOnCpu(gemm, gemm.bind({{"A", a.ref()}, {"B", b.ref()}, {"C", c.ref()}}));
    EXPECT_LE(compareTensors(c, ref).relative, 1e-3)
        << m << "x" << n << "x" << k;
  }
  Kernel softmax = kernels::softmax({128, 128, DType::f32});
  for (auto [rows, cols] :
       {std::array<int64_t, 2>{128, 128}, {1, 1}, {17, 1000}, {40, 129}}) {
    HostTensor x(DType::f32, {rows, cols}), y(DType::f32, {rows, cols}),
        ref(DType::f32, {rows, cols});
    x.fillRandom(uint64_t(rows * cols), -4, 4);
    y.poison();
    kernels::softmaxReference(x, ref);
    runOnCpu(softmax, softmax.bind({{"X", x.ref()}, {"Y", y.ref()}}));
    EXPECT_LE(compareTensors(y, ref).relative, 1e-5) << rows << "x" << cols;
  }
}

TEST(CpuExecutor, RejectsBadArguments) {
  kernels::GemmShape s{16, 16, 16, DType::bf16, DType::f32};
  Kernel k = kernels::gemm(s);
  HostTensor a(DType::bf16, {16, 16}), b(DType::bf16, {16, 16}),
      c(DType::f32, {16, 16});
  HostTensor wrongType(DType::f16, {16, 16}), wrongShape(DType::bf16, {16, 17});
  using test::errorOf;
  EXPECT_THAT(
      errorOf([&] {
        k.bind({{"A", wrongType.ref()}, {"B", b.ref()}, {"C", c.ref()}});
      }),
      HasSubstr("tensor A: expected bf16, got f16"));
  // Run-time M, N, K: bound from A, refused where B disagrees.
  EXPECT_THAT(
      errorOf([&] {
        k.bind({{"A", wrongShape.ref()}, {"B", b.ref()}, {"C", c.ref()}});
      }),
      HasSubstr("tensor B: dimension 0 is 16 but K = 17 from tensor A"));
  Kernel exact = kernels::gemm(s, {.staticShapes = true});
  EXPECT_THAT(
      errorOf([&] {
        exact.bind({{"A", wrongShape.ref()}, {"B", b.ref()}, {"C", c.ref()}});
      }),
      HasSubstr(
          "tensor A: the kernel was compiled for shape 16x16, got 16x17"));
  EXPECT_THAT(errorOf([&] {
                k.bind({{"A", a.ref()}, {"C", c.ref()}});
              }),
              HasSubstr("tensor B: no tensor given"));
  EXPECT_THAT(
      errorOf([&] {
        k.bind(
            {{"A", a.ref()}, {"B", b.ref()}, {"C", c.ref()}, {"D", c.ref()}});
      }),
      HasSubstr("has no tensor parameter D"));
  TensorRef nullA = a.ref();
  nullA.data = nullptr;
  EXPECT_THAT(errorOf([&] {
                k.bind({{"A", nullA}, {"B", b.ref()}, {"C", c.ref()}});
              }),
              HasSubstr("tensor A: null pointer"));
  TensorRef hugeStride = a.ref();
  hugeStride.strides[0] = int64_t(1) << 33;
  EXPECT_THAT(errorOf([&] {
                k.bind({{"A", hugeStride}, {"B", b.ref()}, {"C", c.ref()}});
              }),
              HasSubstr("does not fit kiln's 32-bit index width"));
  EXPECT_THAT(errorOf([&] { runOnCpu(k, {}); }),
              HasSubstr("takes 12 arguments, got 0"));
  auto args = k.bind({{"A", a.ref()}, {"B", b.ref()}, {"C", c.ref()}});
  ASSERT_EQ(k.params()[3].name, "A");
  args[3] = int64_t(1);
  EXPECT_THAT(errorOf([&] { runOnCpu(k, args); }),
              HasSubstr("argument A must be a pointer"));
}

/// Runs `kern` on the CPU for shape `s` (random Q, K, V from `seed`, O and
/// LSE poisoned) and checks both against the fp64 reference.
static void checkAttentionOnCpu(const Kernel &kern,
                                const kernels::AttentionShape &s,
                                uint64_t seed) {
  const int64_t b = s.batch, h = s.heads, nq = s.seqQ, nk = s.seqK,
                d = s.headDim;
  HostTensor q(s.dtype, {b, h, nq, d}), k(s.dtype, {b, h, nk, d}),
      v(s.dtype, {b, h, nk, d}), o(s.dtype, {b, h, nq, d}),
      lse(DType::f32, {b, h, nq});
  q.fillRandom(seed, -2, 2);
  k.fillRandom(seed + 1, -2, 2);
  v.fillRandom(seed + 2);
  o.poison();
  lse.poison();
  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, k, v, oRef, lseRef);
  runOnCpu(kern, kern.bind({{"Q", q.ref()},
                            {"K", k.ref()},
                            {"V", v.ref()},
                            {"O", o.ref()},
                            {"LSE", lse.ref()}}));
  std::string which = std::to_string(b) + "x" + std::to_string(h) +
                      " Nq=" + std::to_string(nq) +
                      " Nk=" + std::to_string(nk) + (s.causal ? " causal" : "");
  EXPECT_LE(compareTensors(o, oRef).relative, 1e-2) << which;
  EXPECT_LE(compareTensors(lse, lseRef).relative, 1e-5) << which;
}

// One run-time-shape attention kernel (the default) on shapes of its class:
// other batch, heads, Nq != Nk, causal and not, each against the fp64
// reference with poisoned outputs.
TEST(CpuExecutor, AttentionRuntimeShapesServeEveryShape) {
  for (bool causal : {false, true}) {
    kernels::AttentionShape built{1, 2, 300, 300, 64, causal, DType::bf16, 0};
    Kernel kern = kernels::attentionForward(
        built, {.blockM = 64, .blockN = 64, .warps = 4});
    for (auto [b, h, nq, nk] : {std::array<int64_t, 4>{1, 2, 300, 300},
                                {2, 1, 77, 77},
                                {1, 3, 130, 190},
                                {1, 1, 1, 1},
                                {2, 2, 200, 129}})
      checkAttentionOnCpu(kern, {b, h, nq, nk, 64, causal, DType::bf16, 0},
                          uint64_t(nq + nk + b + h));
  }
}

// The D=128 wgmma schedule's ragged end after the whole blocks (asked for:
// by default it goes first): a 128-key step when more than 32 keys are left
// after the whole blocks, else a 32-key one; one kernel, every Nk of the
// class (r = 1, 32, 33, 72, 127 keys past the whole blocks, and none),
// against the fp64 reference with poisoned outputs.
TEST(CpuExecutor, AttentionRaggedEndWidths) {
  kernels::AttentionShape built{1, 1, 64, 129, 128, false, DType::bf16, 0};
  // 128-key blocks (129 keys alone would take 64-key ones).
  Kernel kern = kernels::attentionForward(
      built, {.blockN = 128, .maskedBlockFirst = 0, .wgmma = 1});
  EXPECT_EQ(test::countOf(kern.ir(), "scf.for"), 3u);
  // AttentionConfig::blockNRaggedEnd: the key block's width (no narrower
  // step) or a power of two up to it.
  EXPECT_EQ(
      test::countOf(kernels::attentionForward(built, {.blockN = 128,
                                                      .blockNRaggedEnd = 128,
                                                      .maskedBlockFirst = 0,
                                                      .wgmma = 1})
                        .ir(),
                    "scf.for"),
      2u);
  EXPECT_THAT(test::errorOf([&] {
                kernels::attentionForward(built,
                                          {.blockNRaggedEnd = 256, .wgmma = 1});
              }),
              HasSubstr("blockNRaggedEnd (256) must not exceed blockN (128)"));
  for (int64_t nk : {129, 160, 161, 200, 255, 256})
    checkAttentionOnCpu(kern, {1, 1, 64, nk, 128, false, DType::bf16, 0},
                        uint64_t(nk));
}

/// Nq and Nk of one ragged class: shorter than a block, one block and more,
/// Nq != Nk both ways.
const std::array<int64_t, 2> kRaggedRowsKeys[] = {
    {1, 1},     {31, 31},   {129, 129}, {160, 160}, {161, 161},
    {257, 257}, {300, 300}, {129, 300}, {300, 129}, {140, 170},
    {170, 140}, {33, 200},  {200, 33}};

// D=128 under the default schedule takes its masked key block first
// (AttentionConfig::maskedBlockFirst): causal, the diagonal block before
// the whole blocks left of it; non-causal with a ragged Nk, the blocks end
// at Nk and the first, masked, starts before key 0. (On the GPU
// kiln-overlap-dots then makes the two loops one; the executor runs them
// as built.) Each kernel, every Nq and Nk of its class (Nk < 128, whole,
// Nq != Nk both ways), against the fp64 reference with poisoned outputs.
TEST(CpuExecutor, AttentionMaskedBlockFirst) {
  kernels::AttentionShape causal{1, 1, 129, 129, 128, true, DType::bf16, 0},
      whole{1, 1, 256, 256, 128, true, DType::bf16, 0},
      ragged{1, 1, 129, 129, 128, false, DType::bf16, 0};
  const kernels::AttentionConfig wgmma{.wgmma = 1};
  EXPECT_TRUE(
      kernels::diagonalFirst(causal, kernels::resolveConfig(causal, wgmma)));
  EXPECT_TRUE(
      kernels::diagonalFirst(whole, kernels::resolveConfig(whole, wgmma)));
  EXPECT_TRUE(
      kernels::raggedEndFirst(ragged, kernels::resolveConfig(ragged, wgmma)));
  EXPECT_FALSE(kernels::raggedEndFirst(
      ragged,
      kernels::resolveConfig(ragged, {.maskedBlockFirst = 0, .wgmma = 1})));
  Kernel diagonal = kernels::attentionForward(causal, wgmma),
         diagonalWhole = kernels::attentionForward(whole, wgmma),
         first = kernels::attentionForward(ragged, wgmma);
  for (const Kernel *k : {&diagonal, &diagonalWhole, &first})
    EXPECT_EQ(test::countOf(k->ir(), "scf.for"), 2u);
  for (auto [nq, nk] : kRaggedRowsKeys) {
    const uint64_t seed = uint64_t(nq * 5 + nk);
    checkAttentionOnCpu(diagonal, {2, 1, nq, nk, 128, true, DType::bf16, 0},
                        seed);
    checkAttentionOnCpu(first, {2, 1, nq, nk, 128, false, DType::bf16, 0},
                        seed + 1);
  }
  for (auto [nq, nk] : {std::array<int64_t, 2>{256, 256}, {1, 128}, {300, 256}})
    checkAttentionOnCpu(diagonalWhole,
                        {2, 1, nq, nk, 128, true, DType::bf16, 0},
                        uint64_t(nq + nk));
}

// The D=64 wgmma schedule takes a ragged end as the main loop's last step
// (AttentionConfig::raggedEndInLoop): that loop masks every step; by default
// nothing else (one loop), or with blockNRaggedEnd = 32 a 32-key loop takes
// an end that narrow. Each kernel, every Nk of the class, against the fp64
// reference with poisoned outputs.
TEST(CpuExecutor, AttentionRaggedEndInMainLoop) {
  kernels::AttentionShape built{1, 1, 64, 129, 64, false, DType::bf16, 0};
  Kernel kern = kernels::attentionForward(built, {.wgmma = 1});
  Kernel narrow =
      kernels::attentionForward(built, {.blockNRaggedEnd = 32, .wgmma = 1});
  EXPECT_EQ(test::countOf(kern.ir(), "scf.for"), 1u);
  EXPECT_EQ(test::countOf(narrow.ir(), "scf.for"), 2u);
  EXPECT_EQ(test::countOf(kernels::attentionForward(
                              built, {.raggedEndInLoop = 0, .wgmma = 1})
                              .ir(),
                          "scf.for"),
            3u);
  for (const Kernel *k : {&kern, &narrow})
    for (int64_t nk : {1, 31, 33, 129, 160, 161, 200, 255, 256, 300})
      checkAttentionOnCpu(*k, {1, 1, 64, nk, 64, false, DType::bf16, 0},
                          uint64_t(nk));
}

// Causal row blocks that end at Nq (AttentionConfig::alignRowsToEnd) when
// Nq is 1 to 32 rows past a multiple of blockM: the first block then starts
// at a negative row, and each other one takes the keys left of its diagonal
// in a narrow masked loop. One D=128 kernel, every Nq and Nk of the class
// (shifted or not, Nq != Nk both ways), against the fp64 reference with
// poisoned outputs.
TEST(CpuExecutor, AttentionCausalRowsAlignedToEnd) {
  kernels::AttentionShape built{1, 1, 129, 129, 128, true, DType::bf16, 0};
  // (Asked for: by default D=128 takes the diagonal block first instead.)
  Kernel kern =
      kernels::attentionForward(built, {.alignRowsToEnd = 1, .wgmma = 1});
  Kernel apart = kernels::attentionForward(
      built, {.alignRowsToEnd = 1, .narrowStepInDiagonal = 0, .wgmma = 1});
  const std::string unaligned =
      kernels::attentionForward(built, {.alignRowsToEnd = 0, .wgmma = 1}).ir();
  // One loop more either way; the narrow keys' two dots in the diagonal's
  // step (the default at D=128 with two stages) or in their own.
  for (const Kernel *k : {&kern, &apart})
    EXPECT_EQ(test::countOf(k->ir(), "scf.for") -
                  test::countOf(unaligned, "scf.for"),
              1u);
  EXPECT_EQ(test::countOf(kern.ir(), "kiln.dot") -
                test::countOf(unaligned, "kiln.dot"),
            4u);
  EXPECT_EQ(test::countOf(apart.ir(), "kiln.dot") -
                test::countOf(unaligned, "kiln.dot"),
            2u);
  // D=64 in 64-key diagonal blocks (asked for: not the default there since
  // session 39): the narrow keys join the first of two.
  kernels::AttentionShape built64{1, 1, 129, 129, 64, true, DType::bf16, 0};
  const kernels::AttentionConfig aligned64{
      .blockM = 128, .blockN = 128, .alignRowsToEnd = 1, .wgmma = 1};
  Kernel kern64 = kernels::attentionForward(built64, aligned64);
  EXPECT_TRUE(kernels::narrowInDiagonal(
      built64, kernels::resolveConfig(built64, aligned64)));
  EXPECT_FALSE(kernels::rowsAlignedToEnd(
      built64, kernels::resolveConfig(
                   built64, {.blockM = 128, .blockN = 128, .wgmma = 1})));
  for (auto [nq, nk] : kRaggedRowsKeys) {
    const uint64_t seed = uint64_t(nq * 7 + nk);
    checkAttentionOnCpu(kern, {2, 1, nq, nk, 128, true, DType::bf16, 0}, seed);
    checkAttentionOnCpu(apart, {2, 1, nq, nk, 128, true, DType::bf16, 0},
                        seed + 1);
    checkAttentionOnCpu(kern64, {2, 1, nq, nk, 64, true, DType::bf16, 0},
                        seed + 2);
  }
}

// The causal forward's default head groups: the pairs whose K/V take 16
// MiB, at most 8 for 256-byte rows (D=128 in 16 bits) and 16 otherwise,
// lowered to the largest divisor of the pairs down to half of that; the
// kernel built with them over 10 pairs (8 lowered to 5, computed on the
// device from the run-time B and H) is exact.
TEST(CpuExecutor, AttentionCausalHeadGroups) {
  auto group = [](int64_t D, int64_t n, int64_t B = 16, int64_t H = 16) {
    return kernels::resolveConfig({B, H, n, n, D, true, DType::bf16, 0}, {})
        .headGroup;
  };
  EXPECT_EQ(group(128, 1000), 8);
  EXPECT_EQ(group(128, 8192), 4);
  EXPECT_EQ(group(64, 1000), 16);
  EXPECT_EQ(group(64, 8192), 8);
  EXPECT_EQ(group(64, 4097, 3, 32), 12); // 15 of 96
  EXPECT_EQ(group(128, 4097, 3, 16), 6); // 7 of 48
  EXPECT_EQ(group(64, 6000, 2, 32), 8);  // 10 of 64
  EXPECT_EQ(group(64, 4097, 1, 97), 15); // 97 is prime: 15 stays
  EXPECT_EQ(group(128, 130, 2, 5), 5);   // 8 of 10
  const kernels::AttentionShape s{2, 5, 130, 130, 128, true, DType::bf16, 0};
  checkAttentionOnCpu(kernels::attentionForward(s), s, 77);
}

// Causal attention with its diagonal blocks smaller than the others, with
// the general (unsplit) loop when blockN does not divide blockM, with the row
// blocks launched head by head instead of longest first, and longest first
// in groups of two heads of three (the last group holds one).
TEST(CpuExecutor, AttentionScheduleVariantsAgree) {
  kernels::AttentionShape s{1, 3, 300, 300, 64, true, DType::bf16, 0};
  HostTensor q(s.dtype, {1, 3, 300, 64}), k(s.dtype, {1, 3, 300, 64}),
      v(s.dtype, {1, 3, 300, 64});
  q.fillRandom(21, -2, 2);
  k.fillRandom(22, -2, 2);
  v.fillRandom(23);
  HostTensor oRef(DType::f32, q.shape()), lseRef(DType::f32, {1, 3, 300});
  kernels::attentionReference(s, q, k, v, oRef, lseRef);
  using Config = kernels::AttentionConfig;
  const Config diag{
      .blockM = 128, .blockN = 64, .warps = 4, .blockNDiagonal = 32},
      unsplit{.blockM = 64, .blockN = 128, .warps = 4},
      perHead{
          .blockM = 128, .blockN = 64, .warps = 4, .longestFirstGlobally = 0},
      groups{.blockM = 64,
             .blockN = 64,
             .warps = 4,
             .longestFirstGlobally = 1,
             .headGroup = 2};
  Config exactGroups = groups;
  exactGroups.staticShapes = 1;
  EXPECT_EQ(kernels::attentionForward(s, exactGroups).gridFor({}),
            (std::array<int64_t, 3>{15, 1, 1}));
  for (Config c : {diag, unsplit, perHead, groups, exactGroups}) {
    Kernel kern = kernels::attentionForward(s, c);
    HostTensor o(s.dtype, q.shape()), lse(DType::f32, {1, 3, 300});
    o.poison();
    lse.poison();
    runOnCpu(kern, kern.bind({{"Q", q.ref()},
                              {"K", k.ref()},
                              {"V", v.ref()},
                              {"O", o.ref()},
                              {"LSE", lse.ref()}}));
    const std::string which =
        std::to_string(c.blockM) + "x" + std::to_string(c.blockN) +
        " diagonal " + std::to_string(c.blockNDiagonal) + " longest first " +
        std::to_string(c.longestFirstGlobally) + " group " +
        std::to_string(c.headGroup) + " static " +
        std::to_string(c.staticShapes);
    EXPECT_LE(compareTensors(o, oRef).relative, 1e-2) << which;
    EXPECT_LE(compareTensors(lse, lseRef).relative, 1e-5) << which;
  }
}
