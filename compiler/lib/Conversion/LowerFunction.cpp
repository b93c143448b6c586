//===- LowerFunction.cpp - kernel, scalars, loops and elementwise ops -----===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <cstdlib>

using namespace mlir;

namespace kiln::gpu {

Lowerer::Lowerer(func::FuncOp src, int numWarps, int numStages)
    : b(src.getContext()), loc(src.getLoc()), numWarps(numWarps),
      numStages(numStages), src(src) {}

Value Lowerer::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, v, 32);
}
Value Lowerer::i64(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, v, 64);
}

Layout Lowerer::layoutOf(Value v) const {
  std::optional<Layout> l = kiln::layoutOf(v.getType());
  if (!l)
    throw InternalError("GPU lowering: a tile without a layout (run "
                        "kiln-assign-layouts first)");
  return *l;
}

static LLVM::LLVMPointerType ptrType(MLIRContext *ctx, unsigned addrSpace) {
  return LLVM::LLVMPointerType::get(ctx, addrSpace);
}

int64_t Lowerer::run(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  src.walk([](DotOp dot) { checkDotOnTensorCores(dot); });
  b.setInsertionPointToEnd(module.getBody());
  // Dynamic shared memory. wgmma's swizzle works on absolute shared
  // addresses: 1 KB alignment makes kiln's tile offsets (1 KB aligned) line
  // up with it.
  if (!module.lookupSymbol("kiln_smem"))
    LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           "kiln_smem", Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);
  planSharedMemory();
  planRowSkips();
  SmallVector<Type> argTypes;
  for (Type t : src.getArgumentTypes())
    argTypes.push_back(isa<PointerType>(t) ? Type(ptrType(ctx, 1)) : t);
  // TMA tensor maps: 128 bytes by value in the parameter space.
  argTypes.append(tensorMaps.size(), ptrType(ctx, 0));
  // Dynamic tiles: the tile counter (LaunchSpec::tileCounter).
  if (dynamicTiles)
    argTypes.push_back(ptrType(ctx, 1));
  auto fn = LLVM::LLVMFuncOp::create(
      b, loc, src.getName(),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  fn->setAttr("nvvm.kernel", b.getUnitAttr());
  fn->setAttr("nvvm.maxntid",
              b.getDenseI32ArrayAttr({32 * (numWarps + producerWarps), 1, 1}));
  if (auto blocks = src->getAttrOfType<IntegerAttr>("kiln.min_blocks_per_sm"))
    fn->setAttr("nvvm.minctasm", b.getI32IntegerAttr(int(blocks.getInt())));
  for (size_t i = 0; i < tensorMaps.size(); ++i) {
    unsigned arg = src.getNumArguments() + i;
    fn.setArgAttr(arg, "llvm.byval",
                  TypeAttr::get(LLVM::LLVMArrayType::get(b.getI8Type(), 128)));
    fn.setArgAttr(arg, "llvm.align", b.getI32IntegerAttr(64));
    fn.setArgAttr(arg, "nvvm.grid_constant", b.getUnitAttr());
  }
  mlir::Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  for (auto [s, d] : llvm::zip(src.getArguments(), entry->getArguments()))
    scalars[s] = d;
  for (size_t i = 0; i < tensorMaps.size(); ++i)
    tensorMapArgs.push_back(entry->getArgument(src.getNumArguments() + i));
  if (dynamicTiles)
    tileCounterArg = entry->getArguments().back();
  evaluatePersistentGrid();
  foldRuntimeGridY();
  Value tid = NVVM::ThreadIdXOp::create(b, loc, b.getI32Type());
  lane = arith::AndIOp::create(b, loc, tid, i32(31));
  warp = warpIndexOf(tid);
  smemBase = LLVM::AddressOfOp::create(b, loc, ptrType(ctx, 3), "kiln_smem");
  initMbarriers();
  noteLoads();
  noteStores();
  planDeferredArrivals();
  overlapPrevious = src->hasAttr("kiln.overlap_previous");
  if (overlapPrevious && gridDependencyControl)
    report.push_back("launch: starts before the previous launch on its "
                     "stream ends (programmatic dependent launch), on SMs "
                     "that launch's CTAs leave; griddepcontrol.wait at its "
                     "end, so that the launch after it follows both");
  else if (overlapPrevious)
    report.push_back("launch: the kernel asks to overlap the previous "
                     "launch; the target has no programmatic dependent "
                     "launch (sm_90): an ordinary launch");
  overlapPrevious &= gridDependencyControl;
  startGridDependencies();
  mlir::Block &body = src.getBody().front();
  if (producerWarps)
    lowerSpecialized(body);
  else {
    forEachTile([&] {
      for (Operation &op : body.without_terminator())
        lowerOp(&op);
    });
    flushDeferredArrival();
    lowerOp(body.getTerminator());
  }
  return placeScratch();
}

