//===- OverlapDots.cpp - the last dot of a loop one iteration behind
//-------===//
//
// A loop body that ends in a dot accumulating into a carried tile (attention:
// S = Q·Kᵀ; softmax; O = P·V + O·α) keeps the tensor cores idle while its
// elementwise part runs. Run the last dot one iteration behind: iteration j
// issues its first dot (Q·K_jᵀ), then the previous iteration's last dot
// (P_{j-1}·V_{j-1} + O'_{j-1}), and its elementwise part runs while that
// second dot is still on the tensor cores (the lowering waits for a dot only
// when its result is read). The loop carries the last dot's operands (P and
// O') instead of its result; they start as a zero tile and the accumulator's
// initial value, so the first iteration's extra dot adds nothing, and one dot
// after the loop finishes the last iteration (or, for a loop that does not
// run, returns the initial value). The last dot's operand loaded in the loop
// (V) is read at the previous iteration's offset, clamped to the loop's start
// for the first iteration, so the load stays a function of the induction
// variable that the software pipeline can fetch ahead.
//
// Not in a loop that runs at most once (a blocked loop's remainder), where
// there is no next iteration to overlap and the carried operands would only
// cost registers and the V buffer shared memory. But a loop that runs at
// most once right before the overlapped one, whose results are all its
// initial values and whose body ends in the same dot of a B loaded alike (a
// masked first key block, then the whole ones), becomes its first
// iteration: its last dot moves into the loop's first iteration, in place
// of the dot of a zero tile, and the loop carries in its operands.
// Where the schedule also asks (kiln.peel_first_iteration), a loop with no
// such loop before it gets one: its first iteration, peeled (a loop from
// max(lb, e - step) to e = min(lb + step, ub)), so that no iteration issues
// the dot of a zero tile (nor loads V for it): at 256-1024 keys a tile's
// extra dot cost 5-13% (H200, D=128 attention), but the peeled kernel ran
// 1-2% slower from 4096 keys, where a tile's one dot is a small share.
// Only where the kernel's schedule asks (kiln.overlap_dots). A loop gets
// kiln.overlapped, or kiln.not_overlapped = "<why>" when it cannot be done.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace kiln {
#define GEN_PASS_DEF_KILNOVERLAPDOTS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Whether `v` can be recomputed outside `loop` with the induction variable
/// replaced: it is defined outside, is the induction variable, or comes from
/// side-effect-free scalar ops on such values.
bool recomputable(Value v, scf::ForOp loop) {
  if (v == loop.getInductionVar() ||
      !loop->isAncestor(v.getParentBlock()->getParentOp()))
    return true;
  Operation *op = v.getDefiningOp();
  if (!op || op->getBlock() != loop.getBody() || op->getNumRegions() ||
      !isPure(op) || isa<RankedTensorType>(v.getType()))
    return false;
  return llvm::all_of(op->getOperands(),
                      [&](Value o) { return recomputable(o, loop); });
}

/// Clones the computation of `v` at the builder's point with the induction
/// variable mapped to `iv` (values defined outside the loop stay).
Value recompute(OpBuilder &b, Value v, scf::ForOp loop, IRMapping &map) {
  if (Value m = map.lookupOrNull(v))
    return m;
  Operation *op = v.getDefiningOp();
  if (!op || op->getBlock() != loop.getBody())
    return v;
  for (Value o : op->getOperands())
    recompute(b, o, loop, map);
  Operation *copy = b.clone(*op, map);
  return copy->getResult(cast<OpResult>(v).getResultNumber());
}

