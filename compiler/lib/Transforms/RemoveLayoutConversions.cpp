//===- RemoveLayoutConversions.cpp - drop conversions that move nothing ---===//
//
// kiln-assign-layouts converts wherever a user reads another layout; most of
// those conversions are of tiles that cost less to recompute than to move
// between threads: the row and column indices of a causal mask (iota plus an
// offset, expanded and broadcast), splat constants. Such a conversion is
// replaced by a copy of the computation in the target layout, right where the
// conversion was (so inside the loop that reads it, as a GPU thread would
// compute its indices); chains of conversions collapse. The originals that
// nobody reads any more are erased, and CSE (next in the pipeline) merges the
// copies made in the same block.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"

#include <map>

namespace kiln {
#define GEN_PASS_DEF_KILNREMOVELAYOUTCONVERSIONS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Ops in the computation of `v` (up to a limit: beyond it recomputing costs
/// more than moving), or -1 when `v` depends on something that cannot be
/// recomputed anywhere: a load, a dot, a reduction, a loop-carried tile.
int rematCost(Value v, int budget = 64) {
  Operation *op = v.getDefiningOp();
  if (!op || budget <= 0)
    return -1;
  if (isa<IotaOp, SplatOp>(op))
    return 1;
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    return dense && dense.isSplat() ? 1 : -1;
  }
  if (isa<LoadOp, DotOp, ReduceOp>(op) || op->getNumRegions() ||
      op->getNumResults() != 1 || !isPure(op))
    return -1;
  int cost = 1;
  for (Value o : op->getOperands()) {
    if (!isa<RankedTensorType>(o.getType()))
      continue;
    int c = rematCost(o, budget - cost);
    if (c < 0)
      return -1;
    cost += c;
  }
  return cost;
}

/// The layout operand `i` of `op` must have for `op`'s result to be `want`.
Layout operandWant(Operation *op, unsigned i, const Layout &want) {
  if (auto e = dyn_cast<ExpandDimsOp>(op))
    return want.slice(e.getAxis());
  if (auto t = dyn_cast<TransOp>(op)) {
    std::vector<int32_t> inv(t.getOrder().size());
    for (size_t d = 0; d < inv.size(); ++d)
      inv[t.getOrder()[d]] = int32_t(d);
    return want.permute(inv);
  }
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    auto srcShape = bc.getSrc().getType().getShape();
    return want.project(
        broadcastDims({srcShape.begin(), srcShape.end()}, want.shape));
  }
  return want; // elementwise
}

class Rematerializer {
public:
  explicit Rematerializer(OpBuilder &b) : b(b) {}

  /// `v` computed in `want`, by copies of its defining ops placed at the
  /// builder's insertion point.
  Value get(Value v, const Layout &want) {
    if (auto c = v.getDefiningOp<ConvertLayoutOp>())
      return get(c.getSrc(), want);
    RankedTensorType t = withLayout(v.getType(), want);
    if (v.getType() == t)
      return v;
    auto key = std::make_pair(v.getAsOpaquePointer(), t.getAsOpaquePointer());
    if (auto it = made.find(key); it != made.end())
      return it->second;
    Operation *op = v.getDefiningOp();
    SmallVector<Value> operands;
    for (auto [i, o] : llvm::enumerate(op->getOperands()))
      operands.push_back(isa<RankedTensorType>(o.getType())
                             ? get(o, operandWant(op, i, want))
                             : o);
    Operation *copy = b.clone(*op);
    copy->setOperands(operands);
    setTileType(copy->getResult(0), t);
    return made[key] = copy->getResult(0);
  }

private:
  OpBuilder &b;
  std::map<std::pair<void *, const void *>, Value> made;
};

bool movableThrough(Operation *op);

