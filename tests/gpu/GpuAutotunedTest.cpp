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
#include "DeviceTensors.h"

#include "kiln/Compiler/Autotune.h"
#include "kiln/Compiler/Autotuned.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/Reference.h"
#include "kiln/kernels/RmsNorm.h"
#include "kiln/runtime/Cuda.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

using namespace kiln;

namespace {

/// Four of the library's Configs.
const std::vector<kernels::RmsNormConfig> kConfigs{
    {1, 4}, {2, 4}, {4, 8}, {8, 8}};

AutotunedKernel makeNorm(int64_t cols) {
  std::vector<std::string> names;
  for (const kernels::RmsNormConfig &c : kConfigs)
    names.push_back(c.name());
  AutotunedKernel::Options options;
  options.outputs = {"Y"};
  options.tolerance = 1e-2;
  options.tune.budgetSeconds = 60;
  return AutotunedKernel(
      "test_rmsnorm", names,
      [cols](size_t i) { return kernels::rmsNorm(cols, kConfigs[i]); },
      options);
}

/// A tuning database of the test's own (KILN_TUNING_DB) for its scope;
/// the previous setting is put back and the file removed after.
struct OwnTuningDb {
  std::string path, previous;
  bool had;
  explicit OwnTuningDb(const std::string &name)
      : path(::testing::TempDir() + name + "_" + std::to_string(::getpid()) +
             ".tsv") {
    const char *saved = std::getenv("KILN_TUNING_DB");
    had = saved != nullptr;
    previous = saved ? saved : "";
    ::setenv("KILN_TUNING_DB", path.c_str(), 1);
  }
  ~OwnTuningDb() {
    std::filesystem::remove(path);
    if (had)
      ::setenv("KILN_TUNING_DB", previous.c_str(), 1);
    else
      ::unsetenv("KILN_TUNING_DB");
  }
};

TEST(GpuAutotuned, TunesOnFirstLaunchThenUsesTheRecord) {
  REQUIRE_GPU();
  OwnTuningDb db("kiln_autotuned");
  const int64_t R = 3000, C = 4096;
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}),
      y(DType::bf16, {R, C});
  x.fillRandom(1, -3, 3);
  w.fillRandom(2);
  test::DeviceTensors dt;
  dt.add("X", x, false);
  dt.add("W", w, false);
  dt.add("Y", y, true);
  const std::map<std::string, TensorRef> &t = dt.refs;

  AutotunedKernel norm = makeNorm(C);
  norm.launch("cols=4096", t);
  cuda::synchronize();
  EXPECT_EQ(norm.lastSource(), "tuned");
  ASSERT_TRUE(norm.lastTuning());
  int timed = 0;
  for (const TunedTiming &tt : norm.lastTuning()->timings)
    timed += tt.ms > 0;
  EXPECT_GE(timed, 2) << "every Config that compiles is timed";
  ASSERT_TRUE(norm.chosen("cols=4096"));
  // The winner's time is the one in its row; when near-equals were timed
  // again, it is the fastest of that final round.
  const TuneResult &r = *norm.lastTuning();
  for (const TunedTiming &tt : r.timings) {
    if (tt.config == r.config) {
      EXPECT_EQ(tt.ms, r.ms);
    } else if (tt.finalRound) {
      EXPECT_GE(tt.ms, r.ms) << tt.config;
    }
  }
  dt.download("Y", y);
  HostTensor ref(DType::f32, {R, C});
  kernels::rmsNormReference(x, w, ref);
  ErrorStats e = compareTensors(y, ref);
  EXPECT_EQ(e.nonFinite, 0);
  EXPECT_LE(e.relative, 1e-2);

  norm.launch("cols=4096", t);
  EXPECT_EQ(norm.lastSource(), "memo");
  AutotunedKernel again = makeNorm(C);
  dt.poisonOutputs();
  again.launch("cols=4096", t);
  cuda::synchronize();
  EXPECT_EQ(again.lastSource(), "database");
  EXPECT_EQ(again.chosen("cols=4096"), norm.chosen("cols=4096"));
  dt.download("Y", y);
  EXPECT_LE(compareTensors(y, ref).relative, 1e-2);
}