/// Whether `loop` runs at most once: a constant trip count <= 1, the
/// remainder loop of a blocked one, for (i = hi / step * step; i < hi;
/// i += step), for (i = max(a, hi - step); i < hi; i += step), or for (i = a;
/// i < a + step; i += step), with a constant step.
bool runsAtMostOnce(scf::ForOp loop) {
  auto constant = [](Value v) -> std::optional<int64_t> {
    if (auto c = v.getDefiningOp<arith::ConstantIntOp>())
      return c.value();
    return std::nullopt;
  };
  std::optional<int64_t> lo = constant(loop.getLowerBound()),
                         hi = constant(loop.getUpperBound()),
                         step = constant(loop.getStep());
  if (lo && hi && step && *step > 0)
    return *hi - *lo <= *step;
  // for (i = a; i < a + step; i += step)
  if (auto add = loop.getUpperBound().getDefiningOp<arith::AddIOp>();
      add && step)
    for (int side = 0; side < 2; ++side)
      if (add->getOperand(side) == loop.getLowerBound() &&
          constant(add->getOperand(1 - side)) == step)
        return true;
  // for (i = max(a, hi - step); i < hi; i += step)
  if (auto mx = loop.getLowerBound().getDefiningOp<arith::MaxSIOp>();
      mx && step)
    for (Value side : mx->getOperands())
      if (auto sub = side.getDefiningOp<arith::SubIOp>();
          sub && sub.getLhs() == loop.getUpperBound() &&
          constant(sub.getRhs()) == step)
        return true;
  auto mul = loop.getLowerBound().getDefiningOp<arith::MulIOp>();
  if (!step || *step < 1 || !mul)
    return false;
  for (int side = 0; side < 2; ++side) {
    auto div = mul->getOperand(side).getDefiningOp<arith::DivSIOp>();
    if (div && constant(mul->getOperand(1 - side)) == step &&
        div.getLhs() == loop.getUpperBound() && constant(div.getRhs()) == step)
      return true;
  }
  return false;
}

/// Whether `a` in `la` and `b` in `lb` are the same function of their loops'
/// induction variables (the same values outside, or the same pure ops of
/// such in the bodies).
bool sameOfIv(Value a, scf::ForOp la, Value b, scf::ForOp lb) {
  if (a == la.getInductionVar() || b == lb.getInductionVar())
    return a == la.getInductionVar() && b == lb.getInductionVar();
  if (a == b)
    return true;
  Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
  if (!x || !y || x->getBlock() != la.getBody() ||
      y->getBlock() != lb.getBody() || x->getName() != y->getName() ||
      x->getAttrDictionary() != y->getAttrDictionary() ||
      x->getNumOperands() != y->getNumOperands() || x->getNumRegions() ||
      a.getType() != b.getType() ||
      cast<OpResult>(a).getResultNumber() !=
          cast<OpResult>(b).getResultNumber())
    return false;
  return llvm::all_of(
      llvm::zip(x->getOperands(), y->getOperands()), [&](auto pq) {
        return sameOfIv(std::get<0>(pq), la, std::get<1>(pq), lb);
      });
}

/// The last dot of `loop`'s body when it is its only use, yielded as the
/// k-th result, with a B loaded in the body for it alone.
DotOp lastYieldedDot(scf::ForOp loop, unsigned k) {
  Block *body = loop.getBody();
  DotOp last;
  int dots = 0;
  for (Operation &op : *body)
    if (auto d = dyn_cast<DotOp>(op)) {
      last = d;
      ++dots;
    }
  if (dots < 2 || !last->hasOneUse() ||
      *last->user_begin() != body->getTerminator() ||
      last->use_begin()->getOperandNumber() != k)
    return {};
  auto ld = last.getB().getDefiningOp<LoadOp>();
  if (!ld || ld->getBlock() != body || !ld->hasOneUse())
    return {};
  return last;
}

/// The loop before `loop` that can be its first iteration: it runs at most
/// once, its results are `loop`'s initial values and used nowhere else, and
/// its body's last dot is `last`'s, of the same A type and a B that is the
/// same function of its induction variable.
scf::ForOp firstIterationBefore(scf::ForOp loop, DotOp last, unsigned k) {
  ValueRange inits = loop.getInitArgs();
  auto prev =
      inits.empty() ? scf::ForOp() : inits[0].getDefiningOp<scf::ForOp>();
  if (!prev || prev->getBlock() != loop->getBlock() ||
      prev.getNumResults() != inits.size() || !runsAtMostOnce(prev))
    return {};
  for (auto [i, v] : llvm::enumerate(inits))
    if (v != prev.getResult(i) || !v.hasOneUse())
      return {};
  DotOp first = lastYieldedDot(prev, k);
  auto ld = last.getB().getDefiningOp<LoadOp>();
  if (!first || !ld || ld->getBlock() != loop.getBody() ||
      first.getA().getType() != last.getA().getType() ||
      !sameOfIv(first.getB(), prev, last.getB(), loop))
    return {};
  return prev;
}

