//===- GpuAutotunedTest.cpp - a user kernel tuned on its first launch -----===//
//
// RMSNorm written in the DSL with a Config space (rows per program, warps),
// launched through AutotunedKernel: the first launch tunes on the caller's
// tensors and records the winner, a second object of the same name takes it
// from the database; the output matches an fp64 reference. Without a GPU the
// launch says so.
//
//===----------------------------------------------------------------------===//
#include "../unit/TestUtil.h"

#include "kiln/Compiler/Autotuned.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/runtime/Cuda.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

using namespace kiln;
using namespace kiln::dsl;

namespace {

struct NormConfig {
  int64_t rows;
  int warps;
};
const std::vector<NormConfig> kConfigs{{1, 4}, {2, 4}, {4, 8}, {8, 8}};

/// y = x / sqrt(mean(x^2) + eps) * w, each row whole in registers.
Kernel rmsNorm(int64_t cols, const NormConfig &c) {
  KernelBuilder k("rmsnorm");
  Index rows = k.scalarArg("R");
  k.setGrid({cdiv(rows, c.rows)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", bf16, {rows, cols});
  auto W = k.tensorArg("W", bf16, {cols});
  auto Y = k.tensorArg("Y", bf16, {rows, cols});
  Index r0 = programId(0) * c.rows;
  Tile x = load(X.block({r0, 0}, {c.rows, cols})).to(f32);
  Tile meanSquare = reduceSum(x * x, 1) / double(cols);
  Tile y = x * column(rsqrt(meanSquare + 1e-6)) *
           row(load(W.block({0}, {cols})).to(f32));
  store(Y.block({r0, 0}), y.to(bf16));
  return k.finish();
}

AutotunedKernel makeNorm(int64_t cols) {
  std::vector<std::string> names;
  for (const NormConfig &c : kConfigs)
    names.push_back("rows=" + std::to_string(c.rows) +
                    " warps=" + std::to_string(c.warps));
  AutotunedKernel::Options options;
  options.outputs = {"Y"};
  options.tolerance = 1e-2;
  options.tune.budgetSeconds = 60;
  return AutotunedKernel(
      "test_rmsnorm", names,
      [cols](size_t i) { return rmsNorm(cols, kConfigs[i]); }, options);
}

TEST(GpuAutotuned, TunesOnFirstLaunchThenUsesTheRecord) {
  REQUIRE_GPU();
  // A database of this test's own.
  const std::string db = ::testing::TempDir() + "kiln_autotuned_" +
                         std::to_string(::getpid()) + ".tsv";
  const char *saved = std::getenv("KILN_TUNING_DB");
  const std::string previous = saved ? saved : "";
  ::setenv("KILN_TUNING_DB", db.c_str(), 1);
  const int64_t R = 3000, C = 4096;
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}),
      y(DType::bf16, {R, C});
  x.fillRandom(1, -3, 3);
  w.fillRandom(2);
  cuda::Buffer bx(x.storageBytes()), bw(w.storageBytes()), by(y.storageBytes());
  bx.upload(x.data(), x.storageBytes());
  bw.upload(w.data(), w.storageBytes());
  std::map<std::string, TensorRef> t{
      {"X", x.ref()}, {"W", w.ref()}, {"Y", y.ref()}};
  t["X"].data = bx.data();
  t["W"].data = bw.data();
  t["Y"].data = by.data();

  AutotunedKernel norm = makeNorm(C);
  by.fill(0xFF);
  norm.launch("cols=4096", t);
  cuda::synchronize();
  EXPECT_EQ(norm.lastSource(), "tuned");
  ASSERT_TRUE(norm.lastTuning());
  int timed = 0;
  for (const TunedTiming &tt : norm.lastTuning()->timings)
    timed += tt.ms > 0;
  EXPECT_GE(timed, 2) << "every Config that compiles is timed";
  ASSERT_TRUE(norm.chosen("cols=4096"));
  by.download(y.data(), y.storageBytes());
  HostTensor ref(DType::f32, {R, C});
  for (int64_t r = 0; r < R; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c)
      ms += x.flatAt(r * C + c) * x.flatAt(r * C + c);
    double inv = 1 / std::sqrt(ms / double(C) + 1e-6);
    for (int64_t c = 0; c < C; ++c)
      ref.flatSet(r * C + c, x.flatAt(r * C + c) * inv * w.flatAt(c));
  }
  ErrorStats e = compareTensors(y, ref);
  EXPECT_EQ(e.nonFinite, 0);
  EXPECT_LE(e.relative, 1e-2);

  norm.launch("cols=4096", t);
  EXPECT_EQ(norm.lastSource(), "memo");
  AutotunedKernel again = makeNorm(C);
  by.fill(0xFF);
  again.launch("cols=4096", t);
  cuda::synchronize();
  EXPECT_EQ(again.lastSource(), "database");
  EXPECT_EQ(again.chosen("cols=4096"), norm.chosen("cols=4096"));
  by.download(y.data(), y.storageBytes());
  EXPECT_LE(compareTensors(y, ref).relative, 1e-2);
  std::filesystem::remove(db);
  if (saved)
    ::setenv("KILN_TUNING_DB", previous.c_str(), 1);
  else
    ::unsetenv("KILN_TUNING_DB");
}

// The kernel itself, on the CPU executor, for every Config.
TEST(Autotuned, RmsNormRunsOnTheCpu) {
  const int64_t R = 9, C = 256;
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C});
  x.fillRandom(3);
  w.fillRandom(4);
  for (const NormConfig &c : kConfigs) {
    HostTensor y(DType::bf16, {R, C});
    y.poison();
    Kernel k = rmsNorm(C, c);
    runOnCpu(k, k.bind({{"X", x.ref()}, {"W", w.ref()}, {"Y", y.ref()}}));
    double worst = 0;
    for (int64_t r = 0; r < R; ++r) {
      double ms = 0;
      for (int64_t j = 0; j < C; ++j)
        ms += x.flatAt(r * C + j) * x.flatAt(r * C + j);
      for (int64_t j = 0; j < C; ++j) {
        double want =
            x.flatAt(r * C + j) / std::sqrt(ms / C + 1e-6) * w.flatAt(j);
        worst = std::max(worst, std::abs(y.flatAt(r * C + j) - want) /
                                    (std::abs(want) + 1e-2));
      }
    }
    EXPECT_LE(worst, 2e-2) << "rows=" << c.rows;
  }
}

TEST(Autotuned, RefusesAnEmptyOrAmbiguousConfigList) {
  auto build = [](size_t) -> Kernel { throw Error("not built"); };
  EXPECT_THAT(test::errorOf([&] { AutotunedKernel("k", {}, build, {}); }),
              ::testing::HasSubstr("no Configs to choose from"));
  EXPECT_THAT(test::errorOf([&] {
                AutotunedKernel("k", {"a", "a"}, build, {});
              }),
              ::testing::HasSubstr("two Configs named 'a'"));
}

} // namespace
