//===- Index.cpp - index arithmetic, program ids --------------------------===//
#include "BuilderState.h"

using namespace mlir;

namespace kiln::dsl {

using namespace detail;

//===----------------------------------------------------------------------===//
// Index
//===----------------------------------------------------------------------===//

Index::Index(int64_t constant, Loc loc)
    : constant_(constant), extent_(GridExtent(constant)), loc_(loc) {}

Index Index::fromRaw(void *v, std::optional<int64_t> constant,
                     std::optional<GridExtent> extent) {
  Index i;
  i.value_ = v;
  i.kernel_ = currentSerial();
  i.constant_ = constant;
  i.extent_ = std::move(extent);
  return i;
}

void *Index::raw() const {
  // A constant is materialised where it is used, never cached: a cached value
  // made inside a loop body would not dominate a use after the loop.
  if (constant_)
    return detail::raw(i32Constant(*constant_, loc_));
  KernelBuilder::State *current = currentState();
  if (value_ && current && kernel_ != current->serial)
    throw Error("kiln DSL: an Index made while building another kernel is "
                "used in kernel '" +
                current->kernel->name +
                "' (an Index lives as long as the KernelBuilder that made it)");
  return value_;
}

template <class Op>
static Index indexOp(const Index &a, const IndexArg &b,
                     int64_t (*fold)(int64_t, int64_t),
                     std::optional<GridExtent> extent = std::nullopt) {
  if (a.isConstant() && b.value.isConstant()) {
    int64_t r = fold(a.constant(), b.value.constant());
    (void)i32Constant(r, b.loc); // range check only; folded in C++
    return Index(r, b.loc);
  }
  for (const Index *i : {&a, &b.value})
    checkIndex(*i, b.loc, "an Index");
  OpBuilder &bld = builder(b.loc);
  Value v =
      Op::create(bld, location(b.loc), value(a.raw()), value(b.value.raw()));
  return Index::fromRaw(raw(v), std::nullopt, std::move(extent));
}

/// The host formula of a * b, where both have one.
static std::optional<GridExtent> productExtent(const Index &a, const Index &b) {
  if (!a.extent() || !b.extent())
    return std::nullopt;
  GridExtent e = *a.extent();
  e.scale *= b.extent()->scale;
  e.factors.insert(e.factors.end(), b.extent()->factors.begin(),
                   b.extent()->factors.end());
  return e;
}

/// The host formula of cdiv(a, b): an argument (or cdiv of one) by a
/// positive constant.
static std::optional<GridExtent> cdivExtent(const Index &a, const Index &b) {
  if (!a.extent() || !b.isConstant() || b.constant() < 1 ||
      a.extent()->scale != 1 || a.extent()->factors.size() != 1)
    return std::nullopt;
  GridExtent e = *a.extent();
  e.factors[0].divisor *= b.constant();
  return e;
}

Index operator+(const Index &a, IndexArg b) {
  return indexOp<arith::AddIOp>(a, b,
                                [](int64_t x, int64_t y) { return x + y; });
}
Index operator-(const Index &a, IndexArg b) {
  return indexOp<arith::SubIOp>(a, b,
                                [](int64_t x, int64_t y) { return x - y; });
}
Index operator*(const Index &a, IndexArg b) {
  return indexOp<arith::MulIOp>(
      a, b, [](int64_t x, int64_t y) { return x * y; },
      productExtent(a, b.value));
}
Index operator/(const Index &a, IndexArg b) {
  if (b.value.isConstant() && b.value.constant() == 0)
    userError(b.loc, "index division by zero");
  return indexOp<arith::DivSIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x / y; });
}
Index operator%(const Index &a, IndexArg b) {
  if (b.value.isConstant() && b.value.constant() == 0)
    userError(b.loc, "index remainder by zero");
  return indexOp<arith::RemSIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x % y; });
}
Index operator+(int64_t a, IndexArg b) { return Index(a, b.loc) + b; }
Index operator*(int64_t a, IndexArg b) { return Index(a, b.loc) * b; }
Index operator-(int64_t a, IndexArg b) { return Index(a, b.loc) - b; }
Index min(Index a, Index b, Loc loc) {
  return indexOp<arith::MinSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return std::min(x, y); });
}
Index max(Index a, Index b, Loc loc) {
  return indexOp<arith::MaxSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return std::max(x, y); });
}
Index cdiv(Index a, Index b, Loc loc) {
  if (b.isConstant() && b.constant() <= 0)
    userError(loc, "cdiv by a non-positive constant");
  return indexOp<arith::CeilDivSIOp>(
      a, IndexArg(b, loc), [](int64_t x, int64_t y) { return (x + y - 1) / y; },
      cdivExtent(a, b));
}

Index programId(int axis, Loc loc) {
  if (axis < 0 || axis > 2)
    userError(loc,
              "programId: axis " + std::to_string(axis) + " is not 0, 1 or 2");
  OpBuilder &b = builder(loc);
  Value v = ProgramIdOp::create(b, location(loc), b.getI32Type(),
                                b.getI32IntegerAttr(axis));
  return Index::fromRaw(raw(v), std::nullopt);
}

Index numPrograms(int axis, Loc loc) {
  if (axis < 0 || axis > 2)
    userError(loc, "numPrograms: axis " + std::to_string(axis) +
                       " is not 0, 1 or 2");
  // A grid compiled in folds to a constant; the hardware's count otherwise.
  KernelBuilder::State &st = state(loc);
  if (st.gridSet && st.kernel->grid[axis].isConstant())
    return Index(st.kernel->grid[axis].scale, loc);
  OpBuilder &b = builder(loc);
  Value v = NumProgramsOp::create(b, location(loc), b.getI32Type(),
                                  b.getI32IntegerAttr(axis));
  return Index::fromRaw(raw(v), std::nullopt);
}

} // namespace kiln::dsl
