//===- GpuSmallTilesTest.cpp - decoding's small mma.sync tiles on the GPU -===//
//
// The forward under AttentionConfig::smallTiles (16 rows on one warp, 64-key
// blocks at D=64 and 32-key ones at D=128, three stages): chosen by
// launchConfig's default where decoding's programs fill 132 SMs and the
// memory is an H200's, and asked for where they would not (ragged Nk,
// more queries than one row block, keys split as well). Against the fp64 host
// reference: fresh random inputs, O, LSE and the split workspace poisoned
// before the launches, every element compared; each kernel's lowering report
// shows mma.sync, not wgmma. Skips, saying why, without an sm_90a GPU.
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

/// A problem and its key ranges; `byDefault`: the small tiles are
/// launchConfig's choice on 132 SMs with an H200's 4.8 TB/s rather than
/// asked for.
struct SmallTilesCase {
  SplitCase problem;
  bool byDefault;
};

void PrintTo(const SmallTilesCase &c, std::ostream *os) {
  PrintTo(c.problem, os);
  *os << (c.byDefault ? "_default" : "_asked");
}

class SmallTilesOnGpu : public ::testing::TestWithParam<SmallTilesCase> {};

TEST_P(SmallTilesOnGpu, MatchesFp64Reference) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule is decided for sm_90a";
  const SplitCase &c = GetParam().problem;
  kernels::AttentionConfig asked;
  if (!GetParam().byDefault) {
    asked.smallTiles = 1;
    asked.splitKeys = int(c.ranges);
  }
  const kernels::AttentionConfig config =
      kernels::launchConfig(c.shape(), asked, 132, 4.8e12);
  ASSERT_EQ(config.smallTiles, 1);
  ASSERT_EQ(config.splitKeys, c.ranges);
  test::SplitTensors t(c);
  DeviceTensors dt;
  for (auto [name, tensor, output] : t.named(/*withWorkspace=*/c.ranges > 1))
    dt.add(name, *tensor, output);
  for (const Kernel &kernel :
       kernels::attentionForwardKernels(c.shape(), config)) {
    CompiledKernel compiled = test::runOnGpu(kernel, dt);
    if (kernel.name() == "attention_fwd_combine")
      continue;
    std::string report;
    for (const std::string &line : compiled.report)
      report += line + "\n";
    EXPECT_THAT(report, HasSubstr("mma.sync")) << report;
    EXPECT_THAT(report, Not(HasSubstr("wgmma"))) << report;
  }
  dt.download("O", t.o);
  dt.download("LSE", t.lse);
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SmallTilesOnGpu,
    ::testing::Values(
        // The default's: 512 programs, one query and sixteen; 256.
        SmallTilesCase{{16, 32, 1, 1030, 64, 1}, true},
        SmallTilesCase{{8, 32, 1, 2049, 64, 1}, true},
        SmallTilesCase{{16, 16, 3, 1500, 128, 1}, true},
        SmallTilesCase{{16, 32, 16, 1100, 64, 1}, true},
        SmallTilesCase{{32, 16, 1, 1100, 128, 1}, true},
        SmallTilesCase{{32, 16, 16, 1030, 128, 1}, true},
        // Asked for: ragged Nk, Nq filling one row block or ending in it,
        // Nq over several row blocks, short keys, the keys split too.
        SmallTilesCase{{2, 3, 1, 1030, 64, 1}, false},
        SmallTilesCase{{1, 2, 16, 2048, 64, 1}, false},
        SmallTilesCase{{1, 2, 5, 4097, 64, 1}, false},
        SmallTilesCase{{2, 1, 20, 3001, 128, 1}, false},
        SmallTilesCase{{1, 2, 32, 1024, 128, 1}, false},
        SmallTilesCase{{1, 1, 40, 500, 64, 1}, false},
        SmallTilesCase{{1, 1, 1, 300, 128, 1}, false},
        SmallTilesCase{{1, 2, 1, 4097, 64, 4}, false},
        SmallTilesCase{{1, 1, 7, 3000, 128, 3}, false}),
    [](const auto &info) {
      return info.param.problem.name() +
             (info.param.byDefault ? "_default" : "_asked");
    });

} // namespace
