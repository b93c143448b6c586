//===- LowerTmaStore.cpp - block stores through the Tensor Memory Accelerator
//===//
//
// Under the TMA schedule a store of a 16-bit 2-D block goes out as bulk
// tensor copies from shared memory instead of one store per register pair.
// From the registers of a wgmma accumulator each warp's store writes 16 bytes
// of each of 8 rows: half-used sectors and a long queue on the memory pipe
// (ncu at attention D=128 N=512: 11% of warp samples on O's stores). The
// compute warps write the tile to a staging region in the same 128-byte
// swizzled panels TMA loads use (st.shared, conflict free), fence it for the
// async proxy, and one thread per warpgroup hands its slab of rows to TMA,
// which writes whole lines and clips rows and columns outside the tensor.
// The thread waits for the copy to have read the staging tile only before
// the next store into it (and before the kernel returns), so the copy runs
// under the next tile's work.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

/// Warps per group whose data is a slab of rows of `l` (rows `groupRows`),
/// one bulk copy each: warpgroups where the warp bits above the first two run
/// along rows only and every other bit stays inside a slab; else all warps.
static std::pair<int64_t, int64_t> storeGroups(const Layout &l, int numWarps) {
  const int64_t rows = l.shape[0];
  const int groupBits = int(l.warp.size()) - 2;
  if (numWarps <= 4 || (int64_t(4) << groupBits) != numWarps)
    return {numWarps, rows};
  const int64_t slab = rows >> groupBits;
  bool ok = slab % 8 == 0;
  for (int j = 0; ok && j < groupBits; ++j)
    ok = l.warp[2 + j] == Coord{slab << j, 0};
  for (const auto *bases : {&l.reg, &l.lane})
    for (const Coord &c : *bases)
      ok = ok && c[0] < slab;
  for (int j = 0; ok && j < 2; ++j)
    ok = l.warp[j][0] < slab;
  return ok ? std::pair<int64_t, int64_t>{4, slab}
            : std::pair<int64_t, int64_t>{numWarps, rows};
}

namespace {
/// What a store and an atomic share: the block written and the tile.
struct BlockWrite {
  Value ptr, value;
  ValueRange offsets, shape, strides;
  static BlockWrite of(Operation *op) {
    if (auto st = dyn_cast<StoreOp>(op))
      return {st.getPtr(), st.getValue(), st.getOffsets(), st.getShape(),
              st.getStrides()};
    auto a = cast<AtomicRMWOp>(op);
    return {a.getPtr(), a.getValue(), a.getOffsets(), a.getShape(),
            a.getStrides()};
  }
};
} // namespace

