//===- Softmax.cpp - row softmax in kiln's DSL ----------------------------===//
//
// One program handles blockRows rows. A first sweep over the columns keeps a
// running max and a running sum rescaled to it (online softmax), so any row
// length works in one kernel; a second sweep writes exp(x - max) / sum.
// Columns past the end read -inf, whose exponential is 0.
//
//===----------------------------------------------------------------------===//
#include "kiln/kernels/Softmax.h"
#include "kiln/dsl/Dsl.h"

#include <limits>

using namespace kiln::dsl;

namespace kiln::kernels {

Kernel softmax(const SoftmaxShape &s, const SoftmaxConfig &c) {
  if (s.rows < 1 || s.cols < 1)
    throw Error("softmax: rows and cols must be >= 1");
  if (!isFloat(s.dtype))
    throw Error(std::string("softmax: dtype ") + dtypeName(s.dtype) +
                " is not a float type");
  const int64_t BR = c.blockRows, BC = c.blockCols;
  for (int64_t b : {BR, BC})
    if (b < 1 || b > 4096 || (b & (b - 1)))
      throw Error("softmax: blockRows and blockCols must be powers of two in "
                  "[1, 4096], got " +
                  std::to_string(b));
  if (s.rows > std::numeric_limits<int32_t>::max() ||
      s.cols > std::numeric_limits<int32_t>::max())
    throw Error("softmax: rows and cols must be < 2^31 (kiln's index width)");

  KernelBuilder k("softmax");
  Index rows = s.rows, cols = s.cols;
  if (!c.staticShapes) {
    rows = k.scalarArg("rows");
    cols = k.scalarArg("cols");
  }
  k.setGrid({cdiv(rows, BR)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", s.dtype, {rows, cols});
  auto Y = k.tensorArg("Y", s.dtype, {rows, cols});
  Index r0 = programId(0) * BR;

  Tile rowMax = full({BR}, -inf, f32);
  Tile rowSum = zeros({BR}, f32);
  forRange(0, cols, BC, carry(rowMax, rowSum), [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC}), -inf).to(f32);
    Tile newMax = max(rowMax, reduceMax(x, 1));
    rowSum =
        rowSum * exp(rowMax - newMax) + reduceSum(exp(x - column(newMax)), 1);
    rowMax = newMax;
  });
  Tile inverseSum = 1.0 / rowSum; // a division per row, not per element
  forRange(0, cols, BC, [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {BR, BC}), -inf).to(f32);
    Tile y = exp(x - column(rowMax)) * column(inverseSum);
    store(Y.block({r0, c0}), y.to(s.dtype));
  });
  return k.finish();
}

} // namespace kiln::kernels
