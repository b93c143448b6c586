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
// Dynamic tiles (kiln.dynamic_tiles, with the producer warpgroup): fixed
// rounds balance only when the cost falls steadily along the grid; causal
// attention ordered for L2 (longest first within groups of heads) does not.
// Instead the producer takes the next tile from a global counter when it
// has issued this tile's copies, and hands it to the compute warps through a
// two-slot ring in shared memory (a full and an empty mbarrier per slot):
// the first free CTA gets the next tile, as FlashAttention-3's dynamic
// scheduler does. The CTA that takes the last id (there are exactly as many
// takes as tiles: each CTA stops at its first id past the end) puts the
// counter back to zero for the next launch. The counter is the kernel's last
// parameter (after the tensor maps), not a module global: the launcher gives
// each stream its own, so that two launches at once do not share one.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

/// "x=cdiv(N,128) y=H z=1": a run-time grid with the arguments' names
/// (kiln.name, else #i).
static std::string runtimeGridText(func::FuncOp f,
                                   llvm::ArrayRef<GridExtent> extents) {
  std::vector<ParamInfo> params(f.getNumArguments());
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    auto name = f.getArgAttrOfType<StringAttr>(i, "kiln.name");
    params[i].name = name ? name.str() : "#" + std::to_string(i);
  }
  return describeGrid({extents[0], extents[1], extents[2]}, params);
}

/// The kernel's grid: constants, or formulas of its arguments; none when it
/// has no grid.
static std::optional<GridExtents> gridOf(func::FuncOp f) {
  auto grid = f->getAttrOfType<DenseI64ArrayAttr>(kGridAttr);
  auto formulas = f->getAttrOfType<ArrayAttr>(kGridExtentsAttr);
  if (!grid || grid.size() != 3)
    return std::nullopt;
  GridExtents extents;
  for (auto [a, g] : llvm::enumerate(grid.asArrayRef())) {
    if (g != kDynamicDim) {
      extents[a] = GridExtent(g);
      continue;
    }
    auto text = formulas && formulas.size() == 3
                    ? dyn_cast<StringAttr>(formulas[a])
                    : StringAttr();
    if (!text)
      throw InternalError("GPU lowering: grid axis " + std::to_string(a) +
                          " is run-time with no formula");
    extents[a] = GridExtent::parse(text.str());
  }
  return extents;
}

