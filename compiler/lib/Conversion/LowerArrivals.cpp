//===- LowerArrivals.cpp - counters between programs and launches ---------===//
//
// kiln.arrive: a program's arrival at an i32 counter once its global writes
// have completed; kiln.wait_count: a wait for a counter to reach a count.
// With them one launch can hand finished parts of its output to the next
// while it still runs (programmatic dependent launch on sm_90: the arriving
// kernel lets the next start at once, griddepcontrol.launch_dependents; the
// waiting one, kiln.overlap_previous, is launched to start early and ends
// with griddepcontrol.wait so that the launch after it follows both).
//
// An arrival whose count is used is made where it stands: every thread waits
// for its bulk copies to complete, then one atomic. Where the count is not
// used and the CTA is persistent, the arrival is made one program late: at
// the end of the CTA's next program, whose work has given the bulk copies
// time to complete (each thread waits only for its groups older than that
// program's last four), or at the CTA's exit.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <functional>

using namespace mlir;

namespace kiln::gpu {

static void asmStatement(OpBuilder &b, Location loc, StringRef text,
                         ValueRange operands = {},
                         StringRef constraints = "~{memory}") {
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, operands, text, constraints,
                            /*has_side_effects=*/true,
                            /*is_align_stack=*/false, LLVM::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

/// Orders this thread's async-proxy accesses of global memory (bulk copies,
/// TMA) with its generic ones; sm_90 only (`hopper`), none before.
static void fenceGlobalForAsync(OpBuilder &b, Location loc, bool hopper) {
  if (!hopper)
    return;
  NVVM::FenceProxyOp::create(
      b, loc,
      NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_global),
      NVVM::SharedSpaceAttr());
}

Value Lowerer::lowerArrive(ArriveOp op) {
  if (deferArrivals && op.getResult().use_empty()) {
    lowerDeferredArrive(op);
    return i32(0); // unused
  }
  // This thread's writes are complete and ordered before the arrival: its
  // bulk copies (TMA stores and reductions, through the async proxy) and
  // its st/red.global; then every thread of the program is past that point.
  if (gridDependencyControl) // bulk copies: sm_90
    NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, b.getI32IntegerAttr(0),
                                         UnitAttr());
  fenceGlobalForAsync(b, loc, gridDependencyControl);
  asmStatement(b, loc, "fence.acq_rel.gpu;", {}, "");
  barrier();
  // One thread adds 1 (release: the program's writes; acquire: those of the
  // programs that arrived before) and hands the old count to the others
  // through shared memory.
  smemBytes = std::max<int64_t>(smemBytes, 4);
  Value slot = smemPtr(i32(0));
  Value index = scalarOf(op.getIndex());
  Value first = isThreadZero();
  ifThen(first, [&] {
    Value old = guardedElement(
        b, loc, scalarOf(op.getPtr()), index, scalarOf(op.getSize()),
        scalarOf(op.getStride()), i32(-1), [&](Value addr) {
          return LLVM::InlineAsmOp::create(
                     b, loc, b.getI32Type(), ValueRange{addr},
                     "atom.add.acq_rel.gpu.global.u32 $0, [$1], 1;",
                     "=r,l,~{memory}", /*has_side_effects=*/true,
                     /*is_align_stack=*/false, LLVM::TailCallKind::None,
                     LLVM::AsmDialectAttr(), ArrayAttr())
              .getResult(0);
        });
    LLVM::StoreOp::create(b, loc, old, slot);
  });
  barrier();
  Value count = LLVM::LoadOp::create(b, loc, b.getI32Type(), slot);
  barrier(); // the slot is free again (scratch of the ops after)
  note(op, "arrive: each thread waits for its bulk copies, fence.acq_rel.gpu, "
           "a barrier, then one atom.add.acq_rel.gpu per program, the count "
           "handed out through shared memory");
  return count;
}

bool Lowerer::hasUnusedArrival() {
  for (Operation &op : src.getBody().front())
    if (auto a = dyn_cast<ArriveOp>(op); a && a.getResult().use_empty())
      return true;
  return false;
}

void Lowerer::planDeferredArrivals() {
  deferArrivals = !persistentGrid.empty() && hasUnusedArrival();
  if (!deferArrivals)
    return;
  // Locals at the top of the entry block (before any branch the lowering
  // made there), promoted to registers by LLVM.
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(b.getInsertionBlock());
  auto ptr = LLVM::LLVMPointerType::get(b.getContext());
  pendingArrival =
      LLVM::AllocaOp::create(b, loc, ptr, b.getI64Type(), i32(1), 8);
  bulkGroupsSince =
      LLVM::AllocaOp::create(b, loc, ptr, b.getI32Type(), i32(1), 4);
  LLVM::StoreOp::create(b, loc, arith::ConstantIntOp::create(b, loc, 0, 64),
                        pendingArrival);
  LLVM::StoreOp::create(b, loc, i32(0), bulkGroupsSince);
  if (arrivalRing >= 0) {
    arrivalMessages =
        LLVM::AllocaOp::create(b, loc, ptr, b.getI32Type(), i32(1), 4);
    LLVM::StoreOp::create(b, loc, i32(0), arrivalMessages);
  }
}

