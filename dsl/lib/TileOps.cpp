//===- TileOps.cpp - tile arithmetic, comparisons and math ----------------===//
//
// Each function checks its operands the way a user thinks of them (shapes,
// dtypes) and throws a kiln::Error at the user's line before building an op
// that the verifier would reject.
//
//===----------------------------------------------------------------------===//
#include "BuilderState.h"

using namespace mlir;

namespace kiln::dsl {
using namespace detail;

Tile Tile::fromRaw(void *v) {
  Tile t;
  t.value_ = v;
  t.kernel_ = v ? currentSerial() : 0;
  return t;
}

void *Tile::raw() const {
  // Where no kernel is being built (a finished kernel's tiles, read while
  // its Kernel keeps the IR) the value is left to the caller.
  if (value_ && currentSerial() && kernel_ != currentSerial())
    throw Error("kiln DSL: a tile made while building another kernel is "
                "used in this one (a Tile lives as long as the KernelBuilder "
                "that made it)");
  return value_;
}

Shape Tile::shape() const {
  if (!value_)
    return {};
  auto t = cast<RankedTensorType>(value(raw()).getType());
  return Shape(t.getShape().begin(), t.getShape().end());
}

DType Tile::dtype() const {
  if (!value_)
    throw Error("Tile::dtype: the tile is empty");
  return dtypeOf(
      cast<RankedTensorType>(value(raw()).getType()).getElementType());
}

Tile Tile::to(DType dtype, Loc loc) const {
  RankedTensorType t = tileType(*this, loc, "to");
  Type elem = mlirType(state(loc).ctx(), dtype);
  if (t.getElementType() == elem)
    return *this;
  Value v = ConvertOp::create(builder(loc), location(loc), t.clone(elem),
                              value(value_));
  return fromRaw(detail::raw(v));
}

//===----------------------------------------------------------------------===//
// Operand resolution: dtype agreement and broadcasting
//===----------------------------------------------------------------------===//

namespace {
struct Operand {
  const TileArg *arg;
  const char *label;
};
} // namespace

/// The element type shared by the tile operands.
static Type commonElementType(ArrayRef<Operand> ops, const char *opName,
                              const Loc &loc) {
  Type elem;
  const char *first = nullptr;
  for (const Operand &o : ops) {
    if (o.arg->tile) {
      Type t = tileType(*o.arg->tile, loc, opName).getElementType();
      if (elem && t != elem)
        userError(loc, std::string(opName) +
                           ": mixed dtypes without a conversion: " + first +
                           " is " + typeStr(elem) + ", " + o.label + " is " +
                           typeStr(t) + " (convert one with .to(...))");
      if (!elem) {
        elem = t;
        first = o.label;
      }
    }
  }
  if (!elem)
    userError(loc, std::string(opName) + ": needs at least one tile operand");
  return elem;
}

/// The shape every operand broadcasts to.
static SmallVector<int64_t> broadcastShape(ArrayRef<Operand> ops,
                                           const char *opName, const Loc &loc) {
  SmallVector<int64_t> shape;
  bool have = false;
  std::string seen;
  for (const Operand &o : ops) {
    if (!o.arg->tile)
      continue;
    auto s = tileType(*o.arg->tile, loc, opName).getShape();
    if (s.empty())
      continue; // a rank-0 tile broadcasts like a number
    std::string desc = std::string(o.label) + " is " + shapeStr(s);
    if (!have) {
      shape.assign(s.begin(), s.end());
      have = true;
      seen = desc;
      continue;
    }
    bool ok = (int64_t)s.size() == (int64_t)shape.size();
    for (size_t i = 0; ok && i < s.size(); ++i) {
      if (s[i] == shape[i] || s[i] == 1)
        continue;
      if (shape[i] == 1)
        shape[i] = s[i];
      else
        ok = false;
    }
    if (!ok)
      userError(loc, std::string(opName) +
                         ": broadcast of incompatible shapes: " + seen + ", " +
                         desc +
                         " (ranks must be equal and each dimension equal or 1;"
                         " see column(), row(), expandDims())");
    seen += ", " + desc;
  }
  return shape;
}

Value detail::materialize(const TileArg &a, Type elem, ArrayRef<int64_t> shape,
                          const char *opName, const Loc &loc) {
  OpBuilder &b = builder(loc);
  Location l = location(loc);
  auto type = RankedTensorType::get(shape, elem);
  if (a.tile) {
    Value v = value(a.tile->raw());
    if (cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    // kiln.broadcast takes a rank-0 source to any shape.
    return BroadcastOp::create(b, l, type, v);
  }
  if (a.index) {
    if (!elem.isInteger(32))
      userError(loc, std::string(opName) +
                         ": an Index operand is i32 but the "
                         "tile is " +
                         typeStr(elem) +
                         " (convert the tile, or use a number)");
    return SplatOp::create(b, l, type, value(a.index->raw()));
  }
  double x = *a.number;
  if (isa<FloatType>(elem))
    return arith::ConstantOp::create(
        b, l, DenseElementsAttr::get(type, b.getFloatAttr(elem, x)));
  if (x != (double)(int64_t)x)
    userError(loc, std::string(opName) + ": number " + std::to_string(x) +
                       " is not an integer but the tile is " + typeStr(elem));
  return arith::ConstantOp::create(
      b, l, DenseElementsAttr::get(type, b.getIntegerAttr(elem, (int64_t)x)));
}

using BuildFn = Value (*)(OpBuilder &, Location, Type, Value, Value);

static Tile binary(const TileArg &a, const TileArg &b, const char *opName,
                   BuildFn build) {
  const Loc &loc = a.loc;
  Operand ops[] = {{&a, "lhs"}, {&b, "rhs"}};
  Type elem = commonElementType(ops, opName, loc);
  SmallVector<int64_t> shape = broadcastShape(ops, opName, loc);
  Value va = materialize(a, elem, shape, opName, loc);
  Value vb = materialize(b, elem, shape, opName, loc);
  return Tile::fromRaw(raw(build(builder(loc), location(loc), elem, va, vb)));
}

template <class FOp, class IOp>
static Value arithOp(OpBuilder &b, Location l, Type elem, Value x, Value y) {
  if (isa<FloatType>(elem))
    return FOp::create(b, l, x, y);
  return IOp::create(b, l, x, y);
}

template <arith::CmpFPredicate F, arith::CmpIPredicate I>
static Value cmpOp(OpBuilder &b, Location l, Type elem, Value x, Value y) {
  if (isa<FloatType>(elem))
    return arith::CmpFOp::create(b, l, F, x, y);
  return arith::CmpIOp::create(b, l, I, x, y);
}

Tile operator+(TileArg a, TileArg b) {
  return binary(a, b, "+", arithOp<arith::AddFOp, arith::AddIOp>);
}
Tile operator-(TileArg a, TileArg b) {
  return binary(a, b, "-", arithOp<arith::SubFOp, arith::SubIOp>);
}
Tile operator*(TileArg a, TileArg b) {
  return binary(a, b, "*", arithOp<arith::MulFOp, arith::MulIOp>);
}
Tile operator/(TileArg a, TileArg b) {
  return binary(a, b, "/", arithOp<arith::DivFOp, arith::DivSIOp>);
}
Tile operator%(TileArg a, TileArg b) {
  return binary(a, b, "%", arithOp<arith::RemFOp, arith::RemSIOp>);
}
Tile operator<(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, "<", cmpOp<OLT, arith::CmpIPredicate::slt>);
}
Tile operator<=(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, "<=", cmpOp<OLE, arith::CmpIPredicate::sle>);
}
Tile operator>(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, ">", cmpOp<OGT, arith::CmpIPredicate::sgt>);
}
Tile operator>=(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, ">=", cmpOp<OGE, arith::CmpIPredicate::sge>);
}
Tile operator==(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, "==", cmpOp<OEQ, arith::CmpIPredicate::eq>);
}
Tile operator!=(TileArg a, TileArg b) {
  using enum arith::CmpFPredicate;
  return binary(a, b, "!=", cmpOp<UNE, arith::CmpIPredicate::ne>);
}
Tile operator&&(TileArg a, TileArg b) {
  return binary(
      a, b, "&&",
      [](OpBuilder &bl, Location l, Type elem, Value x, Value y) -> Value {
        (void)elem;
        return arith::AndIOp::create(bl, l, x, y);
      });
}
/// An integer-only op: a float operand is the user's error, at their line.
template <class Op>
static Tile integerOp(const TileArg &a, const TileArg &b, const char *opName) {
  Operand ops[] = {{&a, "lhs"}, {&b, "rhs"}};
  Type elem = commonElementType(ops, opName, a.loc);
  if (!isa<IntegerType>(elem))
    userError(a.loc, std::string(opName) +
                         ": integer (or mask) tiles only, got " +
                         typeStr(elem));
  return binary(a, b, opName,
                [](OpBuilder &bl, Location l, Type, Value x, Value y) -> Value {
                  return Op::create(bl, l, x, y);
                });
}
Tile operator||(TileArg a, TileArg b) {
  return integerOp<arith::OrIOp>(a, b, "||");
}
Tile operator&(TileArg a, TileArg b) {
  return integerOp<arith::AndIOp>(a, b, "&");
}
Tile operator|(TileArg a, TileArg b) {
  return integerOp<arith::OrIOp>(a, b, "|");
}
Tile operator^(TileArg a, TileArg b) {
  return integerOp<arith::XOrIOp>(a, b, "^");
}
Tile operator<<(TileArg a, TileArg b) {
  return integerOp<arith::ShLIOp>(a, b, "<<");
}
Tile operator>>(TileArg a, TileArg b) {
  return integerOp<arith::ShRSIOp>(a, b, ">>");
}
Tile max(TileArg a, TileArg b, Loc loc) {
  a.loc = loc;
  return binary(a, b, "max", arithOp<arith::MaximumFOp, arith::MaxSIOp>);
}
Tile min(TileArg a, TileArg b, Loc loc) {
  a.loc = loc;
  return binary(a, b, "min", arithOp<arith::MinimumFOp, arith::MinSIOp>);
}

