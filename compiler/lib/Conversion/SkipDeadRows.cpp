//===- SkipDeadRows.cpp - warpgroups with no rows to compute --------------===//
//
// A tile whose rows are split over the compute warpgroups (a 128-row wgmma
// tile: 64 rows each) often ends past its tensor: attention's last row block
// at Nq = 2049 holds one row. The warpgroup whose rows all lie past the end
// (or, for blocks that start before row 0, before it) still ran every
// iteration of the key loop for results that no store keeps. Here such a
// warpgroup first runs a skeleton of the loop's iterations (the pipeline's
// waits, barriers and fetches, the ping-pong turns and the releases of each
// stage, so that the other warpgroups and the producer see the same
// protocol), then the loop itself for no iteration: no dot and no
// elementwise work.
//
// Legal where (planRowSkips) the loop is a top-level loop without stores,
// atomics or nested regions; each of its results is a tile split by rows over
// the warpgroups (warpgroup w holds rows [wR, (w+1)R) and no others); the
// results reach only row-local ops (elementwise, reductions and broadcasts
// along other dimensions, dots as A or the accumulator, later loops alike)
// and the stored value of stores, whose row offset and row count are known
// before the loop. Then a skipped warpgroup's rows hold stale values only
// in rows every store drops. And (lowerFor) no op in the loop meets the other
// warpgroups at a barrier (a conversion or reduction across them): where
// one does, every warpgroup runs the loop. Without a producer warpgroup the
// skeleton meets the others at block barriers of its own: those and the
// loop's are barrier.sync without .aligned (divergentBarriers).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace kiln::gpu {

/// R where warpgroup w of `numWarps` compute warps holds exactly the rows
/// (dimension 0) [wR, (w+1)R) of a tile of layout `l`.
static std::optional<int64_t> rowsPerWarpgroup(const Layout &l, int numWarps) {
  const int groups = numWarps / 4;
  if (groups < 2 || l.rank() < 1 || l.shape[0] % groups ||
      int64_t(l.warp.size()) != log2i(numWarps))
    return std::nullopt;
  const int64_t R = l.shape[0] / groups;
  if (R & (R - 1))
    return std::nullopt;
  // Bases below R in dimension 0 (any in the others) stay within [0, R):
  // coordinates are their XOR.
  auto within = [&](const Coord &c) { return c[0] >= 0 && c[0] < R; };
  if (!llvm::all_of(l.reg, within) || !llvm::all_of(l.lane, within))
    return std::nullopt;
  for (size_t k = 0; k < l.warp.size(); ++k) {
    if (k < 2) { // the warps of a warpgroup
      if (!within(l.warp[k]))
        return std::nullopt;
      continue;
    }
    Coord rows(l.rank(), 0);
    rows[0] = R << (k - 2);
    if (l.warp[k] != rows)
      return std::nullopt;
  }
  return R;
}

/// Whether row i of `op`'s results depends only on row i of its operand
/// `index` (and on operands that do not vary by row).
static bool rowLocal(Operation *op, unsigned index) {
  if (isa<DotOp>(op))
    return index != 1; // A or the accumulator, not B
  if (auto r = dyn_cast<ReduceOp>(op))
    return r.getAxis() >= 1;
  if (auto e = dyn_cast<ExpandDimsOp>(op))
    return e.getAxis() >= 1;
  if (auto bc = dyn_cast<BroadcastOp>(op))
    return bc.getSrc().getType().getShape()[0] ==
           bc.getResult().getType().getShape()[0];
  if (auto t = dyn_cast<TransOp>(op))
    return t.getOrder()[0] == 0;
  if (isa<ConvertOp, ConvertLayoutOp>(op))
    return true;
  // Elementwise: every operand and result a tile of one shape.
  if (!isa<arith::ArithDialect, math::MathDialect>(op->getDialect()) ||
      op->getNumResults() != 1)
    return false;
  auto shape = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return shape && llvm::all_of(op->getOperandTypes(), [&](Type t) {
           auto tt = dyn_cast<RankedTensorType>(t);
           return tt && tt.getShape() == shape.getShape();
         });
}

