//===- Loops.cpp - counted loops with carried values ----------------------===//
#include "BuilderState.h"

using namespace mlir;

namespace kiln::dsl {

using namespace detail;

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

void forRange(Index lo, Index hi, Index step,
              const std::function<void(Index)> &body, Loc loc) {
  forRange(lo, hi, step, Carry{}, body, loc);
}

/// The body's carried tiles, checked against what entered the loop, as the
/// loop's yield.
static void yieldCarried(OpBuilder &b, Location l, const Carry &carried,
                         ArrayRef<Value> inits, const Loc &loc) {
  if (inits.empty())
    return;
  SmallVector<Value> yields;
  for (auto [i, t] : llvm::enumerate(carried.tiles)) {
    Value v = t->valid() ? value(t->raw()) : Value();
    if (!v || v.getType() != inits[i].getType())
      userError(loc, "forRange: carried tile #" + std::to_string(i) +
                         " enters the loop as " + typeStr(inits[i].getType()) +
                         " and leaves the body as " +
                         (v ? typeStr(v.getType()) : std::string("nothing")) +
                         " (a carried tile keeps its shape and dtype)");
    yields.push_back(v);
  }
  scf::YieldOp::create(b, l, yields);
}

void forRange(Index lo, Index hi, Index step, Carry carried,
              const std::function<void(Index)> &body, Loc loc) {
  if (step.isConstant() && step.constant() <= 0)
    userError(loc, "forRange: step must be positive, got " +
                       std::to_string(step.constant()));
  OpBuilder &b = builder(loc);
  Location l = location(loc);
  for (const Index *i : {&lo, &hi, &step})
    checkIndex(*i, loc, "forRange: a bound");
  SmallVector<Value> inits;
  for (auto [i, t] : llvm::enumerate(carried.tiles)) {
    if (!t->valid())
      userError(loc, "forRange: carried tile #" + std::to_string(i) +
                         " has no value before the loop");
    (void)tileType(*t, loc, "forRange: carried");
    inits.push_back(value(t->raw()));
  }
  auto forOp = scf::ForOp::create(b, l, value(lo.raw()), value(hi.raw()),
                                  value(step.raw()), inits);
  OpBuilder::InsertionGuard guard(b);
  mlir::Block *bodyBlock = forOp.getBody();
  if (inits.empty())
    b.setInsertionPoint(bodyBlock->getTerminator());
  else
    b.setInsertionPointToStart(bodyBlock);
  for (auto [t, arg] : llvm::zip(carried.tiles, forOp.getRegionIterArgs()))
    *t = Tile::fromRaw(raw(arg));
  try {
    body(Index::fromRaw(raw(forOp.getInductionVar()), std::nullopt));
    yieldCarried(b, l, carried, inits, loc);
  } catch (...) {
    // The body threw (a DSL error the user may catch, or their own): the
    // loop holds the part of the body built so far. Its IR stays well
    // formed (the iteration arguments yielded unchanged), the carried tiles
    // are what they were before the loop, and finish() refuses the kernel
    // rather than compile a loop that holds part of its body.
    if (bodyBlock->empty() ||
        !bodyBlock->back().hasTrait<OpTrait::IsTerminator>()) {
      b.setInsertionPointToEnd(bodyBlock);
      scf::YieldOp::create(b, l, forOp.getRegionIterArgs());
    }
    for (auto [t, v] : llvm::zip(carried.tiles, inits))
      *t = Tile::fromRaw(raw(v));
    KernelBuilder::State &st = state(loc);
    if (st.abandonedLoop.empty())
      st.abandonedLoop =
          std::string(loc.file_name()) + ":" + std::to_string(loc.line());
    throw;
  }
  for (auto [t, res] : llvm::zip(carried.tiles, forOp.getResults()))
    *t = Tile::fromRaw(raw(res));
}

} // namespace kiln::dsl
