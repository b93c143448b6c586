//===- RowSumKernel.h - a DSL kernel with run-time integer arguments -------===//
//
// Shared by the CPU and GPU tests of KernelBuilder::scalarArg.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_ROWSUMKERNEL_H
#define KILN_TESTS_ROWSUMKERNEL_H

#include "kiln/dsl/Dsl.h"

namespace kiln::test {

/// Y[r] = sum of X[r, first .. first + n) for an R x C tensor X, in programs
/// of 16 rows and 64-column blocks: n and first are run-time arguments (a
/// loop bound, a loop start and a mask).
inline Kernel rowSumOfRange(int64_t R, int64_t C) {
  using namespace kiln::dsl;
  constexpr int64_t BR = 16, BC = 64;
  KernelBuilder k("row_sum_of_range", {R / BR});
  Index n = k.scalarArg("n");
  Index first = k.scalarArg("first");
  auto X = k.tensorArg("X", f32, {R, C});
  auto Y = k.tensorArg("Y", f32, {R});
  Index r0 = programId(0) * BR;
  Tile acc = zeros({BR}, f32);
  forRange(first, first + n, BC, carry(acc), [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC}));
    x = where(row(arange(BC) + c0) < first + n, x, 0.0);
    acc = acc + reduceSum(x, 1);
  });
  store(Y.block({r0}), acc);
  return k.finish();
}

/// Y[r] = sum of the row X[r, :] of an R x C tensor whose R and C are
/// run-time arguments (the tensors' dimensions, bound from their shapes):
/// programs of 16 rows on a grid of cdiv(R, 16), 64-column blocks.
inline Kernel rowSums() {
  using namespace kiln::dsl;
  constexpr int64_t BR = 16, BC = 64;
  KernelBuilder k("row_sums");
  Index R = k.scalarArg("R"), C = k.scalarArg("C");
  auto X = k.tensorArg("X", f32, {R, C});
  auto Y = k.tensorArg("Y", f32, {R});
  k.setGrid({cdiv(R, BR)});
  Index r0 = programId(0) * BR;
  Tile acc = zeros({BR}, f32);
  forRange(0, C, BC, carry(acc), [&](Index c0) {
    acc = acc + reduceSum(load(X.block({r0, c0}, {BR, BC})), 1);
  });
  store(Y.block({r0}), acc);
  return k.finish();
}

/// Y[r] = sum of X[r, 0 .. n) for an R x C tensor X whose rows are whole
/// 64-column blocks (C a run-time multiple of `multipleOf`, at least n when
/// `atLeast`): programs of 16 rows, 64-column blocks from 0 to n. With both,
/// a block that starts below n lies within its row (IndexFacts.cpp).
inline Kernel rowPrefixSums(int64_t multipleOf = 64, bool atLeast = true,
                            int64_t startColumn = 0) {
  using namespace kiln::dsl;
  constexpr int64_t BR = 16, BC = 64;
  KernelBuilder k("row_prefix_sums");
  Index R = k.scalarArg("R"), C = k.scalarArg("C", multipleOf),
        n = k.scalarArg("n");
  if (atLeast)
    k.requireAtLeast(C, n);
  auto X = k.tensorArg("X", f32, {R, C});
  auto Y = k.tensorArg("Y", f32, {R});
  k.setGrid({cdiv(R, BR)});
  Index r0 = programId(0) * BR;
  Tile acc = zeros({BR}, f32);
  forRange(startColumn, n, BC, carry(acc), [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC}));
    acc = acc + reduceSum(where(row(arange(BC) + c0) < n, x, 0.0), 1);
  });
  store(Y.block({r0}), acc);
  return k.finish();
}

/// A grid of 2 x R programs, R a run-time argument (which may pass the
/// GPU's 65535 along y): program (x, y) writes 2y + x to Y's row y, columns
/// 16x to 16x + 15, and numPrograms(1) to the same place of P. Y and P have
/// `rows` rows, more than any R the caller passes: a program past R that
/// ran would write row R.
inline Kernel programIdsOfARunTimeGrid(int64_t rows) {
  using namespace kiln::dsl;
  KernelBuilder k("program_ids");
  Index R = k.scalarArg("R");
  k.setGrid({Index(2), R});
  auto Y = k.tensorArg("Y", i32, {rows, 32});
  auto P = k.tensorArg("P", i32, {rows, 32});
  Index x = programId(0), y = programId(1);
  store(Y.block({y, x * 16}, {1, 16}), splat(y * 2 + x, {1, 16}));
  store(P.block({y, x * 16}, {1, 16}), splat(numPrograms(1), {1, 16}));
  return k.finish();
}

} // namespace kiln::test

#endif // KILN_TESTS_ROWSUMKERNEL_H
