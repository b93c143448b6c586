//===- PersistentCodegenTest.cpp - persistent CTAs' tile loop -------------===//
//
// What the GPU compiler emits for a persistent kernel's loop over programs
// (no GPU needed), on a kernel of no library's: a GEMM whose C goes out from
// registers, so that its stores' addresses come from the thread id.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/dsl/Dsl.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::countOf;

/// C (M, N) bf16 = A (M, K) · B (K, N) in 128x128 programs on persistent
/// CTAs beside a producer warpgroup, C stored from registers.
static Kernel persistentGemm(bool fresh) {
  using namespace kiln::dsl;
  const int64_t BM = 128, BN = 128, BK = 64;
  KernelBuilder k("persistent_gemm");
  Index M = k.scalarArg("M"), N = k.scalarArg("N"), K = k.scalarArg("K");
  k.setGrid({cdiv(M, BM), cdiv(N, BN)});
  k.setWarps(8);
  k.setStages(2);
  k.setWgmma(true);
  k.setTma(true);
  k.setWarpSpecialize(true);
  k.setReloadThreadIds(true);
  k.setPersistent(true);
  k.setDynamicTiles(true);
  k.setFreshProgramValues(fresh);
  auto A = k.tensorArg("A", DType::bf16, {M, K});
  auto B = k.tensorArg("B", DType::bf16, {K, N});
  auto C = k.tensorArg("C", DType::bf16, {M, N});
  Index m0 = programId(0) * BM, n0 = programId(1) * BN;
  Tile acc = zeros({BM, BN}, f32);
  forRange(0, K, BK, carry(acc), [&](Index k0) {
    acc = dot(load(A.block({m0, k0}, {BM, BK})),
              load(B.block({k0, n0}, {BK, BN})), acc);
  });
  store(C.block({m0, n0}), acc.to(bf16));
  return k.finish();
}

// With fresh program values each tile's body takes the thread id and every
// scalar and pointer argument through an opaque move (inline asm), the
// statements after its loop the thread id again; without, none of that. Both
// lower (the values a tile defines are not used past it) and assemble.
TEST(Codegen, FreshProgramValuesPerTile) {
  const GpuTarget hopper{"sm_90a", 0};
  CompiledKernel plain = compileForGpu(persistentGemm(false), hopper);
  CompiledKernel fresh = compileForGpu(persistentGemm(true), hopper);
  const size_t arguments = 6; // M, N, K, A, B, C
  EXPECT_GE(countOf(fresh.ptx, "begin inline asm"),
            countOf(plain.ptx, "begin inline asm") + arguments + 2);
  // (Plain: the kernel entry's read and the loop's; fresh: the tile's, the
  // loop's and the one after it.)
  EXPECT_GT(countOf(fresh.ptx, "%tid.x"), countOf(plain.ptx, "%tid.x"));
  EXPECT_GE(countOf(fresh.ptx, "mov.b64"), 3u); // the three pointers
  if (!findCudaTool("ptxas"))
    GTEST_SKIP() << "SKIPPED: ptxas (CUDA toolkit) not installed";
  EXPECT_EQ(assembleWithPtxas(fresh).spillStoreBytes, 0);
  assembleWithPtxas(plain);
}
