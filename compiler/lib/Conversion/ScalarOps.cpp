//===- ScalarOps.cpp - one element of an elementwise op -------------------===//
//
// Elementwise ops become the same arith op on scalars, except the
// transcendental functions, which take the GPU's fast approximate path
// (ex2.approx / lg2.approx, as Triton does for exp), computed in f32.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

using namespace mlir;

namespace kiln::gpu {

static Value intrinsic(OpBuilder &b, Location loc, const char *name, Value x) {
  return LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(),
                                       b.getStringAttr(name), ValueRange{x})
      .getResult(0);
}

/// Whether `op` asks for approximate functions (the DSL's MathMode::Fast).
static bool approximate(Operation *op) {
  auto fm = op->getAttrOfType<arith::FastMathFlagsAttr>("fastmath");
  return fm &&
         arith::bitEnumContainsAll(fm.getValue(), arith::FastMathFlags::afn);
}

Value Lowerer::scalarOp(Operation *op, ValueRange operands, Type resultElem) {
  // tanh, sin, cos, rsqrt, erf, floor, abs: in f32. Fast: the approximate
  // instructions; otherwise the math op, which ConvertKilnToLLVM expands
  // into a polynomial (tanh, sin, cos, erf) or LLVM lowers exactly.
  if (isa<math::TanhOp, math::SinOp, math::CosOp, math::RsqrtOp, math::ErfOp,
          math::FloorOp, math::AbsFOp>(op)) {
    Value x = operands[0];
    Type t = x.getType();
    if (!t.isF32())
      x = arith::ExtFOp::create(b, loc, b.getF32Type(), x);
    Value r;
    const bool fast = approximate(op);
    if (fast && isa<math::TanhOp>(op)) // sm_75+; LLVM has no intrinsic
      r = LLVM::InlineAsmOp::create(
              b, loc, b.getF32Type(), ValueRange{x}, "tanh.approx.f32 $0, $1;",
              "=f,f", /*has_side_effects=*/false, /*is_align_stack=*/false,
              LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr())
              .getResult(0);
    else if (fast && isa<math::SinOp>(op))
      r = intrinsic(b, loc, "llvm.nvvm.sin.approx.ftz.f", x);
    else if (fast && isa<math::CosOp>(op))
      r = intrinsic(b, loc, "llvm.nvvm.cos.approx.ftz.f", x);
    else if (fast && isa<math::RsqrtOp>(op))
      r = intrinsic(b, loc, "llvm.nvvm.rsqrt.approx.ftz.f", x);
    else if (isa<math::RsqrtOp>(op))
      r = arith::DivFOp::create(
          b, loc, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f)),
          math::SqrtOp::create(b, loc, x));
    else {
      OperationState st(loc, op->getName());
      st.addOperands(x);
      st.addTypes(b.getF32Type());
      r = b.create(st)->getResult(0);
    }
    if (!t.isF32())
      r = arith::TruncFOp::create(b, loc, t, r);
    return r;
  }
  if (isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op>(op)) {
    Value x = operands[0];
    Type t = x.getType();
    if (!t.isF32())
      x = arith::ExtFOp::create(b, loc, b.getF32Type(), x);
    Value r;
    if (op->hasAttr("kiln.precise")) {
      // The math op in f32, expanded into a polynomial by ConvertKilnToLLVM;
      // exp2(x) as exp(x·ln 2).
      if (isa<math::Exp2Op>(op))
        r = math::ExpOp::create(
            b, loc,
            arith::MulFOp::create(
                b, loc, x,
                arith::ConstantOp::create(
                    b, loc, b.getF32FloatAttr(0.6931471805599453f))));
      else {
        OperationState st(loc, op->getName());
        st.addOperands(x);
        st.addTypes(b.getF32Type());
        r = b.create(st)->getResult(0);
      }
    } else if (isa<math::Exp2Op>(op))
      r = intrinsic(b, loc, "llvm.nvvm.ex2.approx.ftz.f", x);
    else if (isa<math::ExpOp>(op))
      r = intrinsic(b, loc, "llvm.nvvm.ex2.approx.ftz.f",
                    arith::MulFOp::create(
                        b, loc, x,
                        arith::ConstantOp::create(
                            b, loc, b.getF32FloatAttr(1.4426950408889634f))));
    else if (isa<math::Log2Op>(op))
      r = intrinsic(b, loc, "llvm.nvvm.lg2.approx.ftz.f", x);
    else
      r = arith::MulFOp::create(
          b, loc, intrinsic(b, loc, "llvm.nvvm.lg2.approx.ftz.f", x),
          arith::ConstantOp::create(b, loc,
                                    b.getF32FloatAttr(0.6931471805599453f)));
    if (!t.isF32())
      r = arith::TruncFOp::create(b, loc, t, r);
    return r;
  }
  if (isa<ConvertOp>(op)) {
    Value x = operands[0];
    Type from = x.getType(), to = resultElem;
    bool ff = isa<FloatType>(from), ft = isa<FloatType>(to);
    if (ff && ft) {
      if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
        return arith::ExtFOp::create(b, loc, to, x);
      if (from == to)
        return x;
      if (from.getIntOrFloatBitWidth() ==
          to.getIntOrFloatBitWidth()) // bf16<->f16
        return arith::TruncFOp::create(
            b, loc, to, arith::ExtFOp::create(b, loc, b.getF32Type(), x));
      return arith::TruncFOp::create(b, loc, to, x);
    }
    if (!ff && ft)
      return from.isInteger(1) ? Value(arith::UIToFPOp::create(b, loc, to, x))
                               : Value(arith::SIToFPOp::create(b, loc, to, x));
    if (ff && !ft) {
      if (to.isInteger(1))
        return arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::UNE, x,
            arith::ConstantOp::create(b, loc, b.getFloatAttr(from, 0.0)));
      return arith::FPToSIOp::create(b, loc, to, x);
    }
    unsigned wf = from.getIntOrFloatBitWidth(), wt = to.getIntOrFloatBitWidth();
    if (wf == wt)
      return x;
    if (to.isInteger(1))
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x,
                                   arith::ConstantIntOp::create(b, loc, 0, wf));
    if (wf < wt)
      return from.isInteger(1) ? Value(arith::ExtUIOp::create(b, loc, to, x))
                               : Value(arith::ExtSIOp::create(b, loc, to, x));
    return arith::TruncIOp::create(b, loc, to, x);
  }
  if (op->getDialect()->getNamespace() != "arith" &&
      op->getDialect()->getNamespace() != "math")
    throw Error("GPU lowering: unsupported elementwise op " +
                op->getName().getStringRef().str());
  OperationState st(loc, op->getName());
  st.addOperands(operands);
  st.addTypes(resultElem);
  st.addAttributes(op->getAttrs());
  return b.create(st)->getResult(0);
}

} // namespace kiln::gpu