void Lowerer::waitFor(Value v) {
  auto it = llvm::find(inFlight, v);
  if (it == inFlight.end())
    return;
  // Groups complete in order: wait until only those committed after v's are
  // pending.
  int64_t newer = inFlight.end() - it - 1;
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, b.getI64IntegerAttr(newer));
  inFlight.erase(inFlight.begin(), it + 1);
}

void Lowerer::waitForAll() {
  if (inFlight.empty())
    return;
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, b.getI64IntegerAttr(0));
  inFlight.clear();
}

std::string unalignedReason(Value ptr) {
  return "tensor " + accessedTensorName(ptr) +
         " is not specialised as aligned (16-byte aligned base, contiguous "
         "rows, other strides multiples of 16 bytes)";
}

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string text;
  for (int64_t d : shape)
    text += (text.empty() ? "" : "x") + std::to_string(d);
  return text;
}

void Lowerer::note(Operation *op, const std::string &what) {
  report.push_back(lineOf(op) + ": " + what);
}

std::string Lowerer::lineOf(Operation *op) const {
  Location l = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(l);
      fused && !fused.getLocations().empty())
    l = fused.getLocations().front();
  std::string where = "?";
  if (auto fl = dyn_cast<FileLineColLoc>(l)) {
    std::string file = fl.getFilename().str();
    where = file.substr(file.find_last_of('/') + 1) + ":" +
            std::to_string(fl.getLine());
  }
  return where;
}

void Lowerer::lowerBlock(mlir::Block &block) {
  for (Operation &op : block)
    lowerOp(&op);
}

static bool isTile(Value v) { return isa<RankedTensorType>(v.getType()); }

/// The i32 special register X, Y or Z for grid axis 0, 1 or 2.
template <class X, class Y, class Z>
static Value perAxis(OpBuilder &b, Location loc, uint32_t axis) {
  Type t = b.getI32Type();
  if (axis == 0)
    return X::create(b, loc, t);
  if (axis == 1)
    return Y::create(b, loc, t);
  return Z::create(b, loc, t);
}

