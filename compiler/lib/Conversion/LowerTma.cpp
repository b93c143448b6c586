//===- LowerTma.cpp - pipelined loads through the Tensor Memory Accelerator
//===//
//
// Under the TMA schedule a pipelined load becomes cp.async.bulk.tensor copies
// issued by one thread: the block of a tensor argument, one box per 64-column
// panel (128-byte rows: the hardware's 128-byte swizzle is the layout wgmma
// reads), into the stage's buffer. Each stage has an mbarrier; the issuing
// thread arms it with the stage's byte count and the copies complete it, and
// every thread waits on its phase before reading the buffer. The tensor maps
// are kernel parameters (128-byte, grid-constant) that the launcher encodes
// from the tensor's pointer and stride arguments; the lowering says which in
// the module's kiln.tensor_maps.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace kiln::gpu {

/// `v` with sign extensions looked through.
static Value unextended(Value v) {
  while (auto e = v.getDefiningOp<arith::ExtSIOp>())
    v = e.getIn();
  return v;
}

std::optional<Lowerer::TmaLoad> Lowerer::matchTma(LoadOp ld, std::string &why) {
  return matchTmaBlock(ld.getPtr(), ld.getOffsets(), ld.getShape(),
                       ld.getStrides(), ld.getResult(), why);
}

std::optional<Lowerer::TmaLoad>
Lowerer::matchTmaBlock(Value p, ValueRange offsets, ValueRange blockShape,
                       ValueRange strides, Value tile, std::string &why) {
  if (!isAlignedAccess(p)) {
    why = unalignedReason(p);
    return std::nullopt;
  }
  // The pointer: a tensor argument plus index x stride terms of its outer
  // dimensions (what TensorView's [] builds).
  SmallVector<Value> terms;
  while (auto a = p.getDefiningOp<AddPtrOp>()) {
    terms.push_back(a.getOffset());
    p = a.getPtr();
  }
  auto arg = dyn_cast<BlockArgument>(p);
  auto shapeAttr = arg && arg.getOwner() == &src.getBody().front()
                       ? src.getArgAttrOfType<DenseI64ArrayAttr>(
                             arg.getArgNumber(), kTensorShapeAttr)
                       : DenseI64ArrayAttr();
  if (!shapeAttr) {
    why = "its pointer is not a tensor argument's";
    return std::nullopt;
  }
  ArrayRef<int64_t> shape = shapeAttr.asArrayRef();
  const int rank = int(shape.size());
  const unsigned argNo = arg.getArgNumber();
  auto strideArg = [&](int d) { return src.getArgument(argNo + 1 + d); };
  if (rank < 2 || offsets.size() != 2) {
    why = "it is not a 2-D block of a tensor of rank >= 2";
    return std::nullopt;
  }
  // The block's columns run along the tensor's contiguous last dimension,
  // its rows along one other dimension; the pointer indexes the rest.
  TmaLoad t;
  // The access's extents are the tensor's own: the same constant, or the
  // same run-time argument.
  auto dimsAttr =
      src.getArgAttrOfType<DenseI32ArrayAttr>(argNo, kTensorDimsAttr);
  auto isExtent = [&](Value v, int d) {
    if (dimsAttr && dimsAttr[d] >= 0)
      return v == src.getArgument(unsigned(dimsAttr[d]));
    return constantInt(v) == shape[d];
  };
  for (int d = 0; d < rank - 1; ++d)
    if (strides[0] == strideArg(d) && isExtent(blockShape[0], d))
      t.rowDim = d;
  if (t.rowDim < 0 || strides[1] != strideArg(rank - 1) ||
      !isExtent(blockShape[1], rank - 1)) {
    why = "its block is not over the tensor's own dimensions (rows along "
          "one, columns along the contiguous last)";
    return std::nullopt;
  }
  t.index.assign(rank, Value());
  for (Value term : terms) {
    if (constantInt(term) == 0) // an index folded to 0
      continue;
    auto mul = unextended(term).getDefiningOp<arith::MulIOp>();
    bool matched = false;
    for (int d = 0; mul && d < rank - 1 && !matched; ++d)
      for (int side = 0; side < 2 && !matched; ++side)
        if (d != t.rowDim && !t.index[d] &&
            unextended(mul->getOperand(side)) == strideArg(d)) {
          Value index = unextended(mul->getOperand(1 - side));
          if (index.getType().isInteger(32)) {
            t.index[d] = index;
            matched = true;
          }
        }
    if (!matched) {
      why = "its pointer offset is not index x stride of a tensor dimension";
      return std::nullopt;
    }
  }
  auto type = cast<RankedTensorType>(tile.getType());
  const int64_t eb = byteSize(type.getElementType());
  std::optional<SmemTile> g;
  if (eb == 2 || eb == 4)
    g = tileGeometry(layoutOf(tile), eb);
  t.rows = type.getShape()[0];
  if (!g || g->colDim != 1 || g->rowBytes() != 128 || t.rows > 256) {
    why = "its shared-memory tile is not in 128-byte panels (64 16-bit or 32 "
          "32-bit elements: the 128-byte swizzle) with at most 256 rows";
    return std::nullopt;
  }
  t.panelCols = g->panelCols;
  t.panels = g->cols / g->panelCols;
  t.panelBytes = g->panelBytes();
  TensorMapInfo &map = t.info;
  map.pointerParam = int(argNo);
  map.elementBytes = int(eb);
  map.dims.assign(shape.begin(), shape.end());
  if (dimsAttr)
    map.dimParams.assign(dimsAttr.asArrayRef().begin(),
                         dimsAttr.asArrayRef().end());
  for (int d = 0; d < rank; ++d)
    map.strideParams.push_back(int(argNo) + 1 + d);
  map.box.assign(rank, 1);
  map.box[t.rowDim] = t.rows;
  map.box[rank - 1] = t.panelCols;
  return t;
}

