//===- DslIrTest.cpp - the IR the DSL builds ------------------------------===//
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::dsl;
using ::testing::HasSubstr;
using ::testing::Not;

static int count(const std::string &s, const std::string &what) {
  return int(test::countOf(s, what));
}

TEST(DslIr, KernelSignatureAndMetadata) {
  KernelBuilder k("scale_rows", {4, 2});
  auto X = k.tensorArg("X", bf16, {256, 64});
  auto Y = k.tensorArg("Y", f32, {256, 64});
  Index m0 = programId(0) * 64;
  Tile x = load(X.block({m0, 0}, {64, 64}));
  store(Y.block({m0, 0}), x.to(f32) * 2.0);
  Kernel kernel = k.finish();

  EXPECT_EQ(kernel.name(), "scale_rows");
  EXPECT_EQ(kernel.gridFor({}), (std::array<int64_t, 3>{4, 2, 1}));
  ASSERT_EQ(kernel.params().size(), 6u);
  EXPECT_EQ(kernel.params()[0].name, "X");
  EXPECT_EQ(kernel.params()[0].kind, ParamInfo::Kind::Pointer);
  EXPECT_EQ(kernel.params()[2].name, "X_stride1");
  EXPECT_EQ(kernel.params()[3].dtype, DType::f32);
  ASSERT_EQ(kernel.tensors().size(), 2u);
  EXPECT_EQ(kernel.tensors()[1].shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(kernel.tensors()[1].strideParams, (std::vector<int>{4, 5}));

  std::string ir = kernel.ir();
  EXPECT_THAT(
      ir,
      HasSubstr(
          "func.func @scale_rows(%arg0: !kiln.ptr<bf16> {kiln.name = \"X\", "
          "kiln.tensor_shape = array<i64: 256, 64>}"));
  EXPECT_THAT(ir, HasSubstr("kiln.grid = array<i64: 4, 2, 1>, kiln.kernel"));
  EXPECT_THAT(ir, HasSubstr("kiln.load %arg0["));
  EXPECT_THAT(ir, HasSubstr("-> tensor<64x64xbf16>"));
  EXPECT_THAT(ir, HasSubstr("kiln.convert"));
  EXPECT_THAT(ir, HasSubstr("arith.mulf"));
  EXPECT_THAT(ir, HasSubstr("kiln.store"));
}

TEST(DslIr, ConstantsFoldAtBuildTime) {
  KernelBuilder k("fold", {1});
  auto X = k.tensorArg("X", f32, {64});
  Index a = Index(3) * 4 + 5;            // 17, folded in C++
  Index b = cdiv(Index(100), Index(32)); // 4
  EXPECT_TRUE(a.isConstant());
  EXPECT_EQ(a.constant(), 17);
  EXPECT_EQ(b.constant(), 4);
  EXPECT_EQ(numPrograms(0).constant(), 1);
  Tile t = full({16}, 2.0, f32) * 3.0; // folded by the canonicalizer
  store(X.block({a}), t);
  std::string ir = k.finish().ir();
  EXPECT_THAT(ir, HasSubstr("arith.constant 17 : i32"));
  EXPECT_THAT(ir, HasSubstr("dense<6.000000e+00> : tensor<16xf32>"));
  EXPECT_THAT(ir, Not(HasSubstr("arith.muli")));
  EXPECT_THAT(ir, Not(HasSubstr("arith.mulf")));
}

TEST(DslIr, LoopsCarryTiles) {
  KernelBuilder k("loop", {1});
  auto X = k.tensorArg("X", f32, {16, 256});
  auto Y = k.tensorArg("Y", f32, {16});
  Tile sum = zeros({16}, f32), mx = full({16}, -inf, f32);
  forRange(0, 256, 64, carry(sum, mx), [&](Index c0) {
    Tile x = load(X.block({0, c0}, {16, 64}));
    sum = sum + reduceSum(x, 1);
    mx = max(mx, reduceMax(x, 1));
  });
  store(Y.block({0}), sum - mx);
  std::string ir = k.finish().ir();
  EXPECT_THAT(ir, HasSubstr("iter_args("));
  EXPECT_THAT(ir, HasSubstr("-> (tensor<16xf32>, tensor<16xf32>)"));
  EXPECT_THAT(ir, HasSubstr("kiln.reduce sum"));
  EXPECT_THAT(ir, HasSubstr("kiln.reduce max"));
  EXPECT_THAT(ir, HasSubstr("scf.yield"));
  // After the loop, the carried names are the loop's results.
  EXPECT_THAT(ir, HasSubstr("arith.subf %0#0, %0#1"));
}

TEST(DslIr, BroadcastsAreExplicitOps) {
  KernelBuilder k("bcast", {1});
  auto X = k.tensorArg("X", f32, {8, 8});
  Tile x = load(X.block({0, 0}, {8, 8}));
  Tile m = reduceMax(x, 1);
  store(X.block({0, 0}), x - column(m));
  std::string ir = k.finish().ir();
  EXPECT_THAT(
      ir,
      HasSubstr(
          "kiln.expand_dims %1 axis = 1 : tensor<8xf32> -> tensor<8x1xf32>"));
  EXPECT_THAT(
      ir, HasSubstr("kiln.broadcast %2 : tensor<8x1xf32> -> tensor<8x8xf32>"));
}

TEST(DslIr, OpsRecordTheCallersSourceLine) {
  KernelBuilder k("loc", {1});
  auto X = k.tensorArg("X", f32, {16, 16});
  Tile a = load(X.block({0, 0}, {16, 16}));
  int dotLine = __LINE__ + 1;
  Tile c = dot(a, a);
  int addLine = __LINE__ + 1;
  Tile d = c + a;
  store(X.block({0, 0}), d);
  std::string ir = k.finish().ir(/*withLocations=*/true);
  std::string file = __FILE__;
  EXPECT_THAT(ir, HasSubstr("kiln.dot %0, %0, %cst : tensor<16x16xf32>, "
                            "tensor<16x16xf32> -> tensor<16x16xf32> loc(\"" +
                            file + "\":" + std::to_string(dotLine)));
  EXPECT_THAT(ir, HasSubstr("arith.addf %1, %0 : tensor<16x16xf32> loc(\"" +
                            file + "\":" + std::to_string(addLine)));
}

TEST(DslIr, AttentionKernelShape) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = 1000;
  s.headDim = 128;
  s.causal = true;
  s.batch = 2;
  s.heads = 3;
  const kernels::AttentionConfig exact{
      .blockM = 64, .blockN = 64, .warps = 4, .stages = 2, .staticShapes = 1};
  Kernel k = kernels::attentionForward(s, exact);
  // Causal: one axis, the longest row blocks of a group of heads first.
  EXPECT_EQ(k.gridFor({}), (std::array<int64_t, 3>{96, 1, 1}));
  kernels::AttentionConfig perHead = exact;
  perHead.longestFirstGlobally = 0;
  EXPECT_EQ(kernels::attentionForward(s, perHead).gridFor({}),
            (std::array<int64_t, 3>{16, 6, 1}));
  std::string ir = k.ir();
  // Causal: a loop over the blocks left of the diagonal, without masks, and
  // one over the diagonal blocks, with them; each does two dots.
  EXPECT_EQ(count(ir, "kiln.dot"), 4);
  EXPECT_EQ(count(ir, "scf.for"), 2);
  EXPECT_EQ(count(ir, "kiln.store"), 2);
  EXPECT_EQ(count(ir, "math.exp2"), 4);
  EXPECT_EQ(count(ir, "arith.cmpi sge"), 1); // the causal mask, once
  EXPECT_THAT(ir, HasSubstr("arith.minsi")); // causal loop bound
  // fp32 accumulator carried with the running max and sum.
  EXPECT_THAT(
      ir, HasSubstr("-> (tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>)"));

  s.causal = false;
  s.seqQ = s.seqK = 1024;
  std::string full = kernels::attentionForward(s, exact).ir();
  EXPECT_EQ(count(full, "scf.for"), 1);
  EXPECT_THAT(full, Not(HasSubstr("arith.cmpi"))); // no mask needed at all
  EXPECT_THAT(full, Not(HasSubstr("arith.minsi")));
}

