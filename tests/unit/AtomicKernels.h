//===- AtomicKernels.h - DSL kernels that combine into shared outputs -*- C++
//-*-===//
//
// Shared by the CPU and GPU tests of atomicAdd/Max/Min: every program of the
// grid combines its rows into the same output elements.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_ATOMICKERNELS_H
#define KILN_TESTS_ATOMICKERNELS_H

#include "kiln/dsl/Dsl.h"

namespace kiln::test {

/// Y[c] += sum over rows of X[r, c] (f32), and Hi[c] / Lo[c] combined with
/// the max / min over rows of I[r, c] (i32), for R x C inputs with run-time
/// R and C: programs of 16 rows and 32 columns, a ragged edge masked.
inline Kernel columnReductions() {
  using namespace kiln::dsl;
  KernelBuilder k("column_reductions");
  Index R = k.scalarArg("R"), C = k.scalarArg("C");
  auto X = k.tensorArg("X", f32, {R, C});
  auto I = k.tensorArg("I", i32, {R, C});
  auto Y = k.tensorArg("Y", f32, {C});
  auto Hi = k.tensorArg("Hi", i32, {C});
  auto Lo = k.tensorArg("Lo", i32, {C});
  k.setGrid({cdiv(R, 16), cdiv(C, 32)});
  Index r0 = programId(0) * 16, c0 = programId(1) * 32;
  atomicAdd(Y.block({c0}), reduceSum(load(X.block({r0, c0}, {16, 32})), 0));
  // Rows past R read as the padding, which must not win.
  Tile hi = reduceMax(load(I.block({r0, c0}, {16, 32}), -2147483648.0), 0);
  Tile lo = reduceMin(load(I.block({r0, c0}, {16, 32}), 2147483647.0), 0);
  atomicMax(Hi.block({c0}), hi);
  atomicMin(Lo.block({c0}), lo);
  return k.finish();
}

} // namespace kiln::test

#endif // KILN_TESTS_ATOMICKERNELS_H
