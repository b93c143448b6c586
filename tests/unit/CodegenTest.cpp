//===- CodegenTest.cpp - what the GPU compiler emits (no GPU needed) ------===//
#include "CodegenUtil.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Softmax.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <thread>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

static std::set<std::string> globalStoreForms(const std::string &ptx) {
  std::set<std::string> forms;
  std::regex re(R"(st\.global(\.[a-z0-9]+)+)");
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), re);
       it != std::sregex_iterator(); ++it)
    forms.insert(it->str());
  return forms;
}

using test::countOf;
using test::reportOf;
using test::selfAttention;

// Fusion: S and P stay on chip. The attention kernel's only global stores
// are O (16-bit) and the logsumexp (32-bit), and its dots are tensor-core
// instructions: the default schedule's wgmma on sm_90a, mma.sync on sm_80.
TEST(Codegen, AttentionIsOneFusedKernel) {
  for (const char *arch : {"sm_80", "sm_90a"}) {
    kernels::AttentionShape s = selfAttention(4096, 128, false);
    // The default Config is Hopper's (225 KB of shared memory at D=128):
    // sm_80 takes the mma.sync one.
    kernels::AttentionConfig config;
    if (std::string(arch) == "sm_80")
      config.wgmma = 0;
    CompiledKernel c =
        compileForGpu(kernels::attentionForward(s, config), {arch, 0});
    EXPECT_THAT(c.ptx, HasSubstr(std::string(".target ") + arch));
    EXPECT_GT(countOf(c.ptx, std::string(arch) == "sm_80"
                                 ? "mma.sync.aligned.m16n8k16.row.col.f32."
                                   "bf16.bf16.f32"
                                 : "wgmma.mma_async.sync.aligned.m64n"),
              0u);
    EXPECT_THAT(c.ptx, HasSubstr("ex2.approx.ftz.f32"));
    EXPECT_THAT(c.ptx, HasSubstr("shfl.sync.bfly"));
    std::set<std::string> forms = globalStoreForms(c.ptx);
    for (const std::string &f : forms)
      EXPECT_TRUE(f == "st.global.b16" || f == "st.global.v2.b16" ||
                  f == "st.global.b32" || f == "st.global.f32")
          << "unexpected global store " << f;
    EXPECT_FALSE(forms.empty());
    // O's column pairs (adjacent in both accumulator layouts) leave as one
    // 4-byte store, not two 2-byte ones.
    EXPECT_EQ(forms.count("st.global.b16"), 0u) << arch;
    // Every global store writes O or LSE: count the distinct destinations by
    // parameter: O is parameter 19, LSE 24 (after B, H, Nq, Nk and Q, K, V
    // with their strides); S and P have none.
    EXPECT_EQ(c.params[19].name, "O");
    EXPECT_EQ(c.params[24].name, "LSE");
  }
}