Tile where(TileArg cond, TileArg a, TileArg b, Loc loc) {
  if (!cond.tile)
    userError(loc, "where: the condition must be an i1 tile");
  Type ct = tileType(*cond.tile, loc, "where").getElementType();
  if (!ct.isInteger(1))
    userError(loc, "where: the condition is " + typeStr(ct) +
                       ", not i1 (compare to get a mask)");
  Operand vals[] = {{&a, "true value"}, {&b, "false value"}};
  Type elem = commonElementType(vals, "where", loc);
  Operand all[] = {
      {&cond, "condition"}, {&a, "true value"}, {&b, "false value"}};
  SmallVector<int64_t> shape = broadcastShape(all, "where", loc);
  Value c = materialize(cond, ct, shape, "where", loc);
  Value x = materialize(a, elem, shape, "where", loc);
  Value y = materialize(b, elem, shape, "where", loc);
  Value r = arith::SelectOp::create(builder(loc), location(loc), c, x, y);
  return Tile::fromRaw(raw(r));
}

template <class Op>
static Tile unaryFloat(const Tile &x, const char *opName, const Loc &loc) {
  RankedTensorType t = tileType(x, loc, opName);
  if (!isa<FloatType>(t.getElementType()))
    userError(loc, std::string(opName) + ": needs a float tile, got " +
                       typeStr(t.getElementType()));
  return Tile::fromRaw(
      raw(Op::create(builder(loc), location(loc), value(x.raw()))));
}