// Run-time shapes (the default): B, H, Nq and Nk are arguments and the grid
// a formula of them. Built for an Nk of whole key blocks, the kernel has one
// unmasked loop and refuses other Nk; built for a ragged Nk, masked loops
// take the ragged block: by default at D=128 one before the whole blocks
// (maskedBlockFirst); else one per end width (raggedEndBlocks: 64 or 32
// keys at D=128 under wgmma), of which the narrowest that holds the end
// runs.
TEST(DslIr, AttentionRuntimeShapes) {
  kernels::AttentionShape s{2, 3, 1024, 1024, 128, false, DType::bf16, 0};
  const kernels::AttentionConfig c{.blockM = 64, .blockN = 64, .warps = 4};
  Kernel whole = kernels::attentionForward(s, c);
  EXPECT_EQ(describeGrid(whole.grid(), whole.params()),
            "x=cdiv(Nq,64) y=B*H z=1");
  EXPECT_EQ(whole.params()[3].name, "Nk");
  EXPECT_EQ(whole.params()[3].multipleOf, 64);
  EXPECT_THAT(tensorSpecialisation(compileForGpu(whole, {"sm_90a"})),
              HasSubstr("; Nk multiple of 64"));
  std::string ir = whole.ir();
  EXPECT_EQ(count(ir, "scf.for"), 1);
  EXPECT_THAT(ir, Not(HasSubstr("arith.cmpi")));
  EXPECT_THAT(ir, HasSubstr("kiln.tensor_dims = array<i32: 0, 1, 3, -1>"));
  // The defaults: 128-row query blocks.
  HostTensor q(s.dtype, {2, 3, 1000, 128}), kv(s.dtype, {2, 3, 1000, 128}),
      o(s.dtype, {2, 3, 1000, 128}), lse(DType::f32, {2, 3, 1000});
  std::map<std::string, TensorRef> t{{"Q", q.ref()},
                                     {"K", kv.ref()},
                                     {"V", kv.ref()},
                                     {"O", o.ref()},
                                     {"LSE", lse.ref()}};
  EXPECT_THAT(test::errorOf([&] { whole.bind(t); }),
              HasSubstr("dimension 2 (Nk) = 1000 is not a multiple of 64"));
  s.seqQ = s.seqK = 1000;
  Kernel ragged = kernels::attentionForward(s, c);
  EXPECT_EQ(ragged.params()[3].multipleOf, 1);
  EXPECT_EQ(count(ragged.ir(), "scf.for"), 2);
  EXPECT_EQ(count(ragged.ir(), "arith.maxsi"), 1); // lower bound: at most once
  kernels::AttentionConfig after = c;
  after.maskedBlockFirst = 0;
  Kernel endAfter = kernels::attentionForward(s, after);
  EXPECT_EQ(count(endAfter.ir(), "scf.for"), 3);
  EXPECT_EQ(count(endAfter.ir(), "arith.maxsi"), 2);
  Kernel defaults = kernels::attentionForward(s);
  EXPECT_EQ(defaults.gridFor(defaults.bind(t))[0], 8);
  // Any other ragged shape binds to the same kernel.
  HostTensor q2(s.dtype, {1, 5, 77, 128}), kv2(s.dtype, {1, 5, 3001, 128}),
      o2(s.dtype, {1, 5, 77, 128}), lse2(DType::f32, {1, 5, 77});
  auto args = ragged.bind({{"Q", q2.ref()},
                           {"K", kv2.ref()},
                           {"V", kv2.ref()},
                           {"O", o2.ref()},
                           {"LSE", lse2.ref()}});
  EXPECT_EQ(ragged.gridFor(args), (std::array<int64_t, 3>{2, 5, 1}));
  // LSE is kept unspecialised: N = 1000 (rows of 4000 bytes, aligned) and
  // 1001 take one variant, one cache key.
  EXPECT_FALSE(ragged.tensors()[4].specialisable);
  auto keyFor = [&](int64_t n) {
    HostTensor q(s.dtype, {1, 2, n, 128}), o(s.dtype, {1, 2, n, 128}),
        lse(DType::f32, {1, 2, n});
    std::map<std::string, TensorRef> refs{{"Q", q.ref()},
                                          {"K", q.ref()},
                                          {"V", q.ref()},
                                          {"O", o.ref()},
                                          {"LSE", lse.ref()}};
    EXPECT_EQ(unalignedTensors(ragged, refs), std::vector<std::string>{});
    return compileCacheKey(ragged, variantTarget(ragged, refs));
  };
  EXPECT_EQ(keyFor(1000), keyFor(1001));
  EXPECT_EQ(keyFor(1001), keyFor(4097));
}

TEST(DslIr, AttentionRejectsBadShapes) {
  kernels::AttentionShape s;
  s.headDim = 96;
  EXPECT_THAT(test::errorOf([&] { kernels::attentionForward(s); }),
              HasSubstr("head dim 96 is not supported"));
  s.headDim = 64;
  s.seqQ = 0;
  EXPECT_THAT(test::errorOf([&] { kernels::attentionForward(s); }),
              HasSubstr("sequence lengths must be >= 1"));
}
