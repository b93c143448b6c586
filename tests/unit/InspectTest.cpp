//===- InspectTest.cpp - stages, dumps, resources, tuning space (no GPU) --===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/runtime/Error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>
#include <unistd.h>

using namespace kiln;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

static std::vector<std::string> names(const CompiledKernel &c) {
  std::vector<std::string> n;
  for (const CompileStage &s : c.stages)
    n.push_back(s.name);
  return n;
}

// Every pass of Pipeline.cpp is a stage, in order, with its IR when asked,
// and the stages' times add up to no more than the compile.
TEST(Inspect, EveryPassIsAStageWithItsIR) {
  Kernel k = kernels::gemm({64, 64, 64});
  CompiledKernel c = compileForGpu(k, {}, {.keepPasses = true});
  EXPECT_EQ(
      names(c),
      (std::vector<std::string>{
          "kiln", "kiln-overlap-dots", "kiln-assign-layouts",
          "kiln-remove-layout-conversions", "cse", "convert-kiln-to-llvm",
          "convert-scf-to-cf", "convert-to-llvm", "reconcile-unrealized-casts",
          "canonicalize", "cse.2", "verify", "llvm-ir", "llvm-opt", "ptx"}));
  double sum = 0;
  for (const CompileStage &s : c.stages) {
    sum += s.ms;
    EXPECT_GE(s.ms, 0) << s.name;
    bool textual = s.name != "kiln" && s.name != "verify" &&
                   s.name != "llvm-opt" && s.name != "ptx";
    if (textual) {
      EXPECT_FALSE(s.text.empty()) << s.name;
    }
  }
  EXPECT_LE(sum, c.compileMs + 1e-6);
  EXPECT_THAT(c.stages[2].text.str(), HasSubstr("#kiln.layout"));
  EXPECT_THAT(c.stages[5].text.str(), HasSubstr("llvm."));
  EXPECT_THAT(c.stages[12].text.str(), HasSubstr("define "));
  // Without keepPasses the times are there, the texts are not.
  CompiledKernel lean = compileForGpu(k);
  EXPECT_EQ(names(lean), names(c));
  EXPECT_TRUE(lean.stages[2].text.empty());
  EXPECT_EQ(lean.ptx, c.ptx);
}

TEST(Inspect, DumpWritesEveryStage) {
  std::string dir =
      (fs::temp_directory_path() / ("kiln-dump-" + std::to_string(::getpid())))
          .string();
  CompiledKernel c =
      compileForGpu(kernels::gemm({64, 64, 64}), {}, {.keepPasses = true});
  std::string folder = dumpStages(c, dir);
  EXPECT_TRUE(fs::exists(folder + "/00-kiln.mlir"));
  EXPECT_TRUE(fs::exists(folder + "/02-kiln-assign-layouts.mlir"));
  EXPECT_TRUE(fs::exists(folder + "/12-llvm-ir.ll"));
  EXPECT_TRUE(fs::exists(folder + "/14-ptx.ptx"));
  std::ifstream times(folder + "/stages.txt");
  std::string all((std::istreambuf_iterator<char>(times)), {});
  EXPECT_THAT(all, HasSubstr("total"));
  std::ifstream ptx(folder + "/14-ptx.ptx");
  std::string text((std::istreambuf_iterator<char>(ptx)), {});
  EXPECT_EQ(text, c.ptx);
  fs::remove_all(dir);
}

TEST(Inspect, OccupancyFromArchitectureLimits) {
  // 128 threads, 255 registers: 4 warps x 8192 registers = 32768 per block.
  Occupancy o = estimateOccupancy("sm_90a", 128, 255, 98304);
  EXPECT_EQ(o.blocksPerSM, 2);
  EXPECT_EQ(o.warpsPerSM, 8);
  EXPECT_EQ(o.limiter, "registers");
  // 128 KB of shared memory: one block per SM whatever the registers.
  o = estimateOccupancy("sm_90a", 128, 64, 128 * 1024);
  EXPECT_EQ(o.blocksPerSM, 1);
  EXPECT_EQ(o.limiter, "shared memory");
  o = estimateOccupancy("sm_80", 1024, 32, 0);
  EXPECT_EQ(o.blocksPerSM, 2);
  EXPECT_EQ(o.limiter, "threads");
}

// ptxas, when the CUDA toolkit is installed, reports what the NVPTX backend
// cannot know: registers and spills.
TEST(Inspect, PtxasReportsRegistersAndSpills) {
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "ptxas (CUDA toolkit) not installed";
  CompiledKernel c = compileForGpu(kernels::gemm({128, 128, 64}));
  Assembled a = assembleWithPtxas(c);
  EXPECT_GT(a.registers, 16);
  EXPECT_LE(a.registers, 255);
  EXPECT_EQ(a.spillStoreBytes, 0);
  EXPECT_GT(a.cubin.size(), 1000u);
  EXPECT_EQ(a.cubin.substr(1, 3), "ELF");
  c.ptx = "this is not ptx";
  EXPECT_THROW(assembleWithPtxas(c), Error);
}

