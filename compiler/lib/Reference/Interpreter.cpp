//===- Interpreter.cpp - arith and math ops of the CPU executor -----------===//
//
// Elementwise ops compute in fp32 (floats) or int64 (integers) and round or
// wrap the result to the op's element type, so a bf16 addition gives the
// bf16-rounded fp32 sum, as the GPU path computes it.
//
//===----------------------------------------------------------------------===//
#include "RtValue.h"

#include "kiln/runtime/DType.h"
#include "kiln/runtime/Error.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <functional>

using namespace mlir;

namespace kiln::ref {

bool RtValue::isFloatTy() const { return isa<FloatType>(elemType); }
int64_t RtValue::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

void fault(Operation *op, const std::string &msg) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "CPU executor: " << msg << " (op '" << op->getName() << "' at "
     << op->getLoc() << ")";
  throw Error(s);
}

std::shared_ptr<RtValue> makeValue(Type type) {
  auto v = std::make_shared<RtValue>();
  if (auto t = dyn_cast<RankedTensorType>(type)) {
    v->elemType = t.getElementType();
    v->shape.assign(t.getShape().begin(), t.getShape().end());
  } else {
    v->elemType = type;
  }
  if (isa<FloatType>(v->elemType))
    v->f.resize(v->numel());
  else
    v->i.resize(v->numel());
  return v;
}

float roundToType(Type t, float v) {
  if (t.isBF16())
    return roundTo(DType::bf16, v);
  if (t.isF16())
    return roundTo(DType::f16, v);
  return v;
}

int64_t wrapToType(Type t, int64_t v) {
  unsigned w = t.isIndex() ? 64 : t.getIntOrFloatBitWidth();
  if (w == 1)
    return v & 1;
  if (w >= 64)
    return v;
  return int64_t(uint64_t(v) << (64 - w)) >> (64 - w);
}

static uint64_t asUnsigned(Type t, int64_t v) {
  unsigned w = t.isIndex() ? 64 : t.getIntOrFloatBitWidth();
  return w >= 64 ? uint64_t(v) : uint64_t(v) & ((uint64_t(1) << w) - 1);
}

static Type resultType(Operation *op) { return op->getResult(0).getType(); }

template <class F>
static RtRef mapFloat(Operation *op, ArrayRef<RtRef> in, F f) {
  auto r = makeValue(resultType(op));
  for (int64_t k = 0, n = r->numel(); k < n; ++k) {
    float x = in[0]->f[k], y = in.size() > 1 ? in[1]->f[k] : 0.f,
          z = in.size() > 2 ? in[2]->f[k] : 0.f;
    r->f[k] = roundToType(r->elemType, f(x, y, z));
  }
  return r;
}

template <class F> static RtRef mapInt(Operation *op, ArrayRef<RtRef> in, F f) {
  auto r = makeValue(resultType(op));
  Type t = in[0]->elemType;
  for (int64_t k = 0, n = r->numel(); k < n; ++k) {
    int64_t x = in[0]->i[k], y = in.size() > 1 ? in[1]->i[k] : 0;
    r->i[k] = wrapToType(r->elemType, f(t, x, y));
  }
  return r;
}

static bool cmpF(arith::CmpFPredicate p, float x, float y) {
  using P = arith::CmpFPredicate;
  bool uno = std::isnan(x) || std::isnan(y);
  switch (p) {
  case P::AlwaysFalse:
    return false;
  case P::OEQ:
    return !uno && x == y;
  case P::OGT:
    return !uno && x > y;
  case P::OGE:
    return !uno && x >= y;
  case P::OLT:
    return !uno && x < y;
  case P::OLE:
    return !uno && x <= y;
  case P::ONE:
    return !uno && x != y;
  case P::ORD:
    return !uno;
  case P::UEQ:
    return uno || x == y;
  case P::UGT:
    return uno || x > y;
  case P::UGE:
    return uno || x >= y;
  case P::ULT:
    return uno || x < y;
  case P::ULE:
    return uno || x <= y;
  case P::UNE:
    return uno || x != y;
  case P::UNO:
    return uno;
  case P::AlwaysTrue:
    return true;
  }
  return false;
}