void Lowerer::planPersistent(int64_t &top) {
  if (!src->hasAttr("kiln.persistent"))
    return;
  std::string why;
  int64_t tiles = 1; // -1: counted at each launch
  llvm::SmallVector<GridExtent, 3> extents;
  if (std::optional<GridExtents> grid = gridOf(src); !grid)
    why = "the kernel has no grid";
  else {
    for (const GridExtent &e : *grid) {
      extents.push_back(e);
      tiles = e.isConstant() && tiles > 0 ? tiles * e.scale : -1;
    }
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
  persistentGrid = extents;
  dynamicTiles = src->hasAttr("kiln.dynamic_tiles") && producerWarps;
  freshProgramValues = src->hasAttr("kiln.fresh_program_values");
  report.push_back(
      "persistent: the grid's " +
      (tiles > 0 ? std::to_string(tiles) : runtimeGridText(src, extents)) +
      " programs run on at most as many CTAs as the GPU holds at once, " +
      (dynamicTiles
           ? std::string("handed out in grid order (x fastest) as CTAs "
                         "become free: the producer takes the next from a "
                         "global counter and passes it on through shared "
                         "memory")
           : std::string("in rounds of n (x fastest): CTA c of n takes "
                         "program c of each round, n - 1 - c of every "
                         "second full one")) +
      (producerWarps ? "; the stage ring runs on across them" : ""));
  if (src->hasAttr("kiln.dynamic_tiles") && !producerWarps)
    report.push_back("dynamic tiles: no (the schedule asks for them; no "
                     "producer warpgroup to take them): fixed rounds");
  if (gatedFrom) {
    report.push_back(
        "persistent: each tile's buffers are placed by liveness within the "
        "tile, and " +
        std::string(producerWarps
                        ? "the producer fetches a tile's first blocks only "
                          "once the compute warps are done with the previous "
                          "tile (an mbarrier)"
                        : "the warps meet at a barrier after each tile") +
        ": with every buffer live across tiles the kernel needed " +
        std::to_string(gatedFrom) + " bytes of shared memory (limit " +
        std::to_string(sharedLimit) + ")");
    if (producerWarps) {
      top = (top + 7) / 8 * 8;
      tileGate = top;
      top += 8;
    }
  }
  if (producerWarps && hasUnusedArrival()) {
    top = (top + 7) / 8 * 8;
    arrivalRing = top;
    top += 16 + 2 * 16;
  }
  if (!dynamicTiles)
    return;
  top = (top + 7) / 8 * 8;
  tileRing = top;
  top += 8 + 4 * 8;
}

void Lowerer::endTile(TileRole role) {
  if (tileLocalCompute && role == TileRole::Consumer) {
    // The next tile's staging may write where this one's bulk copies read
    // and other warps staged or read: both done first.
    finishTmaStores();
    barrier();
  }
  if (!gatedFrom || role == TileRole::Producer)
    return;
  finishTmaStores(); // the bulk copies have read their staging tiles
  if (tileGate < 0)
    return barrier();
  // The producer's next copies (async proxy) may land where this tile's
  // epilogue wrote and read through the generic proxy.
  fenceSharedForAsync();
  NVVM::MBarrierArriveOp::create(b, loc, Type(), sharedAt(i32(tileGate)),
                                 Value());
}

void Lowerer::waitForPreviousTile() {
  // Tile c waits for the gate's c-th completion (none for the first: a
  // fresh barrier's previous phase counts as complete).
  if (tileGate >= 0)
    waitMbarrier(sharedAt(i32(tileGate)), previousPhase(residentPhase()));
}

Value Lowerer::evaluateExtent(const GridExtent &e) {
  mlir::Block &args = src.getBody().front();
  Value v = e.scale != 1 || e.factors.empty() ? i32(e.scale) : Value();
  for (const GridExtent::Factor &f : e.factors) {
    Value x = scalarOf(args.getArgument(unsigned(f.param)));
    if (f.divisor != 1)
      x = arith::DivUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, x, i32(f.divisor - 1)),
          i32(f.divisor));
    v = v ? arith::MulIOp::create(b, loc, v, x).getResult() : x;
  }
  return v;
}

void Lowerer::foldRuntimeGridY() {
  if (!persistentGrid.empty())
    return;
  std::optional<GridExtents> grid = gridOf(src);
  if (!grid || !foldsGridY(*grid))
    return;
  foldedGridY = evaluateExtent((*grid)[1]);
  Type i32t = b.getI32Type();
  foldedProgramY = arith::AddIOp::create(
      b, loc, NVVM::BlockIdYOp::create(b, loc, i32t),
      arith::MulIOp::create(b, loc, NVVM::GridDimYOp::create(b, loc, i32t),
                            NVVM::BlockIdZOp::create(b, loc, i32t)));
  // The whole CTA returns before its first barrier or shared memory access.
  Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                       foldedProgramY, foldedGridY);
  mlir::Block *entry = b.getInsertionBlock();
  mlir::Block *exit = b.createBlock(entry->getParent());
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  mlir::Block *body = b.createBlock(entry->getParent());
  b.setInsertionPointToEnd(entry);
  LLVM::CondBrOp::create(b, loc, inside, body, exit);
  b.setInsertionPointToStart(body);
  report.push_back("grid: y is run-time; past the device's 65535 the "
                   "launcher splits it across y and z (program y = "
                   "blockIdx.y + gridDim.y * blockIdx.z; CTAs past y return "
                   "at once)");
}

void Lowerer::evaluatePersistentGrid() {
  if (persistentGrid.empty())
    return;
  gridExtentValues.clear();
  for (const GridExtent &e : persistentGrid)
    gridExtentValues.push_back(evaluateExtent(e));
  if (llvm::all_of(persistentGrid,
                   [](const GridExtent &e) { return e.isConstant(); })) {
    persistentTiles = i32(persistentGrid[0].scale * persistentGrid[1].scale *
                          persistentGrid[2].scale);
    return;
  }
  persistentTiles = arith::MulIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, gridExtentValues[0], gridExtentValues[1]),
      gridExtentValues[2]);
}