Value Lowerer::arrivalSlot(Value k, int64_t base) {
  return sharedAt(arith::AddIOp::create(
      b, loc, i32(arrivalRing + base),
      arith::MulIOp::create(b, loc, arith::AndIOp::create(b, loc, k, i32(1)),
                            i32(8))));
}

Value Lowerer::arrivalPhase(Value k) {
  return arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, k, i32(1)), i32(1));
}

void Lowerer::releaseCounter(Value addr) {
  ifThen(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, addr,
                               arith::ConstantIntOp::create(b, loc, 0, 64)),
         [&] {
           Value p = LLVM::IntToPtrOp::create(
               b, loc, LLVM::LLVMPointerType::get(b.getContext(), 1), addr);
           asmStatement(b, loc,
                        "fence.acq_rel.gpu;\n\t"
                        "red.relaxed.gpu.global.add.u32 [$0], 1;",
                        ValueRange{p}, "l,~{memory}");
         });
}

void Lowerer::sendArrival(Value addr) {
  // Message k goes to slot k mod 2, its k / 2-th use: once the arriving
  // thread has read the slot's previous message (a fresh barrier's previous
  // phase counts as done), thread 0 writes the address and every compute
  // thread arrives (release at CTA scope: its writes, completed). Every
  // thread waits (a wait in thread 0's branch alone made ptxas spill 404
  // bytes at D=128 attention); it has nearly always completed.
  Value k = LLVM::LoadOp::create(b, loc, b.getI32Type(), arrivalMessages);
  waitMbarrier(arrivalSlot(k, 32), previousPhase(arrivalPhase(k)));
  ifThen(isThreadZero(),
         [&] { LLVM::StoreOp::create(b, loc, addr, arrivalSlot(k, 0)); });
  NVVM::MBarrierArriveOp::create(b, loc, Type(), arrivalSlot(k, 16), Value());
  LLVM::StoreOp::create(b, loc, arith::AddIOp::create(b, loc, k, i32(1)),
                        arrivalMessages);
}

void Lowerer::makeArrivals() {
  // Message k: wait for the slot's full barrier, read the address, free the
  // slot; -1 ends the loop, 0 is nothing to count; else a release at device
  // scope (what the compute threads completed before their arrivals on the
  // full barrier, which this thread acquired) and the add.
  Type i32t = b.getI32Type(), i64t = b.getI64Type();
  auto loop = scf::WhileOp::create(
      b, loc, TypeRange{i32t, i64t},
      ValueRange{i32(0), arith::ConstantIntOp::create(b, loc, 0, 64)});
  OpBuilder::InsertionGuard g(b);
  Block *before =
      b.createBlock(&loop.getBefore(), {}, {i32t, i64t}, {loc, loc});
  Value k = before->getArgument(0);
  waitMbarrier(arrivalSlot(k, 16), arrivalPhase(k));
  Value addr = LLVM::LoadOp::create(b, loc, i64t, arrivalSlot(k, 0));
  NVVM::MBarrierArriveOp::create(b, loc, Type(), arrivalSlot(k, 32), Value());
  Value more =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, addr,
                            arith::ConstantIntOp::create(b, loc, -1, 64));
  scf::ConditionOp::create(b, loc, more, ValueRange{k, addr});
  Block *after = b.createBlock(&loop.getAfter(), {}, {i32t, i64t}, {loc, loc});
  releaseCounter(after->getArgument(1));
  scf::YieldOp::create(
      b, loc,
      ValueRange{arith::AddIOp::create(b, loc, after->getArgument(0), i32(1)),
                 after->getArgument(1)});
}

void Lowerer::releasePendingArrival() {
  // After a barrier: the writes every thread of the CTA completed before it.
  ifThen(isThreadZero(), [&] {
    releaseCounter(
        LLVM::LoadOp::create(b, loc, b.getI64Type(), pendingArrival));
  });
}

