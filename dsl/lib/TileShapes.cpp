//===- TileShapes.cpp - tile creation, shapes, reductions and dot ---------===//
//
// As TileOps.cpp: each function checks its operands the way a user thinks
// of them and throws a kiln::Error at the user's line before building an op
// that the verifier would reject.
//
//===----------------------------------------------------------------------===//
#include "BuilderState.h"

using namespace mlir;

namespace kiln::dsl {
using namespace detail;

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

static void checkShape(const Shape &shape, const char *opName, const Loc &loc) {
  if (shape.empty())
    userError(loc,
              std::string(opName) + ": a tile needs at least one dimension");
  for (int64_t d : shape)
    if (d < 1)
      userError(loc, std::string(opName) + ": shape " + shapeToString(shape) +
                         " has an empty dimension");
}

Tile full(const Shape &shape, double v, DType dtype, Loc loc) {
  checkShape(shape, "full", loc);
  TileArg a(v, loc);
  Type elem = mlirType(state(loc).ctx(), dtype);
  return Tile::fromRaw(raw(materialize(a, elem, shape, "full", loc)));
}
Tile zeros(const Shape &shape, DType dtype, Loc loc) {
  return full(shape, 0.0, dtype, loc);
}
Tile arange(int64_t n, Loc loc) {
  checkShape({n}, "arange", loc);
  auto type = RankedTensorType::get({n}, builder(loc).getI32Type());
  return Tile::fromRaw(raw(IotaOp::create(builder(loc), location(loc), type)));
}
Tile splat(Index v, const Shape &shape, Loc loc) {
  checkShape(shape, "splat", loc);
  auto type = RankedTensorType::get(shape, builder(loc).getI32Type());
  return Tile::fromRaw(
      raw(SplatOp::create(builder(loc), location(loc), type, value(v.raw()))));
}

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

Tile expandDims(const Tile &x, int64_t axis, Loc loc) {
  RankedTensorType t = tileType(x, loc, "expandDims");
  if (axis < 0 || axis > t.getRank())
    userError(loc, "expandDims: axis " + std::to_string(axis) +
                       " is out of range for a " + shapeStr(t.getShape()) +
                       " tile");
  SmallVector<int64_t> s(t.getShape());
  s.insert(s.begin() + axis, 1);
  Value v = ExpandDimsOp::create(builder(loc), location(loc), t.clone(s),
                                 value(x.raw()), axis);
  return Tile::fromRaw(raw(v));
}

Tile column(const Tile &x, Loc loc) {
  if (x.valid() && x.rank() != 1)
    userError(loc, "column: needs a 1-D tile, got " + shapeToString(x.shape()));
  return expandDims(x, 1, loc);
}
Tile row(const Tile &x, Loc loc) {
  if (x.valid() && x.rank() != 1)
    userError(loc, "row: needs a 1-D tile, got " + shapeToString(x.shape()));
  return expandDims(x, 0, loc);
}

Tile broadcastTo(const Tile &x, const Shape &shape, Loc loc) {
  RankedTensorType t = tileType(x, loc, "broadcastTo");
  bool ok = (int64_t)shape.size() == t.getRank();
  for (size_t i = 0; ok && i < shape.size(); ++i)
    ok = t.getDimSize(i) == shape[i] || t.getDimSize(i) == 1;
  if (!ok)
    userError(loc, "broadcastTo: broadcast of incompatible shapes: " +
                       shapeStr(t.getShape()) + " to " + shapeToString(shape));
  if (t.getShape() == ArrayRef<int64_t>(shape))
    return x;
  Value v = BroadcastOp::create(builder(loc), location(loc), t.clone(shape),
                                value(x.raw()));
  return Tile::fromRaw(raw(v));
}

Tile permute(const Tile &x, const std::vector<int32_t> &order, Loc loc) {
  RankedTensorType t = tileType(x, loc, "permute");
  std::vector<bool> seen(t.getRank(), false);
  bool ok = (int64_t)order.size() == t.getRank();
  for (int32_t o : order) {
    ok = ok && o >= 0 && o < t.getRank() && !seen[o];
    if (ok)
      seen[o] = true;
  }
  if (!ok)
    userError(loc, "permute: the order is not a permutation of the " +
                       std::to_string(t.getRank()) + " dimensions of a " +
                       shapeStr(t.getShape()) + " tile");
  SmallVector<int64_t> s;
  for (int32_t o : order)
    s.push_back(t.getDimSize(o));
  Value v = TransOp::create(builder(loc), location(loc), t.clone(s),
                            value(x.raw()), order);
  return Tile::fromRaw(raw(v));
}

Tile transpose(const Tile &x, Loc loc) {
  if (x.valid() && x.rank() != 2)
    userError(loc,
              "transpose: needs a 2-D tile, got " + shapeToString(x.shape()));
  return permute(x, {1, 0}, loc);
}

//===----------------------------------------------------------------------===//
// Reductions and dot
//===----------------------------------------------------------------------===//

static Tile reduce(const Tile &x, int64_t axis, ReduceKind kind,
                   const char *opName, const Loc &loc) {
  RankedTensorType t = tileType(x, loc, opName);
  if (axis < 0 || axis >= t.getRank())
    userError(loc, std::string(opName) + ": axis " + std::to_string(axis) +
                       " is out of range for a " + shapeStr(t.getShape()) +
                       " tile");
  SmallVector<int64_t> s(t.getShape());
  s.erase(s.begin() + axis);
  OpBuilder &b = builder(loc);
  Value v = ReduceOp::create(b, location(loc), t.clone(s),
                             ReduceKindAttr::get(b.getContext(), kind),
                             value(x.raw()), b.getI32IntegerAttr(axis));
  return Tile::fromRaw(raw(v));
}

Tile reduceSum(const Tile &x, int64_t axis, Loc loc) {
  return reduce(x, axis, ReduceKind::Sum, "reduceSum", loc);
}
Tile reduceMax(const Tile &x, int64_t axis, Loc loc) {
  return reduce(x, axis, ReduceKind::Max, "reduceMax", loc);
}
Tile reduceMin(const Tile &x, int64_t axis, Loc loc) {
  return reduce(x, axis, ReduceKind::Min, "reduceMin", loc);
}

Tile dot(const Tile &a, const Tile &b, const Tile &acc, Loc loc) {
  RankedTensorType ta = tileType(a, loc, "dot"), tb = tileType(b, loc, "dot");
  if (ta.getRank() != 2 || tb.getRank() != 2)
    userError(loc, "dot: operands must be 2-D: lhs is " +
                       shapeStr(ta.getShape()) + ", rhs is " +
                       shapeStr(tb.getShape()));
  Type ea = ta.getElementType(), eb = tb.getElementType();
  if (ea != eb)
    userError(loc, "dot: mixed dtypes without a conversion: lhs is " +
                       typeStr(ea) + ", rhs is " + typeStr(eb));
  if (!(ea.isBF16() || ea.isF16() || ea.isF32()))
    userError(loc,
              "dot: operands must be bf16, f16 or f32, got " + typeStr(ea));
  if (ta.getDimSize(1) != tb.getDimSize(0))
    userError(loc, "dot: inner dimensions differ: lhs is " +
                       shapeStr(ta.getShape()) + ", rhs is " +
                       shapeStr(tb.getShape()) + " (rhs must be " +
                       std::to_string(ta.getDimSize(1)) + "xN)");
  auto rt = RankedTensorType::get({ta.getDimSize(0), tb.getDimSize(1)},
                                  builder(loc).getF32Type());
  Value c;
  if (acc.valid()) {
    RankedTensorType tc = tileType(acc, loc, "dot");
    if (tc != rt)
      userError(loc, "dot: the accumulator is " + shapeStr(tc.getShape()) +
                         "x" + typeStr(tc.getElementType()) +
                         " but lhs times rhs is " + shapeStr(rt.getShape()) +
                         "xf32");
    c = value(acc.raw());
  } else {
    c = value(zeros(Shape(rt.getShape().begin(), rt.getShape().end()),
                    DType::f32, loc)
                  .raw());
  }
  Value v = DotOp::create(builder(loc), location(loc), rt, value(a.raw()),
                          value(b.raw()), c);
  return Tile::fromRaw(raw(v));
}

Tile dot(const Tile &a, const Tile &b, Loc loc) {
  return dot(a, b, Tile(), loc);
}

} // namespace kiln::dsl
