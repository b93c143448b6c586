//===- RuntimeArgTest.cpp - run-time integer arguments in the DSL ---------===//
//
// KernelBuilder::scalarArg (issue 18, item 1 without run-time tensor
// dimensions): one kernel, compiled once, serves every value of the
// argument, as a loop bound, an offset and in masks.
//
//===----------------------------------------------------------------------===//
#include "RowSumKernel.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::dsl;
using kiln::test::errorOf;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

constexpr int64_t R = 64, C = 256;

Kernel rowSumOfRange() { return test::rowSumOfRange(R, C); }

TEST(RuntimeArgs, OneKernelServesEveryValue) {
  Kernel k = rowSumOfRange();
  EXPECT_THAT(k.ir(), HasSubstr("kiln.name = \"n\""));
  HostTensor x(DType::f32, {R, C});
  x.fillRandom(5);
  for (auto [n, first] : {std::pair<int64_t, int64_t>{1, 0}, {37, 3},
                          {100, 50}, {C, 0}, {0, 7}}) {
    HostTensor y(DType::f32, {R});
    y.poison();
    runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}},
                       {{"n", n}, {"first", first}}));
    for (int64_t r = 0; r < R; ++r) {
      double want = 0;
      for (int64_t c = first; c < first + n && c < C; ++c)
        want += x.at(std::vector<int64_t>{r, c});
      EXPECT_NEAR(y.at(std::vector<int64_t>{r}), want, 1e-4) << "n=" << n << " first=" << first
                                          << " row " << r;
    }
  }
}

TEST(RuntimeArgs, CompileForTheGpuOnce) {
  Kernel k = rowSumOfRange();
  for (const char *arch : {"sm_80", "sm_90a"}) {
    CompiledKernel c = compileForGpu(k, {arch});
    // The two integers are kernel parameters, after nothing else was folded.
    EXPECT_EQ(c.params[0].name, "n");
    EXPECT_EQ(c.params[1].name, "first");
    EXPECT_THAT(c.ptx, HasSubstr("row_sum_of_range_param_0"));
  }
}

// Specialisation by value class (Triton's): an offset built from an
// argument compiled as divisible by 16 keeps 16-byte vector loads; without
// the class, element loads. A value of 1 is compiled in.
TEST(RuntimeArgs, ValueClassesSpecialiseTheCompile) {
  EXPECT_EQ(scalarClassOf(1), ScalarClass::One);
  EXPECT_EQ(scalarClassOf(32), ScalarClass::DivisibleBy16);
  EXPECT_EQ(scalarClassOf(0), ScalarClass::DivisibleBy16);
  EXPECT_EQ(scalarClassOf(17), ScalarClass::Any);
  Kernel k = rowSumOfRange();
  std::map<std::string, ScalarClass> classes =
      scalarClasses(k, {{"n", 100}, {"first", 48}, {"X_stride0", 256}});
  EXPECT_EQ(classes.at("n"), ScalarClass::Any);
  EXPECT_EQ(classes.at("first"), ScalarClass::DivisibleBy16);
  CompiledKernel any = compileForGpu(k, {"sm_90a"});
  CompiledKernel div16 = compileForGpu(
      k, {.arch = "sm_90a",
          .scalarClasses = {{"first", ScalarClass::DivisibleBy16}}});
  EXPECT_THAT(div16.ptx, HasSubstr("ld.global.v4.b32"));
  EXPECT_THAT(any.ptx, Not(HasSubstr("ld.global.v4.b32")));
  EXPECT_EQ(div16.params[1].assumed, ScalarClass::DivisibleBy16);
  EXPECT_THAT(tensorSpecialisation(div16), HasSubstr("; first div16"));
  CompiledKernel one =
      compileForGpu(k, {.arch = "sm_90a",
                        .scalarClasses = {{"n", ScalarClass::One}}});
  EXPECT_EQ(one.params[0].assumed, ScalarClass::One);
  EXPECT_NE(one.ptx, any.ptx);
  // Each class combination is its own cache entry.
  EXPECT_NE(compileCacheKey(k, {"sm_90a"}),
            compileCacheKey(k, {.arch = "sm_90a",
                                .scalarClasses = {{"n", ScalarClass::One}}}));
  EXPECT_THAT(errorOf([&] {
                compileForGpu(k, {.scalarClasses = {{"X", ScalarClass::One}}});
              }),
              HasSubstr("scalarClasses names X, which is not an integer"));
}