void Lowerer::planTmaStores() {
  if (!tma)
    return;
  SmallVector<Operation *>
      placed; // the writes with a staging tile of their own
  src.walk([&](Operation *op) {
    if (!isa<StoreOp, AtomicRMWOp>(op))
      return;
    // An fp32 atomic add goes out as a bulk reduction (TMA adds in L2,
    // whole lines) under every TMA schedule: per-register red instructions
    // of a wgmma accumulator write 8-byte pieces of 8 rows each and queue
    // on the memory pipe.
    if (auto a = dyn_cast<AtomicRMWOp>(op);
        a && (a.getKind() != ReduceKind::Sum ||
              !a.getValue().getType().getElementType().isF32()))
      return;
    if (isa<StoreOp>(op) && !src->hasAttr("kiln.tma_stores")) {
      tmaStoreFallback[op] = "the schedule does not ask for TMA stores";
      return;
    }
    BlockWrite w = BlockWrite::of(op);
    // A tile whose threads hold runs of 4 or more elements of a row (a
    // loaded tile, converted) goes out in vector stores, without a staging
    // tile's shared memory (under persistent CTAs, bytes of their own beside
    // every loop's buffers) and its barriers. MMA accumulators hold pairs.
    if (const int64_t run = vectorWidth(layoutOf(w.value));
        isa<StoreOp>(op) && run >= 4) {
      tmaStoreFallback[op] = "its threads hold runs of " +
                             std::to_string(run) +
                             " elements of a row (vector st.global)";
      return;
    }
    std::string why;
    std::optional<TmaLoad> t =
        matchTmaBlock(w.ptr, w.offsets, w.shape, w.strides, w.value, why);
    if (!t) {
      tmaStoreFallback[op] = why;
      return;
    }
    TmaStore s;
    std::tie(s.groupWarps, s.groupRows) =
        storeGroups(layoutOf(w.value), numWarps);
    const int64_t bytes = t->panels * t->panelBytes;
    if (retriedBytes) {
      tmaStoreFallback[op] =
          "its " + std::to_string(bytes / 1024) +
          " KB staging tile and the scratch area for layout conversions and "
          "reductions took " +
          std::to_string(retriedBytes) + " bytes of shared memory (limit " +
          std::to_string(sharedLimit) + ")";
      return;
    }
    s.block = *t;
    s.block.info.box[s.block.rowDim] = s.groupRows;
    // The same write in another top-level statement (a loop of its own, as
    // a causal kernel's masked and unmasked loops repeat their body): they
    // run one after the other, so they share one staging tile. Its leader
    // threads are the same, and each waits for all of its bulk copies to
    // have read the tile before the next staging (lowerTmaStore).
    for (Operation *other : placed)
      if (const TmaStore &o = tmaStores[other];
          o.groupWarps == s.groupWarps && o.groupRows == s.groupRows &&
          o.block.panels == s.block.panels &&
          o.block.panelBytes == s.block.panelBytes &&
          topIndexOf(other) != topIndexOf(op) &&
          BlockWrite::of(other).value.getType() == w.value.getType() &&
          layoutOf(BlockWrite::of(other).value) == layoutOf(w.value)) {
        s.region = o.region;
        s.sharesTileOf = lineOf(other);
        s.block.map = tensorMapFor(s.block.info);
        tmaStores[op] = s;
        return;
      }
    // Read by the bulk copy until the kernel's end (finishTmaStores).
    const int64_t before = shared.peak();
    const int64_t at =
        shared.place(sharedBuffer("TMA staging tile " + lineOf(op), bytes,
                                  topIndexOf(op), int(bodyOps.size()) - 1,
                                  /*computeOnly=*/true));
    if (shared.peak() > sharedLimit) {
      if (!persistentGrid.empty() && !gatedFrom)
        crowdedPeak = std::max(crowdedPeak, shared.peak());
      shared.unplace();
      tmaStoreFallback[op] =
          "its " + std::to_string(bytes / 1024) +
          " KB staging tile does not fit in shared memory beside the " +
          std::to_string(before / 1024) + " KB the kernel uses (" +
          std::to_string(sharedLimit / 1024) + " KB)";
      return;
    }
    s.block.map = tensorMapFor(s.block.info);
    s.region = at;
    tmaStores[op] = s;
    placed.push_back(op);
  });
}