/// Maps `from`'s induction variable and iteration arguments to `to`'s, for
/// cloning `from`'s body into `to`.
IRMapping bodyMapping(scf::ForOp from, scf::ForOp to) {
  IRMapping map;
  map.map(from.getInductionVar(), to.getInductionVar());
  for (auto [a, b] :
       llvm::zip(from.getRegionIterArgs(), to.getRegionIterArgs()))
    map.map(a, b);
  return map;
}

/// `prev` without its last dot (nor that dot's load): it yields the dot's
/// accumulator in its place and the dot's A after its results (`zeroA` when
/// it does not run).
scf::ForOp withoutLastDot(scf::ForOp prev, unsigned k, Value zeroA) {
  DotOp last = lastYieldedDot(prev, k);
  Operation *ld = last.getB().getDefiningOp();
  OpBuilder b(prev);
  SmallVector<Value> inits(prev.getInitArgs());
  inits.push_back(zeroA);
  auto split = scf::ForOp::create(b, prev.getLoc(), prev.getLowerBound(),
                                  prev.getUpperBound(), prev.getStep(), inits);
  split->setDiscardableAttrs(prev->getDiscardableAttrDictionary());
  split->removeAttr("kiln.not_overlapped");
  split->setAttr("kiln.first_iteration_of_next", b.getUnitAttr());
  IRMapping map = bodyMapping(prev, split);
  b.setInsertionPointToStart(split.getBody());
  for (Operation &op : prev.getBody()->without_terminator())
    if (&op != last.getOperation() && &op != ld)
      b.clone(op, map);
  SmallVector<Value> outs;
  auto yield = cast<scf::YieldOp>(prev.getBody()->getTerminator());
  for (auto [i, v] : llvm::enumerate(yield.getOperands()))
    outs.push_back(map.lookupOrDefault(i == k ? last.getAcc() : v));
  outs.push_back(map.lookupOrDefault(last.getA()));
  scf::YieldOp::create(b, yield.getLoc(), outs);
  return split;
}

/// Peels `loop`'s first iteration into a loop of its own right before it,
/// from max(lb, e - step) to e = min(lb + step, ub) (it runs once, or not
/// at all where `loop` did not run), which then starts at e and takes the
/// peeled loop's results as its initial values: a loop that
/// firstIterationBefore accepts, so that the first iteration's last dot
/// computes something rather than a zero tile's product.
void peelFirstIteration(scf::ForOp loop) {
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value lb = loop.getLowerBound(), ub = loop.getUpperBound(),
        step = loop.getStep();
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, lb, step), ub);
  Value start = arith::MaxSIOp::create(
      b, loc, lb, arith::SubIOp::create(b, loc, end, step));
  auto peel = scf::ForOp::create(b, loc, start, end, step, loop.getInitArgs());
  peel->setDiscardableAttrs(loop->getDiscardableAttrDictionary());
  IRMapping map = bodyMapping(loop, peel);
  b.setInsertionPointToStart(peel.getBody());
  for (Operation &op : loop.getBody()->without_terminator())
    b.clone(op, map);
  SmallVector<Value> outs;
  for (Value v : loop.getBody()->getTerminator()->getOperands())
    outs.push_back(map.lookupOrDefault(v));
  scf::YieldOp::create(b, loc, outs);
  loop.getLowerBoundMutable().assign(end);
  loop.getInitArgsMutable().assign(peel.getResults());
}