static bool cmpI(arith::CmpIPredicate p, Type t, int64_t x, int64_t y) {
  using P = arith::CmpIPredicate;
  uint64_t ux = asUnsigned(t, x), uy = asUnsigned(t, y);
  switch (p) {
  case P::eq:
    return x == y;
  case P::ne:
    return x != y;
  case P::slt:
    return x < y;
  case P::sle:
    return x <= y;
  case P::sgt:
    return x > y;
  case P::sge:
    return x >= y;
  case P::ult:
    return ux < uy;
  case P::ule:
    return ux <= uy;
  case P::ugt:
    return ux > uy;
  case P::uge:
    return ux >= uy;
  }
  return false;
}

static RtRef constant(arith::ConstantOp op) {
  auto r = makeValue(op.getType());
  Attribute a = op.getValue();
  auto setFromAttr = [&](int64_t k, Attribute e) {
    if (auto fa = dyn_cast<FloatAttr>(e))
      r->f[k] = roundToType(r->elemType, float(fa.getValueAsDouble()));
    else if (auto ia = dyn_cast<IntegerAttr>(e))
      r->i[k] = wrapToType(r->elemType, ia.getValue().getSExtValue());
    else
      fault(op, "unsupported constant");
  };
  if (auto dense = dyn_cast<DenseElementsAttr>(a)) {
    if (dense.isSplat()) {
      Attribute e = dense.getSplatValue<Attribute>();
      for (int64_t k = 0, n = r->numel(); k < n; ++k)
        setFromAttr(k, e);
    } else {
      int64_t k = 0;
      for (Attribute e : dense.getValues<Attribute>())
        setFromAttr(k++, e);
    }
  } else {
    setFromAttr(0, a);
  }
  return r;
}

RtRef evalElementwise(Operation *op, ArrayRef<RtRef> in) {
  using F3 = float (*)(float, float, float);
  (void)sizeof(F3);
  auto divCheck = [op](Type, int64_t, int64_t y) {
    if (y == 0)
      fault(op, "integer division by zero");
  };
#define FLOAT_OP(OP, EXPR)                                                     \
  if (isa<OP>(op))                                                             \
    return mapFloat(op, in, [](float x, float y, float z) -> float {           \
      (void)x;                                                                 \
      (void)y;                                                                 \
      (void)z;                                                                 \
      return EXPR;                                                             \
    });
#define INT_OP(OP, EXPR)                                                       \
  if (isa<OP>(op))                                                             \
    return mapInt(op, in, [&](Type t, int64_t x, int64_t y) -> int64_t {       \
      (void)t;                                                                 \
      return EXPR;                                                             \
    });

  if (auto c = dyn_cast<arith::ConstantOp>(op))
    return constant(c);

  FLOAT_OP(arith::AddFOp, x + y)
  FLOAT_OP(arith::SubFOp, x - y)
  FLOAT_OP(arith::MulFOp, x * y)
  FLOAT_OP(arith::DivFOp, x / y)
  FLOAT_OP(arith::NegFOp, -x)
  FLOAT_OP(arith::RemFOp, std::fmod(x, y))
  FLOAT_OP(arith::MaximumFOp,
           std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y))
  FLOAT_OP(arith::MinimumFOp,
           std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y))
  FLOAT_OP(arith::MaxNumFOp, std::fmax(x, y))
  FLOAT_OP(arith::MinNumFOp, std::fmin(x, y))
  FLOAT_OP(math::ExpOp, std::exp(x))
  FLOAT_OP(math::Exp2Op, std::exp2(x))
  FLOAT_OP(math::LogOp, std::log(x))
  FLOAT_OP(math::Log2Op, std::log2(x))
  FLOAT_OP(math::SqrtOp, std::sqrt(x))
  FLOAT_OP(math::RsqrtOp, 1.0f / std::sqrt(x))
  FLOAT_OP(math::AbsFOp, std::fabs(x))
  FLOAT_OP(math::TanhOp, std::tanh(x))
  FLOAT_OP(math::SinOp, std::sin(x))
  FLOAT_OP(math::CosOp, std::cos(x))
  FLOAT_OP(math::ErfOp, std::erf(x))
  FLOAT_OP(math::FloorOp, std::floor(x))
  FLOAT_OP(math::FmaOp, std::fma(x, y, z))

  INT_OP(arith::AddIOp, x + y)
  INT_OP(arith::SubIOp, x - y)
  INT_OP(arith::MulIOp, x * y)
  INT_OP(arith::DivSIOp, (divCheck(t, x, y), x / y))
  INT_OP(arith::RemSIOp, (divCheck(t, x, y), x % y))
  INT_OP(arith::DivUIOp,
         (divCheck(t, x, y), int64_t(asUnsigned(t, x) / asUnsigned(t, y))))
  INT_OP(arith::RemUIOp,
         (divCheck(t, x, y), int64_t(asUnsigned(t, x) % asUnsigned(t, y))))
  INT_OP(arith::CeilDivSIOp,
         (divCheck(t, x, y), x / y + ((x % y != 0) && ((x < 0) == (y < 0)))))
  INT_OP(arith::FloorDivSIOp,
         (divCheck(t, x, y), x / y - ((x % y != 0) && ((x < 0) != (y < 0)))))
  INT_OP(math::AbsIOp, x < 0 ? -x : x)
  INT_OP(arith::MaxSIOp, std::max(x, y))
  INT_OP(arith::MinSIOp, std::min(x, y))
  INT_OP(arith::MaxUIOp, asUnsigned(t, x) > asUnsigned(t, y) ? x : y)
  INT_OP(arith::MinUIOp, asUnsigned(t, x) < asUnsigned(t, y) ? x : y)
  INT_OP(arith::AndIOp, x & y)
  INT_OP(arith::OrIOp, x | y)
  INT_OP(arith::XOrIOp, x ^ y)
  INT_OP(arith::ShLIOp, int64_t(uint64_t(x) << (y & 63)))
  INT_OP(arith::ShRSIOp, x >> (y & 63))
  INT_OP(arith::ShRUIOp, int64_t(asUnsigned(t, x) >> (y & 63)))
