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
#include "kiln/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <algorithm>

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

/// columnReductions' tensors for an R x C problem: random inputs, and
/// outputs that start from values the combine must keep (Y: 1.5 to add to;
/// Hi, Lo: values every column's max and min pass).
struct ColumnReductionsData {
  HostTensor x, i, y, hi, lo;
  ColumnReductionsData(int64_t R, int64_t C)
      : x(DType::f32, {R, C}), i(DType::i32, {R, C}), y(DType::f32, {C}),
        hi(DType::i32, {C}), lo(DType::i32, {C}) {
    x.fillRandom(uint64_t(R * 131 + C), -1, 1);
    for (int64_t n = 0; n < R * C; ++n)
      ints(i)[n] = int32_t((uint64_t(n) * 2654435761u) % 2001) - 1000;
    for (int64_t c = 0; c < C; ++c) {
      static_cast<float *>(y.data())[c] = 1.5f;
      ints(hi)[c] = -5000;
      ints(lo)[c] = 5000;
    }
  }
  static int32_t *ints(HostTensor &t) {
    return static_cast<int32_t *>(t.data());
  }
  /// Each column's sum, max and min against the host's (EXPECTs).
  void check() {
    const int64_t R = x.shape()[0], C = x.shape()[1];
    for (int64_t c = 0; c < C; ++c) {
      double sum = 1.5;
      int32_t mx = -5000, mn = 5000;
      for (int64_t r = 0; r < R; ++r) {
        sum += x.at(std::vector<int64_t>{r, c});
        mx = std::max(mx, ints(i)[r * C + c]);
        mn = std::min(mn, ints(i)[r * C + c]);
      }
      EXPECT_NEAR(static_cast<float *>(y.data())[c], sum, 1e-3)
          << R << "x" << C << " column " << c;
      EXPECT_EQ(ints(hi)[c], mx) << "column " << c;
      EXPECT_EQ(ints(lo)[c], mn) << "column " << c;
    }
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_ATOMICKERNELS_H