SmallVector<Value> Lowerer::tmaCoords(const TmaLoad &t, ValueRange offsets) {
  SmallVector<Value> c; // innermost dimension first
  for (int d = int(t.index.size()) - 1; d >= 0; --d)
    c.push_back(d == int(t.index.size()) - 1 ? scalarOf(offsets[1])
                : d == t.rowDim              ? scalarOf(offsets[0])
                : t.index[d]                 ? scalarOf(t.index[d])
                                             : i32(0));
  return c;
}

int Lowerer::tensorMapFor(const TensorMapInfo &info) {
  // One map per distinct tensor and box: a kernel parameter each.
  std::string key = info.str();
  auto it = llvm::find_if(
      tensorMaps, [&](const TensorMapInfo &m) { return m.str() == key; });
  int index = int(it - tensorMaps.begin());
  if (it == tensorMaps.end())
    tensorMaps.push_back(info);
  return index;
}

void Lowerer::planTma(int64_t &top) {
  if (!tma)
    return;
  // A loop fetches through TMA when every load it pipelines can.
  llvm::MapVector<Operation *, SmallVector<LoadOp>> loops;
  src.walk([&](LoadOp ld) {
    if (smemBufferBytes.count(ld.getResult()))
      loops[ld->getParentOp()].push_back(ld);
  });
  for (auto &[loop, loads] : loops) {
    std::vector<std::pair<LoadOp, TmaLoad>> matched;
    std::string why;
    for (LoadOp ld : loads)
      if (std::optional<TmaLoad> t = matchTma(ld, why))
        matched.push_back({ld, *t});
      else {
        tmaFallback[ld.getResult()] = why;
        break;
      }
    if (matched.size() != loads.size()) {
      for (LoadOp ld : loads)
        if (!tmaFallback.count(ld.getResult()))
          tmaFallback[ld.getResult()] =
              "the loop's other loads cannot all use it";
      continue;
    }
    for (auto &[ld, t] : matched) {
      t.map = tensorMapFor(t.info);
      tmaLoads[ld.getResult()] = t;
    }
    // Per stage an 8-byte mbarrier for "landed" and, with a producer
    // warpgroup, one for "released".
    mbarrierBase[loop] = top;
    top += 16 * numStages;
  }
}

/// Whether the producer warpgroup, which runs only the body's scalar ops,
/// has `v`: an argument or region-free scalar ops of them (no loop result).
static bool producerHas(Value v, mlir::Block &body) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner() == &body;
  Operation *op = v.getDefiningOp();
  return op->getBlock() == &body && !op->getNumRegions() &&
         !isa<RankedTensorType>(v.getType()) &&
         llvm::all_of(op->getOperands(),
                      [&](Value o) { return producerHas(o, body); });
}

bool Lowerer::claimTma(LoadOp ld) {
  std::string why;
  std::optional<TmaLoad> t = matchTma(ld, why);
  if (!t) {
    tmaFallback[ld.getResult()] = why;
    return false;
  }
  t->map = tensorMapFor(t->info);
  tmaLoads[ld.getResult()] = *t;
  return true;
}

/// The ops that read `v`: its users, looking through views (layout
/// conversions and transposes).
static SmallVector<Operation *> readersOf(Value v) {
  SmallVector<Operation *> readers;
  SmallVector<Value> work{v};
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers())
      if (isa<ConvertLayoutOp, TransOp>(user))
        work.push_back(user->getResult(0));
      else
        readers.push_back(user);
  return readers;
}