// A run-time grid y may pass the GPU's 65535 (B·H of attention with many
// short sequences): the kernel reads program y as blockIdx.y + gridDim.y ·
// blockIdx.z and returns past y, so that the launcher can fold y into z
// (GpuKernels.RunTimeGridYPastTheDeviceLimit runs it). The CPU executor runs
// the grid as written; a constant y compiles as before.
TEST(RuntimeArgs, RunTimeGridYFoldsIntoZ) {
  Kernel k = test::programIdsOfARunTimeGrid(8);
  HostTensor y(DType::i32, {8, 32}), p(DType::i32, {8, 32});
  y.poison();
  p.poison();
  runOnCpu(k, k.bind({{"Y", y.ref()}, {"P", p.ref()}}, {{"R", 5}}));
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 32; ++c) {
      EXPECT_EQ(y.at(std::vector<int64_t>{r, c}), 2 * r + c / 16);
      EXPECT_EQ(p.at(std::vector<int64_t>{r, c}), 5);
    }
  for (const char *arch : {"sm_80", "sm_90a"}) {
    CompiledKernel c = compileForGpu(k, {arch});
    EXPECT_THAT(c.ptx, HasSubstr("%ctaid.z"));
    EXPECT_THAT(c.ptx, HasSubstr("%nctaid.y"));
    std::string report;
    for (const std::string &line : c.report)
      report += line + "\n";
    EXPECT_THAT(report, HasSubstr("grid: y is run-time; past the device's "
                                  "65535 the launcher splits it across y "
                                  "and z"));
    CompiledKernel constant = compileForGpu(rowSumOfRange(), {arch});
    EXPECT_THAT(constant.ptx, Not(HasSubstr("%ctaid.z")));
  }
}

TEST(RuntimeArgs, BindingIsChecked) {
  Kernel k = rowSumOfRange();
  HostTensor x(DType::f32, {R, C}), y(DType::f32, {R});
  std::map<std::string, TensorRef> t{{"X", x.ref()}, {"Y", y.ref()}};
  EXPECT_THAT(errorOf([&] { k.bind(t, {{"n", 3}}); }),
              HasSubstr("parameter first is not bound"));
  EXPECT_THAT(errorOf([&] { k.bind(t, {{"n", 3}, {"first", 0}, {"m", 1}}); }),
              HasSubstr("has no integer argument m"));
  EXPECT_THAT(errorOf([&] { k.bind(t, {{"n", int64_t(1) << 40}, {"first", 0}}); }),
              HasSubstr("argument n = 1099511627776 does not fit"));
  EXPECT_THAT(errorOf([&] { k.bind(t, {{"X_stride0", 3}, {"n", 1}, {"first", 0}}); }),
              HasSubstr("has no integer argument X_stride0"));
  int line = 0;
  std::string error = errorOf([&] {
    KernelBuilder b("twice", {1});
    b.scalarArg("n");
    line = __LINE__ + 1;
    b.scalarArg("n");
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": scalarArg: a parameter named n exists "
                               "already"));
}

// Run-time tensor dimensions and grid: one kernel serves every shape; the
// launch binds R and C from the tensors and evaluates the grid from them.
TEST(RuntimeShapes, OneKernelServesEveryShape) {
  Kernel k = test::rowSums();
  EXPECT_EQ(k.tensors()[0].shape, (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(k.tensors()[0].dimParams, (std::vector<int>{0, 1}));
  EXPECT_EQ(describeGrid(k.grid(), k.params()), "x=cdiv(R,16) y=1 z=1");
  EXPECT_THAT(k.ir(), HasSubstr("kiln.grid_extents = [\"cdiv(#0,16)\""));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 64},
                            {1, 1},
                            {37, 100},
                            {200, 3},
                            {64, 256}}) {
    HostTensor x(DType::f32, {rows, cols}), y(DType::f32, {rows});
    x.fillRandom(uint64_t(rows * 1000 + cols));
    y.poison();
    std::vector<ArgValue> args = k.bind({{"X", x.ref()}, {"Y", y.ref()}});
    EXPECT_EQ(std::get<int64_t>(args[0]), rows);
    EXPECT_EQ(std::get<int64_t>(args[1]), cols);
    EXPECT_EQ(k.gridFor(args)[0], (rows + 15) / 16);
    runOnCpu(k, args);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0;
      for (int64_t c = 0; c < cols; ++c)
        want += x.at(std::vector<int64_t>{r, c});
      EXPECT_NEAR(y.at(std::vector<int64_t>{r}), want, 1e-4)
          << rows << "x" << cols << " row " << r;
    }
  }
}

TEST(RuntimeShapes, DimensionsAreBoundConsistently) {
  Kernel k = test::rowSums();
  HostTensor x(DType::f32, {20, 8}), y(DType::f32, {21});
  EXPECT_THAT(
      errorOf([&] {
        k.bind({{"X", x.ref()}, {"Y", y.ref()}});
      }),
      HasSubstr("tensor Y: dimension 0 is 21 but R = 20 from tensor X"));
  HostTensor y20(DType::f32, {20});
  EXPECT_THAT(errorOf([&] {
                k.bind({{"X", x.ref()}, {"Y", y20.ref()}}, {{"C", 9}});
              }),
              HasSubstr("argument C = 9 but tensor X has 8"));
  EXPECT_NO_THROW(k.bind({{"X", x.ref()}, {"Y", y20.ref()}}, {{"C", 8}}));
  HostTensor rank3(DType::f32, {2, 2, 2});
  EXPECT_THAT(errorOf([&] {
                k.bind({{"X", rank3.ref()}, {"Y", y20.ref()}});
              }),
              HasSubstr("compiled for shape RxC, got 2x2x2"));
}

