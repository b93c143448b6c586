//===- LowerLoop.cpp - loops and their software pipeline ------------------===//
//
// A kiln scf.for becomes an scf.for over registers: carried tiles turn into
// their registers. Loads that only feed dots are pipelined: fetched S-1 (or
// S-2) iterations ahead into S buffers, by cp.async or by TMA (LowerTma.cpp).
// Small loads to registers are issued one iteration ahead (loadsAhead).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace kiln::gpu {

static bool isTile(Value v) { return isa<RankedTensorType>(v.getType()); }

int Lowerer::prefetchDistance(scf::ForOp forOp) {
  // wgmma accumulations carried around the loop may stay in flight into the
  // next iteration (waitFor retires them before a read): each iteration then
  // fetches S-2 ahead, into the buffers of two iterations back, which every
  // warpgroup's MMAs have finished reading by the barrier. That needs every
  // dot operand of the loop to come through those buffers.
  bool prefetches = false, allPrefetched = true;
  forOp.walk([&](LoadOp ld) {
    bool fetched = smemBufferBytes.count(ld.getResult());
    prefetches |= fetched && ld->getParentOp() == forOp;
    allPrefetched &= fetched || !sharedOperands.count(ld.getResult());
  });
  if (producerWarps) // the producer warpgroup fills every free buffer
    return numStages;
  bool defer = wgmma && numStages >= 3 && prefetches && allPrefetched;
  return defer ? numStages - 2 : numStages - 1;
}

