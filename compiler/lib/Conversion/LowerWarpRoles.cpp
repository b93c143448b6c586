//===- LowerWarpRoles.cpp - a producer warpgroup for the TMA pipeline -----===//
//
// Warp specialization (the schedule's kiln.warp_specialize): one extra
// warpgroup, after the kernel's own warps, only issues the TMA copies of the
// pipelined loops, and the kernel's warps only compute. They meet on two
// mbarriers per stage: "full" (armed by the producer with the stage's bytes,
// completed by the copies) and "empty" (every consumer thread arrives when it
// is done reading the stage). The producer gives registers back and the
// consumers take them (setmaxnreg); the consumers' barriers become a named
// barrier over their threads only, so the producer never joins one.
//
// The producer runs the function's scalar code (program ids, index
// arithmetic) and, for each pipelined loop, a loop with the same bounds that
// waits for a free stage and fills it. Every loop draws its stages from one
// ring (one set of mbarriers; stage s of each loop in the same bytes), in
// program order on both sides, so the producer runs on into the next loop
// (and, persistent, the next tile) while the consumers finish this one.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace kiln::gpu {

static bool isTile(Value v) { return isa<RankedTensorType>(v.getType()); }

void Lowerer::planWarpRoles() {
  if (!src->hasAttr("kiln.warp_specialize"))
    return;
  std::string why; // the first reason
  auto fail = [&](const char *reason) {
    if (why.empty())
      why = reason;
  };
  if (!tma || mbarrierBase.empty())
    fail("no loop fetches through TMA");
  for (auto &[loop, base] : mbarrierBase)
    if (loop->getParentOp() != src.getOperation())
      fail("a TMA loop is nested in another loop");
  for (auto &[v, bytes] : smemBufferBytes)
    if (!tmaLoads.count(v))
      fail("a pipelined load goes by cp.async");
  if (numWarps % 4 || numWarps > 28)
    fail("the compute warps are not whole warpgroups (or exceed 28)");
  if (!why.empty()) {
    report.push_back("warp roles: none (the schedule asks for a producer "
                     "warpgroup; not possible: " +
                     why + ")");
    return;
  }
  producerWarps = 4;
  // One ring for all loops: the first loop's mbarriers serve every loop.
  const int64_t ringBase = mbarrierBase.front().second;
  for (auto &[loop, base] : mbarrierBase)
    base = ringBase;
  // Registers at launch: what ptxas can give every thread of the CTA (of
  // each of the schedule's CTAs per SM); the producer keeps 24 and the
  // consumers share the rest, in steps of 8.
  int threads = 32 * (numWarps + producerWarps);
  int perSM = 1;
  if (auto blocks = src->getAttrOfType<IntegerAttr>("kiln.min_blocks_per_sm"))
    perSM = std::max<int>(1, int(blocks.getInt()));
  int atLaunch = std::min(248, 65536 / perSM / threads / 8 * 8);
  producerRegisters = 24;
  consumerRegisters =
      std::min(240, (atLaunch * threads - 128 * producerRegisters) /
                        (32 * numWarps) / 8 * 8);
  // setmaxnreg.inc may only raise the count: with few compute warps they
  // keep what they have at launch.
  if (consumerRegisters <= atLaunch)
    consumerRegisters = 0;
  report.push_back(
      "warp roles: warps " + std::to_string(numWarps) + "-" +
      std::to_string(numWarps + 3) +
      " a producer warpgroup (one thread issues the TMA copies; setmaxnreg " +
      std::to_string(producerRegisters) + "), warps 0-" +
      std::to_string(numWarps - 1) + " compute (" +
      (consumerRegisters ? "setmaxnreg " + std::to_string(consumerRegisters)
                         : std::string("registers as launched")) +
      "), per stage a full and an empty mbarrier, one ring of " +
      std::to_string(numStages) + " stages for all " +
      std::to_string(mbarrierBase.size()) + " loop(s)");
}

void Lowerer::planPingpong() {
  if (!src->hasAttr("kiln.pingpong"))
    return;
  std::string why;
  if (!producerWarps)
    why = "no producer warpgroup";
  else if (numWarps != 8)
    why = "it takes two compute warpgroups (8 warps), not " +
          std::to_string(numWarps) + " warps";
  else {
    for (auto &[loop, base] : mbarrierBase)
      for (Operation &op : cast<scf::ForOp>(loop).getBody()->getOperations())
        if (isa<DotOp>(op)) {
          pingpongDots.insert(&op);
          break;
        }
    if (pingpongDots.empty())
      why = "no pipelined loop has a dot directly in its body";
  }
  if (!why.empty()) {
    report.push_back("ping-pong: none (the schedule asks for it; not "
                     "possible: " +
                     why + ")");
    return;
  }
  report.push_back(
      "ping-pong: compute warpgroups 0 and 1 take turns issuing the first "
      "dot of each pipelined loop (" +
      std::to_string(pingpongDots.size()) +
      " loop(s); bar.sync on its own named barrier 2 or 3, bar.arrive on "
      "the other's after the commit), so one's softmax-side work overlaps "
      "the other's MMAs");
}

// Barrier 2 + w is "warpgroup w may issue": its 128 threads sync on it and
// the other warpgroup's 128 arrive, 256 in all.
void Lowerer::takeTurn() {
  Value wg = arith::ShRUIOp::create(b, loc, warp, i32(2));
  NVVM::BarrierOp::create(b, loc, TypeRange{},
                          arith::AddIOp::create(b, loc, wg, i32(2)), i32(256),
                          {}, Value());
}

void Lowerer::passTurn() {
  Value wg = arith::ShRUIOp::create(b, loc, warp, i32(2));
  NVVM::BarrierArriveOp::create(
      b, loc, arith::SubIOp::create(b, loc, i32(3), wg), i32(256));
}

