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
  int64_t kvHeads = 0;   ///< K and V's heads (grouped-query); 0: heads
};

std::string caseName(const AttentionCase &c) {
  return std::to_string(c.batch) + "x" + std::to_string(c.heads) + "_q" +
         std::to_string(c.seqQ) + "_k" + std::to_string(c.seqK) + "_d" +
         std::to_string(c.headDim) +
         (c.kvHeads > 0 ? "_kv" + std::to_string(c.kvHeads) : "") +
         (c.causal ? "_causal_" : "_full_") + dtypeName(c.dtype) +
         (c.interleavedHeads ? "_bshd" : "");
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
  kernels::AttentionShape s{c.batch,  c.heads, c.seqQ, c.seqK,   c.headDim,
                            c.causal, c.dtype, 0,      c.kvHeads};
  const int64_t kvHeads = c.kvHeads > 0 ? c.kvHeads : c.heads;
  Kernel k = kernels::attentionForward(s);
  uint64_t seed = std::hash<std::string>()(caseName(c));
  HostTensor q = makeBHND(c.dtype, c.batch, c.heads, c.seqQ, c.headDim,
                          c.interleavedHeads);
  HostTensor kk = makeBHND(c.dtype, c.batch, kvHeads, c.seqK, c.headDim,
                           c.interleavedHeads);
  HostTensor v = makeBHND(c.dtype, c.batch, kvHeads, c.seqK, c.headDim,
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
        // Grouped heads: 4 or 3 query heads per K/V head.
        AttentionCase{2, 4, 100, 130, 64, true, bf16, false, 1},
        AttentionCase{1, 4, 77, 190, 128, false, f16, true, 2},
        AttentionCase{1, 3, 257, 257, 64, false, bf16, false, 1},
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

// Split-K's partials: C (S, M, N), each K range's product stored apart,
// the last ranges empty (zeros) where there are more ranges than K steps;
// their sum is A·B. An epilogue or a C other than fp32 is refused.
TEST(GemmOnCpu, SplitPartialsStoreEachRangeApart) {
  const int64_t M = 100, N = 70, K = 333; // 11 steps of 32
  HostTensor a(bf16, {M, K}), b(bf16, {K, N}), ref(DType::f32, {M, N});
  a.fillRandom(1);
  b.fillRandom(2);
  kernels::gemmReference(a, b, ref);
  HostTensor at = kernels::transposeMatrix(a);
  for (int64_t splits : {1, 3, 16})
    for (bool aT : {false, true}) {
      SCOPED_TRACE(std::to_string(splits) + " ranges" + (aT ? ", AT" : ""));
      kernels::GemmShape s{M, N, K, bf16, DType::f32};
      s.aTransposed = aT;
      s.splitPartials = true;
      kernels::GemmConfig c{
          .blockM = 32, .blockN = 32, .blockK = 32, .splitK = splits};
      Kernel k = kernels::gemm(s, c);
      HostTensor parts(DType::f32, {splits, M, N});
      parts.poison();
      runOnCpu(k, k.bind({{aT ? "AT" : "A", aT ? at.ref() : a.ref()},
                          {"B", b.ref()},
                          {"C", parts.ref()}}));
      HostTensor sum(DType::f32, {M, N});
      for (int64_t i = 0; i < M * N; ++i) {
        double total = 0;
        for (int64_t r = 0; r < splits; ++r)
          total += parts.flatAt(r * M * N + i);
        sum.flatSet(i, total);
      }
      ErrorStats e = compareTensors(sum, ref);
      EXPECT_LE(e.relative, 1e-5);
      EXPECT_EQ(e.nonFinite, 0);
      if (splits == 16) // ranges of one step: 11 to 15 are empty
        for (int64_t i = 11 * M * N; i < 16 * M * N; ++i)
          ASSERT_EQ(parts.flatAt(i), 0.0);
    }
  kernels::GemmShape s{M, N, K, bf16, DType::f32, true};
  s.splitPartials = true;
  EXPECT_THAT(test::errorOf([&] { kernels::gemm(s, {.splitK = 2}); }),
              ::testing::HasSubstr("splitPartials stores each K range's "
                                   "product apart"));
  s = {M, N, K, bf16, bf16};
  s.splitPartials = true;
  EXPECT_THROW(kernels::gemm(s, {.splitK = 2}), Error);
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