void Lowerer::lowerFor(scf::ForOp forOp) {
  // Software pipelining of the loads that only feed dots: numStages buffers
  // each; the prologue fetches the first numStages-1 iterations' blocks, and
  // iteration i, once its own blocks have arrived and every warp is past the
  // barrier (so done with iteration i-1), fetches iteration i+numStages-1's
  // into the buffer iteration i-1 used, then computes.
  SmallVector<LoadOp> prefetched;
  SmallVector<Operation *> slice;
  for (Operation &op : forOp.getBody()->without_terminator())
    if (auto ld = dyn_cast<LoadOp>(op);
        ld && smemBufferBytes.count(ld.getResult()))
      prefetched.push_back(ld);
  for (LoadOp ld : prefetched)
    canPrefetch(ld, &slice);
  llvm::SetVector<Operation *> sliceOps(slice.begin(), slice.end());
  Value srcIv = forOp.getInductionVar();
  // planTma decided for the loop as a whole.
  const bool viaTma =
      !prefetched.empty() && tmaLoads.count(prefetched[0].getResult());
  // The slice's scalar ops lowered for another iteration `iv` around
  // `emit`, the loop's own values restored after; unless `inRange`, an
  // iteration the loop may not run, whose accesses keep their bounds checks.
  auto atIteration = [&](Value iv, const llvm::SetVector<Operation *> &slice,
                         llvm::function_ref<void()> emit,
                         bool inRange = false) {
    Value saved = scalars.lookup(srcIv);
    scalars[srcIv] = iv;
    const bool wasOut = ivsOutOfRange.contains(srcIv);
    if (!inRange)
      ivsOutOfRange.insert(srcIv);
    for (Operation *op : slice)
      lowerOp(op);
    emit();
    if (!wasOut)
      ivsOutOfRange.erase(srcIv);
    for (Operation *op : slice)
      scalars.erase(op->getResult(0));
    if (saved)
      scalars[srcIv] = saved;
    else
      scalars.erase(srcIv);
  };
  // An iteration the loop runs (step > 0): its upper bound's compare.
  auto belowUpperBound = [&](Value iv) -> Value {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, iv,
                                 scalarOf(forOp.getUpperBound()));
  };
  auto fetch = [&](Value iv, Value slot) {
    atIteration(iv, sliceOps, [&] {
      if (viaTma) {
        // Only iterations the loop runs: no copy is left in flight after it.
        SmallVector<Value> bases;
        for (LoadOp ld : prefetched)
          bases.push_back(stageBuffer(ld, slot));
        issueTma(
            prefetched, bases, mbarrier(forOp, slot),
            arith::AndIOp::create(b, loc, isTmaLeader(), belowUpperBound(iv)));
      } else {
        for (LoadOp ld : prefetched) {
          SmemTile t = *tileGeometry(layoutOf(ld.getResult()));
          t.base = stageBuffer(ld, slot);
          issueAsyncCopy(ld, t,
                         pointerMovesWith(ld.getPtr(), srcIv)
                             ? belowUpperBound(iv)
                             : Value());
        }
        NVVM::CpAsyncCommitGroupOp::create(b, loc);
      }
    });
  };
  int S = numStages;
  // With a producer warpgroup the consumers only wait for full buffers and
  // release them (lowerProducerLoop fetches).
  const bool consumer = fedByRing(forOp);
  // Another loop may have used these buffers: every warp is past it.
  if (!prefetched.empty() && !consumer)
    barrier();
  const int dist = prefetchDistance(forOp);
  // Iteration `iv`'s fetch: the blocks `dist` iterations ahead, into the
  // stage `dist` past `slot`.
  auto fetchAhead = [&](Value iv, Value slot) {
    fetch(arith::AddIOp::create(b, loc, iv,
                                arith::MulIOp::create(b, loc,
                                                      scalarOf(forOp.getStep()),
                                                      i32(dist))),
          arith::RemUIOp::create(
              b, loc, arith::AddIOp::create(b, loc, slot, i32(dist)), i32(S)));
  };
  const bool defer = !consumer && dist == S - 2;
  // kiln-overlap-dots ran the last dot one iteration behind: each dot is
  // waited for only where its result is read, and nothing is left in flight
  // past the body, so this holds with any number of stages.
  const bool overlapped = forOp->hasAttr("kiln.overlapped");
  if (overlapped)
    note(forOp, "loop: its last dot runs one iteration behind, issued after "
                "the next iteration's first dot (kiln-overlap-dots)");
  else if (forOp->hasAttr("kiln.first_iteration_of_next"))
    note(forOp, "loop: the next loop's first iteration (kiln-overlap-dots: "
                "its last dot runs there, behind the next loop's first dot)");
  else if (auto why = forOp->getAttrOfType<StringAttr>("kiln.not_overlapped"))
    note(forOp, "loop: dots not overlapped (the schedule asks; not possible: " +
                    why.str() + ")");
  for (int i = 0; !prefetched.empty() && !consumer && i < dist; ++i)
    fetch(arith::AddIOp::create(
              b, loc, scalarOf(forOp.getLowerBound()),
              arith::MulIOp::create(b, loc, scalarOf(forOp.getStep()), i32(i))),
          i32(i));
  // One-shot loads the body reads: waited for now, their latency spent
  // beside the prologue's copies.
  if (!pendingOneShot.empty())
    waitOneShotReadBy(forOp);

  // Small register loads one iteration ahead: the prologue loads the first
  // iteration's; each iteration loads the next one's before its own work.
  SmallVector<LoadOp> ahead;
  SmallVector<Operation *> aheadSliceOps;
  for (Operation &op : forOp.getBody()->without_terminator())
    if (auto ld = dyn_cast<LoadOp>(op); ld && loadsAhead(ld)) {
      ahead.push_back(ld);
      iterationSlice(ld, &aheadSliceOps);
    }
  llvm::SetVector<Operation *> aheadSlice(aheadSliceOps.begin(),
                                          aheadSliceOps.end());
  auto loadAhead = [&](Value iv, bool inRange) {
    SmallVector<Value> regs;
    atIteration(
        iv, aheadSlice,
        [&] {
          for (LoadOp ld : ahead) {
            Regs r = !inRange && pointerMovesWith(ld.getPtr(), srcIv)
                         ? lowerLoadIf(ld, belowUpperBound(iv))
                         : lowerLoad(ld);
            regs.append(r.regs.begin(), r.regs.end());
          }
        },
        inRange);
    return regs;
  };
  // Loads ahead whose blocks lie within their tensor at every iteration the
  // loop runs (blockWithin) read the next iteration's, or on the last one
  // this one's again (discarded): one uniform min instead of a compare and
  // a select per element.
  bool clampAhead = false;
  for (LoadOp ld : ahead)
    for (auto [off, dim, len] :
         llvm::zip(ld.getOffsets(), ld.getShape(), ld.getType().getShape()))
      clampAhead |= blockWithin(off, len, dim, {}) &&
                    !blockWithin(off, len, dim, {srcIv});
  // Padded only where the block may leave its tensor at an iteration that
  // runs: the padding's select, the load's first consumer, waited for its
  // whole latency before the loop (the backward's dK/dV kernels at each
  // tile's start; H100: +1.4-3.5% at D=128 and causal D=64, 0.4% slower at
  // non-causal D=64, docs/experiments/2026-11-26-session36.txt).
  loadingFirstAhead = true;
  SmallVector<Value> firstAhead =
      loadAhead(scalarOf(forOp.getLowerBound()), /*inRange=*/false);
  loadingFirstAhead = false;
  // The last iteration's induction variable, lb + (ub - lb - 1) / step * step
  // (only read where the loop runs). A min with it rather than a select on
  // next < ub: the D=128 backward's persistent loop then keeps its registers
  // (H100: +3% at 1000 keys, even elsewhere).
  Value lastIv;
  if (clampAhead) {
    Value lb = scalarOf(forOp.getLowerBound()),
          step = scalarOf(forOp.getStep());
    Value span = arith::SubIOp::create(
        b, loc,
        arith::SubIOp::create(b, loc, scalarOf(forOp.getUpperBound()), lb),
        i32(1));
    lastIv = arith::AddIOp::create(
        b, loc, lb,
        arith::MulIOp::create(
            b, loc, arith::DivUIOp::create(b, loc, span, step), step));
  }

  // Each carried tile becomes its registers (one value if uniform).
  struct Carried {
    std::optional<Layout> layout;
    size_t first, count;
  };
  std::vector<Carried> carried;
  SmallVector<Value> inits;
  for (auto [arg, init] :
       llvm::zip(forOp.getRegionIterArgs(), forOp.getInitArgs())) {
    if (!isTile(arg)) {
      carried.push_back({std::nullopt, inits.size(), 1});
      inits.push_back(scalarOf(init));
      continue;
    }
    Layout l = layoutOf(arg);
    Regs r = regsIn(init, l);
    carried.push_back({l, inits.size(), r.regs.size()});
    inits.append(r.regs.begin(), r.regs.end());
  }
  const size_t carriedCount = inits.size();
  // The stage that holds this iteration's blocks and the phase of its
  // mbarrier: under a producer warpgroup where the previous loop left the
  // ring, else from stage 0 (the loop's own mbarriers).
  if (!prefetched.empty())
    inits.push_back(consumer ? ringSlot : i32(0));
  if (viaTma)
    inits.push_back(consumer ? ringPhase : i32(0));
  const size_t aheadFirst = inits.size();
  inits.append(firstAhead.begin(), firstAhead.end());
  // A warpgroup whose rows no store keeps runs the iterations' pipeline
  // alone, then the loop for none (SkipDeadRows.cpp).
  std::optional<DeadRowSkip> skip =
      skipDeadRows(forOp, inits, carriedCount, !prefetched.empty(), viaTma,
                   consumer, dist, fetchAhead);
  int opBarriers = 0;
  auto newFor = scf::ForOp::create(b, loc, scalarOf(forOp.getLowerBound()),
                                   skip ? skip->bound.getResult()
                                        : scalarOf(forOp.getUpperBound()),
                                   scalarOf(forOp.getStep()), inits);
  auto bind = [&](ValueRange values, auto target) {
    for (auto [i, c] : llvm::enumerate(carried)) {
      Value v = target(i);
      ValueRange part = values.slice(c.first, c.count);
      if (!isTile(v))
        scalars[v] = part[0];
      else if (c.layout)
        tiles[v] = Regs{c.layout, SmallVector<Value>(part), {}};
      else
        tiles[v] = Regs{std::nullopt, {}, part[0]};
    }
  };
  {
    OpBuilder::InsertionGuard g(b);
    // Without carried values the builder already made the (empty) yield.
    if (inits.empty())
      b.setInsertionPoint(newFor.getBody()->getTerminator());
    else
      b.setInsertionPointToStart(newFor.getBody());
    // Thread ids re-read in the body (an opaque read that LLVM cannot hoist)
    // keep the lane-derived address arithmetic inside the loop instead of
    // hoisting dozens of live addresses out of it.
    Value savedLane = lane, savedWarp = warp;
    Operation *savedLoop = currentLoop;
    Value savedOuterLane = outerLane, savedOuterWarp = outerWarp;
    currentLoop = newFor;
    outerLane = lane;
    outerWarp = warp;
    if (reloadThreadIds)
      rereadThreadId();
    scalars[srcIv] = newFor.getInductionVar();
    bind(newFor.getRegionIterArgs(),
         [&](size_t i) { return forOp.getRegionIterArgs()[i]; });
    Value slot;
    if (!prefetched.empty()) {
      slot = newFor.getRegionIterArgs()[carriedCount];
      if (viaTma) // this iteration's copies have landed
        waitMbarrier(mbarrier(forOp, slot),
                     newFor.getRegionIterArgs()[carriedCount + 1]);
      else // this iteration's group
        NVVM::CpAsyncWaitGroupOp::create(b, loc, dist - 1);
    }
    if (!prefetched.empty() && !consumer) {
      barrier();
      fetchAhead(newFor.getInductionVar(), slot);
    }
    for (LoadOp ld : prefetched)
      prefetchedBase[ld.getResult()] = stageBuffer(ld, slot);
    Value savedSlot = ringSlotHere;
    ringSlotHere = consumer ? slot : Value();
    // This iteration's registers of the loads ahead, then the next one's.
    size_t at = aheadFirst;
    for (LoadOp ld : ahead) {
      Layout l = layoutOf(ld.getResult());
      auto regs = newFor.getRegionIterArgs().slice(at, l.numRegs());
      tiles[ld.getResult()] = Regs{l, SmallVector<Value>(regs), {}};
      loadedAhead.insert(ld.getResult());
      at += l.numRegs();
    }
    SmallVector<Value> nextAhead;
    if (!ahead.empty()) {
      Value next = arith::AddIOp::create(b, loc, newFor.getInductionVar(),
                                         scalarOf(forOp.getStep()));
      if (clampAhead)
        next = arith::MinSIOp::create(b, loc, next, lastIv);
      nextAhead = loadAhead(next, clampAhead);
    }
    auto yield = cast<scf::YieldOp>(forOp.getBody()->getTerminator());
    // Carried dot results may arrive in flight from the previous iteration.
    // A consumer of the producer's ring waits for each dot where its result
    // is read (the MMAs of the next dots queue behind it meanwhile) and for
    // all of them before it releases the iteration's buffers.
    bool savedDefer = deferWaits;
    deferWaits = defer || overlapped || consumer;
    if (defer)
      for (auto [arg, y] :
           llvm::zip(forOp.getRegionIterArgs(), yield.getOperands()))
        if (y.getDefiningOp<DotOp>())
          inFlight.push_back(arg);
    const int barriersBefore = barrierCount;
    for (Operation &op : forOp.getBody()->without_terminator())
      lowerOp(&op);
    opBarriers = barrierCount - barriersBefore;
    if (overlapped && !defer)
      waitForAll();
    deferWaits = savedDefer;
    ringSlotHere = savedSlot;
    if (consumer) { // done reading this iteration's buffers: release them
      waitForAll();
      NVVM::MBarrierArriveOp::create(b, loc, Type(), emptyMbarrier(forOp, slot),
                                     Value());
    }
    SmallVector<Value> outs;
    for (auto [i, c] : llvm::enumerate(carried)) {
      Value y = yield.getOperand(i);
      if (!isTile(y))
        outs.push_back(scalarOf(y));
      else if (c.layout) {
        Regs r = regsIn(y, *c.layout);
        outs.append(r.regs.begin(), r.regs.end());
      } else
        outs.push_back(materialize(y).scalar);
    }
    if (!prefetched.empty()) {
      Value next = slot,
            phase =
                viaTma ? newFor.getRegionIterArgs()[carriedCount + 1] : Value();
      nextStage(next, viaTma ? &phase : nullptr);
      outs.push_back(next);
      if (viaTma)
        outs.push_back(phase);
    }
    outs.append(nextAhead.begin(), nextAhead.end());
    if (!inits.empty())
      scf::YieldOp::create(b, loc, outs);
    lane = savedLane;
    warp = savedWarp;
    currentLoop = savedLoop;
    outerLane = savedOuterLane;
    outerWarp = savedOuterWarp;
  }
  if (skip) {
    noteDeadRowSkip(forOp, *skip, opBarriers);
    divergentBarriers = false; // skipped loops are top-level loops
  }
  // After a persistent tile's loop, what follows (the tile's stores) takes
  // fresh ids too: from the tile's, LLVM computed its addresses at the
  // tile's start and held them across the loops (freshenForTile).
  if (freshProgramValues && reloadThreadIds && !currentLoop && tile)
    rereadThreadId();
  bind(newFor.getResults(), [&](size_t i) { return forOp.getResult(i); });
  if (consumer) {
    ringSlot = newFor.getResult(carriedCount);
    ringPhase = newFor.getResult(carriedCount + 1);
  }
  waitForAll(); // MMAs of the last iteration
  if (!prefetched.empty() && !viaTma)
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0); // the last, unused fetch
}

