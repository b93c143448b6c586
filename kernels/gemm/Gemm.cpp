//===- Gemm.cpp - tiled matrix multiply in kiln's DSL ---------------------===//
#include "kiln/kernels/Gemm.h"
#include "kiln/dsl/Dsl.h"

using namespace kiln::dsl;

namespace kiln::kernels {

Kernel gemm(const GemmShape &s, const GemmConfig &c) {
  if (s.M < 1 || s.N < 1 || s.K < 1)
    throw Error("gemm: M, N and K must be >= 1");
  if (!isFloat(s.dtype) || !isFloat(s.outDtype))
    throw Error("gemm: dtypes must be float types");

  KernelBuilder k("gemm", {cdiv(s.M, c.blockM), cdiv(s.N, c.blockN)});
  k.setWarps(c.warps);
  k.setStages(c.stages);
  k.setWgmma(c.wgmma);
  k.setTma(c.wgmma && c.tma);
  k.setWarpSpecialize(c.wgmma && c.warpSpecialize);
  auto A = k.tensorArg("A", s.dtype, {s.M, s.K});
  auto B = k.tensorArg("B", s.dtype, {s.K, s.N});
  auto C = k.tensorArg("C", s.outDtype, {s.M, s.N});

  Index m0 = programId(0) * c.blockM, n0 = programId(1) * c.blockN;
  Tile acc = zeros({c.blockM, c.blockN}, f32);
  // Out-of-range rows and columns of A and B read 0 and add nothing.
  forRange(0, s.K, c.blockK, carry(acc), [&](Index k0) {
    Tile a = load(A.block({m0, k0}, {c.blockM, c.blockK}));
    Tile b = load(B.block({k0, n0}, {c.blockK, c.blockN}));
    acc = dot(a, b, acc);
  });
  store(C.block({m0, n0}), acc.to(s.outDtype));
  return k.finish();
}

} // namespace kiln::kernels