Tile neg(const Tile &x, Loc loc) {
  return unaryFloat<arith::NegFOp>(x, "neg", loc);
}
Tile exp(const Tile &x, Loc loc) {
  return unaryFloat<math::ExpOp>(x, "exp", loc);
}
Tile exp2(const Tile &x, Loc loc) {
  return unaryFloat<math::Exp2Op>(x, "exp2", loc);
}
Tile log(const Tile &x, Loc loc) {
  return unaryFloat<math::LogOp>(x, "log", loc);
}
Tile log2(const Tile &x, Loc loc) {
  return unaryFloat<math::Log2Op>(x, "log2", loc);
}
Tile sqrt(const Tile &x, Loc loc) {
  return unaryFloat<math::SqrtOp>(x, "sqrt", loc);
}

/// A float op in `mode`: Fast marks it `afn` (approximate functions), which
/// the GPU lowering takes for its approximate instructions.
template <class Op>
static Tile unaryMath(const Tile &x, MathMode mode, const char *opName,
                      const Loc &loc) {
  Tile r = unaryFloat<Op>(x, opName, loc);
  if (mode == MathMode::Fast)
    value(r.raw()).getDefiningOp()->setAttr(
        "fastmath", arith::FastMathFlagsAttr::get(state(loc).ctx(),
                                                  arith::FastMathFlags::afn));
  return r;
}