void Lowerer::lowerOp(Operation *op) {
  loc = op->getLoc();
  if (auto it = topIndex.find(op); it != topIndex.end())
    currentTop = it->second;
  // A wgmma still in flight is waited for before its registers are read;
  // a wgmma dot may take it as its accumulator in flight (same registers).
  for (OpOperand &use : op->getOpOperands())
    if (!(isa<DotOp>(op) && use.getOperandNumber() == 2 && wgmma))
      waitFor(use.get());
  // A pipelined loop waits after its prologue (lowerFor); the return for
  // every load left, whose copy still writes this CTA's shared memory.
  if (!pendingOneShot.empty() && !isa<scf::ForOp>(op))
    waitOneShotReadBy(op, isa<func::ReturnOp>(op));
  if (isa<func::ReturnOp>(op)) {
    finishTmaStores();
    endGridDependencies();
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    return;
  }
  if (auto p = dyn_cast<ProgramIdOp>(op)) {
    scalars[p] =
        tile ? programId(p.getAxis())
        : foldedProgramY && p.getAxis() == 1
            ? foldedProgramY
            : perAxis<NVVM::BlockIdXOp, NVVM::BlockIdYOp, NVVM::BlockIdZOp>(
                  b, loc, p.getAxis());
    return;
  }
  if (auto p = dyn_cast<NumProgramsOp>(op)) {
    scalars[p] =
        !persistentGrid.empty() ? gridExtentValues[p.getAxis()]
        : foldedGridY && p.getAxis() == 1
            ? foldedGridY
            : perAxis<NVVM::GridDimXOp, NVVM::GridDimYOp, NVVM::GridDimZOp>(
                  b, loc, p.getAxis());
    return;
  }
  if (auto a = dyn_cast<AddPtrOp>(op)) {
    Type elem = a.getPtr().getType().getPointeeType();
    Value off = scalarOf(a.getOffset());
    scalars[a] = LLVM::GEPOp::create(b, loc, ptrType(b.getContext(), 1), elem,
                                     scalarOf(a.getPtr()), ValueRange{off});
    return;
  }
  if (auto f = dyn_cast<scf::ForOp>(op)) {
    waitForAll();
    return lowerFor(f);
  }
  if (auto s = dyn_cast<StoreOp>(op)) {
    if (auto it = tmaStores.find(s); it != tmaStores.end())
      return lowerTmaStoreOrFallback(s, it->second, [&] { lowerStore(s); });
    return lowerStore(s);
  }
  if (auto a = dyn_cast<AtomicRMWOp>(op)) {
    if (auto it = tmaStores.find(a); it != tmaStores.end())
      return lowerTmaStoreOrFallback(a, it->second, [&] { lowerAtomic(a); });
    return lowerAtomic(a);
  }
  if (auto w = dyn_cast<WaitCountOp>(op))
    return lowerWaitCount(w);
  if (op->getNumResults() != 1)
    throw InternalError("GPU lowering: unexpected op " +
                        op->getName().getStringRef().str());
  Value r = op->getResult(0);
  if (auto li = dyn_cast<LoadIndexOp>(op)) {
    scalars[r] = lowerLoadIndex(li);
    return;
  }
  if (auto a = dyn_cast<ArriveOp>(op)) {
    scalars[r] = lowerArrive(a);
    return;
  }
  if (!isTile(r)) { // scalar index arithmetic
    SmallVector<Value> operands;
    for (Value o : op->getOperands())
      operands.push_back(scalarOf(o));
    if (isa<arith::ConstantOp>(op)) {
      scalars[r] = b.clone(*op)->getResult(0);
      return;
    }
    scalars[r] = scalarOp(op, operands, r.getType());
    return;
  }
  if (isUniform(op)) {
    tiles[r] = materialize(r);
    return;
  }
  if (loadedAhead.count(r))
    return; // the loop holds its registers
  const Layout l = layoutOf(r);
  if (auto ld = dyn_cast<LoadOp>(op); ld && prefetchedBase.count(r)) {
    // Fetched by the previous iteration (or the prologue) into this buffer.
    std::optional<SmemTile> t = tileGeometry(l);
    t->base = prefetchedBase[r];
    smemTiles[r] = *t;
    return;
  }
  if (auto ld = dyn_cast<LoadOp>(op);
      ld && (residentMbarrier.count(r) || oneShotMbarrier.count(r))) {
    if (residentMbarrier.count(r)) // the producer's copy for this tile
      waitMbarrier(residentMbarrierOf(r), residentPhase());
    else
      issueOneShot(ld); // waited for before its first reader
    std::optional<SmemTile> t = tileGeometry(l);
    t->base = i32(smemRegion[r]);
    smemTiles[r] = *t;
    return;
  }
  if (auto ld = dyn_cast<LoadOp>(op); ld && sharedOperands.count(r)) {
    Regs regs = lowerLoad(ld);
    barrier(); // the previous readers of this region are done
    std::optional<SmemTile> t =
        stage(regs, ld.getType().getElementType(), i32(smemRegion[r]));
    if (!t)
      throw InternalError(
          "GPU lowering: cannot stage a dot operand in shared memory");
    barrier();
    smemTiles[r] = *t;
    return;
  }
  if (auto tr = dyn_cast<TransOp>(op); tr && smemTiles.count(tr.getSrc())) {
    SmemTile t = smemTiles[tr.getSrc()]; // a transpose is a view
    std::vector<int> inv(2);
    for (int i = 0; i < 2; ++i)
      inv[tr.getOrder()[i]] = i;
    t.rowDim = inv[t.rowDim];
    t.colDim = inv[t.colDim];
    std::swap(t.shape[0], t.shape[1]);
    smemTiles[r] = t;
    return;
  }
  if (auto cv = dyn_cast<ConvertLayoutOp>(op);
      cv && smemTiles.count(cv.getSrc())) {
    // A staged dot operand: the dot reads it with ldmatrix, a k-slice at a
    // time.
    smemTiles[r] = smemTiles[cv.getSrc()];
    return;
  }
  if (auto cv = dyn_cast<ConvertLayoutOp>(op); cv && stagedOperands.count(r))
    lowerStagedOperand(cv);
  else if (auto cv = dyn_cast<ConvertLayoutOp>(op))
    tiles[r] = lowerConvertLayout(cv, l);
  else if (auto io = dyn_cast<IotaOp>(op)) {
    Value t = threadCoord(l)[0];
    Regs out{l, {}, {}};
    for (int64_t i = 0; i < l.numRegs(); ++i)
      out.regs.push_back(
          arith::AddIOp::create(b, loc, t, i32(l.regCoord(i)[0])));
    tiles[r] = out;
  } else if (auto ld = dyn_cast<LoadOp>(op))
    tiles[r] = lowerLoad(ld);
  else if (auto g = dyn_cast<GatherOp>(op))
    tiles[r] = lowerGather(g);
  else if (auto d = dyn_cast<DotOp>(op))
    tiles[r] = lowerDot(d);
  else if (auto red = dyn_cast<ReduceOp>(op))
    tiles[r] = lowerReduce(red);
  else if (auto bc = dyn_cast<BroadcastOp>(op))
    tiles[r] = lowerBroadcast(bc.getSrc(), l);
  else if (isa<ExpandDimsOp, TransOp>(op)) {
    Regs in = tiles.lookup(op->getOperand(0));
    tiles[r] = Regs{l, in.regs, {}};
  } else if (isa<arith::ConstantOp>(op))
    throw Error("GPU lowering: non-splat constant tiles are not supported yet");
  else if (auto sel = dyn_cast<arith::SelectOp>(op);
           std::optional<Regs> masked =
               sel ? lowerMaskedSelect(sel, l) : std::nullopt)
    tiles[r] = *masked;
  else
    tiles[r] = lowerElementwise(op, l);
}