void Lowerer::planResidentTma(int64_t &top) {
  // Only for persistent CTAs, where the producer fetches the next tile's
  // blocks while the compute warps finish this one. Without persistence it
  // measured slower than the compute warps' own loads at causal D=128 on the
  // H200 (bf16 TFLOP/s at N=2k/4k: 326/425 against 356/468; non-causal
  // +1-2%), for a reason not yet found.
  if (!producerWarps || persistentGrid.empty())
    return;
  mlir::Block &body = src.getBody().front();
  for (Operation &op : body) {
    auto ld = dyn_cast<LoadOp>(op);
    if (!ld || !sharedOperands.count(ld.getResult()))
      continue;
    if (!llvm::all_of(ld->getOperands(),
                      [&](Value o) { return producerHas(o, body); })) {
      tmaFallback[ld.getResult()] =
          "its address depends on a loop's result, which the producer "
          "warpgroup does not compute";
      continue;
    }
    // Its last reader at the top level (maybe inside loops).
    Operation *last = nullptr;
    for (Operation *reader : readersOf(ld.getResult())) {
      Operation *top = body.findAncestorOpInBlock(*reader);
      if (!last || last->isBeforeInBlock(top))
        last = top;
    }
    if (!last || !claimTma(ld))
      continue;
    residentMbarrier[ld.getResult()] = top; // full; empty 8 bytes after
    top += 16;
    releaseAfter[last].push_back(ld.getResult());
  }
}

void Lowerer::planOneShotTma(int64_t &top) {
  // Each CTA computes one tile: the load's buffer is live from the body's
  // start (SharedMemoryPlan), so no earlier reader of its bytes can exist.
  if (!tma || producerWarps || !persistentGrid.empty() ||
      !src->hasAttr("kiln.one_shot_loads"))
    return;
  for (Operation &op : src.getBody().front()) {
    auto ld = dyn_cast<LoadOp>(op);
    if (!ld || !sharedOperands.count(ld.getResult()) ||
        ld.getPadding().convertToDouble() != 0.0) // TMA fills with zeros
      continue;
    if (!claimTma(ld))
      continue;
    oneShotMbarrier[ld.getResult()] = top;
    top += 8;
  }
}

void Lowerer::issueOneShot(LoadOp ld) {
  Value r = ld.getResult();
  issueTma({ld}, {i32(smemRegion[r])}, sharedAt(i32(oneShotMbarrier.lookup(r))),
           isThreadZero());
  pendingOneShot[r] = readersOf(r);
}

void Lowerer::waitOneShotReadBy(Operation *op, bool all) {
  for (auto it = pendingOneShot.begin(); it != pendingOneShot.end();) {
    if (all || llvm::any_of(it->second,
                            [&](Operation *r) { return op->isAncestor(r); })) {
      waitMbarrier(sharedAt(i32(oneShotMbarrier.lookup(it->first))), i32(0));
      it = pendingOneShot.erase(it);
    } else
      ++it;
  }
}

void Lowerer::issueResident(LoadOp ld) {
  Value full = residentMbarrierOf(ld.getResult());
  Value empty = residentMbarrierOf(ld.getResult(), /*released=*/true);
  // Released by the consumers after the previous tile.
  waitMbarrier(empty, previousPhase(residentPhase()));
  issueTma({ld}, {i32(smemRegion[ld.getResult()])}, full,
           arith::ConstantIntOp::create(b, loc, 1, 1));
}

Value Lowerer::residentMbarrierOf(Value v, bool released) {
  return sharedAt(i32(residentMbarrier.lookup(v) + (released ? 8 : 0)));
}

Value Lowerer::residentPhase() {
  return tileCount ? arith::AndIOp::create(b, loc, tileCount, i32(1)) : i32(0);
}

Value Lowerer::sharedAt(Value byteOffset) {
  return LLVM::GEPOp::create(b, loc, smemBase.getType(), b.getI8Type(),
                             smemBase, ValueRange{byteOffset});
}

Value Lowerer::isThreadZero() {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                               arith::OrIOp::create(b, loc, lane, warp),
                               i32(0));
}

