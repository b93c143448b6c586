//===- MathTest.cpp - the DSL's math functions on the CPU and in PTX ------===//
//
// Each function against its host reference on the CPU executor (which
// computes both modes in full precision); on the GPU target, the fast mode's
// approximate instructions and the precise mode's polynomial in the PTX, and
// a PTX that ptxas accepts. tests/gpu checks the GPU's values.
//
//===----------------------------------------------------------------------===//
#include "IntegerKernel.h"
#include "MathKernel.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/runtime/HostTensor.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

TEST(Math, FunctionsMatchTheirReferencesOnTheCpu) {
  for (const test::MathCase &c : test::mathCases()) {
    SCOPED_TRACE(c.name);
    Kernel k = test::mathKernel(c, dsl::MathMode::Precise);
    HostTensor x(DType::f32, {64, 128}), y(DType::f32, {64, 128});
    x.fillRandom(7, c.lo, c.hi);
    y.poison();
    runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}));
    double worst = 0;
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 128; ++j) {
        std::vector<int64_t> at{i, j};
        worst = std::max(worst, std::fabs(y.at(at) - c.reference(x.at(at))));
      }
    EXPECT_LE(worst, 1e-5);
  }
}

TEST(Math, FastAndPreciseLowerDifferently) {
  auto ptxOf = [](const std::string &name, dsl::MathMode mode) {
    for (const test::MathCase &c : test::mathCases())
      if (c.name == name)
        return compileForGpu(test::mathKernel(c, mode), {"sm_90a"}).ptx;
    return std::string();
  };
  EXPECT_THAT(ptxOf("tanh", dsl::MathMode::Fast), HasSubstr("tanh.approx.f32"));
  EXPECT_THAT(ptxOf("tanh", dsl::MathMode::Precise),
              Not(HasSubstr("tanh.approx")));
  EXPECT_THAT(ptxOf("sigmoid", dsl::MathMode::Fast),
              HasSubstr("tanh.approx.f32"));
  EXPECT_THAT(ptxOf("sin", dsl::MathMode::Fast), HasSubstr("sin.approx"));
  EXPECT_THAT(ptxOf("sin", dsl::MathMode::Precise),
              Not(HasSubstr("sin.approx")));
  EXPECT_THAT(ptxOf("cos", dsl::MathMode::Fast), HasSubstr("cos.approx"));
  EXPECT_THAT(ptxOf("rsqrt", dsl::MathMode::Fast), HasSubstr("rsqrt.approx"));
  EXPECT_THAT(ptxOf("rsqrt", dsl::MathMode::Precise), HasSubstr("sqrt.rn.f32"));
  EXPECT_THAT(ptxOf("floor", dsl::MathMode::Fast),
              HasSubstr("cvt.rmi.f32.f32"));
  EXPECT_THAT(ptxOf("abs", dsl::MathMode::Fast), HasSubstr("abs.f32"));
  EXPECT_THAT(ptxOf("pow", dsl::MathMode::Fast), HasSubstr("lg2.approx"));
  for (const char *f : {"pow", "exp", "exp2", "log", "log2"}) {
    const std::string precise = ptxOf(f, dsl::MathMode::Precise);
    EXPECT_THAT(precise, Not(HasSubstr("ex2.approx"))) << f;
    EXPECT_THAT(precise, Not(HasSubstr("lg2.approx"))) << f;
  }
  EXPECT_THAT(ptxOf("exp", dsl::MathMode::Fast), HasSubstr("ex2.approx"));
  EXPECT_THAT(ptxOf("log", dsl::MathMode::Fast), HasSubstr("lg2.approx"));
  // Every function in both modes assembles.
  if (std::system("command -v ptxas > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED: ptxas is not on the PATH";
  for (const test::MathCase &c : test::mathCases())
    for (dsl::MathMode mode : {dsl::MathMode::Fast, dsl::MathMode::Precise}) {
      std::string path = ::testing::TempDir() + "kiln_math_" + c.name + ".ptx";
      std::ofstream(path) << ptxOf(c.name, mode);
      std::string cmd = "ptxas -arch=sm_90a " + path + " -o /dev/null";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
}

TEST(Math, MisuseNamesTheUsersLine) {
  int line = 0;
  std::string error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_math", {1});
    dsl::Tile i = dsl::arange(16);
    line = __LINE__ + 1;
    dsl::tanh(i);
  });
  EXPECT_THAT(error, HasSubstr("MathTest.cpp:" + std::to_string(line) +
                               ": tanh: needs a float tile, got i32"));
}

// Integer ops and casts on the CPU executor (the GPU's: tests/gpu).
TEST(Math, IntegerOpsAndCastsOnTheCpu) {
  test::IntegerData d(300);
  Kernel k = test::integerOps();
  runOnCpu(k, k.bind({{"X", d.x.ref()},
                      {"F", d.f.ref()},
                      {"Out", d.out.ref()},
                      {"G", d.g.ref()}}));
  d.check();
  EXPECT_NO_THROW(compileForGpu(k, {.arch = "sm_90a"}));
}

TEST(Math, BitwiseOpsRefuseFloatTiles) {
  int line = 0;
  std::string error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_bits", {1});
    dsl::Tile f = dsl::zeros({16}, DType::f32);
    line = __LINE__ + 1;
    (void)(f << 2);
  });
  EXPECT_THAT(error, HasSubstr("MathTest.cpp:" + std::to_string(line) +
                               ": <<: integer (or mask) tiles only, got f32"));
}

} // namespace