// requireContiguous: the IR says so, bind refuses a strided last dimension,
// and the CPU executor (which reads real strides) agrees with the result.
TEST(RuntimeShapes, ContiguousTensorsAreRequiredSo) {
  KernelBuilder k("copy_row");
  Index n = k.scalarArg("n");
  k.setGrid({1});
  auto X = k.tensorArg("X", f32, {n});
  auto Y = k.tensorArg("Y", f32, {n});
  k.requireContiguous(X);
  store(Y.block({0}), load(X.block({0}, {64})) * 2.0);
  Kernel kern = k.finish();
  EXPECT_THAT(kern.ir(), HasSubstr("kiln.contiguous, kiln.name = \"X\""));
  EXPECT_THAT(kern.ir(), Not(HasSubstr("kiln.contiguous, kiln.name = \"Y\"")));
  HostTensor strided(DType::f32, {50}, {2}), y(DType::f32, {50});
  EXPECT_THAT(errorOf([&] {
                kern.bind({{"X", strided.ref()}, {"Y", y.ref()}});
              }),
              HasSubstr("tensor X: the kernel requires a contiguous last "
                        "dimension (stride 1), got stride 2"));
  HostTensor x(DType::f32, {50});
  x.fillRandom(3);
  y.poison();
  runOnCpu(kern, kern.bind({{"X", x.ref()}, {"Y", y.ref()}}));
  for (int64_t i = 0; i < 50; ++i)
    EXPECT_EQ(y.flatAt(i), 2 * x.flatAt(i)) << i;
}

TEST(RuntimeShapes, MisuseNamesTheUsersLine) {
  int line = 0;
  std::string error = errorOf([&] {
    KernelBuilder k("bad_dim");
    Index n = k.scalarArg("n");
    line = __LINE__ + 1;
    k.tensorArg("X", f32, {n * 2, 4});
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": tensorArg X: dimension 0 is neither a "
                               "constant nor a run-time integer argument"));
  error = errorOf([&] {
    KernelBuilder k("bad_grid");
    Index n = k.scalarArg("n");
    line = __LINE__ + 1;
    k.setGrid({n + 1});
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": setGrid: extent x is not a product of"));
  error = errorOf([&] {
    KernelBuilder k("no_grid");
    line = __LINE__ + 1;
    k.finish();
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": finish: kernel no_grid has no grid"));
  // Products and cdivs of arguments by constants are what a grid may be.
  KernelBuilder k("good_grid");
  Index n = k.scalarArg("n"), h = k.scalarArg("h");
  k.setGrid({cdiv(n, 128), h * 2 * n, 3});
  Kernel done = k.finish();
  EXPECT_EQ(describeGrid(done.grid(), done.params()),
            "x=cdiv(n,128) y=2*h*n z=3");
  EXPECT_EQ(done.gridFor({int64_t(300), int64_t(5)}),
            (std::array<int64_t, 3>{3, 3000, 3}));
  EXPECT_THAT(errorOf([&] {
                done.gridFor({int64_t(0), int64_t(5)});
              }),
              HasSubstr("grid extent x = cdiv(n,128) is 0"));
  GridExtent parsed = GridExtent::parse(done.grid()[1].str());
  EXPECT_EQ(parsed, done.grid()[1]);
  EXPECT_THAT(errorOf([&] { GridExtent::parse("cdiv(#0,0)"); }),
              HasSubstr("cannot parse"));
}

// requireProduct: bind refuses a run-time integer other than the factor
// times another one (attention's query heads and grouped K/V heads), naming
// the tensors they came from; misuse names the user's line.
TEST(RuntimeShapes, ProductsAreRequiredSo) {
  KernelBuilder b("pairs");
  Index n = b.scalarArg("n"), m = b.scalarArg("m");
  b.requireProduct(n, 3, m);
  auto X = b.tensorArg("X", f32, {n}), Y = b.tensorArg("Y", f32, {m});
  b.setGrid({1});
  store(Y.block({0}), load(X.block({0}, {16})) * 2.0);
  Kernel k = b.finish();
  HostTensor x(DType::f32, {6}), y(DType::f32, {2}), y3(DType::f32, {3});
  EXPECT_NO_THROW(k.bind({{"X", x.ref()}, {"Y", y.ref()}}));
  EXPECT_THAT(errorOf([&] {
                k.bind({{"X", x.ref()}, {"Y", y3.ref()}});
              }),
              HasSubstr("kernel pairs: n = 6 (from tensor X) must be 3 times "
                        "m = 3 (from tensor Y)"));
  int line = 0;
  std::string error = errorOf([&] {
    KernelBuilder c("constant");
    Index p = c.scalarArg("p");
    line = __LINE__ + 1;
    c.requireProduct(p, 2, Index(4));
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": requireProduct: both values must be "
                               "run-time integer arguments"));
  error = errorOf([&] {
    KernelBuilder c("zero");
    Index p = c.scalarArg("p"), q = c.scalarArg("q");
    line = __LINE__ + 1;
    c.requireProduct(p, 0, q);
  });
  EXPECT_THAT(error, HasSubstr("RuntimeArgTest.cpp:" + std::to_string(line) +
                               ": requireProduct: the factor must be >= 1"));
}

} // namespace
