//===- AtomicTest.cpp - atomicAdd/Max/Min in the DSL ----------------------===//
#include "AtomicKernels.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/runtime/HostTensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

/// Column sums, maxima and minima of random inputs against the host's; the
/// outputs start from values the combine must keep (Y: 1.5 added to, Hi/Lo:
/// a value every column's max/min passes).
void checkColumnReductions(
    const std::function<void(const Kernel &, HostTensor &, HostTensor &,
                             HostTensor &, HostTensor &, HostTensor &)> &run,
    int64_t R, int64_t C) {
  Kernel k = test::columnReductions();
  HostTensor x(DType::f32, {R, C}), i(DType::i32, {R, C}), y(DType::f32, {C}),
      hi(DType::i32, {C}), lo(DType::i32, {C});
  x.fillRandom(uint64_t(R * C), -1, 1);
  std::mt19937 rng(uint32_t(R + C));
  auto *iv = static_cast<int32_t *>(i.data());
  for (int64_t n = 0; n < R * C; ++n)
    iv[n] = int32_t(rng() % 2001) - 1000;
  for (int64_t c = 0; c < C; ++c) {
    static_cast<float *>(y.data())[c] = 1.5f;
    static_cast<int32_t *>(hi.data())[c] = -5000;
    static_cast<int32_t *>(lo.data())[c] = 5000;
  }
  run(k, x, i, y, hi, lo);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 1.5;
    int32_t mx = -5000, mn = 5000;
    for (int64_t r = 0; r < R; ++r) {
      sum += x.at(std::vector<int64_t>{r, c});
      mx = std::max(mx, iv[r * C + c]);
      mn = std::min(mn, iv[r * C + c]);
    }
    EXPECT_NEAR(static_cast<float *>(y.data())[c], sum, 1e-3) << "column " << c;
    EXPECT_EQ(static_cast<int32_t *>(hi.data())[c], mx) << "column " << c;
    EXPECT_EQ(static_cast<int32_t *>(lo.data())[c], mn) << "column " << c;
  }
}

TEST(Atomics, ProgramsCombineIntoSharedOutputsOnTheCpu) {
  for (auto [R, C] : {std::pair<int64_t, int64_t>{64, 64}, {100, 45}, {1, 1}})
    checkColumnReductions(
        [](const Kernel &k, HostTensor &x, HostTensor &i, HostTensor &y,
           HostTensor &hi, HostTensor &lo) {
          runOnCpu(k, k.bind({{"X", x.ref()},
                              {"I", i.ref()},
                              {"Y", y.ref()},
                              {"Hi", hi.ref()},
                              {"Lo", lo.ref()}}));
        },
        R, C);
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
  EXPECT_THAT(report, HasSubstr("atomic sum 32: one red/atom.global per "
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