TEST(Codegen, PtxAssemblesWithPtxas) {
  if (std::system("command -v ptxas > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED: ptxas is not on the PATH";
  kernels::AttentionShape s = selfAttention(1000, 64, true);
  kernels::AttentionConfig wg{.warps = 8, .wgmma = 1};
  kernels::GemmConfig gemmWg{
      .blockM = 128, .blockN = 128, .blockK = 64, .warps = 8, .wgmma = true};
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const Kernel &k :
         {kernels::attentionForward(s), kernels::gemm({256, 256, 256}),
          kernels::softmax({100, 1000, DType::bf16}),
          kernels::attentionForward(s, wg),
          kernels::gemm({256, 256, 256}, gemmWg)}) {
      CompiledKernel c = compileForGpu(k, {arch, 0});
      std::string path =
          ::testing::TempDir() + "kiln_" + c.name + "_" + arch + ".ptx";
      std::ofstream(path) << c.ptx;
      std::string cmd =
          std::string("ptxas -arch=") + arch + " " + path + " -o /dev/null";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
}

// kiln's short LLVM pipeline against LLVM's O3: the same memory traffic,
// tensor-core and transcendental work in every kernel; at most a few percent
// of other instructions more (address arithmetic).
TEST(Codegen, KilnLlvmPipelineDoesO3sWork) {
  // Ragged: the masked paths too.
  kernels::AttentionShape s = selfAttention(1000, 128, true);
  for (const Kernel &k :
       {kernels::attentionForward(s), kernels::gemm({256, 256, 256}),
        kernels::softmax({100, 1000, DType::bf16})}) {
    CompiledKernel kiln = compileForGpu(k, {.llvmPipeline = "kiln"}),
                   o3 = compileForGpu(k, {.llvmPipeline = "O3"});
    for (const char *op :
         {"mma.sync", "ldmatrix", "cp.async.cg", "ld.global", "st.global",
          "st.shared", "ld.shared", "ex2.approx", "shfl.sync", "bar.sync"})
      EXPECT_EQ(countOf(kiln.ptx, op), countOf(o3.ptx, op))
          << k.name() << ": " << op;
    size_t lines = countOf(kiln.ptx, "\n"), o3Lines = countOf(o3.ptx, "\n");
    EXPECT_LT(lines, o3Lines * 105 / 100) << k.name();
  }
}

// What no GPU of the architecture can run is rejected when compiling, with
// the numbers.
TEST(Codegen, SchedulesThatCannotFitAreRejected) {
  kernels::AttentionConfig deep;
  deep.stages = 8;
  EXPECT_THAT(test::errorOf([&] {
                compileForGpu(kernels::attentionForward(
                                  selfAttention(4096, 128, false), deep),
                              {"sm_90a"});
              }),
              HasSubstr("bytes of shared memory per block; sm_90a allows "
                        "232448 (8 pipeline stages, 8 warps)"));
  EXPECT_THAT(test::errorOf([&] {
                compileForGpu(
                    kernels::attentionForward(selfAttention(4096, 128, false)),
                    {"sm_80"});
              }),
              HasSubstr("sm_80 allows 166912"));
}

// Compiles of different kernels on several threads at once give what each
// gives alone (the optimized IR is printed from a module in its own context
// while the backend runs).
TEST(Codegen, ConcurrentCompilesAgreeWithSerialOnes) {
  std::vector<std::function<Kernel()>> builds = {
      [] { return kernels::attentionForward(selfAttention(1024, 128, true)); },
      [] { return kernels::attentionForward(selfAttention(777, 64, false)); },
      [] {
        return kernels::gemm({512, 256, 128});
      },
      [] {
        return kernels::softmax({100, 1000});
      }};
  std::vector<std::string> ptx(builds.size()), ir(builds.size());
  for (size_t i = 0; i < builds.size(); ++i) {
    CompiledKernel c = compileForGpu(builds[i]());
    ptx[i] = c.ptx;
    ir[i] = c.llvmIR.str();
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<CompiledKernel> out(2 * builds.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < out.size(); ++t)
      threads.emplace_back(
          [&, t] { out[t] = compileForGpu(builds[t % builds.size()]()); });
    for (std::thread &t : threads)
      t.join();
    for (size_t t = 0; t < out.size(); ++t) {
      EXPECT_EQ(out[t].ptx, ptx[t % builds.size()]) << t;
      EXPECT_EQ(out[t].llvmIR.str(), ir[t % builds.size()]) << t;
    }
  }
}

TEST(Codegen, UnsupportedShapesAreNamed) {
  EXPECT_THAT(
      test::errorOf([] {
        compileForGpu(kernels::gemm({64, 64, 64, DType::f32, DType::f32}));
      }),
      HasSubstr("f32 dots are not supported on the GPU yet"));
  EXPECT_THAT(test::errorOf([] {
                compileForGpu(kernels::gemm({64, 64, 64}), {"sm_75", 0});
              }),
              HasSubstr("target sm_75 is not supported"));
  EXPECT_THAT(test::errorOf([] {
                compileForGpu(kernels::gemm({64, 64, 64}),
                              {.arch = "sm_90a", .numStages = 1});
              }),
              HasSubstr("pipeline stages must be in [2, 8], got 1"));
  EXPECT_THAT(
      test::errorOf([] {
        compileForGpu(kernels::gemm({64, 64, 64}), {.llvmPipeline = "O4"});
      }),
      HasSubstr("LLVM pipeline 'O4' is not one of kiln, O1, O2, O3"));
}

TEST(Codegen, JitCacheKeysOnIrAndTarget) {
  CompileCacheStats before = compileCacheStats();
  kernels::GemmShape s{96, 64, 64};
  auto a = compileCached(kernels::gemm(s));
  auto b = compileCached(kernels::gemm(s)); // built again, alike: a hit
  EXPECT_EQ(a.get(), b.get());
  auto c = compileCached(kernels::gemm(s), {.arch = "sm_80"}); // other target
  EXPECT_NE(a.get(), c.get());
  EXPECT_NE(compileCacheKey(kernels::gemm(s), {}),
            compileCacheKey(kernels::gemm(s), {.llvmPipeline = "O3"}));
  s.K = 128; // another shape: the same run-time-shape kernel, a hit
  auto d = compileCached(kernels::gemm(s));
  EXPECT_EQ(a.get(), d.get());
  // Compiled in, each shape is a kernel of its own.
  auto e = compileCached(kernels::gemm(s, {.staticShapes = true}));
  s.K = 64;
  auto f = compileCached(kernels::gemm(s, {.staticShapes = true}));
  EXPECT_NE(e.get(), f.get());
  EXPECT_NE(a.get(), e.get());
  CompileCacheStats after = compileCacheStats();
  EXPECT_EQ(after.hits - before.hits, 2);
  // Compiled, or found on disk by an earlier run.
  EXPECT_EQ(after.misses + after.diskHits - before.misses - before.diskHits, 4);
}