/// Under kiln.fresh_program_values each tile's body sees the thread id and
/// the kernel's scalar and pointer arguments as fresh values (an opaque move
/// per tile), so that LLVM does not hoist the arithmetic of a tile's first
/// loads and last stores out of the tile loop: held across the inner loops,
/// it spilled (attention's backward at D=128: 288 bytes non-causal, 392
/// causal, and 30% slower than one CTA per program; the statements after
/// the inner loops take fresh ids too, lowerFor). Not by default: the
/// forward at D=128, whose spills it also removed, ran 3-6% slower at causal
/// N=1000-2048 (the arithmetic then runs once per tile, not once per CTA).
Lowerer::FreshValues Lowerer::freshenForTile(TileRole role) {
  FreshValues saved{lane, warp, {}};
  if (!freshProgramValues)
    return saved;
  if (role != TileRole::Producer) // the producer's one thread: no shuffle
    rereadThreadId();
  for (BlockArgument a : src.getArguments()) {
    Value v = scalars.lookup(a);
    if (!v)
      continue;
    Type t = v.getType();
    const bool ptr = isa<LLVM::LLVMPointerType>(t);
    Value x =
        ptr ? LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), v).getResult()
            : v;
    if (!x.getType().isInteger(32) && !x.getType().isInteger(64))
      continue;
    const bool wide = x.getType().isInteger(64);
    auto asmOp = LLVM::InlineAsmOp::create(
        b, loc, x.getType(), ValueRange{x},
        wide ? "mov.b64 $0, $1;" : "mov.b32 $0, $1;", wide ? "=l,l" : "=r,r",
        /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr());
    Value y = asmOp.getResult(0);
    saved.args.push_back({a, v});
    scalars[a] = ptr ? LLVM::IntToPtrOp::create(b, loc, t, y).getResult() : y;
  }
  return saved;
}

void Lowerer::restore(const FreshValues &saved) {
  lane = saved.lane;
  warp = saved.warp;
  for (auto [a, v] : saved.args)
    scalars[a] = v;
}

void Lowerer::forEachTile(llvm::function_ref<void()> body, TileRole role) {
  if (persistentGrid.empty())
    return body();
  if (dynamicTiles)
    return forEachDynamicTile(body, role);
  Value tiles = persistentTiles;
  SmallVector<Value> inits;
  if (ringSlot)
    inits = {ringSlot, ringPhase};
  Type t = b.getI32Type();
  Value first = NVVM::BlockIdXOp::create(b, loc, t);
  Value step = NVVM::GridDimXOp::create(b, loc, t);
  auto loop = scf::ForOp::create(b, loc, first, tiles, step, inits);
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
        tiles);
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
    FreshValues saved = freshenForTile(role);
    body();
    waitForAll();
    endTile(role);
    restore(saved);
    if (ringSlot)
      scf::YieldOp::create(b, loc, ValueRange{ringSlot, ringPhase});
    tile = tileCount = Value();
  }
  if (ringSlot) {
    ringSlot = loop.getResult(0);
    ringPhase = loop.getResult(1);
  }
}

Value Lowerer::tileRingSlot(Value k) {
  return sharedAt(arith::AddIOp::create(
      b, loc, i32(tileRing),
      arith::MulIOp::create(b, loc, arith::AndIOp::create(b, loc, k, i32(1)),
                            i32(4))));
}

Value Lowerer::tileRingMbarrier(Value k, bool released) {
  Value slot = arith::AndIOp::create(b, loc, k, i32(1));
  return sharedAt(
      arith::AddIOp::create(b, loc, i32(tileRing + 8 + (released ? 16 : 0)),
                            arith::MulIOp::create(b, loc, slot, i32(8))));
}

