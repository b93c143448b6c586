//===- SplitKeysTest.cpp - the forward with its keys split across programs ===//
//
// attention_fwd_split then attention_fwd_combine (AttentionConfig::splitKeys)
// on the CPU executor against the fp64 reference: ragged Nk, a range with
// no keys, Nq != Nk, D 64 and 128; every output and workspace poisoned
// first. Then what the GPU lowering makes of them, and bad configs.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "SplitKeysCase.h"
#include "TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::SplitCase;
using ::testing::HasSubstr;

namespace {

class SplitKeysOnCpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitKeysOnCpu, MatchesFp64Reference) {
  const SplitCase &c = GetParam();
  // Small key blocks keep the executor quick and the ranges many.
  std::vector<Kernel> ks = kernels::attentionForwardKernels(
      c.shape(), {.blockM = 64,
                  .blockN = 32,
                  .staticShapes = c.staticShapes,
                  .splitKeys = int(c.ranges)});
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name(), "attention_fwd_split");
  EXPECT_EQ(ks[1].name(), "attention_fwd_combine");
  test::SplitTensors t(c);
  std::map<std::string, TensorRef> refs;
  for (auto [name, tensor, output] : t.named())
    refs[name] = tensor->ref();
  for (const Kernel &kernel : ks)
    runOnCpu(kernel, kernel.bind(kernel.tensorsIn(refs)));
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SplitKeysOnCpu,
    ::testing::Values(
        // 1000 keys: 32 blocks of 32 in 3 ranges of 11 blocks, the last
        // ending at the ragged Nk.
        SplitCase{1, 2, 70, 1000, 64, 3},
        // Decoding: one query; 3 blocks in 4 ranges: the last has no keys.
        SplitCase{2, 1, 1, 90, 64, 4},
        // More queries than keys, whole key blocks, D=128.
        SplitCase{1, 1, 130, 256, 128, 2},
        // The combine's loop over ranges (S * D past what it unrolls), at
        // D=128 and at D=64 with ranges that hold no keys.
        SplitCase{1, 2, 40, 700, 128, 3}, SplitCase{2, 1, 3, 90, 64, 8},
        // B, H, Nq and Nk compiled in: the ragged end's mask as well.
        SplitCase{1, 2, 33, 500, 64, 3, 1}),
    [](const auto &info) { return info.param.name(); });

// The Hopper lowering of both kernels under the defaults: the split kernel
// loads K and V by TMA and runs its dots on wgmma; O's ranges leave by
// st.global (fp32, no TMA staging tile).
TEST(SplitKeysCodegen, LowersOnHopperWithTheDefaults) {
  for (int64_t d : {64, 128}) {
    kernels::AttentionShape s = test::selfAttention(4097, d, false);
    s.seqQ = 1;
    std::vector<Kernel> ks =
        kernels::attentionForwardKernels(s, {.splitKeys = 8});
    ASSERT_EQ(ks.size(), 2u);
    CompiledKernel split = compileForGpu(ks[0], {"sm_90a", 0});
    CompiledKernel combine = compileForGpu(ks[1], {"sm_90a", 0});
    const std::string report = test::reportOf(split);
    EXPECT_THAT(report, HasSubstr("wgmma")) << report;
    EXPECT_GE(test::countOf(report, ": TMA (cp.async.bulk.tensor"), 2u)
        << report;
    EXPECT_FALSE(combine.ptx.empty());
  }
}

TEST(SplitKeysErrors, CausalAndTheOneKernelEntryAreRefused) {
  kernels::AttentionShape s = test::selfAttention(1000, 64, true);
  try {
    kernels::attentionForwardKernels(s, {.splitKeys = 4});
    ADD_FAILURE() << "causal with split keys was accepted";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), HasSubstr("non-causal attention only"));
  }
  s.causal = false;
  try {
    kernels::attentionForward(s, {.splitKeys = 4});
    ADD_FAILURE() << "attentionForward built one of two kernels";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), HasSubstr("attentionForwardKernels"));
  }
  EXPECT_EQ(kernels::attentionForwardKernels(s, {.splitKeys = 1}).size(), 1u);
}