void Lowerer::lowerTmaStore(Operation *op, const TmaStore &s) {
  const BlockWrite w = BlockWrite::of(op);
  Value v = w.value;
  Regs in = regsIn(v, layoutOf(v));
  const bool perGroup = s.groupWarps < numWarps;
  // The thread's warp from a fresh read of its id: LLVM otherwise merges the
  // warpgroup index with the one the dots' layouts use and keeps values of
  // it live through the loops (causal D=64 on sm_90a: 140 registers instead
  // of 128, one CTA per SM instead of two, 28% slower on the H200).
  Value tid = freshThreadId();
  Value ownWarp = warpIndexOf(tid),
        ownLane = arith::AndIOp::create(b, loc, tid, i32(31));
  Value group =
      perGroup ? arith::ShRUIOp::create(b, loc, ownWarp, i32(2)).getResult()
               : i32(0);
  Value leader = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::eq,
          arith::RemUIOp::create(b, loc, ownWarp, i32(s.groupWarps)), i32(0)),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ownLane, i32(0)));
  // Named barrier 4 + g over warpgroup g (0-3 are the CTA's, the compute
  // warps' and ping-pong's), its id a constant in a branch per warpgroup:
  // with an id in a register ptxas reserves all 16 named barriers. Without
  // groups, barrier() over all compute warps.
  const int64_t groups = numWarps / s.groupWarps;
  SmallVector<Value> barrierIds, isGroup;
  for (int64_t g = 0; perGroup && g < groups; ++g) {
    barrierIds.push_back(i32(4 + g));
    isGroup.push_back(
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, group, i32(g)));
  }
  Value barrierThreads = i32(32 * s.groupWarps);
  auto groupBarrier = [&](bool fence) {
    if (!perGroup)
      return barrier();
    if (fence)
      fenceSharedForAsync();
    for (int64_t g = 0; g < groups; ++g)
      ifThen(isGroup[g], [&] {
        NVVM::BarrierOp::create(b, loc, TypeRange{}, barrierIds[g],
                                barrierThreads, {}, Value());
      });
  };
  // The previous copy out of this tile has read it.
  ifThen(leader, [&] {
    NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, b.getI32IntegerAttr(0),
                                         b.getUnitAttr());
  });
  // A staging tile in bytes that other warps read earlier (a finished
  // buffer's, the scratch area's): every compute warp is past them.
  if (perGroup && (shared.overlapped(s.region) || !scratchUses.empty()))
    barrier();
  groupBarrier(/*fence=*/false);
  std::optional<SmemTile> t =
      stage(in, elementType(v.getType()), i32(s.region));
  if (!t)
    throw InternalError("GPU lowering: cannot stage a TMA store's tile");
  groupBarrier(/*fence=*/true); // the bulk copy reads via the async proxy
  SmallVector<Value> c = tmaCoords(s.block, w.offsets);
  Value slabRow = arith::MulIOp::create(b, loc, group, i32(s.groupRows));
  const int rowCoord = int(s.block.index.size()) - 1 - s.block.rowDim;
  c[rowCoord] = arith::AddIOp::create(b, loc, c[rowCoord], slabRow);
  Value slabBase = arith::AddIOp::create(
      b, loc, i32(s.region),
      arith::MulIOp::create(b, loc, slabRow, i32(t->rowBytes())));
  ifThen(leader, [&] {
    for (int64_t p = 0; p < s.block.panels; ++p) {
      SmallVector<Value> cp(c);
      cp[0] = arith::AddIOp::create(b, loc, c[0], i32(t->panelCols * p));
      Value from = sharedAt(
          arith::AddIOp::create(b, loc, slabBase, i32(p * t->panelBytes())));
      if (isa<AtomicRMWOp>(op))
        NVVM::CpAsyncBulkTensorReduceOp::create(
            b, loc, tensorMapArgs[s.block.map], from, NVVM::TMAReduxKind::ADD,
            NVVM::TMAStoreMode::TILE, cp, Value());
      else
        NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
            b, loc, tensorMapArgs[s.block.map], from, cp, Value(),
            NVVM::TMAStoreMode::TILE, Value());
    }
    NVVM::CpAsyncBulkCommitGroupOp::create(b, loc);
    if (bulkGroupsSince) // counted for arrivals made a program late
      LLVM::StoreOp::create(
          b, loc,
          arith::AddIOp::create(
              b, loc,
              LLVM::LoadOp::create(b, loc, b.getI32Type(), bulkGroupsSince),
              i32(1)),
          bulkGroupsSince);
  });
}

/// Whether an index of the kernel's source is >= 0 by construction: constants,
/// program ids and counts, the induction variables of loops that start at
/// such a value and count up, and sums, products, quotients and remainders
/// (by positive constants), minima and maxima of such.
static bool nonNegative(Value v, int depth = 0) {
  if (depth > 16)
    return false;
  if (auto loop = scf::getForInductionVarOwner(v)) {
    auto step = loop.getStep().getDefiningOp<arith::ConstantIntOp>();
    return step && step.value() > 0 &&
           nonNegative(loop.getLowerBound(), depth + 1);
  }
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (auto c = dyn_cast<arith::ConstantIntOp>(def))
    return c.value() >= 0;
  if (isa<ProgramIdOp, NumProgramsOp>(def))
    return true;
  auto both = [&] {
    return nonNegative(def->getOperand(0), depth + 1) &&
           nonNegative(def->getOperand(1), depth + 1);
  };
  if (isa<arith::AddIOp, arith::MulIOp, arith::MinSIOp>(def))
    return both();
  if (isa<arith::MaxSIOp>(def))
    return nonNegative(def->getOperand(0), depth + 1) ||
           nonNegative(def->getOperand(1), depth + 1);
  if (isa<arith::DivSIOp, arith::RemSIOp, arith::CeilDivSIOp>(def)) {
    auto c = def->getOperand(1).getDefiningOp<arith::ConstantIntOp>();
    return c && c.value() > 0 && nonNegative(def->getOperand(0), depth + 1);
  }
  return false;
}

