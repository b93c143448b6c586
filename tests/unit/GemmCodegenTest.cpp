//===- GemmCodegenTest.cpp - what the GEMM compiles to (no GPU needed) ----===//
//
// The GEMM's fused epilogues (bias, GELU, residual, column sums) and where
// their buffers go in shared memory; every Config kiln.linear's autotuner
// may pick on Hopper, compiled for the shape classes an LM head meets (N a
// multiple of 16, and N = 50257, whose rows rule TMA out for B and C):
// assembled (without spills for the first), within the shared memory, with
// the CTAs per SM it asks for; kiln.linear's tuning key.
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "GemmColumnSums.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Tunables.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::reportOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

/// `kiln bench gemm`'s blocks (128x256x64, wgmma, TMA, a producer
/// warpgroup; one tile a CTA, C from registers) and a Hopper target with M,
/// N and K multiples of 16.
static kernels::GemmConfig benchGemmConfig() {
  return {.blockM = 128,
          .blockN = 256,
          .blockK = 64,
          .warps = 8,
          .stages = 3,
          .wgmma = true,
          .warpSpecialize = true};
}
static GpuTarget hopperGemmTarget() {
  GpuTarget target{.arch = "sm_90a"};
  for (const char *dim : {"M", "N", "K"})
    target.scalarClasses[dim] = ScalarClass::DivisibleBy16;
  return target;
}

// A GEMM epilogue of bias and GELU converts nothing of the accumulator and
// adds no shared memory (issue 21 measured 279552 bytes, past the H200's
// 232448, when the 128x256 fp32 accumulator went through shared memory). The
// bias row is loaded blocked, each element once, and moves to the slice of
// the accumulator's layout through 512 bytes of shared memory that the stage
// ring no longer uses: loaded in that slice (64 registers, each element in 64
// threads) it took 32 loads a thread after the loop (kiln bench gemm, H200,
// 8192x50264x768: 1.41 ms against 1.18).
TEST(Codegen, GemmEpilogueAddsNoSharedMemory) {
  const kernels::GemmConfig big = benchGemmConfig();
  const GpuTarget target = hopperGemmTarget();
  auto compile = [&](bool bias, kernels::GemmActivation act) {
    return compileForGpu(
        kernels::gemm({8192, 8192, 8192, DType::bf16, DType::bf16, bias, act},
                      big),
        target);
  };
  CompiledKernel plain = compile(false, kernels::GemmActivation::None),
                 fused = compile(true, kernels::GemmActivation::GeluTanh);
  EXPECT_EQ(fused.sharedBytes, plain.sharedBytes);
  EXPECT_LE(fused.sharedBytes, sharedMemoryLimit("sm_90a"));
  EXPECT_THAT(fused.layouts, Not(ContainsRegex("convert_layout[^\n]*128x256")));
  EXPECT_THAT(fused.layouts,
              ContainsRegex("convert_layout %[0-9]+ : tensor<256xbf16, "
                            "#blocked[0-9]*> -> tensor<256xbf16, #mma1>"));
  EXPECT_THAT(fused.layouts,
              HasSubstr("of them through shared memory (not ldmatrix, not "
                        "register renames): 1"));
  // Through shared memory as vectors: each thread's column pairs in one
  // 4-byte read, not two 2-byte ones.
  EXPECT_THAT(fused.ptx, HasSubstr("ld.shared.v2.b16"));
  EXPECT_THAT(fused.ptx, Not(HasSubstr("ld.shared.b16")));
  const std::string report = reportOf(fused);
  EXPECT_THAT(report, HasSubstr("load 256: 16-byte vector loads to registers"));
  EXPECT_THAT(report, HasSubstr("scratch of conversions and reductions [1024, "
                                "1536) in the bytes of: stage ring"));
  // Persistent CTAs keep the scratch beside the ring: 512 bytes more.
  kernels::GemmConfig persistent = big;
  persistent.persistent = persistent.tmaStore = true;
  CompiledKernel p =
      compileForGpu(kernels::gemm({8192, 8192, 8192, DType::bf16, DType::bf16,
                                   true, kernels::GemmActivation::GeluTanh},
                                  persistent),
                    target);
  CompiledKernel q = compileForGpu(
      kernels::gemm({8192, 8192, 8192, DType::bf16, DType::bf16}, persistent),
      target);
  EXPECT_EQ(p.sharedBytes, q.sharedBytes + 512) << reportOf(p);
}

