//===- Gather.cpp - loads addressed by values in memory -------------------===//
//
// gather: a tile whose rows an index tile chooses (embedding lookups, block
// tables); loadIndex: one i32 from memory as an Index (offsets and loop
// bounds read at run time); arrive: a program's arrival at a counter in
// memory, as an Index; waitCount: a wait for a counter to reach a count.
// Each checks its operands at the user's line.
//
//===----------------------------------------------------------------------===//
#include "BuilderState.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;

namespace kiln::dsl {
using namespace detail;

Tile gather(const TensorView &table, const Tile &rows, Index col, int64_t cols,
            double padding, Loc loc) {
  RankedTensorType rt = tileType(rows, loc, "gather");
  const std::string what = "gather from " + table.name() + ": ";
  if (table.dims().size() != 2)
    userError(loc, what + "the view must be 2-D (rows, columns), it is " +
                       std::to_string(table.dims().size()) +
                       "-D (index the outer dimensions first)");
  if (rt.getRank() != 1 || !rt.getElementType().isInteger(32))
    userError(loc, what + "row indices must be a 1-D i32 tile, got " +
                       shapeStr(rt.getShape()) + " " +
                       typeStr(rt.getElementType()));
  if (cols < 1)
    userError(loc, what + "cols must be positive, got " + std::to_string(cols));
  const int64_t n = rt.getDimSize(0);
  Tile rowTile = broadcastTo(column(rows, loc), {n, cols}, loc);
  OpBuilder &b = builder(loc);
  SmallVector<Value> shape, strides;
  for (const Index &d : table.dims())
    shape.push_back(value(d.raw()));
  for (const Index &s : table.strides())
    strides.push_back(value(s.raw()));
  auto type = RankedTensorType::get({n, cols},
                                    mlirType(state(loc).ctx(), table.dtype()));
  auto op = GatherOp::create(b, location(loc), type, value(table.pointer()),
                             value(rowTile.raw()), value(col.raw()), shape,
                             strides, b.getF64FloatAttr(padding));
  return Tile::fromRaw(raw(op.getResult()));
}

Index loadIndex(const TensorView &view, Index i, int64_t padding, Loc loc) {
  const std::string what = "loadIndex from " + view.name() + ": ";
  if (view.dims().size() != 1)
    userError(loc, what + "the view must be 1-D, it is " +
                       std::to_string(view.dims().size()) +
                       "-D (index the outer dimensions first)");
  if (view.dtype() != DType::i32)
    userError(loc, what + "the tensor must hold i32, it holds " +
                       dtypeName(view.dtype()));
  OpBuilder &b = builder(loc);
  auto op = LoadIndexOp::create(
      b, location(loc), b.getI32Type(), value(view.pointer()), value(i.raw()),
      value(view.dims()[0].raw()), value(view.strides()[0].raw()),
      b.getI64IntegerAttr(padding));
  return Index::fromRaw(raw(op.getResult()), std::nullopt);
}

/// The checks arrive and waitCount share: a 1-D i32 view, at the kernel's
/// top level (`why` says why not in a loop).
static OpBuilder &counterBuilder(const TensorView &counters,
                                 const std::string &what, const char *why,
                                 Loc loc) {
  if (counters.dims().size() != 1)
    userError(loc, what + "the view must be 1-D, it is " +
                       std::to_string(counters.dims().size()) +
                       "-D (index the outer dimensions first)");
  if (counters.dtype() != DType::i32)
    userError(loc, what + "the counters must be i32, they are " +
                       dtypeName(counters.dtype()));
  OpBuilder &b = builder(loc);
  if (!isa<func::FuncOp>(b.getInsertionBlock()->getParentOp()))
    userError(loc, what + "must be at the kernel's top level, not inside a "
                          "loop (" + why + ")");
  return b;
}

Index arrive(const TensorView &counters, Index i, Loc loc) {
  // Once per program: in a loop's body it would count every iteration.
  OpBuilder &b = counterBuilder(counters, "arrive at " + counters.name() + ": ",
                                "each program arrives once", loc);
  auto op = ArriveOp::create(b, location(loc), b.getI32Type(),
                             value(counters.pointer()), value(i.raw()),
                             value(counters.dims()[0].raw()),
                             value(counters.strides()[0].raw()));
  return Index::fromRaw(raw(op.getResult()), std::nullopt);
}

void waitCount(const TensorView &counters, Index i, Index target, Loc loc) {
  // Before what the program reads: a wait in a loop's body would hold up a
  // pipelined loop's prefetches, which run ahead of it.
  OpBuilder &b =
      counterBuilder(counters, "waitCount on " + counters.name() + ": ",
                     "a program waits once, before what it reads", loc);
  WaitCountOp::create(b, location(loc), value(counters.pointer()),
                      value(i.raw()), value(counters.dims()[0].raw()),
                      value(counters.strides()[0].raw()), value(target.raw()));
}

} // namespace kiln::dsl