void Lowerer::lowerSpecialized(mlir::Block &body) {
  Value isProducer = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                           warp, i32(numWarps));
  auto ifOp = scf::IfOp::create(b, loc, isProducer, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    NVVM::SetMaxRegisterOp::create(b, loc, producerRegisters,
                                   NVVM::SetMaxRegisterAction::decrease);
    auto saved = scalars;
    ringSlot = ringPhase = i32(0);
    auto leader = scf::IfOp::create(b, loc, isTmaLeader(), false);
    b.setInsertionPoint(leader.thenBlock()->getTerminator());
    // Arrivals at counters are the compute warps' (after their writes), and
    // so is the scalar code that depends on their counts.
    llvm::DenseSet<Value> arrivals;
    for (Operation &op : body.without_terminator())
      if (isa<ArriveOp>(op) || llvm::any_of(op.getOperands(), [&](Value v) {
            return arrivals.contains(v);
          }))
        arrivals.insert(op.result_begin(), op.result_end());
    auto produce = [&] {
      waitForPreviousTile();
      for (Operation &op : body.without_terminator()) {
        if (op.getNumResults() == 1 && arrivals.contains(op.getResult(0)))
          continue;
        if (auto f = dyn_cast<scf::ForOp>(op); f && mbarrierBase.count(f))
          lowerProducerLoop(f);
        else if (auto w = dyn_cast<WaitCountOp>(op))
          lowerWaitCount(w, /*producer=*/true); // before its copies
        else if (auto ld = dyn_cast<LoadOp>(op);
                 ld && residentMbarrier.count(ld.getResult()))
          issueResident(ld);
        else if (op.getNumRegions() == 0 && op.getNumResults() == 1 &&
                 !isTile(op.getResult(0)))
          lowerOp(&op); // scalar arithmetic the loops' bounds and blocks use
      }
    };
    forEachTile(produce, TileRole::Producer);
    scalars = std::move(saved);
    b.setInsertionPointAfter(leader);
    if (arrivalRing >= 0) // a thread of the producer's second warp
      ifThen(arith::AndIOp::create(
                 b, loc,
                 arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, warp,
                                       i32(numWarps + 1)),
                 arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                       i32(0))),
             [&] { makeArrivals(); });
  }
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    if (consumerRegisters)
      NVVM::SetMaxRegisterOp::create(b, loc, consumerRegisters,
                                     NVVM::SetMaxRegisterAction::increase);
    consumerBarriers = true;
    ringSlot = ringPhase = i32(0);
    // Warpgroup 0 has the first turn. Every turn it takes is handed back by
    // warpgroup 1 after its own, so the last hand-back is taken at the end:
    // no arrivals are left on the barrier.
    auto onWarpgroup0 = [&](llvm::function_ref<void()> emit) {
      ifThen(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, warp,
                                   i32(4)),
             emit);
    };
    if (!pingpongDots.empty())
      onWarpgroup0(
          [&] { NVVM::BarrierArriveOp::create(b, loc, i32(2), i32(256)); });
    auto compute = [&] {
      for (Operation &op : body.without_terminator()) {
        lowerOp(&op);
        // Done with the resident loads it last reads: the producer may
        // fetch the next tile's.
        if (auto it = releaseAfter.find(&op); it != releaseAfter.end()) {
          waitForAll();
          for (Value v : it->second)
            NVVM::MBarrierArriveOp::create(
                b, loc, Type(), residentMbarrierOf(v, /*released=*/true),
                Value());
        }
      }
    };
    forEachTile(compute, TileRole::Consumer);
    flushDeferredArrival();
    if (!pingpongDots.empty())
      onWarpgroup0([&] { takeTurn(); });
    finishTmaStores();
  }
  endGridDependencies();
  LLVM::ReturnOp::create(b, loc, ValueRange{});
}

void Lowerer::lowerProducerLoop(scf::ForOp forOp) {
  SmallVector<LoadOp> loads;
  SmallVector<Operation *> slice;
  for (Operation &op : forOp.getBody()->without_terminator())
    if (auto ld = dyn_cast<LoadOp>(op); ld && tmaLoads.count(ld.getResult()))
      loads.push_back(ld);
  for (LoadOp ld : loads)
    canPrefetch(ld, &slice);
  llvm::SetVector<Operation *> sliceOps(slice.begin(), slice.end());
  // A free stage: the consumers released it S iterations ago.
  auto waitFree = [&](Value slot, Value phase) {
    waitMbarrier(emptyMbarrier(forOp, slot), previousPhase(phase));
  };
  auto newFor = scf::ForOp::create(
      b, loc, scalarOf(forOp.getLowerBound()), scalarOf(forOp.getUpperBound()),
      scalarOf(forOp.getStep()), ValueRange{ringSlot, ringPhase});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(newFor.getBody());
    Value slot = newFor.getRegionIterArgs()[0],
          phase = newFor.getRegionIterArgs()[1];
    waitFree(slot, phase);
    scalars[forOp.getInductionVar()] = newFor.getInductionVar();
    for (Operation *op : sliceOps)
      lowerOp(op);
    SmallVector<Value> bases;
    for (LoadOp ld : loads)
      bases.push_back(stageBuffer(ld, slot));
    issueTma(loads, bases, mbarrier(forOp, slot),
             arith::ConstantIntOp::create(b, loc, 1, 1));
    nextStage(slot, &phase);
    scf::YieldOp::create(b, loc, ValueRange{slot, phase});
  }
  // No wait for the consumers here: the next loop's stages come from the
  // same ring, each filled only once released.
  ringSlot = newFor.getResult(0);
  ringPhase = newFor.getResult(1);
}

} // namespace kiln::gpu