Tile abs(const Tile &x, Loc loc) {
  RankedTensorType t = tileType(x, loc, "abs");
  if (isa<IntegerType>(t.getElementType()))
    return Tile::fromRaw(
        raw(math::AbsIOp::create(builder(loc), location(loc), value(x.raw()))));
  return unaryFloat<math::AbsFOp>(x, "abs", loc);
}
Tile floor(const Tile &x, Loc loc) {
  return unaryFloat<math::FloorOp>(x, "floor", loc);
}
Tile erf(const Tile &x, Loc loc) {
  return unaryFloat<math::ErfOp>(x, "erf", loc);
}
Tile tanh(const Tile &x, MathMode mode, Loc loc) {
  return unaryMath<math::TanhOp>(x, mode, "tanh", loc);
}
Tile sin(const Tile &x, MathMode mode, Loc loc) {
  return unaryMath<math::SinOp>(x, mode, "sin", loc);
}
Tile cos(const Tile &x, MathMode mode, Loc loc) {
  return unaryMath<math::CosOp>(x, mode, "cos", loc);
}
Tile rsqrt(const Tile &x, MathMode mode, Loc loc) {
  return unaryMath<math::RsqrtOp>(x, mode, "rsqrt", loc);
}
// Compositions: every op they build carries the user's line.
Tile sigmoid(const Tile &x, MathMode mode, Loc loc) {
  if (mode == MathMode::Fast) {
    Tile t = tanh(TileArg(x, loc) * TileArg(0.5, loc), mode, loc);
    return TileArg(TileArg(t, loc) * TileArg(0.5, loc), loc) +
           TileArg(0.5, loc);
  }
  Tile e = exp(neg(x, loc), loc);
  return TileArg(1.0, loc) / TileArg(TileArg(e, loc) + TileArg(1.0, loc), loc);
}
Tile pow(const Tile &x, TileArg y, Loc loc) {
  return pow(x, std::move(y), MathMode::Fast, loc);
}
Tile pow(const Tile &x, TileArg y, MathMode mode, Loc loc) {
  RankedTensorType t = tileType(x, loc, "pow");
  if (!isa<FloatType>(t.getElementType()))
    userError(loc,
              "pow: needs a float tile, got " + typeStr(t.getElementType()));
  y.loc = loc;
  return exp2(y * TileArg(log2(x, mode, loc), loc), mode, loc);
}

/// exp and log ops lower to the approximate instructions unless marked
/// kiln.precise (the one-argument DSL forms predate MathMode).
template <class Op>
static Tile expLog(const Tile &x, MathMode mode, const char *opName,
                   const Loc &loc) {
  Tile r = unaryFloat<Op>(x, opName, loc);
  if (mode == MathMode::Precise)
    value(r.raw()).getDefiningOp()->setAttr("kiln.precise",
                                            UnitAttr::get(state(loc).ctx()));
  return r;
}
Tile exp(const Tile &x, MathMode mode, Loc loc) {
  return expLog<math::ExpOp>(x, mode, "exp", loc);
}
Tile exp2(const Tile &x, MathMode mode, Loc loc) {
  return expLog<math::Exp2Op>(x, mode, "exp2", loc);
}
Tile log(const Tile &x, MathMode mode, Loc loc) {
  return expLog<math::LogOp>(x, mode, "log", loc);
}
Tile log2(const Tile &x, MathMode mode, Loc loc) {
  return expLog<math::Log2Op>(x, mode, "log2", loc);
}

} // namespace kiln::dsl
