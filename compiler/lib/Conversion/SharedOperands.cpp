//===- SharedOperands.cpp - what the lowering stages in shared memory -----===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

using namespace mlir;

namespace kiln::gpu {

llvm::DenseSet<Value> findSharedOperands(func::FuncOp func) {
  llvm::DenseSet<Value> out;
  func.walk([&](LoadOp ld) {
    Type elem = ld.getType().getElementType();
    if (ld.getType().getRank() == 2 && elem.getIntOrFloatBitWidth() == 16 &&
        onlyDotOperand(ld.getResult()))
      out.insert(ld.getResult());
  });
  return out;
}

void Lowerer::planStagedOperands() {
  if (!wgmma)
    return;
  // Whether `v` already lives in shared memory (a dot-only load, viewed).
  std::function<bool(Value)> inShared = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<TransOp, ConvertLayoutOp>(def))
      return inShared(def->getOperand(0));
    return sharedOperands.contains(v);
  };
  src.walk([&](ConvertLayoutOp cv) {
    auto type = cv.getType();
    if (type.getRank() != 2 || byteSize(type.getElementType()) != 2 ||
        cv.getResult().use_empty() || inShared(cv.getSrc()))
      return;
    for (OpOperand &use : cv.getResult().getUses())
      if (!isa<DotOp>(use.getOwner()) || use.getOperandNumber() == 2)
        return;
    Layout from = layoutOf(cv.getSrc()), to = layoutOf(cv.getResult());
    if (from.lane == to.lane && from.warp == to.warp)
      return; // registers are renamed, not moved
    std::optional<SmemTile> t = tileGeometry(from);
    if (!t || t->panelCols != 64 || t->shape[t->rowDim] % 8)
      return; // not a descriptor operand: a conversion to registers
    stagedOperands[cv.getResult()] = stagedBytes(type);
  });
}

int64_t Lowerer::stagedBytes(RankedTensorType type) {
  return SharedPlan::alignUp(type.getNumElements() * 2);
}

bool Lowerer::fedByRing(Operation *loop) {
  if (!producerWarps || !isa_and_nonnull<scf::ForOp>(loop))
    return false;
  for (Operation &op : cast<scf::ForOp>(loop).getBody()->without_terminator())
    if (auto ld = dyn_cast<LoadOp>(op);
        ld && smemBufferBytes.count(ld.getResult()))
      return tmaLoads.count(ld.getResult()); // planTma decided per loop
  return false;
}

void Lowerer::lowerStagedOperand(ConvertLayoutOp op) {
  // A dot that read the previous contents (an iteration ago) is complete in
  // this warp, and after the barrier in every warp.
  for (Operation *user : op.getResult().getUsers())
    if (llvm::is_contained(inFlight, user->getResult(0)))
      waitFor(user->getResult(0));
  Value base = i32(stagedOperands.lookup(op.getResult()));
  auto copies = stagedCopies.find(op.getResult());
  if (copies != stagedCopies.end() && ringSlotHere) {
    // This stage's copy (planStagedCopies): no barrier before.
    Value other = arith::AddIOp::create(
        b, loc, i32(copies->second),
        arith::MulIOp::create(
            b, loc, arith::SubIOp::create(b, loc, ringSlotHere, i32(1)),
            i32(stagedBytes(cast<RankedTensorType>(op.getType())))));
    base = arith::SelectOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ringSlotHere,
                              i32(0)),
        base, other);
  } else {
    barrier();
  }
  Value src = op.getSrc();
  std::optional<SmemTile> t =
      stage(regsIn(src, layoutOf(src)), elementType(src.getType()), base);
  if (!t)
    throw InternalError("GPU lowering: cannot stage a dot operand");
  barrier(); // fenced for wgmma's reads
  smemTiles[op.getResult()] = *t;
}

} // namespace kiln::gpu