// Shared memory is placed by liveness: the epilogue's scratch area and TMA
// staging tile take the stage ring's bytes once the loop is over, so the
// epilogue needs no more than the main loop had (issue 21; before, the
// column sums added 8 KB and the staging tile 64 KB).
TEST(Codegen, EpilogueReusesThePipelineBuffers) {
  const GpuTarget target = hopperGemmTarget();
  CompiledKernel plain =
      compileForGpu(test::gemmWithColumnSums(false, false), target);
  for (bool tmaStore : {false, true}) {
    CompiledKernel c =
        compileForGpu(test::gemmWithColumnSums(true, tmaStore), target);
    std::string report = reportOf(c);
    EXPECT_EQ(c.sharedBytes, plain.sharedBytes) << report;
    EXPECT_THAT(report, HasSubstr(tmaStore ? "[1024, 66560); scratch "
                                             "of conversions and reductions "
                                             "[66560, 74752) in the bytes of: "
                                             "stage ring"
                                           : "scratch of conversions and "
                                             "reductions [1024, 9216) in the "
                                             "bytes of: stage ring"));
  }
  // Persistent CTAs run the body again (the producer fetches the next
  // tile's stages during the epilogue): every buffer lives throughout.
  CompiledKernel p =
      compileForGpu(test::gemmWithColumnSums(true, false, true), target);
  EXPECT_EQ(p.sharedBytes, plain.sharedBytes + 8192) << reportOf(p);
  EXPECT_THAT(reportOf(p), Not(HasSubstr("in the bytes of")));
  EXPECT_THAT(reportOf(p), Not(HasSubstr("placed by liveness within")));
}

// Persistent with 4 stages (192 KB of ring): the 64 KB staging tile does not
// fit beside the ring when every buffer lives across tiles, so the producer
// waits for each tile's end instead and the epilogue takes the ring's bytes:
// no more shared memory than the main loop, and C still goes out by TMA.
TEST(Codegen, PersistentEpilogueWaitsRatherThanGrows) {
  const GpuTarget target = hopperGemmTarget();
  CompiledKernel plain =
      compileForGpu(test::gemmWithColumnSums(false, false, true, 4), target);
  CompiledKernel p =
      compileForGpu(test::gemmWithColumnSums(true, true, true, 4), target);
  const std::string report = reportOf(p);
  EXPECT_EQ(p.sharedBytes, plain.sharedBytes) << report;
  EXPECT_THAT(report, HasSubstr("persistent: each tile's buffers are placed "
                                "by liveness within the tile, and the "
                                "producer fetches a tile's first blocks only "
                                "once the compute warps are done with the "
                                "previous tile (an mbarrier): with every "
                                "buffer live across tiles the kernel needed "
                                "263168 bytes"));
  EXPECT_THAT(report, HasSubstr("store 128x256: TMA"));
  EXPECT_THAT(report, HasSubstr("in the bytes of: stage ring"));
  // Tiles handed out by a counter wait the same way.
  CompiledKernel d = compileForGpu(
      test::gemmWithColumnSums(true, true, true, 4, true), target);
  EXPECT_EQ(d.sharedBytes, plain.sharedBytes) << reportOf(d);
  EXPECT_THAT(reportOf(d), HasSubstr("placed by liveness within the tile"));
  // Where everything fits live across tiles, nothing waits.
  EXPECT_THAT(reportOf(plain), Not(HasSubstr("placed by liveness within")));
}
// A residual tile added in the epilogue is loaded in the accumulator's layout
// (pairs of columns a thread, no element in two threads) rather than loaded
// blocked and moved through shared memory: of the epilogue only the bias row
// goes through shared memory.
TEST(Codegen, GemmResidualEpilogueMovesNothing) {
  const kernels::GemmConfig big = benchGemmConfig();
  const GpuTarget target = hopperGemmTarget();
  CompiledKernel plain = compileForGpu(
      kernels::gemm({8192, 8192, 8192, DType::bf16, DType::bf16}, big), target);
  CompiledKernel fused = compileForGpu(
      kernels::gemm({8192, 8192, 8192, DType::bf16, DType::bf16, true,
                     kernels::GemmActivation::GeluTanh, true},
                    big),
      target);
  EXPECT_EQ(fused.sharedBytes, plain.sharedBytes);
  EXPECT_THAT(fused.layouts,
              HasSubstr("of them through shared memory (not ldmatrix, not "
                        "register renames): 1"));
  EXPECT_THAT(fused.layouts, HasSubstr("tensor<128x256xbf16, #mma"));
  EXPECT_THAT(fused.layouts, Not(ContainsRegex("convert_layout[^\n]*128x256")));
}