Value Lowerer::stageBuffer(LoadOp ld, Value slot) {
  return arith::AddIOp::create(
      b, loc, i32(smemRegion[ld.getResult()]),
      arith::MulIOp::create(b, loc, slot, i32(stageStride)));
}

void Lowerer::nextStage(Value &slot, Value *phase) {
  slot = arith::RemUIOp::create(
      b, loc, arith::AddIOp::create(b, loc, slot, i32(1)), i32(numStages));
  if (phase)
    *phase = arith::XOrIOp::create(
        b, loc, *phase,
        arith::ExtUIOp::create(b, loc, b.getI32Type(),
                               arith::CmpIOp::create(b, loc,
                                                     arith::CmpIPredicate::eq,
                                                     slot, i32(0))));
}

Value Lowerer::freshThreadId() {
  auto asmOp = LLVM::InlineAsmOp::create(
      b, loc, b.getI32Type(), ValueRange{}, "mov.u32 $0, %tid.x;", "=r",
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr());
  return asmOp.getResult(0);
}

Value Lowerer::warpIndexOf(Value tid) {
  Value w = arith::ShRUIOp::create(b, loc, tid, i32(5));
  // What ptxas takes for warp-uniform values goes to its uniform registers
  // and datapath: wgmma's descriptors from the warpgroup index, above all,
  // which it otherwise held in ordinary registers (the backward at D=128
  // spilled them, and reloaded one before dQ's dot: ~5% of its stall
  // samples). H100, back to back: backward +1-3.6%, forward +1-5%
  // (docs/experiments/2026-11-25-h100-session25.txt). All lanes are
  // converged wherever a warp index is taken (kernel entry, loop bodies,
  // a bulk store's staging).
  auto asmOp = LLVM::InlineAsmOp::create(
      b, loc, b.getI32Type(), ValueRange{w},
      "shfl.sync.idx.b32 $0, $1, 0, 0x1f, 0xffffffff;", "=r,r",
      /*has_side_effects=*/false, /*is_align_stack=*/false,
      LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr());
  return asmOp.getResult(0);
}

void Lowerer::rereadThreadId() {
  Value tid = freshThreadId();
  lane = arith::AndIOp::create(b, loc, tid, i32(31));
  warp = warpIndexOf(tid);
}

} // namespace kiln::gpu