/// Rewrites `loop`; returns why not when it cannot.
std::string overlap(scf::ForOp loop) {
  if (runsAtMostOnce(loop))
    return "the loop runs at most once (nothing to overlap with)";
  Block *body = loop.getBody();
  SmallVector<DotOp> dots;
  for (Operation &op : *body)
    if (auto d = dyn_cast<DotOp>(op))
      dots.push_back(d);
  if (dots.size() < 2)
    return "the body has fewer than two dots";
  DotOp first = dots.front(), last = dots.back();
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  if (!last->hasOneUse() || *last->user_begin() != yield)
    return "the last dot's result is used other than carried";
  unsigned k = last->use_begin()->getOperandNumber();
  // The iteration argument that held the last dot's result: in the rotated
  // body, the previous iteration's last dot computes it.
  BlockArgument carried = loop.getRegionIterArgs()[k];
  auto ld = last.getB().getDefiningOp<LoadOp>();
  bool bInLoop = loop->isAncestor(last.getB().getParentBlock()->getParentOp());
  if (bInLoop && (!ld || ld->getBlock() != body || !ld->hasOneUse()))
    return "the last dot's B operand is computed in the loop, not loaded";
  // The last dot's B, loaded in the loop: reloaded at other offsets.
  const bool loadsB = ld && bInLoop;
  if (loadsB)
    for (Value o : ld->getOperands())
      if (!recomputable(o, loop))
        return "the last dot's B load has an address that is not a function "
               "of the induction variable";

  scf::ForOp prev = loadsB ? firstIterationBefore(loop, last, k) : nullptr;
  // Without such a loop, and where the schedule asks, its first iteration
  // becomes one (when the step is a constant, which runsAtMostOnce needs to
  // see that it runs once).
  if (loadsB && !prev && loop.getStep().getDefiningOp<arith::ConstantOp>() &&
      loop->getParentOfType<func::FuncOp>()->hasAttr(
          "kiln.peel_first_iteration")) {
    peelFirstIteration(loop);
    prev = firstIterationBefore(loop, last, k);
    assert(prev && "a peeled first iteration is the loop's first iteration");
  }
  OpBuilder b(prev ? prev : loop);
  Location loc = loop.getLoc();
  Value lb = loop.getLowerBound(), step = loop.getStep();
  auto aTy = cast<RankedTensorType>(last.getA().getType());
  Value zeroA = arith::ConstantOp::create(
      b, loc, aTy,
      DenseElementsAttr::get(aTy, b.getFloatAttr(aTy.getElementType(), 0.0)));
  SmallVector<Value> inits(loop.getInitArgs());
  // The first iteration's offset when `prev` is it (it runs at its lower
  // bound, if at all).
  Value firstIv;
  if (prev) {
    scf::ForOp split = withoutLastDot(prev, k, zeroA);
    inits.assign(split.getResults().begin(), split.getResults().end());
    firstIv = split.getLowerBound();
    prev.replaceAllUsesWith(
        split.getResults().take_front(prev.getNumResults()));
    prev.erase();
  } else {
    // inits[k] (the accumulator) now carries O'; then P.
    inits.push_back(zeroA);
  }
  b.setInsertionPoint(loop);
  auto rotated =
      scf::ForOp::create(b, loc, lb, loop.getUpperBound(), step, inits);
  rotated->setDiscardableAttrs(loop->getDiscardableAttrDictionary());
  rotated->setAttr("kiln.overlapped", b.getUnitAttr());
  Block *nb = rotated.getBody();
  const unsigned n = loop.getNumRegionIterArgs();
  Value iv = rotated.getInductionVar(), pCarried = nb->getArgument(1 + n),
        accCarried = rotated.getRegionIterArgs()[k];
  IRMapping map;
  map.map(loop.getInductionVar(), iv);
  for (unsigned i = 0; i < n; ++i)
    if (i != k)
      map.map(loop.getRegionIterArgs()[i], rotated.getRegionIterArgs()[i]);

  // The previous iteration's last dot, right after this one's first dot (or
  // before the first reader of the accumulator, if that comes earlier).
  Operation *firstUse = nullptr;
  for (Operation *user : carried.getUsers())
    if (Operation *a = body->findAncestorOpInBlock(*user);
        a && (!firstUse || a->isBeforeInBlock(firstUse)))
      firstUse = a;
  Operation *issueAfter = first;
  if (firstUse && !first->isBeforeInBlock(firstUse))
    issueAfter = nullptr; // at the start of the body
  auto loadBAt = [&](Value offset) -> Value {
    IRMapping at;
    at.map(loop.getInductionVar(), offset);
    for (Value o : ld->getOperands())
      recompute(b, o, loop, at);
    return b.clone(*ld, at)->getResult(0);
  };
  b.setInsertionPointToStart(nb);
  // The previous iteration's offset: iv - step, but the first iteration's
  // (whose P is zero, unless `prev` ran) is lb, or `prev`'s.
  auto previousIv = [&]() -> Value {
    Value back = arith::SubIOp::create(b, loc, iv, step);
    if (!firstIv)
      return arith::MaxSIOp::create(b, loc, back, lb);
    Value isFirst =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, iv, lb);
    return arith::SelectOp::create(b, loc, isFirst, firstIv, back);
  };
  auto issuePrevious = [&] {
    Value bOperand = loadsB ? loadBAt(previousIv()) : last.getB();
    Value r = DotOp::create(b, last.getLoc(), last.getType(), pCarried,
                            bOperand, accCarried);
    map.map(carried, r);
  };
  if (!issueAfter)
    issuePrevious();
  for (Operation &op : body->without_terminator()) {
    if (&op == last.getOperation() || (loadsB && &op == ld))
      continue;
    b.clone(op, map);
    if (&op == issueAfter)
      issuePrevious();
  }
  SmallVector<Value> outs;
  for (auto [i, v] : llvm::enumerate(yield.getOperands()))
    outs.push_back(i == k ? map.lookupOrDefault(last.getAcc())
                          : map.lookupOrDefault(v));
  outs.push_back(map.lookupOrDefault(last.getA()));
  scf::YieldOp::create(b, yield.getLoc(), outs);

  // After the loop: the last iteration's dot, its B at the last iteration's
  // offset, lb + (ub - lb - 1) / step · step (lb when the loop does not
  // run): scalar arithmetic of the bounds, not a loop result, so that a
  // producer warpgroup can fetch it too.
  b.setInsertionPointAfter(rotated);
  Value bOperand = last.getB();
  if (loadsB) {
    Value span = arith::SubIOp::create(
        b, loc, arith::SubIOp::create(b, loc, rotated.getUpperBound(), lb),
        arith::ConstantIntOp::create(b, loc, lb.getType(), 1));
    Value lastIv = arith::AddIOp::create(
        b, loc, lb,
        arith::MulIOp::create(
            b, loc, arith::DivSIOp::create(b, loc, span, step), step));
    Value at = arith::MaxSIOp::create(b, loc, lastIv, lb);
    if (firstIv) // none of its own: `prev`'s
      at = arith::SelectOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt,
                                rotated.getUpperBound(), lb),
          at, firstIv);
    bOperand = loadBAt(at);
  }
  Value finalAcc =
      DotOp::create(b, last.getLoc(), last.getType(), rotated.getResult(n),
                    bOperand, rotated.getResult(k));
  for (unsigned i = 0; i < n; ++i)
    loop.getResult(i).replaceAllUsesWith(i == k ? finalAcc
                                                : rotated.getResult(i));
  loop.erase();
  return "";
}

struct KilnOverlapDots : kiln::impl::KilnOverlapDotsBase<KilnOverlapDots> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr("kiln.overlap_dots"))
      return;
    SmallVector<scf::ForOp> loops;
    func.walk([&](scf::ForOp f) { loops.push_back(f); });
    for (scf::ForOp loop : loops) {
      std::string why = overlap(loop);
      if (!why.empty())
        loop->setAttr("kiln.not_overlapped",
                      StringAttr::get(loop.getContext(), why));
    }
  }
};

} // namespace
