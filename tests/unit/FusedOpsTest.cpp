//===- FusedOpsTest.cpp - rotary and cross-entropy on the CPU executor ----===//
//
// kernels::rotary and kernels::crossEntropyForward / Backward against fp64
// (FusedOpsData.h) on the CPU executor, for ragged sizes, strided tensors
// and several Configs; their bad input refused with the reason.
//
//===----------------------------------------------------------------------===//
#include "FusedOpsData.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/CrossEntropy.h"
#include "kiln/kernels/RmsNorm.h"
#include "kiln/kernels/Rotary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;

TEST(FusedOpsOnCpu, RotaryMatchesFp64) {
  struct Case {
    int64_t H, T, D, P;
    bool strided, inverse;
    kernels::RotaryConfig config;
  };
  for (const Case &c : {Case{2, 37, 64, 50, false, false, {16, 4}},
                        Case{3, 70, 128, 200, true, false, {32, 4}},
                        Case{1, 5, 16, 9, false, true, {64, 8}},
                        Case{4, 33, 64, 33, true, true, {16, 4}}}) {
    SCOPED_TRACE("H=" + std::to_string(c.H) + " T=" + std::to_string(c.T) +
                 " D=" + std::to_string(c.D));
    test::RotaryData d(c.H, c.T, c.D, c.P, c.strided, c.inverse);
    Kernel k = kernels::rotary(c.D, c.config, c.inverse);
    runOnCpu(k, k.bind({{"X", d.x.ref()},
                        {"Y", d.y.ref()},
                        {"Pos", d.pos.ref()},
                        {"Cos", d.cos.ref()},
                        {"Sin", d.sin.ref()}}));
    d.check();
  }
}

TEST(FusedOpsOnCpu, CrossEntropyMatchesFp64) {
  struct Case {
    int64_t R, V, rowStride;
    kernels::CrossEntropyConfig config;
  };
  for (const Case &c :
       {Case{7, 1000, 1000, {1, 256, 4}}, Case{9, 333, 340, {2, 128, 4}},
        Case{4, 5000, 5000, {4, 2048, 8}}, Case{1, 17, 17, {1, 16, 4}}}) {
    SCOPED_TRACE("R=" + std::to_string(c.R) + " V=" + std::to_string(c.V));
    test::CrossEntropyData d(c.R, c.V, c.rowStride);
    Kernel fwd = kernels::crossEntropyForward(c.config);
    runOnCpu(fwd, fwd.bind({{"X", d.x.ref()},
                            {"Labels", d.labels.ref()},
                            {"LSE", d.lse.ref()},
                            {"Loss", d.loss.ref()}}));
    d.checkForward();
    for (bool perRow : {false, true}) {
      d.dx.poison();
      Kernel bwd = kernels::crossEntropyBackward(c.config, -100, perRow);
      std::map<std::string, TensorRef> t{{"X", d.x.ref()},
                                         {"Labels", d.labels.ref()},
                                         {"LSE", d.lse.ref()},
                                         {"Scale", d.scale.ref()},
                                         {"DX", d.dx.ref()}};
      if (perRow)
        t["DLoss"] = d.dloss.ref();
      runOnCpu(bwd, bwd.bind(t));
      d.checkBackward(perRow);
    }
  }
}

TEST(FusedOpsOnCpu, BadConfigsAndTensorsAreRefused) {
  EXPECT_THAT(test::errorOf([] { kernels::rotary(96); }),
              HasSubstr("power of two >= 16, got 96"));
  EXPECT_THAT(test::errorOf([] { kernels::rotary(64, {.tokens = 3}); }),
              HasSubstr("tokens per program must be a power of two, got 3"));
  EXPECT_THAT(test::errorOf([] { kernels::crossEntropyForward({.rows = 3}); }),
              HasSubstr("rows and blockV must be powers of two"));
  // Labels of the wrong dtype: named before anything runs.
  test::CrossEntropyData d(4, 100, 100);
  HostTensor labels32(DType::i32, {4});
  Kernel fwd = kernels::crossEntropyForward();
  EXPECT_THAT(test::errorOf([&] {
                fwd.bind({{"X", d.x.ref()},
                          {"Labels", labels32.ref()},
                          {"LSE", d.lse.ref()},
                          {"Loss", d.loss.ref()}});
              }),
              HasSubstr("Labels"));
}

// Every Config of the tuning spaces compiles for Hopper (what the tuner
// would otherwise report as failed at run time); the loads of a row are
// vectors where the tensors are aligned.
TEST(FusedOpsOnCpu, EveryConfigCompilesForHopper) {
  GpuTarget target{.arch = "sm_90a"};
  for (const kernels::RmsNormConfig &c : kernels::rmsNormConfigs()) {
    // Rows of a power of two, and not (GPT-2's 768, Llama-13B's 5120).
    for (int64_t cols : {4096, 768})
      EXPECT_NO_THROW(compileForGpu(kernels::rmsNorm(cols, c), target))
          << c.name() << " cols " << cols;
    for (int64_t cols : {8192, 5120})
      EXPECT_NO_THROW(compileForGpu(kernels::layerNorm(cols, c), target))
          << c.name() << " cols " << cols;
  }
  for (const kernels::RotaryConfig &c : kernels::rotaryConfigs())
    EXPECT_NO_THROW(compileForGpu(kernels::rotary(128, c), target)) << c.name();
  for (const kernels::CrossEntropyConfig &c : kernels::crossEntropyConfigs()) {
    EXPECT_NO_THROW(compileForGpu(kernels::crossEntropyForward(c), target))
        << c.name();
    EXPECT_NO_THROW(compileForGpu(kernels::crossEntropyBackward(c), target))
        << c.name();
  }
}
