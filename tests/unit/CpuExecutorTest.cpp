//===- CpuExecutorTest.cpp - the CPU executor's semantics -----------------===//
//
// What the CPU executor guarantees whatever the kernel (stores inside their
// tensor, integer and mask semantics, every size served, bad arguments
// refused) and attention's schedules on it (run-time shapes, ragged ends,
// masked first blocks, causal alignments, head groups, variants agreeing).
// CpuRunTest.cpp: the kernels against fp64 references.
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
                d = s.headDim, hk = s.kvHeads > 0 ? s.kvHeads : h;
  HostTensor q(s.dtype, {b, h, nq, d}), k(s.dtype, {b, hk, nk, d}),
      v(s.dtype, {b, hk, nk, d}), o(s.dtype, {b, h, nq, d}),
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

// Grouped heads: one build for 2 query heads per K/V head serves other
// batches, head counts and lengths with that group size; bind refuses K/V
// heads that are not H / 2, and the shape check a kvHeads that does not
// divide the heads.
TEST(CpuExecutor, AttentionGroupedHeadsServeEveryShapeOfTheGroup) {
  for (bool causal : {false, true}) {
    kernels::AttentionShape built{1,      4,           300, 300, 64,
                                  causal, DType::bf16, 0,   2};
    Kernel kern = kernels::attentionForward(
        built, {.blockM = 64, .blockN = 64, .warps = 4});
    for (auto [b, h, nq, nk] : {std::array<int64_t, 4>{1, 4, 300, 300},
                                {2, 2, 77, 130},
                                {1, 6, 130, 190}})
      checkAttentionOnCpu(kern,
                          {b, h, nq, nk, 64, causal, DType::bf16, 0, h / 2},
                          uint64_t(nq + nk + b + h));
    HostTensor q(DType::bf16, {1, 4, 64, 64}), kv(DType::bf16, {1, 3, 64, 64}),
        o(DType::bf16, {1, 4, 64, 64}), lse(DType::f32, {1, 4, 64});
    try {
      kern.bind({{"Q", q.ref()},
                 {"K", kv.ref()},
                 {"V", kv.ref()},
                 {"O", o.ref()},
                 {"LSE", lse.ref()}});
      ADD_FAILURE() << "bound 3 K/V heads to 4 query heads in groups of 2";
    } catch (const Error &e) {
      EXPECT_THAT(e.what(),
                  ::testing::AllOf(HasSubstr("H = 4 (from tensor "),
                                   HasSubstr("must be 2 times Hk = 3")));
    }
  }
  try {
    kernels::attentionForward({1, 4, 64, 64, 64, false, DType::bf16, 0, 3});
    ADD_FAILURE() << "built 4 query heads over 3 K/V heads";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(),
                HasSubstr("3 K/V heads do not divide the 4 query heads"));
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
