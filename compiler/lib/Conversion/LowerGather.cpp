//===- LowerGather.cpp - loads addressed by values in memory --------------===//
//
// kiln.gather: each register's row comes from the row-index tile (in the
// result's layout, so the thread holds it), its column from the layout;
// consecutive registers along a row go out as one vector load under the
// same conditions as a block load's (the tensor's aligned specialisation,
// the row length and starting column multiples of the width).
// kiln.load_index: one load of the same address in every thread, guarded by
// the index's range (LowerArrivals.cpp: counters).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/Dialect/Kiln/IR/TensorArgs.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

int64_t Lowerer::gatherWidth(GatherOp op) {
  const Layout l = layoutOf(op.getResult());
  if (!isAlignedAccess(op.getPtr()))
    return 1;
  int64_t vec = 1; // registers 0..vec-1: consecutive columns of one row
  for (const Coord &c : l.reg) {
    if (c[0] != 0 || c[1] != vec)
      break;
    vec *= 2;
  }
  vec = std::min<int64_t>(vec, 16 / byteSize(op.getType().getElementType()));
  while (vec > 1 && (knownDivisor(op.getShape()[1]) % vec ||
                     knownDivisor(op.getCol()) % vec))
    vec /= 2;
  return l.duplicateRegMask() & (vec - 1) ? 1 : vec;
}

Regs Lowerer::lowerGather(GatherOp op) {
  const Layout l = layoutOf(op.getResult());
  Type elem = op.getType().getElementType();
  Regs rows = regsIn(op.getRows(), l);
  const int64_t vec = gatherWidth(op);
  SmallVector<Value> tc = threadCoord(l);
  Value base = scalarOf(op.getPtr()), col0 = scalarOf(op.getCol());
  Value nRows = scalarOf(op.getShape()[0]), nCols = scalarOf(op.getShape()[1]);
  auto wide = [&](Value v) {
    return arith::ExtSIOp::create(b, loc, b.getI64Type(), v);
  };
  Value rowStride = wide(scalarOf(op.getStrides()[0]));
  Value colStride = vec > 1 ? i64(1) : wide(scalarOf(op.getStrides()[1]));
  auto vt = VectorType::get({vec}, elem);
  Value padVec = paddingValue(elem, op.getPadding().convertToDouble(), vec);
  if (vec == 1) // one-element vectors all the same, for one code path
    padVec = LLVM::InsertElementOp::create(
        b, loc, LLVM::UndefOp::create(b, loc, vt), padVec, i32(0));
  std::string shape =
      std::to_string(l.shape[0]) + "x" + std::to_string(l.shape[1]);
  note(op, "gather " + shape + ": rows from an index tile, " +
               (vec > 1 ? "vector loads of " + std::to_string(vec) + " elements"
                        : std::string("one load per element")) +
               " to registers" +
               (isAlignedAccess(op.getPtr())
                    ? ""
                    : "; " + unalignedReason(op.getPtr())));
  Regs out{l, {}, {}};
  for (int64_t r = 0; r < l.numRegs(); r += vec) {
    Value row = rows.layout ? rows.regs[r] : rows.scalar;
    Value col = arith::AddIOp::create(
        b, loc, col0,
        arith::AddIOp::create(b, loc, tc[1], i32(l.regCoord(r)[1])));
    // Unsigned compares: negative rows and columns are out of range too.
    Value ok = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, nRows),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, col, nCols));
    Value off = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, wide(row), rowStride),
        arith::MulIOp::create(b, loc, wide(col), colStride));
    off = arith::SelectOp::create(b, loc, ok, off, i64(0));
    Value addr = LLVM::GEPOp::create(b, loc, base.getType(), elem, base,
                                     ValueRange{off});
    Value v = LLVM::LoadOp::create(b, loc, vt, addr,
                                   /*alignment=*/vec * byteSize(elem));
    v = arith::SelectOp::create(b, loc, ok, v, padVec);
    for (int64_t i = 0; i < vec; ++i)
      out.regs.push_back(
          LLVM::ExtractElementOp::create(b, loc, v, i32(i)).getResult());
  }
  return out;
}

/// `access(address)` of element `index` (stride `stride`) of the i32 tensor
/// at `ptr` where 0 <= index < size, else `outside` (of access's type): the
/// value in every thread that runs it.
Value guardedElement(OpBuilder &b, Location loc, Value ptr, Value index,
                     Value size, Value stride, Value outside,
                     llvm::function_ref<Value(Value)> access) {
  Value ok =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, index, size);
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{outside.getType()}, ok,
                                /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value off = arith::MulIOp::create(
      b, loc, arith::ExtSIOp::create(b, loc, b.getI64Type(), index),
      arith::ExtSIOp::create(b, loc, b.getI64Type(), stride));
  Value addr = LLVM::GEPOp::create(b, loc, ptr.getType(), b.getI32Type(), ptr,
                                   ValueRange{off});
  scf::YieldOp::create(b, loc, access(addr));
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, outside);
  return ifOp.getResult(0);
}

Value Lowerer::lowerLoadIndex(LoadIndexOp op) {
  return guardedElement(
      b, loc, scalarOf(op.getPtr()), scalarOf(op.getIndex()),
      scalarOf(op.getSize()), scalarOf(op.getStride()), i32(op.getPadding()),
      [&](Value addr) {
        return LLVM::LoadOp::create(b, loc, b.getI32Type(), addr).getResult();
      });
}

} // namespace kiln::gpu