#undef FLOAT_OP
#undef INT_OP

  if (auto c = dyn_cast<arith::CmpFOp>(op)) {
    auto r = makeValue(resultType(op));
    for (int64_t k = 0, n = r->numel(); k < n; ++k)
      r->i[k] = cmpF(c.getPredicate(), in[0]->f[k], in[1]->f[k]);
    return r;
  }
  if (auto c = dyn_cast<arith::CmpIOp>(op)) {
    auto r = makeValue(resultType(op));
    for (int64_t k = 0, n = r->numel(); k < n; ++k)
      r->i[k] =
          cmpI(c.getPredicate(), in[0]->elemType, in[0]->i[k], in[1]->i[k]);
    return r;
  }
  if (isa<arith::SelectOp>(op)) {
    auto r = makeValue(resultType(op));
    bool scalarCond = in[0]->shape.empty();
    for (int64_t k = 0, n = r->numel(); k < n; ++k) {
      bool c = in[0]->i[scalarCond ? 0 : k] != 0;
      const RtValue &src = c ? *in[1] : *in[2];
      if (r->isFloatTy())
        r->f[k] = src.f[k];
      else
        r->i[k] = src.i[k];
    }
    return r;
  }
  // Casts.
  if (isa<arith::ExtFOp, arith::TruncFOp>(op))
    return mapFloat(op, in, [](float x, float, float) { return x; });
  if (isa<arith::SIToFPOp, arith::UIToFPOp>(op)) {
    auto r = makeValue(resultType(op));
    bool u = isa<arith::UIToFPOp>(op);
    for (int64_t k = 0, n = r->numel(); k < n; ++k) {
      int64_t x = in[0]->i[k];
      r->f[k] = roundToType(
          r->elemType, u ? float(asUnsigned(in[0]->elemType, x)) : float(x));
    }
    return r;
  }
  if (isa<arith::FPToSIOp>(op)) {
    auto r = makeValue(resultType(op));
    for (int64_t k = 0, n = r->numel(); k < n; ++k)
      r->i[k] = wrapToType(r->elemType, int64_t(std::trunc(in[0]->f[k])));
    return r;
  }
  if (isa<arith::ExtSIOp, arith::TruncIOp, arith::IndexCastOp>(op)) {
    auto r = makeValue(resultType(op));
    for (int64_t k = 0, n = r->numel(); k < n; ++k) {
      int64_t x = in[0]->i[k];
      if (in[0]->elemType.isInteger(1))
        x = x ? -1 : 0; // sign-extending a set i1 gives all ones
      r->i[k] = wrapToType(r->elemType, x);
    }
    return r;
  }
  if (isa<arith::ExtUIOp>(op)) {
    auto r = makeValue(resultType(op));
    for (int64_t k = 0, n = r->numel(); k < n; ++k)
      r->i[k] = wrapToType(r->elemType,
                           int64_t(asUnsigned(in[0]->elemType, in[0]->i[k])));
    return r;
  }
  return nullptr;
}

} // namespace kiln::ref