void Lowerer::forEachDynamicTile(llvm::function_ref<void()> body,
                                 TileRole role) {
  if (role == TileRole::All)
    throw InternalError("GPU lowering: dynamic tiles without warp roles");
  Value tiles = persistentTiles;
  std::optional<int64_t> constantTiles = constantInt(tiles);
  Value lastTile =
      constantTiles ? i32(*constantTiles - 1)
                    : arith::SubIOp::create(b, loc, tiles, i32(1)).getResult();
  Type i32t = b.getI32Type();
  // Hand-out k sits in slot k mod 2; its mbarriers complete phase k / 2 mod
  // 2 (a fresh barrier's "previous phase" counts as complete).
  auto phaseOf = [&](Value k) {
    return arith::AndIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, k, i32(1)), i32(1));
  };
  // Producer: publishes tile t as hand-out k once the slot is released.
  auto publish = [&](Value k, Value t) {
    waitMbarrier(tileRingMbarrier(k, /*released=*/true),
                 previousPhase(phaseOf(k)));
    LLVM::StoreOp::create(b, loc, t, tileRingSlot(k));
    NVVM::MBarrierArriveOp::create(
        b, loc, Type(), tileRingMbarrier(k, /*released=*/false), Value());
    return t;
  };
  // Producer: the next tile from the counter (the first n are the CTAs' own
  // ids); whoever takes the last id resets the counter.
  auto take = [&]() -> Value {
    Value counter = tileCounterArg;
    Value old =
        LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, counter,
                                  i32(1), LLVM::AtomicOrdering::monotonic);
    ifThen(
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, old, lastTile),
        [&] { LLVM::StoreOp::create(b, loc, i32(0), counter); });
    return arith::AddIOp::create(b, loc, NVVM::GridDimXOp::create(b, loc, i32t),
                                 old);
  };
  // Compute warps: every thread reads hand-out k, then releases its slot.
  auto receive = [&](Value k) -> Value {
    waitMbarrier(tileRingMbarrier(k, /*released=*/false), phaseOf(k));
    Value t = LLVM::LoadOp::create(b, loc, i32t, tileRingSlot(k));
    NVVM::MBarrierArriveOp::create(
        b, loc, Type(), tileRingMbarrier(k, /*released=*/true), Value());
    return t;
  };
  const bool producer = role == TileRole::Producer;
  auto next = [&](Value k) {
    return producer ? publish(k, take()) : receive(k);
  };
  Value first = producer
                    ? publish(i32(0), NVVM::BlockIdXOp::create(b, loc, i32t))
                    : receive(i32(0));
  SmallVector<Value> inits{first, i32(0)};
  if (ringSlot)
    inits.append({ringSlot, ringPhase});
  SmallVector<Type> types(inits.size(), i32t);
  SmallVector<Location> locs(inits.size(), loc);
  auto loop = scf::WhileOp::create(b, loc, types, inits);
  {
    OpBuilder::InsertionGuard g(b);
    Block *before = b.createBlock(&loop.getBefore(), {}, types, locs);
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                       before->getArgument(0), tiles);
    scf::ConditionOp::create(b, loc, more, before->getArguments());
    Block *after = b.createBlock(&loop.getAfter(), {}, types, locs);
    tile = after->getArgument(0);
    tileCount = after->getArgument(1);
    if (ringSlot) {
      ringSlot = after->getArgument(2);
      ringPhase = after->getArgument(3);
    }
    FreshValues saved = freshenForTile(role);
    body();
    waitForAll();
    endTile(role);
    Value k = arith::AddIOp::create(b, loc, tileCount, i32(1));
    SmallVector<Value> yields{next(k), k};
    restore(saved);
    if (ringSlot)
      yields.append({ringSlot, ringPhase});
    scf::YieldOp::create(b, loc, yields);
    tile = tileCount = Value();
  }
  if (ringSlot) {
    ringSlot = loop.getResult(2);
    ringPhase = loop.getResult(3);
  }
}

Value Lowerer::programId(uint32_t axis) {
  // x = tile mod gx, y = (tile / gx) mod gy, z = tile / (gx gy).
  Value v = tile;
  for (uint32_t a = 0; a < axis; ++a)
    v = arith::DivUIOp::create(b, loc, v, gridExtentValues[a]);
  return axis == 2 ? v
                   : arith::RemUIOp::create(b, loc, v, gridExtentValues[axis]);
}

} // namespace kiln::gpu