void Lowerer::planRowSkips() {
  if (numWarps < 8 || numWarps % 4 || src->hasAttr("kiln.keep_dead_rows"))
    return;
  mlir::Block &body = src.getBody().front();
  // A value the loop's code can read: an argument, or defined before it.
  auto before = [&](Value v, Operation *loop) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return arg.getOwner() == &body;
    Operation *def = v.getDefiningOp();
    return def->getBlock() == &body && def->isBeforeInBlock(loop);
  };
  for (Operation &top : body) {
    auto loop = dyn_cast<scf::ForOp>(top);
    if (!loop || loop.getNumResults() == 0)
      continue;
    bool hasDot = false, plain = true;
    loop.getBody()->walk([&](Operation *op) {
      hasDot |= isa<DotOp>(op);
      plain &= !isa<StoreOp, AtomicRMWOp, ArriveOp, WaitCountOp>(op) &&
               op->getNumRegions() == 0;
    });
    if (!hasDot || !plain)
      continue;
    RowSkip skip;
    bool ok = true;
    for (Value r : loop.getResults()) {
      auto type = dyn_cast<RankedTensorType>(r.getType());
      std::optional<int64_t> R =
          type ? rowsPerWarpgroup(layoutOf(r), numWarps) : std::nullopt;
      ok &= R && (!skip.rows || *R == skip.rows);
      skip.rows = R.value_or(0);
    }
    // Follow the results to their stores.
    llvm::SetVector<Value> tainted(loop.getResults().begin(),
                                   loop.getResults().end());
    for (size_t i = 0; ok && i < tainted.size(); ++i) {
      for (OpOperand &use : tainted[i].getUses()) {
        Operation *user = use.getOwner();
        const unsigned n = use.getOperandNumber();
        auto carry = [&](scf::ForOp f, unsigned k) {
          tainted.insert(f.getRegionIterArgs()[k]);
          tainted.insert(f.getResult(k));
        };
        if (auto f = dyn_cast<scf::ForOp>(user)) {
          if (n < f.getNumControlOperands())
            ok = false;
          else
            carry(f, n - f.getNumControlOperands());
        } else if (auto y = dyn_cast<scf::YieldOp>(user)) {
          if (auto f = dyn_cast<scf::ForOp>(y->getParentOp()))
            carry(f, n);
          else
            ok = false;
        } else if (auto s = dyn_cast<StoreOp>(user)) {
          ok &= n == 0 && before(s.getOffsets()[0], loop) &&
                before(s.getShape()[0], loop);
          if (ok && !llvm::is_contained(skip.stores, s))
            skip.stores.push_back(s);
        } else if (rowLocal(user, n)) {
          tainted.insert(user->result_begin(), user->result_end());
        } else {
          ok = false;
        }
        if (!ok)
          break;
      }
    }
    // Whole tiles of rows at every offset: no warpgroup's rows are ever
    // all dropped while another's are kept.
    const int64_t tileRows = skip.rows * (numWarps / 4);
    bool whole = true;
    for (StoreOp s : skip.stores)
      whole &= knownDivisor(s.getShape()[0]) % tileRows == 0 &&
               knownDivisor(s.getOffsets()[0]) % tileRows == 0 &&
               knownNonNegative(s.getOffsets()[0]);
    if (ok && !skip.stores.empty() && !whole)
      rowSkips[loop] = std::move(skip);
  }
}

Value Lowerer::rowsLive(scf::ForOp forOp) {
  auto it = rowSkips.find(forOp);
  if (it == rowSkips.end())
    return Value();
  const int64_t R = it->second.rows;
  // Rows [first, first + R) of the tile are this warpgroup's.
  Value first = arith::MulIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, warp, i32(2)), i32(R));
  Value dead = arith::ConstantIntOp::create(b, loc, 1, 1);
  for (StoreOp s : it->second.stores) {
    Value offset = scalarOf(s.getOffsets()[0]), rows = scalarOf(s.getShape()[0]);
    if (!offset || !rows)
      return Value();
    Value from = arith::AddIOp::create(b, loc, offset, first);
    Value past = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                       from, rows);
    Value beforeStart = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::sle,
        arith::AddIOp::create(b, loc, from, i32(R)), i32(0));
    dead = arith::AndIOp::create(
        b, loc, dead, arith::OrIOp::create(b, loc, past, beforeStart));
  }
  return arith::XOrIOp::create(b, loc, dead,
                               arith::ConstantIntOp::create(b, loc, 1, 1));
}

