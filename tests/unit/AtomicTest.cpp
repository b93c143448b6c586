//===- AtomicTest.cpp - atomicAdd/Max/Min in the DSL ----------------------===//
#include "AtomicKernels.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

TEST(Atomics, ProgramsCombineIntoSharedOutputsOnTheCpu) {
  Kernel k = test::columnReductions();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{64, 64}, {100, 45}, {1, 1}}) {
    test::ColumnReductionsData d(R, C);
    runOnCpu(k, k.bind({{"X", d.x.ref()},
                        {"I", d.i.ref()},
                        {"Y", d.y.ref()},
                        {"Hi", d.hi.ref()},
                        {"Lo", d.lo.ref()}}));
    d.check();
  }
}

TEST(Atomics, LowerToGlobalAtomics) {
  CompiledKernel c = compileForGpu(test::columnReductions(), {"sm_90a"});
  // One per element a thread owns (ptxas makes the unread results REDs).
  EXPECT_GT(test::countOf(c.ptx, "atom.global.add.f32"), 0u);
  EXPECT_GT(test::countOf(c.ptx, "atom.global.max.s32"), 0u);
  EXPECT_GT(test::countOf(c.ptx, "atom.global.min.s32"), 0u);
  // The min's padding (INT32_MAX) selected for rows past the end.
  EXPECT_GT(test::countOf(c.ptx, "2147483647"), 0u);
  std::string report;
  for (const std::string &line : c.report)
    report += line + "\n";
  // C is run-time: the sum goes out 4 floats per red where the row holds
  // them, element by element where its end cuts a vector.
  EXPECT_GT(test::countOf(c.ptx, "red.global.add.v4.f32"), 0u);
  EXPECT_THAT(report, HasSubstr("atomic sum 32: red.global.add.v4.f32"));
  EXPECT_THAT(report, HasSubstr("atomic max 32: one red/atom.global per "
                                "element from registers"));
}

TEST(Atomics, MisuseNamesTheUsersLine) {
  int line = 0;
  std::string error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_atomic", {1});
    auto Y = k.tensorArg("Y", dsl::bf16, {16});
    line = __LINE__ + 1;
    dsl::atomicAdd(Y.block({0}), dsl::zeros({16}, dsl::bf16));
  });
  EXPECT_THAT(error, HasSubstr("AtomicTest.cpp:" + std::to_string(line) +
                               ": atomicAdd to Y: f32 or i32 tiles only, got "
                               "bf16"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_atomic_max", {1});
    auto Y = k.tensorArg("Y", dsl::f32, {16});
    line = __LINE__ + 1;
    dsl::atomicMax(Y.block({0}), dsl::zeros({16}, dsl::f32));
  });
  EXPECT_THAT(error, HasSubstr("AtomicTest.cpp:" + std::to_string(line) +
                               ": atomicMax to Y: i32 tiles only, got f32"));
}

} // namespace
