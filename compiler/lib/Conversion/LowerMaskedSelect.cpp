//===- LowerMaskedSelect.cpp - a select skipped where its mask is all true ===//
//
// Bounds and causal masks compare index ranges: `where(row(arange(BN) + n0)
// < N, x, -inf)`. In a loop over blocks the comparison is true for every
// element of every block but the last, yet each step would pay a compare and
// a select per element (in a flash-attention step as much ALU work as a
// third of its softmax). Here, when a select's condition is such a
// comparison, each thread first compares the ends of the index ranges it
// holds (a few scalar ops) and takes the select's true operand as it is when
// every one of its elements is known to pass; only the other threads run the
// per-element selects. Under kiln.skip_passing_masks (the kernel's choice:
// where few steps need the mask the branch pays, elsewhere it costs ~1%).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace kiln::gpu {

namespace {

/// The least and greatest of the values a thread holds of an i32 tile, as
/// i64 scalars, and whether they are exact (no i32 wrap-around on the way).
struct ThreadRange {
  Value lo, hi;
  Value exact; ///< i1
};

} // namespace

/// A thread's range of an i32 tile built from iota, uniform values, sums,
/// differences and shape changes that keep each thread's elements (expand,
/// broadcast, transpose); nullopt for anything else.
static std::optional<ThreadRange> threadRange(Lowerer &L, Value v) {
  OpBuilder &b = L.b;
  auto tileType = dyn_cast<RankedTensorType>(v.getType());
  if (!tileType || !tileType.getElementType().isInteger(32))
    return std::nullopt;
  auto wide = [&](Value x) {
    return arith::ExtSIOp::create(b, L.loc, b.getI64Type(), x).getResult();
  };
  auto yes = [&] { return arith::ConstantIntOp::create(b, L.loc, 1, 1); };
  Operation *op = v.getDefiningOp();
  if (const Regs *have = L.loweredTile(v); have && !have->layout) {
    Value s = wide(have->scalar); // uniform
    return ThreadRange{s, s, yes()};
  }
  if (!op)
    return std::nullopt;
  if (auto io = dyn_cast<IotaOp>(op)) {
    Layout l = L.layoutOf(v);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (int64_t r = 0; r < l.numRegs(); ++r) {
      lo = std::min(lo, l.regCoord(r)[0]);
      hi = std::max(hi, l.regCoord(r)[0]);
    }
    Value t = wide(L.threadCoord(l)[0]);
    return ThreadRange{arith::AddIOp::create(b, L.loc, t, L.i64(lo)),
                       arith::AddIOp::create(b, L.loc, t, L.i64(hi)), yes()};
  }
  if (isa<ExpandDimsOp, BroadcastOp, TransOp>(op))
    return threadRange(L, op->getOperand(0));
  bool add = isa<arith::AddIOp>(op), sub = isa<arith::SubIOp>(op);
  if (!add && !sub)
    return std::nullopt;
  std::optional<ThreadRange> x = threadRange(L, op->getOperand(0));
  std::optional<ThreadRange> y =
      x ? threadRange(L, op->getOperand(1)) : std::nullopt;
  if (!y)
    return std::nullopt;
  ThreadRange out;
  if (add) {
    out.lo = arith::AddIOp::create(b, L.loc, x->lo, y->lo);
    out.hi = arith::AddIOp::create(b, L.loc, x->hi, y->hi);
  } else {
    out.lo = arith::SubIOp::create(b, L.loc, x->lo, y->hi);
    out.hi = arith::SubIOp::create(b, L.loc, x->hi, y->lo);
  }
  // The i32 elements equal these i64 sums only where no sum wraps.
  auto cmp = [&](arith::CmpIPredicate p, Value a, Value c) {
    return arith::CmpIOp::create(b, L.loc, p, a, c).getResult();
  };
  Value fits =
      arith::AndIOp::create(b, L.loc,
                            cmp(arith::CmpIPredicate::sge, out.lo,
                                L.i64(std::numeric_limits<int32_t>::min())),
                            cmp(arith::CmpIPredicate::sle, out.hi,
                                L.i64(std::numeric_limits<int32_t>::max())));
  out.exact = arith::AndIOp::create(
      b, L.loc, arith::AndIOp::create(b, L.loc, x->exact, y->exact), fits);
  return out;
}

/// An i1 scalar that is true only when every element of the i1 tile `cond`
/// that this thread holds is true; null when the condition is not a signed
/// comparison of two ranges (or a conjunction of them).
static Value allTrueInThread(Lowerer &L, Value cond) {
  Operation *op = cond.getDefiningOp();
  if (!op)
    return {};
  if (isa<ExpandDimsOp, BroadcastOp, TransOp>(op))
    return allTrueInThread(L, op->getOperand(0));
  if (isa<arith::AndIOp>(op)) {
    Value x = allTrueInThread(L, op->getOperand(0));
    Value y = x ? allTrueInThread(L, op->getOperand(1)) : Value();
    return y ? arith::AndIOp::create(L.b, L.loc, x, y).getResult() : Value();
  }
  auto cmp = dyn_cast<arith::CmpIOp>(op);
  if (!cmp)
    return {};
  using P = arith::CmpIPredicate;
  P p = cmp.getPredicate();
  if (p != P::slt && p != P::sle && p != P::sgt && p != P::sge)
    return {};
  std::optional<ThreadRange> x = threadRange(L, cmp.getLhs());
  std::optional<ThreadRange> y =
      x ? threadRange(L, cmp.getRhs()) : std::nullopt;
  if (!y)
    return {};
  // x < y everywhere when x's greatest is below y's least, and so on.
  bool below = p == P::slt || p == P::sle;
  Value all = below ? arith::CmpIOp::create(L.b, L.loc, p, x->hi, y->lo)
                    : arith::CmpIOp::create(L.b, L.loc, p, x->lo, y->hi);
  Value exact = arith::AndIOp::create(L.b, L.loc, x->exact, y->exact);
  return arith::AndIOp::create(L.b, L.loc, all, exact);
}

std::optional<Regs> Lowerer::lowerMaskedSelect(arith::SelectOp op,
                                               const Layout &l) {
  if (!skipPassingMasks || !isa<RankedTensorType>(op.getCondition().getType()))
    return std::nullopt;
  Value allTrue = allTrueInThread(*this, op.getCondition());
  if (!allTrue)
    return std::nullopt;
  Regs cond = regsIn(op.getCondition(), l);
  Regs yes = regsIn(op.getTrueValue(), l), no = regsIn(op.getFalseValue(), l);
  SmallVector<Type> types;
  for (Value v : yes.regs)
    types.push_back(v.getType());
  auto ifOp = scf::IfOp::create(b, loc, types, allTrue, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, loc, yes.regs);
    b.setInsertionPointToStart(ifOp.elseBlock());
    SmallVector<Value> picked;
    for (int64_t r = 0; r < l.numRegs(); ++r)
      picked.push_back(arith::SelectOp::create(b, loc, cond.regs[r],
                                               yes.regs[r], no.regs[r]));
    scf::YieldOp::create(b, loc, picked);
  }
  note(op, "select: skipped in threads whose index ranges pass the "
           "condition everywhere (a check per thread, then a branch)");
  return Regs{l, SmallVector<Value>(ifOp.getResults()), {}};
}

} // namespace kiln::gpu