std::optional<Lowerer::DeadRowSkip> Lowerer::skipDeadRows(
    scf::ForOp forOp, SmallVectorImpl<Value> &inits, size_t carried,
    bool prefetches, bool viaTma, bool consumer, int dist,
    llvm::function_ref<void(Value, Value)> fetch) {
  Value live = rowsLive(forOp);
  if (!live)
    return std::nullopt;
  DeadRowSkip skip;
  // Until the loop is lowered (lowerFor resets it): the skeleton's barriers
  // and the loop's are different instructions.
  divergentBarriers = true;
  Value lb = scalarOf(forOp.getLowerBound()),
        ub = scalarOf(forOp.getUpperBound()), step = scalarOf(forOp.getStep());
  const size_t stageArgs = !prefetches ? 0 : viaTma ? 2 : 1;
  if (stageArgs) {
    // Before the loop, not around it: the loop's code stays as it was
    // (around it, ptxas scheduled the same instructions differently, 1-2%
    // slower where no warpgroup skipped).
    ValueRange stage = ValueRange(inits).slice(carried, stageArgs);
    skip.pipeline = scf::IfOp::create(
        b, loc, stage.getTypes(),
        arith::XOrIOp::create(b, loc, live,
                              arith::ConstantIntOp::create(b, loc, 1, 1)),
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&skip.pipeline.getElseRegion().front());
    scf::YieldOp::create(b, loc, stage);
    b.setInsertionPointToStart(&skip.pipeline.getThenRegion().front());
    const bool turns = llvm::any_of(
        forOp.getBody()->getOperations(),
        [&](Operation &op) { return pingpongDots.contains(&op); });
    auto loop = scf::ForOp::create(b, loc, lb, ub, step, stage);
    {
      OpBuilder::InsertionGuard inLoop(b);
      b.setInsertionPointToStart(loop.getBody());
      Value slot = loop.getRegionIterArgs()[0];
      Value phase = viaTma ? loop.getRegionIterArgs()[1] : Value();
      if (viaTma) // landed: no release can run ahead of the stage's phase
        waitMbarrier(mbarrier(forOp, slot), phase);
      else
        NVVM::CpAsyncWaitGroupOp::create(b, loc, dist - 1);
      if (!consumer) { // this warpgroup's part of the fetch ahead
        barrier();
        fetch(loop.getInductionVar(), slot);
      }
      if (turns) {
        takeTurn();
        passTurn();
      }
      if (consumer)
        NVVM::MBarrierArriveOp::create(b, loc, Type(),
                                       emptyMbarrier(forOp, slot), Value());
      nextStage(slot, viaTma ? &phase : nullptr);
      SmallVector<Value> next{slot};
      if (viaTma)
        next.push_back(phase);
      scf::YieldOp::create(b, loc, next);
    }
    scf::YieldOp::create(b, loc, loop.getResults());
    for (size_t i = 0; i < stageArgs; ++i)
      inits[carried + i] = skip.pipeline.getResult(i);
  }
  skip.bound = arith::SelectOp::create(b, loc, live, ub, lb);
  return skip;
}

void Lowerer::noteDeadRowSkip(scf::ForOp forOp, const DeadRowSkip &skip,
                              int opBarriers) {
  if (opBarriers) { // the warpgroups meet inside: every one runs it
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(skip.bound);
    if (skip.pipeline)
      skip.pipeline->setOperand(0, arith::ConstantIntOp::create(b, loc, 0, 1));
    skip.bound->setOperand(0, arith::ConstantIntOp::create(b, loc, 1, 1));
    note(forOp, "loop: every warpgroup computes it (an op in it meets the "
                "other warpgroups at a barrier)");
    return;
  }
  const RowSkip &rs = rowSkips.at(forOp);
  std::string tensors;
  for (StoreOp s : rs.stores)
    tensors += (tensors.empty() ? "" : ", ") + accessedTensorName(s.getPtr());
  note(forOp, "loop: a warpgroup whose " + std::to_string(rs.rows) +
                  " rows all fall outside what the stores to " + tensors +
                  " keep (past the end or before row 0) runs none of its "
                  "work, only the waits for and releases of each stage");
}

} // namespace kiln::gpu
