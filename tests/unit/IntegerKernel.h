//===- IntegerKernel.h - integer ops and casts, CPU and GPU ----*- C++ -*-===//
//
// Shared by the CPU executor and GPU tests: a kernel of every integer op
// (bitwise and/or/xor, shifts, division and remainder, min/max, abs) and of
// the casts between i32, f32 and bf16, with a host reference of each.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_INTEGERKERNEL_H
#define KILN_TESTS_INTEGERKERNEL_H

#include "kiln/dsl/Dsl.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace kiln::test {

/// Out (N, 8) i32 from X (N) i32 and F (N) f32: the columns below.
inline Kernel integerOps() {
  using namespace kiln::dsl;
  KernelBuilder k("integer_ops");
  Index N = k.scalarArg("N");
  auto X = k.tensorArg("X", i32, {N});
  auto F = k.tensorArg("F", f32, {N});
  auto Out = k.tensorArg("Out", i32, {N, 8});
  auto G = k.tensorArg("G", f32, {N});
  k.setGrid({cdiv(N, 128)});
  Index n0 = programId(0) * 128;
  Tile x = load(X.block({n0}, {128}));
  Tile f = load(F.block({n0}, {128}));
  Tile cols[] = {(x << 3) ^ (x >> 2),
                 (x & 0xFF) | 0x100,
                 x / 7 + x % 7,
                 max(x, 5) - min(x, -5),
                 abs(x),
                 f.to(i32),                    // toward zero
                 (x > 0 || x < -1000).to(i32), // a mask as 0/1
                 f.to(bf16).to(f32).to(i32)};
  for (int c = 0; c < 8; ++c)
    store(Out.block({n0, c}, {128, 1}), column(cols[c]));
  store(G.block({n0}), x.to(f32) * 0.5);
  return k.finish();
}

/// Inputs (every sign, small and large values), poisoned outputs, and the
/// host reference of each column.
struct IntegerData {
  HostTensor x, f, out, g;
  explicit IntegerData(int64_t N)
      : x(DType::i32, {N}), f(DType::f32, {N}), out(DType::i32, {N, 8}),
        g(DType::f32, {N}) {
    for (int64_t i = 0; i < N; ++i) {
      int64_t v = int64_t((uint64_t(i) * 2654435761u) % 200003) - 100000;
      x.flatSet(i, double(i % 3 == 0 ? v : v % 300));
      f.flatSet(i, double(v) / 7.0);
    }
    out.poison();
    g.poison();
  }
  void check() const {
    const int64_t N = x.shape()[0];
    int64_t bad = 0;
    for (int64_t i = 0; i < N; ++i) {
      const int32_t v = int32_t(x.flatAt(i));
      const float fv = float(f.flatAt(i));
      const float fb = bf16ToFloat(floatToBf16(fv));
      const int32_t want[8] = {int32_t(uint32_t(v) << 3) ^ (v >> 2),
                               (v & 0xFF) | 0x100,
                               v / 7 + v % 7,
                               std::max(v, 5) - std::min(v, -5),
                               std::abs(v),
                               int32_t(fv),
                               int32_t(v > 0 || v < -1000),
                               int32_t(fb)};
      for (int c = 0; c < 8; ++c)
        if (int32_t(out.flatAt(i * 8 + c)) != want[c] && bad++ < 5)
          ADD_FAILURE() << "Out[" << i << ", " << c
                        << "] = " << out.flatAt(i * 8 + c) << ", want "
                        << want[c] << " (x " << v << ", f " << fv << ")";
      if (g.flatAt(i) != double(v) * 0.5 && bad++ < 5)
        ADD_FAILURE() << "G[" << i << "] = " << g.flatAt(i);
    }
    EXPECT_EQ(bad, 0);
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_INTEGERKERNEL_H