void Lowerer::initMbarriers() {
  if (mbarrierBase.empty() && residentMbarrier.empty() &&
      oneShotMbarrier.empty() && tileRing < 0 && arrivalRing < 0)
    return;
  auto ifOp = scf::IfOp::create(b, loc, isThreadZero(), /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    llvm::SmallSetVector<int64_t, 4> bases; // loops may share a ring
    for (auto &[loop, base] : mbarrierBase)
      bases.insert(base);
    // Dynamic tiles: the producer fills a slot, every compute thread
    // releases it.
    for (int s = 0; tileRing >= 0 && s < 2; ++s) {
      NVVM::MBarrierInitOp::create(b, loc, tileRingMbarrier(i32(s), false),
                                   i32(1), Value());
      NVVM::MBarrierInitOp::create(b, loc, tileRingMbarrier(i32(s), true),
                                   i32(32 * numWarps), Value());
    }
    for (int s = 0; arrivalRing >= 0 && s < 2; ++s) { // deferred arrivals
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(arrivalRing + 16 + 8 * s)),
                                   i32(32 * numWarps), Value());
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(arrivalRing + 32 + 8 * s)),
                                   i32(1), Value());
    }
    if (tileGate >= 0) // every compute thread arrives at a tile's end
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(tileGate)),
                                   i32(32 * numWarps), Value());
    for (auto &[v, at] : oneShotMbarrier)
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(at)), i32(1), Value());
    for (auto &[v, at] : residentMbarrier) {
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(at)), i32(1), Value());
      NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(at + 8)),
                                   i32(32 * numWarps), Value());
    }
    for (int64_t base : bases)
      for (int s = 0; s < numStages; ++s) {
        NVVM::MBarrierInitOp::create(b, loc, sharedAt(i32(base + 8 * s)),
                                     i32(1), Value());
        // Released when every consumer thread has arrived.
        NVVM::MBarrierInitOp::create(b, loc,
                                     sharedAt(i32(base + 8 * (numStages + s))),
                                     i32(32 * numWarps), Value());
      }
  }
  NVVM::FenceMbarrierInitOp::create(b, loc);
  barrier();
}

void Lowerer::waitMbarrier(Value mbar, Value phase) {
  NVVM::MBarrierTryWaitParityOp::create(b, loc, mbar, phase, i32(10000000));
}

Value Lowerer::previousPhase(Value phase) {
  return arith::XOrIOp::create(b, loc, phase, i32(1));
}

Value Lowerer::emptyMbarrier(Operation *loop, Value slot) {
  return sharedAt(arith::AddIOp::create(
      b, loc, i32(mbarrierBase.lookup(loop) + 8 * numStages),
      arith::MulIOp::create(b, loc, slot, i32(8))));
}

Value Lowerer::mbarrier(Operation *loop, Value slot) {
  return sharedAt(
      arith::AddIOp::create(b, loc, i32(mbarrierBase.lookup(loop)),
                            arith::MulIOp::create(b, loc, slot, i32(8))));
}

Value Lowerer::isTmaLeader() {
  return producerWarps
             ? arith::AndIOp::create(
                   b, loc,
                   arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, warp,
                                         i32(numWarps)),
                   arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                         i32(0)))
             : isThreadZero();
}

void Lowerer::issueTma(ArrayRef<LoadOp> loads, ArrayRef<Value> bases,
                       Value mbar, Value pred) {
  int64_t bytes = 0;
  for (LoadOp ld : loads)
    bytes += ld.getType().getNumElements() * 2;
  // Coordinates first (scalar arithmetic every thread can do), then one
  // thread arms the barrier and issues the copies.
  SmallVector<SmallVector<Value>> coords;
  for (LoadOp ld : loads)
    coords.push_back(
        tmaCoords(tmaLoads[LoadOp(ld).getResult()], ld.getOffsets()));

  auto ifOp = scf::IfOp::create(b, loc, pred, /*withElse=*/false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), mbar, i32(bytes),
                                         NVVM::MemScopeKind::CTA, false,
                                         Value());
  for (auto [i, ld] : llvm::enumerate(loads)) {
    const TmaLoad &t = tmaLoads[LoadOp(ld).getResult()];
    Value base = bases[i];
    ArrayRef<Value> c = coords[i];
    Value map = tensorMapArgs[t.map];
    for (int64_t p = 0; p < t.panels; ++p) {
      SmallVector<Value> cp(c);
      if (p)
        cp[0] = arith::AddIOp::create(b, loc, c[0], i32(t.panelCols * p));
      // The copy takes a shared::cluster address; this CTA's own shared
      // memory is part of that window.
      Value dst = LLVM::AddrSpaceCastOp::create(
          b, loc, LLVM::LLVMPointerType::get(b.getContext(), 7),
          sharedAt(arith::AddIOp::create(b, loc, base, i32(p * t.panelBytes))));
      NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
          b, loc, dst, map, cp, mbar, ValueRange{}, Value(), Value(),
          NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
    }
  }
}

} // namespace kiln::gpu
