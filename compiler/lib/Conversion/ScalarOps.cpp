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
  return b
      .create<LLVM::CallIntrinsicOp>(loc, b.getF32Type(), b.getStringAttr(name),
                                     ValueRange{x})
      .getResult(0);
}

Value Lowerer::scalarOp(Operation *op, ValueRange operands, Type resultElem) {
  if (isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op>(op)) {
    Value x = operands[0];
    Type t = x.getType();
    if (!t.isF32())
      x = b.create<arith::ExtFOp>(loc, b.getF32Type(), x);
    Value r;
    if (isa<math::Exp2Op>(op))
      r = intrinsic(b, loc, "llvm.nvvm.ex2.approx.ftz.f", x);
    else if (isa<math::ExpOp>(op))
      r = intrinsic(b, loc, "llvm.nvvm.ex2.approx.ftz.f",
                    b.create<arith::MulFOp>(
                        loc, x,
                        b.create<arith::ConstantOp>(
                            loc, b.getF32FloatAttr(1.4426950408889634f))));
    else if (isa<math::Log2Op>(op))
      r = intrinsic(b, loc, "llvm.nvvm.lg2.approx.ftz.f", x);
    else
      r = b.create<arith::MulFOp>(
          loc, intrinsic(b, loc, "llvm.nvvm.lg2.approx.ftz.f", x),
          b.create<arith::ConstantOp>(loc,
                                      b.getF32FloatAttr(0.6931471805599453f)));
    if (!t.isF32())
      r = b.create<arith::TruncFOp>(loc, t, r);
    return r;
  }
  if (isa<ConvertOp>(op)) {
    Value x = operands[0];
    Type from = x.getType(), to = resultElem;
    bool ff = isa<FloatType>(from), ft = isa<FloatType>(to);
    if (ff && ft) {
      if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
        return b.create<arith::ExtFOp>(loc, to, x);
      if (from == to)
        return x;
      if (from.getIntOrFloatBitWidth() ==
          to.getIntOrFloatBitWidth()) // bf16<->f16
        return b.create<arith::TruncFOp>(
            loc, to, b.create<arith::ExtFOp>(loc, b.getF32Type(), x));
      return b.create<arith::TruncFOp>(loc, to, x);
    }
    if (!ff && ft)
      return from.isInteger(1) ? Value(b.create<arith::UIToFPOp>(loc, to, x))
                               : Value(b.create<arith::SIToFPOp>(loc, to, x));
    if (ff && !ft) {
      if (to.isInteger(1))
        return b.create<arith::CmpFOp>(
            loc, arith::CmpFPredicate::UNE, x,
            b.create<arith::ConstantOp>(loc, b.getFloatAttr(from, 0.0)));
      return b.create<arith::FPToSIOp>(loc, to, x);
    }
    unsigned wf = from.getIntOrFloatBitWidth(), wt = to.getIntOrFloatBitWidth();
    if (wf == wt)
      return x;
    if (to.isInteger(1))
      return b.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::ne, x,
          b.create<arith::ConstantIntOp>(loc, 0, wf));
    if (wf < wt)
      return from.isInteger(1) ? Value(b.create<arith::ExtUIOp>(loc, to, x))
                               : Value(b.create<arith::ExtSIOp>(loc, to, x));
    return b.create<arith::TruncIOp>(loc, to, x);
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
