//===- LowerPersistent.cpp - one CTA per SM, looping over the grid's tiles ===//
//
// Persistent scheduling (the schedule's kiln.persistent): the runtime
// launches at most as many CTAs as the GPU runs at once, and each walks the
// kernel's grid in rounds of n tiles (a tile is one program of the grid, x
// fastest): CTA c of n takes tile c of each round, counted from the round's
// end in every second full round. When the tiles' cost falls along the grid
// (causal attention dispatched longest first) two rounds then cost every CTA
// about the same, where a fixed position would give CTA 0 the largest tile
// of every round. The body runs once per tile with the program ids it would
// have had. What it buys: with a producer warpgroup the
// stage ring runs on across tiles, so the next tile's blocks are fetched
// while this tile's last dots and stores finish, and no CTA waits for a
// launch slot.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

void Lowerer::planPersistent() {
  if (!src->hasAttr("kiln.persistent"))
    return;
  auto grid = src->getAttrOfType<DenseI64ArrayAttr>(kGridAttr);
  std::string why;
  int64_t tiles = 1;
  if (!grid || grid.size() != 3)
    why = "the kernel has no grid";
  else {
    for (int64_t g : grid.asArrayRef())
      tiles *= g;
    if (tiles > (int64_t(1) << 31) - 1)
      why = "its grid has more than 2^31 - 1 programs";
  }
  // Loops with their own TMA mbarriers restart at phase 0 each time they
  // run; only the producer's shared ring carries its phase across tiles.
  if (why.empty() && !mbarrierBase.empty() && !producerWarps)
    why = "its TMA loops have no producer warpgroup (their mbarrier phases "
          "would restart on every tile)";
  if (!why.empty()) {
    report.push_back("persistent: no (the schedule asks for it; not "
                     "possible: " +
                     why + "): one CTA per program");
    return;
  }
  persistentGrid.assign(grid.asArrayRef().begin(), grid.asArrayRef().end());
  report.push_back(
      "persistent: the grid's " + std::to_string(tiles) +
      " programs run on at most as many CTAs as the GPU holds "
      "at once, in rounds of n (x fastest): CTA c of n takes "
      "program c of each round, n - 1 - c of every second "
      "full one" +
      (producerWarps ? "; the stage ring runs on across them" : ""));
}

void Lowerer::forEachTile(llvm::function_ref<void()> body) {
  if (persistentGrid.empty())
    return body();
  const int64_t tiles =
      persistentGrid[0] * persistentGrid[1] * persistentGrid[2];
  SmallVector<Value> inits;
  if (ringSlot)
    inits = {ringSlot, ringPhase};
  Type t = b.getI32Type();
  Value first = NVVM::BlockIdXOp::create(b, loc, t);
  Value step = NVVM::GridDimXOp::create(b, loc, t);
  auto loop = scf::ForOp::create(b, loc, first, i32(tiles), step, inits);
  {
    OpBuilder::InsertionGuard g(b);
    if (inits.empty())
      b.setInsertionPoint(loop.getBody()->getTerminator());
    else
      b.setInsertionPointToStart(loop.getBody());
    // Round r = t / n: in odd full rounds the position is mirrored.
    Value iv = loop.getInductionVar();
    Value round = arith::DivUIOp::create(b, loc, iv, step);
    Value full = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ule,
        arith::MulIOp::create(
            b, loc, arith::AddIOp::create(b, loc, round, i32(1)), step),
        i32(tiles));
    Value odd = arith::TruncIOp::create(b, loc, b.getI1Type(), round);
    Value mirrored = arith::SubIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc,
                              arith::MulIOp::create(b, loc, round, step), step),
        arith::AddIOp::create(b, loc, first, i32(1)));
    tile = arith::SelectOp::create(
        b, loc, arith::AndIOp::create(b, loc, odd, full), mirrored, iv);
    tileCount = round;
    if (ringSlot) {
      ringSlot = loop.getRegionIterArgs()[0];
      ringPhase = loop.getRegionIterArgs()[1];
    }
    body();
    waitForAll();
    if (ringSlot)
      scf::YieldOp::create(b, loc, ValueRange{ringSlot, ringPhase});
    tile = tileCount = Value();
  }
  if (ringSlot) {
    ringSlot = loop.getResult(0);
    ringPhase = loop.getResult(1);
  }
}

Value Lowerer::programId(uint32_t axis) {
  // x = tile mod gx, y = (tile / gx) mod gy, z = tile / (gx gy).
  Value v = tile;
  for (uint32_t a = 0; a < axis; ++a)
    v = arith::DivUIOp::create(b, loc, v, i32(persistentGrid[a]));
  return axis == 2
             ? v
             : arith::RemUIOp::create(b, loc, v, i32(persistentGrid[axis]));
}

} // namespace kiln::gpu
