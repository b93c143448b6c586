//===- GemmConfigsCodegenTest.cpp - the GEMM's tuning candidates ----------===//
//
// Every Config kiln.linear's autotuner may pick on Hopper compiles for
// sm_90a with the shape classes an LM head meets (N a multiple of 16, and
// N = 50257, whose rows rule TMA out for B and C), assembles (without spills
// for the first), fits the shared memory and holds the CTAs per SM it asks
// for. No GPU needed.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Tunables.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(Codegen, EveryHopperGemmConfigAssembles) {
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  for (bool ragged : {false, true})
    for (const auto &[name, config] : kernels::gemmConfigs(90)) {
      SCOPED_TRACE(name + (ragged ? " (N = 50257)" : ""));
      GpuTarget target{.arch = "sm_90a"};
      target.scalarClasses["M"] = target.scalarClasses["K"] =
          ScalarClass::DivisibleBy16;
      target.scalarClasses["N"] =
          ragged ? ScalarClass::Any : ScalarClass::DivisibleBy16;
      if (ragged) // rows of 50257 elements: B's and C's are not 16-byte
        target.unalignedTensors = {"B", "C"};
      CompiledKernel c = compileForGpu(
          kernels::gemm({1, 1, 1, DType::bf16, DType::bf16}, config), target);
      EXPECT_LE(c.sharedBytes, sharedMemoryLimit("sm_90a"));
      Assembled a = assembleWithPtxas(c);
      if (!ragged) // N = 50257 spills 8-44 bytes (B by element loads)
        EXPECT_EQ(a.spillStoreBytes, 0);
      Occupancy o = estimateOccupancy("sm_90a", c.threads, a.registers,
                                      c.sharedBytes);
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
}