/// Whether a tile op's result has one value for all elements: splats, and
/// what elementwise ops and shape changes make of uniform tiles. It lowers
/// to one scalar whatever its layout says.
bool Lowerer::isUniform(Operation *op) const {
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    return dense && dense.isSplat();
  }
  if (isa<LoadOp, GatherOp, DotOp, ReduceOp, IotaOp>(op) || op->getNumRegions())
    return false;
  for (Value o : op->getOperands()) {
    if (!isTile(o))
      continue;
    auto it = tiles.find(o);
    if (it == tiles.end() || it->second.layout)
      return false;
  }
  return true;
}

/// The scalar of a uniform tile.
Regs Lowerer::materialize(Value v) {
  Operation *op = v.getDefiningOp();
  if (!op) // a uniform loop-carried tile
    return tiles.lookup(v);
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    auto dense = cast<DenseElementsAttr>(c.getValue());
    auto attr = cast<TypedAttr>(dense.getSplatValue<Attribute>());
    return Regs{std::nullopt, {}, arith::ConstantOp::create(b, loc, attr)};
  }
  if (auto s = dyn_cast<SplatOp>(op))
    return Regs{std::nullopt, {}, scalarOf(s.getValue())};
  if (isa<ExpandDimsOp, TransOp, BroadcastOp, ConvertLayoutOp>(op))
    return tiles.lookup(op->getOperand(0));
  SmallVector<Value> operands;
  for (Value o : op->getOperands())
    operands.push_back(tiles.lookup(o).scalar);
  return Regs{
      std::nullopt, {}, scalarOp(op, operands, elementType(v.getType()))};
}

Regs Lowerer::lowerElementwise(Operation *op, const Layout &l) {
  SmallVector<Regs> ins;
  for (Value o : op->getOperands())
    ins.push_back(regsIn(o, l));
  Regs out{l, {}, {}};
  Type elem = elementType(op->getResult(0).getType());
  for (int64_t r = 0; r < l.numRegs(); ++r) {
    SmallVector<Value> operands;
    for (Regs &in : ins)
      operands.push_back(in.regs[r]);
    out.regs.push_back(scalarOp(op, operands, elem));
  }
  return out;
}

Regs Lowerer::lowerConvertLayout(ConvertLayoutOp op, const Layout &to) {
  auto it = tiles.find(op.getSrc());
  if (it == tiles.end())
    throw InternalError("GPU lowering: tile used before it was lowered");
  const Regs &have = it->second;
  if (*have.layout == to) // the same distribution under another name
    return Regs{to, have.regs, {}};
  Regs out{to, {}, {}};
  convertLayout(have, to, elementType(op.getType()), out.regs);
  return out;
}

Regs Lowerer::regsIn(Value v, const Layout &want) {
  auto it = tiles.find(v);
  if (it == tiles.end())
    throw InternalError("GPU lowering: tile used before it was lowered");
  const Regs &have = it->second;
  if (!have.layout) // uniform
    return Regs{want, SmallVector<Value>(want.numRegs(), have.scalar), {}};
  if (*have.layout != want)
    throw InternalError("GPU lowering: a tile in " + have.layout->str() +
                        " is read in " + want.str() +
                        " without a kiln.convert_layout");
  return Regs{want, have.regs, {}};
}

} // namespace kiln::gpu