/// The offsets of a block write that may be negative (none: no guard).
static SmallVector<Value> offsetsMaybeNegative(Operation *op) {
  SmallVector<Value> out;
  for (Value offset : BlockWrite::of(op).offsets)
    if (!nonNegative(offset))
      out.push_back(offset);
  return out;
}

/// The report's words for a guarded bulk store or reduction.
static std::string guardText(Operation *op, const char *otherwise) {
  return offsetsMaybeNegative(op).empty()
             ? std::string()
             : std::string("; where its offsets are negative (the bulk copy "
                           "faults there), ") +
                   otherwise;
}

void Lowerer::lowerTmaStoreOrFallback(Operation *op, const TmaStore &s,
                                      llvm::function_ref<void()> fallback) {
  Value inRange;
  for (Value offset : offsetsMaybeNegative(op)) {
    Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                     scalarOf(offset), i32(0));
    inRange = inRange ? arith::AndIOp::create(b, loc, inRange, ok) : ok;
  }
  if (!inRange)
    return lowerTmaStore(op, s);
  // The branch is uniform: the offsets are the same in every thread.
  auto ifOp = scf::IfOp::create(b, loc, inRange, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  lowerTmaStore(op, s);
  b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
  fallback();
}

void Lowerer::finishTmaStores() {
  if (tmaStores.empty())
    return;
  // A thread with no bulk copies in flight passes at once.
  NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, b.getI32IntegerAttr(0),
                                       b.getUnitAttr());
}

/// " from a 128-byte swizzled staging tile of N KB; who <verb> P box(es)
/// of RxC)": the report's words for a bulk store or reduction.
static std::string stagingText(const Lowerer::TmaStore &s, int numWarps,
                               const char *verb) {
  return " from a 128-byte swizzled staging tile of " +
         std::to_string(s.block.panels * s.block.panelBytes / 1024) + " KB; " +
         (s.groupWarps < numWarps ? "each warpgroup " : "one thread ") + verb +
         " " + std::to_string(s.block.panels) + " box(es) of " +
         std::to_string(s.groupRows) + "x" + std::to_string(s.block.panelCols) +
         (s.sharesTileOf.empty()
              ? ")"
              : "; the staging tile is the one of the write at " +
                    s.sharesTileOf + " that runs before)");
}

void Lowerer::noteStores() {
  auto stagingText = [&](const TmaStore &s, const char *verb) {
    return kiln::gpu::stagingText(s, numWarps, verb);
  };
  src.walk([&](StoreOp st) {
    const std::string shape = shapeText(st.getValue().getType().getShape());
    if (auto it = tmaStores.find(st); it != tmaStores.end()) {
      note(st, "store " + shape + ": TMA (cp.async.bulk.tensor" +
                   stagingText(it->second, "copies") +
                   guardText(st, "st.global from registers"));
      return;
    }
    const std::string within = boundsChecksText(
        st.getOffsets(), st.getShape(), st.getValue().getType().getShape());
    if (!isAlignedAccess(st.getPtr())) {
      note(st, "store " + shape +
                   ": st.global from registers, one element "
                   "each" +
                   within + "; " + unalignedReason(st.getPtr()));
      return;
    }
    std::string why = tmaStoreFallback.lookup(st);
    note(st, "store " + shape + ": st.global from registers, " +
                 accessText(storeWidth(st),
                            st.getValue().getType().getElementType(),
                            st.getShape(), "store") +
                 within + (why.empty() ? std::string() : "; not TMA: " + why));
  });
  src.walk([&](AtomicRMWOp a) {
    const std::string shape = shapeText(a.getValue().getType().getShape());
    if (auto it = tmaStores.find(a); it != tmaStores.end()) {
      note(a, "atomic sum " + shape +
                  ": TMA reduction (cp.reduce.async.bulk.tensor add" +
                  stagingText(it->second, "adds") +
                  guardText(a, "red.global from registers"));
      return;
    }
    std::string why = tmaStoreFallback.lookup(a);
    const int64_t vec = atomicWidth(a);
    note(a,
         std::string("atomic ") + stringifyReduceKind(a.getKind()).str() + " " +
             shape + ": " +
             (vec > 1 ? "red.global.add.v" + std::to_string(vec) + ".f32, " +
                            std::to_string(vec) + " elements per instruction" +
                            raggedText(vec, a.getShape()) + ","
                      : std::string("one red/atom.global per element")) +
             " from registers" + (why.empty() ? "" : "; not TMA: " + why));
  });
}

} // namespace kiln::gpu