// cuobjdump 13 needs nvdisasm for SASS; where cuobjdump fails and nvdisasm
// is there, the disassembly comes from nvdisasm (fake tools first on PATH).
TEST(Inspect, DisassemblyFallsBackToNvdisasm) {
  fs::path dir = fs::temp_directory_path() /
                 ("kiln-fake-tools-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto tool = [&](const char *name, const char *body) {
    std::ofstream(dir / name) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(dir / name, fs::perms::owner_all);
  };
  tool("cuobjdump",
       "echo \"Could not find executable file 'nvdisasm'\"; exit 1");
  tool("nvdisasm", "echo FAKE-SASS $1");
  const char *old = getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", (dir.string() + ":" + saved).c_str(), 1);
  std::string sass;
  EXPECT_NO_THROW(sass = disassemble("not a cubin"));
  setenv("PATH", saved.c_str(), 1);
  fs::remove_all(dir);
  EXPECT_THAT(sass, HasSubstr("FAKE-SASS -c"));
}

TEST(Tuning, AttentionConfigStringsRoundTrip) {
  kernels::AttentionConfig c;
  c.blockM = 64;
  c.blockN = 128;
  c.warps = 4;
  c.stages = 3;
  c.reloadThreadIds = 1;
  c.wgmma = c.warpSpecialize = c.pingpong = c.overlap = c.persistent = 1;
  kernels::AttentionConfig d =
      kernels::parseConfigString(kernels::configString(c));
  EXPECT_EQ(d.blockM, 64);
  EXPECT_EQ(d.blockN, 128);
  EXPECT_EQ(d.warps, 4);
  EXPECT_EQ(d.stages, 3);
  EXPECT_EQ(d.reloadThreadIds, 1);
  EXPECT_EQ(d.wgmma, 1);
  EXPECT_EQ(d.warpSpecialize, 1);
  EXPECT_EQ(d.pingpong, 1);
  EXPECT_EQ(d.overlap, 1);
  EXPECT_EQ(d.persistent, 1);
  EXPECT_EQ(kernels::parseConfigString("tma=0 blockN=4096").tma, 0);
  EXPECT_EQ(kernels::parseConfigString("tma=0 blockN=4096").blockN, 4096);
  EXPECT_THROW(kernels::parseConfigString("blockM=x"), Error);
  EXPECT_THROW(kernels::parseConfigString("tiles=3"), Error);
  kernels::AttentionShape s;
  s.seqQ = s.seqK = 3000;
  s.headDim = 128;
  s.causal = true;
  EXPECT_EQ(kernels::attentionTuneBucket(s), "D=128 causal=1 N<=4096");
  // Decoding tunes apart from the square shapes of its key count, with the
  // small mma.sync tiles among its candidates (16 rows on one warp, 32 on
  // two) and none of them for a square shape.
  kernels::AttentionShape dec{32, 16, 1, 8192, 128, false, DType::bf16, 0};
  EXPECT_EQ(kernels::attentionTuneBucket(dec), "D=128 causal=0 Nq<=16 N<=8192");
  dec.seqQ = 16;
  EXPECT_EQ(kernels::attentionTuneBucket(dec), "D=128 causal=0 Nq<=16 N<=8192");
  dec.seqQ = 17;
  EXPECT_EQ(kernels::attentionTuneBucket(dec), "D=128 causal=0 N<=8192");
  dec.seqQ = dec.seqK = 8;
  EXPECT_EQ(kernels::attentionTuneBucket(dec), "D=128 causal=0 N<=512");
  auto smallOnes = [](const kernels::AttentionShape &shape) {
    int n = 0;
    for (const TuneCandidate &c : kernels::attentionCandidates(shape)) {
      const kernels::AttentionConfig parsed =
          kernels::parseConfigString(c.config);
      if (parsed.blockM <= 32) {
        EXPECT_EQ(parsed.wgmma, 0) << c.config;
        EXPECT_EQ(parsed.warps, parsed.blockM / 16) << c.config;
        EXPECT_GT(c.sharedBytes, 0) << c.config;
        ++n;
      }
    }
    return n;
  };
  EXPECT_EQ(smallOnes({32, 16, 1, 8192, 128, false, DType::bf16, 0}), 12);
  EXPECT_EQ(smallOnes({32, 32, 4, 4096, 64, false, DType::bf16, 0}), 12);
  EXPECT_EQ(smallOnes({4, 16, 8192, 8192, 128, false, DType::bf16, 0}), 0);
  // Decoding lists them first: a budget that runs out reaches them.
  EXPECT_TRUE(kernels::attentionCandidates(
                  {32, 16, 1, 8192, 128, false, DType::bf16, 0})
                  .front()
                  .config.starts_with("blockM=16 "));
  // Each builds the small tiles' kernel: the preset's, compiled, on mma.sync.
  const kernels::AttentionShape one{32,  16,    1,           8192,
                                    128, false, DType::bf16, 0};
  for (const TuneCandidate &c : kernels::attentionCandidates(one))
    if (c.config.starts_with("blockM=16 blockN=32 warps=1 stages=3 ")) {
      CompiledKernel k = compileForGpu(c.build(), {"sm_90a", 0});
      std::string report;
      for (const std::string &line : k.report)
        report += line + "\n";
      EXPECT_THAT(report, HasSubstr("mma.sync m16n8k16")) << report;
      EXPECT_THAT(report, ::testing::Not(HasSubstr("wgmma"))) << report;
      return;
    }
  ADD_FAILURE() << "no candidate of the small tiles' preset";
}