/// Whether `v` (after conversions) is a broadcast tile that costs more to
/// move than what it is broadcast from, or elementwise ops of one and of
/// tiles that can be recomputed (a mask comparing column indices with a
/// broadcast per-row label).
bool isBroadcast(Value v) {
  while (auto c = v.getDefiningOp<ConvertLayoutOp>())
    v = c.getSrc();
  Operation *op = v.getDefiningOp();
  if (!op || rematCost(v) >= 0)
    return false;
  if (isa<BroadcastOp>(op))
    return true;
  if (isa<ExpandDimsOp>(op) || !movableThrough(op))
    return false;
  for (Value o : op->getOperands())
    if (isa<RankedTensorType>(o.getType()) && rematCost(o) < 0)
      return isBroadcast(o);
  return false;
}

/// Ops a conversion may move back through: broadcasts, expand_dims and
/// elementwise ops (their other operands recomputed in the new layout).
bool movableThrough(Operation *op) {
  if (isa<BroadcastOp, ExpandDimsOp>(op))
    return true;
  if (isa<LoadOp, DotOp, ReduceOp, TransOp, IotaOp, SplatOp, ConvertLayoutOp,
          arith::ConstantOp>(op) ||
      op->getNumRegions() || op->getNumResults() != 1 || !isPure(op) ||
      !isa<RankedTensorType>(op->getResult(0).getType()))
    return false;
  int moved = 0; // operands that cannot be recomputed: one at most
  for (Value o : op->getOperands())
    moved += isa<RankedTensorType>(o.getType()) && rematCost(o) < 0;
  return moved <= 1;
}

/// Whether a load in `want` costs each thread few loads: few registers, or
/// elements that few threads share. A bias row read in a 128x256
/// accumulator's column slice (64 registers, each element in 64 threads)
/// issued 32 loads a thread after the dot and held each tile's epilogue up
/// (kiln bench gemm, H200, 8192x50264x768: 1.41 ms against 1.14 without the
/// bias); a blocked load, each element once, and a conversion through
/// shared memory took 1.18.
bool cheapToReload(const Layout &want) {
  int shared = 0; // threads holding each element: 2^shared
  for (const std::vector<Coord> *bases : {&want.lane, &want.warp})
    for (const Coord &c : *bases)
      shared += llvm::all_of(c, [](int64_t x) { return x == 0; });
  return want.numRegs() <= 8 || shared <= 2;
}

/// Whether the conversion of `v` to `want` is better done by loading again:
/// `v` is a load, or elementwise ops of one (a residual tile read in bf16 and
/// widened), used by nothing else, read in a dot's accumulator layout. Each
/// thread then loads its own elements (pairs of columns) instead of a
/// blocked load and a round trip through shared memory. (Dot operands are
/// staged in shared memory for ldmatrix or wgmma; blocked-to-blocked
/// conversions keep the load's coalesced layout.)
bool reloadable(Value v, const Layout &want) {
  if (want.kind != Layout::Kind::Mma || !cheapToReload(want))
    return false;
  while (auto c = v.getDefiningOp<ConvertLayoutOp>())
    v = c.getSrc();
  Operation *op = v.getDefiningOp();
  if (!op || !v.hasOneUse())
    return false;
  if (isa<LoadOp>(op))
    return true;
  if (isa<BroadcastOp, ExpandDimsOp>(op) || !movableThrough(op))
    return false;
  for (auto [i, o] : llvm::enumerate(op->getOperands()))
    if (isa<RankedTensorType>(o.getType()) && rematCost(o) < 0)
      return reloadable(o, operandWant(op, unsigned(i), want));
  return false;
}