// The default split: none where the programs keep the CTA slots (132 SMs:
// 264 at D=64, two CTAs an SM; 132 at D=128) 80% busy over their waves,
// else the fewest ranges reaching 90%, each range keeping 4 key blocks;
// none where causal or without an SM count.
TEST(SplitKeysDefault, FollowsTheWavesOfThePrograms) {
  auto split = [](int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D,
                  bool causal, int64_t sms) {
    kernels::AttentionShape s{B, H, Nq, Nk, D, causal, DType::bf16, 0};
    return kernels::defaultSplitKeys(s, {}, sms);
  };
  EXPECT_EQ(split(1, 16, 1, 32768, 128, false, 132), 8); // 16 programs
  EXPECT_EQ(split(1, 32, 1, 32768, 64, false, 132), 8);  // 32
  EXPECT_EQ(split(4, 16, 1, 8192, 128, false, 132), 2);  // 64
  EXPECT_EQ(split(8, 16, 1, 8192, 128, false, 132), 1);  // 128 of 132
  EXPECT_EQ(split(4, 32, 1, 8192, 64, false, 132), 2);   // 128 of 264
  EXPECT_EQ(split(64, 32, 1, 4096, 64, false, 132), 1);  // 2048: 97%
  EXPECT_EQ(split(1, 32, 300, 16384, 64, false, 132), 8); // 96 -> 768
  EXPECT_EQ(split(4, 32, 300, 16384, 64, false, 132), 2); // 384: 73%
  EXPECT_EQ(split(1, 16, 1, 1024, 128, false, 132), 2);   // 8 key blocks
  EXPECT_EQ(split(1, 2, 3, 2000, 64, false, 132), 4);     // 2 programs
  EXPECT_EQ(split(1, 2, 1, 32768, 64, false, 132), 64);
  EXPECT_EQ(split(1, 16, 1, 300, 128, false, 132), 1);    // 3 key blocks
  EXPECT_EQ(split(1, 16, 1, 32768, 128, true, 132), 1);   // causal
  EXPECT_EQ(split(1, 16, 1, 32768, 128, false, 0), 1);    // no GPU
  EXPECT_EQ(split(1, 16, 1, 32768, 128, false, 264), 16); // more SMs
  // The kernels follow it: two with -1 (the default) on 132 SMs, one
  // without an SM count or with splitKeys 0.
  kernels::AttentionShape s{1, 16, 1, 32768, 128, false, DType::bf16, 0};
  EXPECT_EQ(kernels::attentionForwardKernels(s, {}, 132).size(), 2u);
  EXPECT_EQ(kernels::splitKeysOf(s, {}, 132), 8);
  EXPECT_EQ(kernels::attentionForwardKernels(s, {}).size(), 1u);
  EXPECT_EQ(kernels::attentionForwardKernels(s, {.splitKeys = 0}, 132).size(),
            1u);
}

// Decoding's small tiles (AttentionConfig::smallTiles) on the CPU executor:
// 16-row tiles, 64-key blocks at D=64 (Nq over three row blocks, ragged Nk)
// and 32-key ones at D=128 (one query; Nq over two row blocks), each with
// its keys split as well.
TEST(SmallTilesOnCpu, MatchesFp64Reference) {
  for (const SplitCase &c :
       {SplitCase{1, 2, 40, 300, 64, 1}, SplitCase{2, 1, 1, 200, 128, 1},
        SplitCase{1, 2, 5, 500, 64, 3}, SplitCase{1, 1, 20, 260, 128, 2}}) {
    SCOPED_TRACE(c.name());
    const kernels::AttentionConfig config{.smallTiles = 1,
                                          .splitKeys = int(c.ranges)};
    const kernels::AttentionConfig r =
        kernels::resolveConfig(c.shape(), config);
    EXPECT_EQ(r.wgmma, 0);
    EXPECT_EQ(r.blockM, 16);
    EXPECT_EQ(r.warps, 1);
    EXPECT_EQ(r.blockN, c.D == 64 ? 64 : 32);
    EXPECT_EQ(r.stages, 3);
    test::SplitTensors t(c);
    std::map<std::string, TensorRef> refs;
    for (auto [name, tensor, output] : t.named(c.ranges > 1))
      refs[name] = tensor->ref();
    for (const Kernel &kernel :
         kernels::attentionForwardKernels(c.shape(), config))
      runOnCpu(kernel, kernel.bind(kernel.tensorsIn(refs)));
    t.check(c);
  }
}

