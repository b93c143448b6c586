//===- FusedOpsData.h - rotary and cross-entropy inputs, fp64 checks -*- C++
//-*-===//
//
// Shared by the CPU executor and GPU tests of kernels/rotary and
// kernels/loss: fresh random inputs (seeded by the case), outputs poisoned,
// every element compared with a plain fp64 computation.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_FUSEDOPSDATA_H
#define KILN_TESTS_FUSEDOPSDATA_H

#include "kiln/kernels/Reference.h"
#include "kiln/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::test {

/// Rotary embedding: X, Y (H, T, D) bf16 (with `strided`, a (T, H, D)
/// buffer seen as (H, T, D): the layout of a (B, N, H, D) activation),
/// positions scattered over P, cos/sin of RoPE's angles.
struct RotaryData {
  HostTensor x, y, pos, cos, sin;
  bool inverse;
  RotaryData(int64_t H, int64_t T, int64_t D, int64_t P, bool strided,
             bool inverse)
      : x(make(H, T, D, strided)), y(make(H, T, D, strided)),
        pos(DType::i32, {T}), cos(DType::f32, {P, D / 2}),
        sin(DType::f32, {P, D / 2}), inverse(inverse) {
    x.fillRandom(uint64_t(H * 131 + T * 7 + D), -3, 3);
    for (int64_t t = 0; t < T; ++t)
      pos.flatSet(t, double((uint64_t(t) * 2654435761u + 11) % P));
    kernels::ropeTables(P, D, cos, sin);
    y.poison();
  }
  static HostTensor make(int64_t H, int64_t T, int64_t D, bool strided) {
    if (!strided)
      return HostTensor(DType::bf16, {H, T, D});
    return HostTensor(DType::bf16, {H, T, D}, {D, H * D, 1});
  }
  void check() const {
    const int64_t H = x.shape()[0], T = x.shape()[1], D = x.shape()[2];
    int64_t bad = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D / 2; ++i) {
          const int64_t p = int64_t(pos.flatAt(t));
          const double c = cos.flatAt(p * D / 2 + i),
                       s = (inverse ? -1 : 1) * sin.flatAt(p * D / 2 + i);
          const int64_t at = (h * T + t) * D + i;
          const double x1 = x.flatAt(at), x2 = x.flatAt(at + D / 2);
          for (auto [got, want] :
               {std::pair{y.flatAt(at), x1 * c - x2 * s},
                std::pair{y.flatAt(at + D / 2), x2 * c + x1 * s}})
            // bf16 output: 2^-8 of the value, plus fp32 rounding near 0.
            if (!(std::abs(got - want) <= 8e-3 * std::abs(want) + 1e-5) &&
                bad++ < 5)
              ADD_FAILURE() << "Y[" << h << ", " << t << ", " << i
                            << "(+D/2)] = " << got << ", want " << want;
        }
    EXPECT_EQ(bad, 0);
  }
};

/// Cross-entropy: bf16 logits (R, V) (some rows padded to a larger row
/// stride), i64 labels with a few ignored, LSE and per-row losses, and the
/// gradient for a per-row DLoss (or none: mean with Scale).
struct CrossEntropyData {
  HostTensor x, labels, lse, loss, dloss, scale, dx;
  int64_t ignoreIndex;
  CrossEntropyData(int64_t R, int64_t V, int64_t rowStride,
                   int64_t ignoreIndex = -100)
      : x(DType::bf16, {R, V}, {rowStride, 1}), labels(DType::i64, {R}),
        lse(DType::f32, {R}), loss(DType::f32, {R}), dloss(DType::f32, {R}),
        scale(DType::f32, {1}), dx(DType::bf16, {R, V}),
        ignoreIndex(ignoreIndex) {
    x.fillRandom(uint64_t(R * 31 + V), -8, 8);
    for (int64_t r = 0; r < R; ++r) {
      labels.flatSet(r, r % 5 == 2 ? double(ignoreIndex)
                                   : double((uint64_t(r) * 40503u) % V));
      dloss.flatSet(r, 0.5 + double(r % 3));
    }
    scale.flatSet(0, 1.0 / 3.0);
    lse.poison();
    loss.poison();
    dx.poison();
  }
  /// log Σ exp of row r, in fp64.
  double rowLse(int64_t r) const {
    const int64_t V = x.shape()[1];
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v)
      m = std::max(m, x.flatAt(r * V + v));
    for (int64_t v = 0; v < V; ++v)
      s += std::exp(x.flatAt(r * V + v) - m);
    return m + std::log(s);
  }
  void checkForward() const {
    const int64_t R = x.shape()[0], V = x.shape()[1];
    for (int64_t r = 0; r < R; ++r) {
      const double l = rowLse(r);
      const int64_t label = int64_t(labels.flatAt(r));
      const double want =
          label == ignoreIndex ? 0 : l - x.flatAt(r * V + label);
      EXPECT_NEAR(lse.flatAt(r), l, 1e-4 * std::abs(l) + 1e-4) << "row " << r;
      EXPECT_NEAR(loss.flatAt(r), want, 1e-4 * std::abs(want) + 1e-4)
          << "row " << r;
    }
  }
  void checkBackward(bool perRow) const {
    const int64_t R = x.shape()[0], V = x.shape()[1];
    int64_t bad = 0;
    for (int64_t r = 0; r < R; ++r) {
      const double l = rowLse(r);
      const int64_t label = int64_t(labels.flatAt(r));
      const double g = label == ignoreIndex
                           ? 0
                           : scale.flatAt(0) * (perRow ? dloss.flatAt(r) : 1);
      for (int64_t v = 0; v < V; ++v) {
        const double want =
            g * (std::exp(x.flatAt(r * V + v) - l) - (v == label ? 1 : 0));
        const double got = dx.flatAt(r * V + v);
        if (!(std::abs(got - want) <= 8e-3 * std::abs(want) + 1e-6) &&
            bad++ < 5)
          ADD_FAILURE() << "DX[" << r << ", " << v << "] = " << got << ", want "
                        << want;
      }
    }
    EXPECT_EQ(bad, 0);
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_FUSEDOPSDATA_H
