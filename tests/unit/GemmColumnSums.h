//===- GemmColumnSums.h - a GEMM whose epilogue needs shared memory -*- C++
//-*-===//
//
// Shared by the codegen and GPU tests: a GEMM on the 128x256x64 schedule of
// `kiln bench gemm` whose epilogue needs shared memory of its own: column
// sums (partial sums across warps go through the scratch area) and, with
// `tmaStore`, C through a staging tile.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_GEMMCOLUMNSUMS_H
#define KILN_TESTS_GEMMCOLUMNSUMS_H

#include "kiln/dsl/Dsl.h"

namespace kiln::test {

/// C (M, N) bf16 = A (M, K) · B (K, N), and with `sums` S (N) f32 += the
/// column sums of the f32 product; `transposed`: C (N, M) holds the
/// product's transpose (its tile moves between layouts through the scratch
/// area: 64 KB).
inline Kernel gemmWithColumnSums(bool sums, bool tmaStore,
                                 bool persistent = false, int stages = 3,
                                 bool dynamicTiles = false,
                                 bool transposed = false) {
  using namespace kiln::dsl;
  const int64_t BM = 128, BN = 256, BK = 64;
  KernelBuilder k("gemm_column_sums");
  Index M = k.scalarArg("M"), N = k.scalarArg("N"), K = k.scalarArg("K");
  k.setGrid({cdiv(M, BM), cdiv(N, BN)});
  k.setWarps(8);
  k.setStages(stages);
  k.setWgmma(true);
  k.setTma(true);
  k.setTmaStores(tmaStore);
  k.setWarpSpecialize(true);
  k.setPersistent(persistent);
  k.setDynamicTiles(dynamicTiles);
  auto A = k.tensorArg("A", DType::bf16, {M, K});
  auto B = k.tensorArg("B", DType::bf16, {K, N});
  auto C = transposed ? k.tensorArg("C", DType::bf16, {N, M})
                      : k.tensorArg("C", DType::bf16, {M, N});
  auto S = k.tensorArg("S", DType::f32, {N});
  Index m0 = programId(0) * BM, n0 = programId(1) * BN;
  Tile acc = zeros({BM, BN}, f32);
  forRange(0, K, BK, carry(acc), [&](Index k0) {
    acc = dot(load(A.block({m0, k0}, {BM, BK})),
              load(B.block({k0, n0}, {BK, BN})), acc);
  });
  if (transposed)
    store(C.block({n0, m0}), transpose(acc.to(bf16)));
  else
    store(C.block({m0, n0}), acc.to(bf16));
  if (sums)
    atomicAdd(S.block({n0}, {BN}), reduceSum(acc, 0));
  return k.finish();
}

} // namespace kiln::test

#endif // KILN_TESTS_GEMMCOLUMNSUMS_H