// launchConfig's small tiles: at most 16 queries on 1024 keys or more, not
// causal, keys not split, tiles and tensor-core path left to the defaults,
// and programs for 48% of the small tiles' CTA slots (132 SMs, 4 CTAs an SM
// by shared memory at both D: 254), on 30 GB/s of DRAM bandwidth an SM (an
// H200's 4.8 TB/s on 132 SMs, not an H100's 3.35).
constexpr double kH200 = 4.8e12, kH100 = 3.35e12; // DRAM bytes a second
TEST(SmallTilesDefault, FollowsThePrograms) {
  auto small = [](int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D,
                  kernels::AttentionConfig c = {}, bool causal = false,
                  int64_t sms = 132, double bandwidth = kH200) {
    kernels::AttentionShape s{B, H, Nq, Nk, D, causal, DType::bf16, 0};
    return kernels::launchConfig(s, c, sms, bandwidth).smallTiles;
  };
  EXPECT_EQ(small(16, 32, 1, 4096, 64), 1);   // 512 programs of 254
  EXPECT_EQ(small(64, 32, 16, 32768, 64), 1); // 2048
  EXPECT_EQ(small(8, 32, 1, 4096, 64), 1);    // 256
  EXPECT_EQ(small(1, 253, 1, 4096, 64), 0);   // 253
  EXPECT_EQ(small(4, 32, 1, 4096, 64), 0);    // split
  EXPECT_EQ(small(16, 32, 17, 4096, 64), 0);  // two row blocks a head
  // The memory's bandwidth an SM decides too, at both D.
  EXPECT_EQ(small(32, 16, 1, 8192, 128), 1);  // 512 programs
  EXPECT_EQ(small(32, 16, 16, 8192, 128), 1); // 16 queries
  EXPECT_EQ(small(16, 16, 1, 4096, 128), 1);  // 256 programs
  EXPECT_EQ(small(8, 16, 1, 4096, 128), 0);   // 128: wgmma, keys split
  EXPECT_EQ(small(32, 16, 1, 8192, 128, {}, false, 132, kH100), 0);
  EXPECT_EQ(small(32, 16, 1, 8192, 128, {}, false, 132, 0), 0); // unknown
  EXPECT_EQ(small(32, 16, 1, 8192, 128, {}, false, 200, kH200), 0); // 24 GB/s
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {}, false, 132, kH100), 0);
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {}, false, 132, 0), 0); // unknown
  EXPECT_EQ(small(1, 1, 1, 4096, 128, {.smallTiles = 1}), 1);
  EXPECT_EQ(small(16, 32, 1, 1000, 64), 0);               // short keys
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {}, true), 0);     // causal
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {}, false, 0), 0); // no GPU
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {.blockM = 64}), 0);
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {.wgmma = 1}), 0);
  EXPECT_EQ(small(16, 32, 1, 4096, 64, {.smallTiles = 0}), 0);
  EXPECT_EQ(small(1, 1, 1, 4096, 64, {.smallTiles = 1}), 1);
  // Explicit fields stay; wgmma contradicts the small tiles.
  kernels::AttentionShape s{16, 32, 1, 4096, 64, false, DType::bf16, 0};
  EXPECT_EQ(kernels::resolveConfig(s, {.stages = 2, .smallTiles = 1}).stages,
            2);
  EXPECT_EQ(kernels::resolveConfig(s, {.blockN = 128, .smallTiles = 1}).blockN,
            128);
  EXPECT_EQ(kernels::resolveConfig(s, {.smallTiles = 0}).stages, 2);
  EXPECT_EQ(kernels::resolveConfig(s, {}).wgmma, 1); // without an SM count
  try {
    kernels::resolveConfig(s, {.smallTiles = 1, .wgmma = 1});
    ADD_FAILURE() << "small tiles on wgmma were accepted";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), HasSubstr("contradicts"));
  }
  // The kernels follow it.
  std::vector<Kernel> ks = kernels::attentionForwardKernels(s, {}, 132, kH200);
  ASSERT_EQ(ks.size(), 1u);
  CompiledKernel k = compileForGpu(ks[0], {"sm_90a", 0});
  const std::string report = test::reportOf(k);
  EXPECT_THAT(report, HasSubstr("mma.sync m16n8k16")) << report;
  EXPECT_THAT(report, ::testing::Not(HasSubstr("wgmma"))) << report;
}

} // namespace