void Lowerer::lowerDeferredArrive(ArriveOp op) {
  // The previous program's bulk copies have completed: all of this
  // thread's groups but the last (up to) four it committed in this program.
  constexpr int64_t kRecent = 4;
  Value since = LLVM::LoadOp::create(b, loc, b.getI32Type(), bulkGroupsSince);
  std::function<void(int64_t)> waitOlder = [&](int64_t n) {
    auto wait = [&](int64_t keep) {
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, b.getI32IntegerAttr(keep),
                                           UnitAttr());
    };
    if (n == 0)
      return wait(0);
    auto ifOp = scf::IfOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, since, i32(n)),
        /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    wait(n);
    b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    waitOlder(n - 1);
  };
  if (gridDependencyControl) // bulk copies: sm_90
    waitOlder(kRecent);
  fenceGlobalForAsync(b, loc, gridDependencyControl);
  if (arrivalRing >= 0) {
    sendArrival(LLVM::LoadOp::create(b, loc, b.getI64Type(), pendingArrival));
  } else {
    barrier();
    releasePendingArrival();
  }
  LLVM::StoreOp::create(b, loc, i32(0), bulkGroupsSince);
  // This program's counter, made at the next one's end (0: none).
  Value addr = guardedElement(
      b, loc, scalarOf(op.getPtr()), scalarOf(op.getIndex()),
      scalarOf(op.getSize()), scalarOf(op.getStride()),
      arith::ConstantIntOp::create(b, loc, 0, 64), [&](Value at) {
        return LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), at).getResult();
      });
  LLVM::StoreOp::create(b, loc, addr, pendingArrival);
  note(op, "arrive (count unused, persistent CTAs): made one program late, at "
           "the end of the CTA's next program or at its exit, so that no "
           "thread waits for this program's bulk copies to complete: each "
           "thread waits for its groups older than the next program's last " +
               std::to_string(kRecent) + ", fence.proxy.async.global, " +
               (arrivalRing >= 0
                    ? "then hands the counter to a producer-warpgroup thread "
                      "(an mbarrier ring in shared memory, no barrier), which "
                      "makes the fence.acq_rel.gpu and red.add.gpu"
                    : "a barrier, then one fence.acq_rel.gpu and red.add.gpu"));
}

void Lowerer::flushDeferredArrival() {
  if (!deferArrivals)
    return;
  if (gridDependencyControl)
    NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, b.getI32IntegerAttr(0),
                                         UnitAttr());
  fenceGlobalForAsync(b, loc, gridDependencyControl);
  if (arrivalRing >= 0) { // the last program's, then the end
    sendArrival(LLVM::LoadOp::create(b, loc, b.getI64Type(), pendingArrival));
    sendArrival(arith::ConstantIntOp::create(b, loc, -1, 64));
    return;
  }
  barrier();
  releasePendingArrival();
}

void Lowerer::lowerWaitCount(WaitCountOp op, bool producer) {
  // One thread polls (acquire at device scope) with a short sleep between
  // reads; after ~2^25 reads (tens of seconds) it traps, and the launch
  // fails rather than hangs.
  auto poll = [&] {
    guardedElement(b, loc, scalarOf(op.getPtr()), scalarOf(op.getIndex()),
                   scalarOf(op.getSize()), scalarOf(op.getStride()), i32(0),
                   [&](Value addr) {
                     asmStatement(b, loc,
                                  "{\n\t.reg .pred p;\n\t.reg .b32 v, n;\n\t"
                                  "mov.b32 n, 0;\n"
                                  "KILN_WAIT_${:uid}:\n\t"
                                  "ld.acquire.gpu.global.b32 v, [$0];\n\t"
                                  "setp.ge.s32 p, v, $1;\n\t"
                                  "@p bra KILN_DONE_${:uid};\n\t"
                                  "nanosleep.u32 128;\n\t"
                                  "add.s32 n, n, 1;\n\t"
                                  "setp.lt.u32 p, n, 33554432;\n\t"
                                  "@p bra KILN_WAIT_${:uid};\n\t"
                                  "trap;\n"
                                  "KILN_DONE_${:uid}:\n\t}",
                                  ValueRange{addr, scalarOf(op.getTarget())},
                                  "l,r,~{memory}");
                     return i32(0);
                   });
    // What the thread reads next may come through the async proxy (TMA).
    fenceGlobalForAsync(b, loc, gridDependencyControl);
  };
  if (producer) // the producer's one thread
    return poll();
  Value first = isThreadZero();
  ifThen(first, poll);
  barrier();
  note(op, "wait_count: one thread polls ld.acquire.gpu (nanosleep between "
           "reads; a trap after ~2^25), then a barrier");
}

void Lowerer::startGridDependencies() {
  if (!gridDependencyControl)
    return;
  bool arrives = false;
  src.walk([&](ArriveOp) { arrives = true; });
  if (!arrives)
    return;
  asmStatement(b, loc, "griddepcontrol.launch_dependents;", {}, "");
  report.push_back("launch: the next launch may start while this one runs "
                   "(griddepcontrol.launch_dependents at the start: it "
                   "arrives at counters, which a kernel launched to overlap "
                   "it waits on)");
}

void Lowerer::endGridDependencies() {
  if (!overlapPrevious)
    return;
  asmStatement(b, loc, "griddepcontrol.wait;");
}

} // namespace kiln::gpu