// B given as BT (N x K, nn.Linear's weight as stored): its blocks come by
// TMA as B's do and feed wgmma K-major, with no conversion of either
// operand and the shared memory B's kernel has; an N of 50257 leaves BT's
// rows (K elements) aligned, so only C's stores change path.
TEST(Codegen, GemmTransposedWeightTakesTheSamePaths) {
  kernels::GemmConfig c = benchGemmConfig();
  c.persistent = c.tmaStore = true;
  const GpuTarget target = hopperGemmTarget();
  kernels::GemmShape s{8192, 8192, 8192, DType::bf16, DType::bf16};
  CompiledKernel b = compileForGpu(kernels::gemm(s, c), target);
  s.bTransposed = true;
  CompiledKernel bt = compileForGpu(kernels::gemm(s, c), target);
  EXPECT_EQ(bt.sharedBytes, b.sharedBytes);
  const std::string report = reportOf(bt);
  EXPECT_THAT(bt.layouts, HasSubstr("kiln.aligned, kiln.name = \"BT\""));
  EXPECT_THAT(report, HasSubstr("load 256x64: TMA"));
  EXPECT_THAT(report, HasSubstr("B descriptor, K-major shared memory"));
  EXPECT_THAT(bt.layouts,
              HasSubstr("of them through shared memory (not ldmatrix, not "
                        "register renames): 0"));
}

// Split-K on Hopper: each range's tile is added into C by a TMA reduction
// (cp.reduce.async.bulk.tensor add) from the staging tile, with no more
// shared memory or registers than the plain kernel and no spills.
TEST(Codegen, GemmSplitKAddsByTmaReduction) {
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  kernels::GemmConfig c = benchGemmConfig();
  c.persistent = c.tmaStore = true;
  c.groupM = 16;
  kernels::GemmShape s{768, 3072, 8192, DType::bf16, DType::f32};
  s.aTransposed = true; // a weight gradient's X^T·dZ
  CompiledKernel plain = compileForGpu(kernels::gemm(s, c), hopperGemmTarget());
  c.splitK = 4;
  CompiledKernel split = compileForGpu(kernels::gemm(s, c), hopperGemmTarget());
  EXPECT_THAT(reportOf(split), HasSubstr("atomic sum 128x256: TMA reduction "
                                         "(cp.reduce.async.bulk.tensor add"));
  EXPECT_THAT(split.ptx, HasSubstr("cp.reduce.async.bulk.tensor"));
  EXPECT_EQ(split.sharedBytes, plain.sharedBytes);
  Assembled a = assembleWithPtxas(split);
  EXPECT_EQ(a.spillStoreBytes, 0);
  EXPECT_LE(a.registers, assembleWithPtxas(plain).registers);
}

// Split-K partials on Hopper, every Config kiln.linear tunes them over: a
// range's tile goes to its own slice of C (S, M, N) by TMA stores, with no
// more shared memory than the plain kernel and no spills.
TEST(Codegen, GemmSplitPartialsStoreByTma) {
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  kernels::GemmShape s{768, 768, 16384, DType::bf16, DType::f32};
  s.aTransposed = true;
  for (const auto &[name, base] : kernels::gemmConfigs(90)) {
    if (base.persistent)
      continue;
    SCOPED_TRACE(name);
    kernels::GemmConfig c = base;
    s.splitPartials = false;
    CompiledKernel plain =
        compileForGpu(kernels::gemm(s, c), hopperGemmTarget());
    s.splitPartials = true;
    c.splitK = 3;
    CompiledKernel split =
        compileForGpu(kernels::gemm(s, c), hopperGemmTarget());
    EXPECT_THAT(split.ptx, HasSubstr("cp.async.bulk.tensor.3d.global.shared"));
    EXPECT_LE(split.sharedBytes, plain.sharedBytes);
    EXPECT_EQ(assembleWithPtxas(split).spillStoreBytes, 0);
  }
  // sm_80's Configs (mma.sync) store the partials from registers.
  for (const auto &[name, base] : kernels::gemmConfigs(80)) {
    SCOPED_TRACE(name + " sm_80");
    kernels::GemmConfig c = base;
    c.splitK = 3;
    CompiledKernel split = compileForGpu(kernels::gemm(s, c), {"sm_80", 0});
    EXPECT_THAT(split.ptx, HasSubstr("mma.sync.aligned.m16n8k16"));
    EXPECT_THAT(split.ptx, HasSubstr("st.global"));
    EXPECT_EQ(assembleWithPtxas(split).spillStoreBytes, 0);
  }
}