// Configs whose kernels spill registers are pruned after compiling, not
// timed, when another Config does not spill: a 16384-column row in 4 warps
// (8 rows a program: 1024 floats a thread) against one in 8 warps.
TEST(GpuAutotuned, PrunesConfigsThatSpill) {
  REQUIRE_GPU();
  OwnTuningDb db("kiln_spills");
  const int64_t R = 256, C = 16384;
  const std::vector<kernels::RmsNormConfig> configs{{8, 4}, {1, 8}};
  AutotunedKernel norm(
      "test_spills", {configs[0].name(), configs[1].name()},
      [&](size_t i) { return kernels::rmsNorm(C, configs[i]); },
      {.outputs = {"Y"}, .tolerance = 1e-2});
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}),
      y(DType::bf16, {R, C});
  x.fillRandom(1);
  w.fillRandom(2);
  test::DeviceTensors dt;
  dt.add("X", x, false);
  dt.add("W", w, false);
  dt.add("Y", y, true);
  norm.launch("cols=16384", dt.refs);
  cuda::synchronize();
  ASSERT_TRUE(norm.lastTuning());
  const auto &timings = norm.lastTuning()->timings;
  EXPECT_THAT(timings[0].status,
              ::testing::HasSubstr("B of register spills (more than 256; "
                                   "other Configs have none)"));
  EXPECT_EQ(timings[0].ms, 0);
  EXPECT_EQ(timings[1].status, "ok");
  EXPECT_EQ(norm.chosen("cols=16384"), configs[1].name());
}

// The kernel itself, on the CPU executor, for every Config of the library's;
// rows of a power of two and not (200, GPT-2's 768: tiles of 256 and 1024
// whose columns past the row load as 0 and are not stored; the rows are
// back to back, so a store past one would land in the next).
TEST(Autotuned, RmsNormRunsOnTheCpu) {
  const int64_t R = 9;
  for (int64_t C : {256, 200, 768}) {
    HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C});
    x.fillRandom(3);
    w.fillRandom(4);
    HostTensor ref(DType::f32, {R, C});
    kernels::rmsNormReference(x, w, ref);
    for (const kernels::RmsNormConfig &c : kernels::rmsNormConfigs()) {
      HostTensor y(DType::bf16, {R, C});
      y.poison();
      Kernel k = kernels::rmsNorm(C, c);
      runOnCpu(k, k.bind({{"X", x.ref()}, {"W", w.ref()}, {"Y", y.ref()}}));
      ErrorStats e = compareTensors(y, ref);
      EXPECT_EQ(e.nonFinite, 0) << c.name() << " cols " << C;
      EXPECT_LE(e.relative, 1e-2) << c.name() << " cols " << C;
    }
  }
}

TEST(Autotuned, LayerNormRunsOnTheCpu) {
  const int64_t R = 9;
  for (int64_t C : {256, 200, 768}) {
    HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}), b(DType::bf16, {C});
    x.fillRandom(5, 1, 3); // an offset the mean must remove
    w.fillRandom(6);
    b.fillRandom(7);
    HostTensor ref(DType::f32, {R, C});
    kernels::layerNormReference(x, w, b, ref);
    for (const kernels::RmsNormConfig &c : kernels::rmsNormConfigs()) {
      HostTensor y(DType::bf16, {R, C});
      y.poison();
      Kernel k = kernels::layerNorm(C, c);
      runOnCpu(k, k.bind({{"X", x.ref()},
                          {"W", w.ref()},
                          {"B", b.ref()},
                          {"Y", y.ref()}}));
      ErrorStats e = compareTensors(y, ref);
      EXPECT_EQ(e.nonFinite, 0) << c.name() << " cols " << C;
      EXPECT_LE(e.relative, 1e-2) << c.name() << " cols " << C;
    }
  }
}

