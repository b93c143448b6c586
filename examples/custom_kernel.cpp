//===- custom_kernel.cpp - writing your own kiln kernel
//--------------------===//
//
// A fused "scale, mask and row-normalise" kernel written from scratch: each
// program takes 32 rows, multiplies by a scale, zeroes the entries above the
// diagonal and divides each row by its sum of absolute values (L1 norm). It
// shows the pieces a kernel is made of: a KernelBuilder with a grid, tensor
// arguments, blocked loads and stores, tile arithmetic, row reductions, and
// an error that names this file's line when the shapes do not fit.
//
//===----------------------------------------------------------------------===//
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"

#include <cmath>
#include <cstdio>

using namespace kiln;
using namespace kiln::dsl;

static Kernel rowNormalize(int64_t rows, int64_t cols, double scale) {
  const int64_t BR = 32, BC = 64;
  KernelBuilder k("row_normalize", {cdiv(rows, BR)});
  auto X = k.tensorArg("X", f32, {rows, cols});
  auto Y = k.tensorArg("Y", f32, {rows, cols});
  Index r0 = programId(0) * BR;
  Tile r = column(arange(BR) + r0);

  Tile norm = zeros({BR}, f32);
  forRange(0, cols, BC, carry(norm), [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC})) * scale;
    Tile keep = r >= row(arange(BC) + c0);
    norm = norm + reduceSum(where(keep, max(x, neg(x)), 0.0), 1);
  });
  forRange(0, cols, BC, [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC})) * scale;
    Tile keep = r >= row(arange(BC) + c0);
    store(Y.block({r0, c0}), where(keep, x, 0.0) / column(norm));
  });
  return k.finish();
}

int main() {
  const int64_t R = 100, C = 70;
  Kernel k = rowNormalize(R, C, 0.5);
  HostTensor x(DType::f32, {R, C}), y(DType::f32, {R, C});
  x.fillRandom(7);
  y.poison();
  runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}));

  double worst = 0;
  for (int64_t i = 0; i < R; ++i) {
    double norm = 0;
    for (int64_t j = 0; j <= std::min(i, C - 1); ++j)
      norm += std::abs(0.5 * x.at(std::vector<int64_t>{i, j}));
    for (int64_t j = 0; j < C; ++j) {
      double want =
          j <= i ? 0.5 * x.at(std::vector<int64_t>{i, j}) / norm : 0.0;
      worst =
          std::max(worst, std::abs(y.at(std::vector<int64_t>{i, j}) - want));
    }
  }
  std::printf("row_normalize %lldx%lld: max abs error %.2e\n", (long long)R,
              (long long)C, worst);

  // Misuse is reported at the user's line, with the shapes.
  try {
    KernelBuilder bad("bad", {1});
    Tile a = zeros({64, 32}, f32), b = zeros({64, 32}, f32);
    dot(a, b);
  } catch (const kiln::Error &e) {
    std::printf("a mistake, as kiln reports it:\n  %s\n", e.what());
  }
  return worst < 1e-5 ? 0 : 1;
}