TEST(Codegen, EveryHopperGemmConfigAssembles) {
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  for (bool bT : {false, true})
    for (bool ragged : {false, true})
      for (const auto &[name, config] : kernels::gemmConfigs(90)) {
        SCOPED_TRACE(name + (ragged ? " (N = 50257)" : "") + (bT ? " BT" : ""));
        GpuTarget target{.arch = "sm_90a"};
        target.scalarClasses["M"] = target.scalarClasses["K"] =
            ScalarClass::DivisibleBy16;
        target.scalarClasses["N"] =
            ragged ? ScalarClass::Any : ScalarClass::DivisibleBy16;
        // Rows of 50257 elements: B's and C's are not 16-byte aligned
        // (BT's rows are K long).
        if (ragged)
          target.unalignedTensors = {bT ? "C" : "B", "C"};
        kernels::GemmShape shape{1, 1, 1, DType::bf16, DType::bf16};
        shape.bTransposed = bT;
        CompiledKernel c = compileForGpu(kernels::gemm(shape, config), target);
        EXPECT_LE(c.sharedBytes, sharedMemoryLimit("sm_90a"));
        Assembled a = assembleWithPtxas(c);
        if (!ragged) { // N = 50257 spills 8-44 bytes (B by element loads)
          EXPECT_EQ(a.spillStoreBytes, 0);
        }
        Occupancy o =
            estimateOccupancy("sm_90a", c.threads, a.registers, c.sharedBytes);
        EXPECT_GE(o.blocksPerSM, std::max(1, config.minBlocksPerSM))
            << o.limiter;
      }
}

// The epilogue is in kiln.linear's tuning key: a GELU's best schedule is not
// the plain GEMM's, and neither may take the other's record.
TEST(Codegen, LinearKeyNamesTheEpilogue) {
  using kernels::GemmActivation;
  EXPECT_EQ(kernels::linearKey(8192, 50264, 768, false, GemmActivation::None),
            "M=2^13 N=50264 K=768 bf16 epilogue=none");
  EXPECT_EQ(
      kernels::linearKey(8000, 50264, 768, true, GemmActivation::GeluTanh),
      "M=2^13 N=50264 K=768 bf16 epilogue=bias+gelu");
  EXPECT_EQ(kernels::linearKey(64, 64, 64, false, GemmActivation::Relu),
            "M=2^6 N=64 K=64 bf16 epilogue=relu");
  EXPECT_EQ(kernels::linearKey(64, 64, 64, true, GemmActivation::None),
            "M=2^6 N=64 K=64 bf16 epilogue=bias");
  // A weight given as BT (nn.Linear's layout) tunes on its own.
  EXPECT_EQ(kernels::linearKey(8192, 50257, 768, false, GemmActivation::None,
                               {.bTransposed = true}),
            "M=2^13 N=50257 K=768 bf16 epilogue=none B=NxK");
  // So do the backward's GEMMs: X^T·dZ with A as AT, and a forward that
  // keeps the pre-activation for the gradient.
  EXPECT_EQ(kernels::linearKey(768, 3072, 8192, false, GemmActivation::None,
                               {.aTransposed = true}),
            "M=2^10 N=3072 K=8192 bf16 epilogue=none A=KxM");
  EXPECT_EQ(kernels::linearKey(8192, 3072, 768, true, GemmActivation::GeluTanh,
                               {.bTransposed = true, .preActivation = true}),
            "M=2^13 N=3072 K=768 bf16 epilogue=bias+gelu B=NxK +Z");
  // Split-K partials are their own kernel (C is (S, M, N) fp32).
  EXPECT_EQ(kernels::linearKey(768, 768, 16384, false, GemmActivation::None,
                               {.aTransposed = true, .splitK = 3}),
            "M=2^10 N=768 K=16384 bf16 epilogue=none A=KxM split=3");
  kernels::LinearLayout epilogue{.splitK = 2};
  EXPECT_THROW(kernels::linearTuned(true, GemmActivation::None, 90, epilogue),
               Error);
}

// Split-K where whole waves of 128x128 tiles leave SMs idle: the fewest
// ranges that fill 80% of their waves (132 SMs: the weight gradients of a
// GPT layer of 768 over 16384 tokens), never a range under 1024 of K.
TEST(Codegen, LinearSplitKFillsTheWaves) {
  EXPECT_EQ(kernels::linearSplitK(768, 768, 16384, 132), 3);  // 36 tiles
  EXPECT_EQ(kernels::linearSplitK(3072, 768, 16384, 132), 3); // 144
  EXPECT_EQ(kernels::linearSplitK(2304, 768, 16384, 132), 1); // 108: 82%
  EXPECT_EQ(kernels::linearSplitK(1024, 768, 4100, 132), 2);  // 48: 36% -> 73%
  EXPECT_EQ(kernels::linearSplitK(16384, 768, 3072, 132), 1); // 768 tiles
  EXPECT_EQ(kernels::linearSplitK(768, 768, 2047, 132), 1);   // K short
  EXPECT_EQ(kernels::linearSplitK(128, 128, 4096, 132), 1);   // K / 4 < 1024
  EXPECT_EQ(kernels::linearSplitK(768, 768, 16384, 0), 1);
}