// Attention's tunings time the schedule launches take untuned first,
// whatever the budget: with none, it is the only candidate timed and the
// winner, checked against the reference and recorded.
TEST(GpuAutotuned, AttentionTimesTheUntunedDefaultWhateverTheBudget) {
  REQUIRE_GPU();
  OwnTuningDb db("kiln_untuned_default");
  TuneOptions o;
  o.budgetSeconds = 0;
  o.force = true;
  const cuda::DeviceInfo &dev = cuda::device();
  const kernels::AttentionShape dec{32,  16,    1,           4096,
                                    128, false, DType::bf16, 0};
  const kernels::AttentionShape square{2,  4,     1000,        1000,
                                       64, false, DType::bf16, 0};
  for (bool backward : {false, true}) {
    const kernels::AttentionShape &s = backward ? square : dec;
    TuneResult r = backward ? kernels::tuneAttentionBackward(s, o)
                            : kernels::tuneAttention(s, o);
    EXPECT_FALSE(r.fromDatabase);
    EXPECT_GT(r.baselineMs, 0) << backward;
    EXPECT_EQ(r.config, r.baselineConfig) << backward;
    if (!backward) {
      EXPECT_EQ(r.config, kernels::configString(kernels::untunedDefaultConfig(
                              s, dev.smCount, dev.memoryBandwidth)));
    }
    int timed = 0, skipped = 0;
    for (const TunedTiming &t : r.timings) {
      timed += t.status == "ok";
      skipped += t.status == "skipped: time budget spent";
    }
    EXPECT_EQ(timed, 1) << backward;
    EXPECT_GT(skipped, 10) << backward;
    std::optional<std::string> recorded =
        tunedConfig(backward ? "attention-backward" : "attention",
                    backward ? kernels::attentionBackwardTuneBucket(s)
                             : kernels::attentionTuneBucket(s),
                    "bf16");
    EXPECT_EQ(recorded.value_or("none"), r.config) << backward;
  }
}

// The baseline (TuneCandidate::baseline) is compiled and timed whatever the
// budget and the estimates, which would prune any other candidate: with no
// budget it is the one timed, the winner, checked against the reference.
TEST(GpuAutotuned, BaselineEscapesTheBudgetAndTheEstimates) {
  REQUIRE_GPU();
  OwnTuningDb db("kiln_baseline");
  const int64_t R = 256, C = 4096;
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}),
      y(DType::bf16, {R, C}), ref(DType::f32, {R, C});
  x.fillRandom(1);
  w.fillRandom(2);
  kernels::rmsNormReference(x, w, ref);
  test::DeviceTensors dt;
  dt.add("X", x, false);
  dt.add("W", w, false);
  dt.add("Y", y, true);
  std::vector<TuneCandidate> cs;
  for (const kernels::RmsNormConfig &c : kConfigs) {
    TuneCandidate t;
    t.config = c.name();
    t.build = [C, c] { return kernels::rmsNorm(C, c); };
    cs.push_back(std::move(t));
  }
  cs[2].baseline = true;
  cs[2].sharedBytes = int64_t(1) << 40;
  cs[2].registers = 1000;
  TuneHarness h;
  h.sets = 1;
  h.args = [&](const Kernel &k, int) { return k.bind(k.tensorsIn(dt.refs)); };
  h.check = [&](const Kernel &k, GpuKernel &g) -> std::string {
    dt.poisonOutputs();
    g.launch(k.bind(k.tensorsIn(dt.refs)));
    cuda::synchronize();
    dt.download("Y", y);
    ErrorStats e = compareTensors(y, ref);
    return e.nonFinite || e.relative > 1e-2 ? "wrong Y" : "";
  };
  TuneOptions o;
  o.budgetSeconds = 0;
  o.force = true;
  TuneResult r = autotune("test_baseline", "cols=4096", "bf16", cs, h, o);
  EXPECT_EQ(r.config, cs[2].config);
  EXPECT_EQ(r.baselineConfig, cs[2].config);
  EXPECT_GT(r.baselineMs, 0);
  ASSERT_EQ(r.timings.size(), cs.size());
  for (size_t i = 0; i < cs.size(); ++i)
    EXPECT_EQ(r.timings[i].status, i == 2 ? "ok" : "skipped: time budget spent")
        << cs[i].config;
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
