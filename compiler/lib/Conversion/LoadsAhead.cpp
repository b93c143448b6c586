//===- LoadsAhead.cpp - which loads a loop fetches ahead ------------------===//
//
// A load in a loop body whose address depends only on the induction
// variable and values from outside the loop (its iteration slice) can be
// issued an iteration early: by cp.async or TMA into shared memory where a
// dot reads it (canPrefetch), or into registers where its copy is small
// (loadsAhead).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llvm/ADT/SetVector.h"

#include <functional>

using namespace mlir;

namespace kiln::gpu {

bool Lowerer::canPrefetch(LoadOp ld, SmallVectorImpl<Operation *> *slice) {
  if (!isAlignedAccess(ld.getPtr()) || !sharedOperands.count(ld.getResult()) ||
      ld.getPadding().convertToDouble() != 0.0)
    return false; // cp.async fills with zeros only
  auto forOp = dyn_cast<scf::ForOp>(ld->getParentOp());
  if (!forOp)
    return false;
  const Layout l = layoutOf(ld.getResult());
  // Rows of any length: TMA fills past their end with zeros, and cp.async
  // copies the last vector's bytes that lie in the row (issueAsyncCopy).
  if (vectorWidth(l) < 8 || byteSize(ld.getType().getElementType()) != 2 ||
      knownDivisor(ld.getOffsets().back()) % 8 || !tileGeometry(l))
    return false;
  return iterationSlice(ld, slice);
}

bool Lowerer::loadsAhead(LoadOp ld) {
  // 16 registers a thread at most: the next iteration's copy is live
  // through the whole body.
  constexpr int64_t kMaxRegs = 16;
  Value r = ld.getResult();
  return isa_and_nonnull<scf::ForOp>(ld->getParentOp()) &&
         !smemBufferBytes.count(r) && !sharedOperands.count(r) &&
         !residentMbarrier.count(r) && layoutOf(r).numRegs() <= kMaxRegs &&
         iterationSlice(ld, nullptr);
}

bool Lowerer::iterationSlice(LoadOp ld, SmallVectorImpl<Operation *> *slice) {
  auto forOp = dyn_cast<scf::ForOp>(ld->getParentOp());
  if (!forOp)
    return false;
  llvm::SetVector<Operation *> ops;
  bool ok = true;
  std::function<void(Value)> visit = [&](Value v) {
    if (!ok || v == forOp.getInductionVar())
      return;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      ok &= arg.getOwner() != forOp.getBody();
      return;
    }
    Operation *d = v.getDefiningOp();
    if (!forOp->isAncestor(d))
      return;
    if (d->getBlock() != forOp.getBody() || d->getNumRegions() ||
        d->getNumResults() != 1 ||
        isa<RankedTensorType>(d->getResult(0).getType()) ||
        !(isa<AddPtrOp>(d) || d->getDialect()->getNamespace() == "arith")) {
      ok = false;
      return;
    }
    if (ops.insert(d))
      for (Value o : d->getOperands())
        visit(o);
  };
  for (Value o : ld->getOperands())
    visit(o);
  if (ok && slice) {
    SmallVector<Operation *> sorted(ops.begin(), ops.end());
    llvm::sort(sorted, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    slice->append(sorted.begin(), sorted.end());
  }
  return ok;
}

bool Lowerer::pointerMovesWith(Value ptr, Value iv) {
  // Only the loop body's ops can move with its induction variable (as in
  // iterationSlice): the walk stops at values defined outside it.
  Block *body = cast<BlockArgument>(iv).getOwner();
  llvm::SmallVector<Value> work{ptr};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (v == iv)
      return true;
    Operation *d = v.getDefiningOp();
    if (!d || d->getBlock() != body || !seen.insert(v).second)
      continue;
    if (isa<AddPtrOp>(d) || d->getDialect()->getNamespace() == "arith")
      work.append(d->operand_begin(), d->operand_end());
  }
  return false;
}

} // namespace kiln::gpu