/// `v` in layout `want`, converting as early and as small a tile as
/// possible: back through movableThrough ops (each copied in its new layout
/// right after the original) to the tile they start from, which is
/// converted where it is defined: outside the loops it is computed outside
/// of. A rank-1 load is instead loaded again in `want` where that is cheap.
Value convertEarly(Value v, const Layout &want) {
  while (auto c = v.getDefiningOp<ConvertLayoutOp>())
    v = c.getSrc();
  RankedTensorType t = withLayout(v.getType(), want);
  if (v.getType() == t)
    return v;
  Operation *op = v.getDefiningOp();
  OpBuilder b(v.getContext());
  if (op)
    b.setInsertionPointAfter(op);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  if (op && movableThrough(op)) {
    SmallVector<Value> operands;
    for (auto [i, o] : llvm::enumerate(op->getOperands())) {
      if (!isa<RankedTensorType>(o.getType())) {
        operands.push_back(o);
        continue;
      }
      Layout w = operandWant(op, i, want);
      if (rematCost(o) >= 0) {
        Rematerializer remat(b);
        operands.push_back(remat.get(o, w));
      } else {
        operands.push_back(convertEarly(o, w));
      }
    }
    Operation *copy = b.clone(*op);
    copy->setOperands(operands);
    setTileType(copy->getResult(0), t);
    return copy->getResult(0);
  }
  if (auto ld = dyn_cast_or_null<LoadOp>(op);
      ld &&
      ((t.getRank() == 1 && cheapToReload(want)) || reloadable(v, want))) {
    Operation *copy = b.clone(*op);
    setTileType(copy->getResult(0), t);
    return copy->getResult(0);
  }
  return ConvertLayoutOp::create(b, v.getLoc(), t, v);
}

struct RemoveLayoutConversions
    : public kiln::impl::KilnRemoveLayoutConversionsBase<
          RemoveLayoutConversions> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // A broadcast tile (a bias row, a per-row statistic) read in another
    // layout: what it is broadcast from is converted instead, once, where
    // it is computed.
    SmallVector<ConvertLayoutOp> converts;
    func.walk([&](ConvertLayoutOp c) { converts.push_back(c); });
    for (ConvertLayoutOp c : converts)
      if (isBroadcast(c.getSrc())) {
        c.replaceAllUsesWith(convertEarly(c.getSrc(), *layoutOf(c.getType())));
        c.erase();
      }
    converts.clear();
    func.walk([&](ConvertLayoutOp c) { converts.push_back(c); });
    for (ConvertLayoutOp c : converts) {
      Value src = c.getSrc();
      while (auto inner = src.getDefiningOp<ConvertLayoutOp>())
        src = inner.getSrc();
      if (src.getType() == c.getType()) {
        c.replaceAllUsesWith(src);
        c.erase();
        continue;
      }
      c.getSrcMutable().assign(src);
      if (reloadable(src, *layoutOf(c.getType()))) {
        c.replaceAllUsesWith(convertEarly(src, *layoutOf(c.getType())));
        c.erase();
        continue;
      }
      if (rematCost(src) < 0)
        continue; // a conversion that has to move data
      OpBuilder b(c);
      Rematerializer remat(b);
      c.replaceAllUsesWith(remat.get(src, *layoutOf(c.getType())));
      c.erase();
    }
    // A conversion that moves data, of a tile a loop does not change, runs
    // once before the loop rather than in every iteration. Not a dot
    // operand's: the lowering reads those from shared memory where the dot
    // needs them (ldmatrix), rather than holding them in registers.
    converts.clear();
    func.walk([&](ConvertLayoutOp c) { converts.push_back(c); });
    for (ConvertLayoutOp c : converts) {
      if (layoutOf(c.getType())->kind == Layout::Kind::DotOperand)
        continue;
      Operation *before = nullptr;
      for (Operation *p = c->getParentOp(); isa<scf::ForOp>(p);
           p = p->getParentOp()) {
        if (!cast<scf::ForOp>(p).isDefinedOutsideOfLoop(c.getSrc()))
          break;
        before = p;
      }
      if (before)
        c->moveBefore(before);
    }
    // The originals that only fed removed conversions.
    SmallVector<Operation *> ops;
    func.walk([&](Operation *op) { ops.push_back(op); });
    for (Operation *op : llvm::reverse(ops))
      if (op->getNumRegions() == 0 && isOpTriviallyDead(op))
        op->erase();
  }
};

} // namespace
