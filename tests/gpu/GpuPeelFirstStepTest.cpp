//===- GpuPeelFirstStepTest.cpp - the key loop's first step peeled -------===//
//
// D=128 non-causal attention on whole key blocks up to 2048 keys, where the
// default schedule peels the overlapped key loop's first step
// (AttentionConfig::peelFirstStep): its P·V then runs in the loop's first
// iteration, which no longer issues the dot of a zero tile. Peeled (the
// default) and not, against the fp64 host reference: fresh random inputs,
// O and LSE poisoned before the launch, every element compared. Skips,
// saying why, without an sm_90a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/SplitKeysCase.h"
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/runtime/Cuda.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;
using test::SplitCase;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

class PeelFirstStepOnGpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(PeelFirstStepOnGpu, MatchesFp64Reference) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule needs sm_90a";
  const SplitCase &c = GetParam();
  for (int peel : {-1, 0}) {
    SCOPED_TRACE(peel < 0 ? "default (peeled)" : "not peeled");
    kernels::AttentionConfig config;
    config.splitKeys = 0;
    config.peelFirstStep = peel;
    ASSERT_EQ(kernels::resolveConfig(c.shape(), config).peelFirstStep,
              peel < 0 ? 1 : 0);
    test::SplitTensors t(c);
    DeviceTensors dt;
    for (auto [name, tensor, output] : t.named(/*withWorkspace=*/false))
      dt.add(name, *tensor, output);
    CompiledKernel compiled =
        test::runOnGpu(kernels::attentionForward(c.shape(), config), dt);
    std::string report;
    for (const std::string &line : compiled.report)
      report += line + "\n";
    const char *firstIteration = "loop: the next loop's first iteration";
    if (peel < 0)
      EXPECT_THAT(report, HasSubstr(firstIteration)) << report;
    else
      EXPECT_THAT(report, Not(HasSubstr(firstIteration))) << report;
    dt.download("O", t.o);
    dt.download("LSE", t.lse);
    t.check(c);
  }
}

// One whole key block of 64 (N=128 takes 64-key blocks), two, eight and
// sixteen; queries that end mid-block.
INSTANTIATE_TEST_SUITE_P(Shapes, PeelFirstStepOnGpu,
                         ::testing::Values(SplitCase{2, 2, 128, 128, 128, 1},
                                           SplitCase{2, 3, 256, 256, 128, 1},
                                           SplitCase{1, 2, 1024, 1024, 128, 1},
                                           SplitCase{2, 1, 300, 2048, 128, 1}),
                         [](const auto &info) { return info.param.name(); });

} // namespace