// The tuner's baseline is what launches take untuned on that GPU: D=128
// decoding's small tiles by the memory's bandwidth an SM (H200, not H100),
// wgmma elsewhere, keys never split.
TEST(Tuning, UntunedDefaultIsTheLaunchesSchedule) {
  const kernels::AttentionShape dec{32,  16,    1,           8192,
                                    128, false, DType::bf16, 0};
  const kernels::AttentionShape square{4,   16,   4096,        4096,
                                       128, true, DType::bf16, 0};
  for (auto [s, sms, bandwidth] :
       {std::tuple{dec, 132, 4.8e12}, std::tuple{dec, 132, 3.35e12},
        std::tuple{square, 132, 4.8e12}, std::tuple{dec, 0, 0.0}}) {
    kernels::AttentionConfig u =
        kernels::untunedDefaultConfig(s, sms, bandwidth);
    kernels::AttentionConfig l =
        kernels::resolveConfig(s, kernels::launchConfig(s, {}, sms, bandwidth));
    EXPECT_EQ(kernels::configString(u), kernels::configString(l))
        << s.seqQ << " " << bandwidth;
    EXPECT_EQ(u.splitKeys, 1);
  }
  EXPECT_EQ(kernels::untunedDefaultConfig(dec, 132, 4.8e12).blockM, 16);
  EXPECT_EQ(kernels::untunedDefaultConfig(dec, 132, 3.35e12).wgmma, 1);
  // With few programs launches split the keys; the baseline does not.
  const kernels::AttentionShape few{1, 4, 1, 8192, 128, false, DType::bf16, 0};
  EXPECT_GT(kernels::launchConfig(few, {}, 132, 4.8e12).splitKeys, 1);
  EXPECT_EQ(kernels::untunedDefaultConfig(few, 132, 4.8e12).splitKeys, 1);
}

TEST(Tuning, BackwardSpaceIsWholeSequencesOfBothWaysToDq) {
  kernels::AttentionShape s{4, 16, 4096, 4096, 128, true, DType::bf16, 0};
  EXPECT_EQ(kernels::attentionBackwardTuneBucket(s),
            "backward D=128 causal=1 N<=4096");
  std::vector<TuneCandidate> cs = kernels::attentionBackwardCandidates(s);
  int atomic = 0, own = 0;
  for (const TuneCandidate &c : cs) {
    ASSERT_TRUE(c.buildSequence) << c.config;
    kernels::AttentionBackwardConfig d =
        kernels::parseBackwardConfigString(c.config);
    EXPECT_EQ(kernels::backwardConfigString(d), c.config);
    (d.deterministic ? own : atomic)++;
    if (d.blockN == 128 && d.blockM == 128) { // dK, dV, Sᵀ, dPᵀ: 256/thread
      EXPECT_GT(c.registers, 255) << c.config;
    }
  }
  EXPECT_GT(atomic, 0);
  EXPECT_GT(own, 0);
  // A candidate builds its kernels: atomics end with the conversion.
  std::vector<Kernel> ks =
      cs.back().buildSequence(); // the last: atomics, blockN 128
  EXPECT_EQ(ks.back().name(), "attention_bwd_dq_convert");
  EXPECT_THROW(kernels::parseBackwardConfigString("blockM=x"), Error);
  EXPECT_THROW(kernels::parseBackwardConfigString("tiles=3"), Error);
}

// The tuner prunes on estimates made before compiling. Where every layout
// conversion stays in registers (4 warps), the shared-memory estimate is the
// compiler's own figure; elsewhere it is a lower bound, and the tuner checks
// the compiled figure too.
TEST(Tuning, CandidateEstimatesMatchTheCompiler) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = 1024;
  s.headDim = 128;
  auto cands = kernels::attentionCandidates(s);
  // 36 mma.sync, 24 wgmma, 2 with a producer warpgroup and ping-pong, 2 more
  // with P·V overlapped
  EXPECT_EQ(cands.size(), 64u);
  int checked = 0;
  for (const TuneCandidate &c : cands) {
    if (c.config.find("warps=8") != std::string::npos ||
        c.config.find("reloadIds=1") != std::string::npos)
      continue; // same shared memory as their warps=4, reload=0 twins
    if (c.config.find("blockN=128") != std::string::npos)
      continue; // keep the test short
    CompiledKernel k = compileForGpu(c.build());
    EXPECT_EQ(k.sharedBytes, c.sharedBytes) << c.config;
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}
