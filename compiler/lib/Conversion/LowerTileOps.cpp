//===- LowerTileOps.cpp - memory, layout changes, reductions, dots --------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <functional>
#include <map>

#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace kiln::gpu {

SmallVector<Value> Lowerer::threadCoord(const Layout &l, bool lanes) {
  SmallVector<Value> c(l.rank(), i32(0));
  auto add = [&](Value id, const std::vector<Coord> &bases) {
    for (size_t bit = 0; bit < bases.size(); ++bit)
      for (int64_t d = 0; d < l.rank(); ++d)
        if (bases[bit][d]) {
          Value set = arith::AndIOp::create(
              b, loc, arith::ShRUIOp::create(b, loc, id, i32(bit)), i32(1));
          c[d] = arith::AddIOp::create(
              b, loc, c[d],
              arith::MulIOp::create(b, loc, set, i32(bases[bit][d])));
        }
  };
  if (lanes)
    add(lane, l.lane);
  add(warp, l.warp);
  return c;
}

Value Lowerer::isOwner(const Layout &l) {
  Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
  auto zero = [&](Value id, int64_t mask) {
    if (!mask)
      return;
    Value bits = arith::AndIOp::create(b, loc, id, i32(mask));
    ok = arith::AndIOp::create(
        b, loc, ok,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, bits, i32(0)));
  };
  zero(lane, l.duplicateLaneMask());
  zero(warp, l.duplicateWarpMask());
  return ok;
}

void Lowerer::barrier() {
  // What this thread wrote to shared memory (st.shared, cp.async) becomes
  // visible to wgmma's operand reads, which go through the async proxy.
  if (wgmma)
    fenceSharedForAsync();
  if (consumerBarriers) // named barrier 1 over the compute warps only
    NVVM::BarrierOp::create(b, loc, TypeRange{}, i32(1), i32(32 * numWarps), {},
                            Value());
  else
    NVVM::Barrier0Op::create(b, loc);
}

void Lowerer::fenceSharedForAsync() {
  NVVM::FenceProxyOp::create(
      b, loc,
      NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_shared),
      NVVM::SharedSpaceAttr::get(b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

void Lowerer::ifThen(Value cond, llvm::function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElse=*/false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  body();
}

Value Lowerer::smemPtr(Value byteOffset) {
  Value off = arith::AddIOp::create(b, loc, byteOffset, scratchBaseValue());
  return LLVM::GEPOp::create(b, loc, smemBase.getType(), b.getI8Type(),
                             smemBase, ValueRange{off});
}

int64_t byteSize(Type t) {
  return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8;
}

/// Linear (row-major) index of a coordinate given as constant + thread parts.
static Value linearIndex(Lowerer &L, const Layout &l, const Coord &regPart,
                         ArrayRef<Value> threadPart) {
  Value idx = L.i32(0);
  int64_t stride = 1;
  for (int64_t d = l.rank() - 1; d >= 0; --d) {
    Value c =
        arith::AddIOp::create(L.b, L.loc, threadPart[d], L.i32(regPart[d]));
    idx = arith::AddIOp::create(
        L.b, L.loc, idx, arith::MulIOp::create(L.b, L.loc, c, L.i32(stride)));
    stride *= l.shape[d];
  }
  return idx;
}

void Lowerer::convertLayout(const Regs &in, const Layout &to, Type elem,
                            SmallVectorImpl<Value> &out) {
  const Layout &from = *in.layout;
  // Same threads hold the same elements: the conversion renames registers.
  if (from.lane == to.lane && from.warp == to.warp) {
    std::map<Coord, int64_t> where;
    for (int64_t r = 0; r < from.numRegs(); ++r)
      where.emplace(from.regCoord(r), r);
    bool all = true;
    for (int64_t r = 0; r < to.numRegs() && all; ++r)
      all = where.count(to.regCoord(r));
    if (all) {
      for (int64_t r = 0; r < to.numRegs(); ++r)
        out.push_back(in.regs[where[to.regCoord(r)]]);
      return;
    }
  }
  if (to.kind == Layout::Kind::DotOperand &&
      convertToDotOperand(in, to, elem, out))
    return;
  // Otherwise through shared memory: every thread writes what it holds at the
  // element's row-major position and reads back what it needs.
  int64_t esize = byteSize(elem);
  ++genericConversions;
  smemBytes = std::max(smemBytes, from.numElements() * esize);
  Type memTy = elem.isInteger(1) ? b.getI8Type() : elem;
  barrier(); // earlier readers of the scratch area are done
  SmallVector<Value> tc = threadCoord(from);
  int64_t dup = from.duplicateRegMask();
  for (int64_t r = 0; r < from.numRegs(); ++r) {
    if (r & dup)
      continue;
    Value idx = linearIndex(*this, from, from.regCoord(r), tc);
    Value v = in.regs[r];
    if (elem.isInteger(1))
      v = arith::ExtUIOp::create(b, loc, b.getI8Type(), v);
    Value off = arith::MulIOp::create(b, loc, idx, i32(esize));
    LLVM::StoreOp::create(b, loc, v, smemPtr(off));
  }
  barrier();
  SmallVector<Value> tcTo = threadCoord(to);
  for (int64_t r = 0; r < to.numRegs(); ++r) {
    Value idx = linearIndex(*this, to, to.regCoord(r), tcTo);
    Value off = arith::MulIOp::create(b, loc, idx, i32(esize));
    Value v = LLVM::LoadOp::create(b, loc, memTy, smemPtr(off));
    if (elem.isInteger(1))
      v = arith::TruncIOp::create(b, loc, b.getI1Type(), v);
    out.push_back(v);
  }
}

Regs Lowerer::lowerBroadcast(Value src, const Layout &dst) {
  auto srcShape = cast<RankedTensorType>(src.getType()).getShape();
  std::vector<int64_t> dims =
      broadcastDims({srcShape.begin(), srcShape.end()}, dst.shape);
  Layout proj = dst.project(dims);
  Regs in = regsIn(src, proj);
  // proj's register bits are dst's minus those along `dims`, in order.
  std::vector<int> keptBits;
  for (size_t bit = 0; bit < dst.reg.size(); ++bit) {
    bool along = false;
    for (int64_t d : dims)
      along |= dst.reg[bit][d] != 0;
    if (!along)
      keptBits.push_back(int(bit));
  }
  Regs out{dst, {}, {}};
  for (int64_t r = 0; r < dst.numRegs(); ++r) {
    int64_t s = 0;
    for (size_t i = 0; i < keptBits.size(); ++i)
      s |= (r >> keptBits[i] & 1) << i;
    out.regs.push_back(in.regs[s]);
  }
  return out;
}

/// Addresses and in-bounds predicates of a block access, per register.
/// For every `step`-th register (the others get null values). Where the
/// tensor is specialised as aligned (`aligned`) the last dimension's stride is
/// the constant 1.
static void blockAddresses(Lowerer &L, const Layout &l, Value base,
                           bool unitLastStride, ValueRange offsets,
                           ValueRange shape, ValueRange strides, Type elem,
                           SmallVectorImpl<Value> &addrs,
                           SmallVectorImpl<Value> &inBounds, int64_t step = 1) {
  SmallVector<Value> tc = L.threadCoord(l);
  OpBuilder &b = L.b;
  // Dimensions the whole block provably lies in need no compares.
  SmallVector<bool> within;
  for (int64_t d = 0; d < l.rank(); ++d)
    within.push_back(
        blockWithin(offsets[d], l.shape[d], shape[d], L.ivsOutOfRange));
  for (int64_t r = 0; r < l.numRegs(); ++r) {
    if (r % step) {
      addrs.push_back({});
      inBounds.push_back({});
      continue;
    }
    Coord rc = l.regCoord(r);
    Value ok = arith::ConstantIntOp::create(b, L.loc, 1, 1);
    Value off = L.i64(0);
    for (int64_t d = 0; d < l.rank(); ++d) {
      Value c = arith::AddIOp::create(
          b, L.loc, L.scalarOf(offsets[d]),
          arith::AddIOp::create(b, L.loc, tc[d], L.i32(rc[d])));
      // Unsigned compare: negative coordinates are out of range too.
      if (!within[d])
        ok = arith::AndIOp::create(
            b, L.loc, ok,
            arith::CmpIOp::create(b, L.loc, arith::CmpIPredicate::ult, c,
                                  L.scalarOf(shape[d])));
      // 64-bit products cannot overflow for 32-bit coordinates and strides;
      // the one select below gives out-of-range elements the first element's
      // address, which exists.
      Value stride = unitLastStride && d + 1 == l.rank()
                         ? L.i32(1)
                         : L.scalarOf(strides[d]);
      Value term = arith::MulIOp::create(
          b, L.loc, arith::ExtSIOp::create(b, L.loc, b.getI64Type(), c),
          arith::ExtSIOp::create(b, L.loc, b.getI64Type(), stride));
      off = arith::AddIOp::create(b, L.loc, off, term);
    }
    Value safeOff = arith::SelectOp::create(b, L.loc, ok, off, L.i64(0));
    addrs.push_back(LLVM::GEPOp::create(b, L.loc, base.getType(), elem, base,
                                        ValueRange{safeOff}));
    inBounds.push_back(ok);
  }
}

/// Registers 0..n-1 hold n consecutive elements of the last dimension.
static int64_t vectorWidth(const Layout &l) {
  int64_t n = 1;
  for (const Coord &c : l.reg) {
    bool next = c.back() == n;
    for (int64_t d = 0; d + 1 < l.rank(); ++d)
      next &= c[d] == 0;
    if (!next)
      break;
    n *= 2;
  }
  return n;
}

/// Elements per vector access of a block in layout `l` (1: none): whole
/// vectors are in or out of bounds when the row length and the block's
/// offset along it are multiples of the vector width.
static int64_t accessWidth(bool aligned, const Layout &l, Type elem,
                           ValueRange shape, ValueRange offsets) {
  int64_t vec =
      aligned ? std::min<int64_t>(vectorWidth(l), 16 / byteSize(elem)) : 1;
  // The row length: a constant, or a run-time dimension of a known class.
  if (vec > 1 &&
      (knownDivisor(shape.back()) % vec || knownDivisor(offsets.back()) % vec))
    vec = 1;
  return vec;
}

Value Lowerer::paddingValue(Type elem, double padding, int64_t vec) {
  // An integer padding is made from the f64 directly: through f32, a large
  // one (INT32_MAX for a min) would round out of range.
  Value pad =
      isa<FloatType>(elem)
          ? arith::ConstantOp::create(b, loc, b.getFloatAttr(elem, padding))
                .getResult()
          : arith::ConstantIntOp::create(b, loc, elem, int64_t(padding))
                .getResult();
  if (vec == 1)
    return pad;
  Value v = LLVM::UndefOp::create(b, loc, VectorType::get({vec}, elem));
  for (int64_t i = 0; i < vec; ++i)
    v = LLVM::InsertElementOp::create(b, loc, v, pad, i32(i));
  return v;
}

Regs Lowerer::lowerLoad(LoadOp op) {
  Layout l = layoutOf(op.getResult());
  Type elem = op.getType().getElementType();
  const bool aligned = isAlignedAccess(op.getPtr());
  int64_t vec = accessWidth(aligned, l, elem, op.getShape(), op.getOffsets());
  SmallVector<Value> addrs, ok;
  blockAddresses(*this, l, scalarOf(op.getPtr()),
                 isContiguousAccess(op.getPtr()), op.getOffsets(),
                 op.getShape(), op.getStrides(), elem, addrs, ok, vec);
  Value pad = paddingValue(elem, op.getPadding().convertToDouble(), 1);
  Regs out{l, {}, {}};
  if (vec > 1) {
    auto vt = VectorType::get({vec}, elem);
    Value padVec = paddingValue(elem, op.getPadding().convertToDouble(), vec);
    for (int64_t r = 0; r < l.numRegs(); r += vec) {
      Value v = LLVM::LoadOp::create(b, loc, vt, addrs[r],
                                     /*alignment=*/vec * byteSize(elem));
      v = arith::SelectOp::create(b, loc, ok[r], v, padVec);
      for (int64_t i = 0; i < vec; ++i)
        out.regs.push_back(LLVM::ExtractElementOp::create(b, loc, v, i32(i)));
    }
    return out;
  }
  for (int64_t r = 0; r < l.numRegs(); ++r) {
    Value v = LLVM::LoadOp::create(b, loc, elem, addrs[r]);
    out.regs.push_back(arith::SelectOp::create(b, loc, ok[r], v, pad));
  }
  return out;
}

bool Lowerer::canPrefetch(LoadOp ld, SmallVectorImpl<Operation *> *slice) {
  if (!isAlignedAccess(ld.getPtr()) || !sharedOperands.count(ld.getResult()) ||
      ld.getPadding().convertToDouble() != 0.0)
    return false; // cp.async fills with zeros only
  auto forOp = dyn_cast<scf::ForOp>(ld->getParentOp());
  if (!forOp)
    return false;
  const Layout l = layoutOf(ld.getResult());
  if (vectorWidth(l) < 8 || byteSize(ld.getType().getElementType()) != 2 ||
      knownDivisor(ld.getShape().back()) % 8 ||
      knownDivisor(ld.getOffsets().back()) % 8 || !tileGeometry(l))
    return false;
  return iterationSlice(ld, slice);
}

bool Lowerer::loadsAhead(LoadOp ld) {
  // 16 registers a thread at most: the next iteration's copy is live
  // through the whole body.
  constexpr int64_t kMaxRegs = 16;
  Value r = ld.getResult();
  return isa_and_nonnull<scf::ForOp>(ld->getParentOp()) &&
         !smemBufferBytes.count(r) && !sharedOperands.count(r) &&
         !residentMbarrier.count(r) && layoutOf(r).numRegs() <= kMaxRegs &&
         iterationSlice(ld, nullptr);
}

bool Lowerer::iterationSlice(LoadOp ld, SmallVectorImpl<Operation *> *slice) {
  auto forOp = dyn_cast<scf::ForOp>(ld->getParentOp());
  if (!forOp)
    return false;
  llvm::SetVector<Operation *> ops;
  bool ok = true;
  std::function<void(Value)> visit = [&](Value v) {
    if (!ok || v == forOp.getInductionVar())
      return;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      ok &= arg.getOwner() != forOp.getBody();
      return;
    }
    Operation *d = v.getDefiningOp();
    if (!forOp->isAncestor(d))
      return;
    if (d->getBlock() != forOp.getBody() || d->getNumRegions() ||
        d->getNumResults() != 1 ||
        isa<RankedTensorType>(d->getResult(0).getType()) ||
        !(isa<AddPtrOp>(d) || d->getDialect()->getNamespace() == "arith")) {
      ok = false;
      return;
    }
    if (ops.insert(d))
      for (Value o : d->getOperands())
        visit(o);
  };
  for (Value o : ld->getOperands())
    visit(o);
  if (ok && slice) {
    SmallVector<Operation *> sorted(ops.begin(), ops.end());
    llvm::sort(sorted, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    slice->append(sorted.begin(), sorted.end());
  }
  return ok;
}

void Lowerer::issueAsyncCopy(LoadOp ld, const SmemTile &t) {
  Layout l = layoutOf(ld.getResult());
  Type elem = ld.getType().getElementType();
  SmallVector<Value> addrs, ok;
  blockAddresses(*this, l, scalarOf(ld.getPtr()), /*aligned=*/true,
                 ld.getOffsets(), ld.getShape(), ld.getStrides(), elem, addrs,
                 ok, 8);
  SmallVector<Value> ptrs = tilePtrs(t, l, 8, !copyAddressesPerRegister);
  for (int64_t r = 0; r < l.numRegs(); r += 8) {
    Value bytes = arith::SelectOp::create(b, loc, ok[r], i32(16), i32(0));
    NVVM::CpAsyncOp::create(
        b, loc, ptrs[r / 8], addrs[r], b.getI32IntegerAttr(16),
        NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                             NVVM::LoadCacheModifierKind::CG),
        bytes);
  }
}

/// Writes a tile's elements to a block of a global tensor (a store or an
/// atomic): each element once (by the thread that owns it, its first
/// register), in bounds only, `vec` consecutive registers per access; `write`
/// emits the access for register r at `addr` under that predicate.
static void writeBlock(
    Lowerer &L, Value value, Value ptr, ValueRange offsets, ValueRange shape,
    ValueRange strides, bool aligned, int64_t vec,
    llvm::function_ref<void(const Regs &, int64_t r, Value addr)> write) {
  OpBuilder &b = L.b;
  Layout l = L.layoutOf(value);
  Regs in = L.regsIn(value, l);
  Type elem = cast<RankedTensorType>(value.getType()).getElementType();
  const int64_t dup = l.duplicateRegMask();
  SmallVector<Value> addrs, ok;
  blockAddresses(L, l, L.scalarOf(ptr), aligned || isContiguousAccess(ptr),
                 offsets, shape, strides, elem, addrs, ok, vec);
  Value owner = L.isOwner(l);
  for (int64_t r = 0; r < l.numRegs(); r += vec) {
    if (r & dup)
      continue; // another register holds the same element
    Value pred = arith::AndIOp::create(b, L.loc, ok[r], owner);
    auto ifOp = scf::IfOp::create(b, L.loc, pred, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    write(in, r, addrs[r]);
  }
}

int64_t Lowerer::atomicWidth(AtomicRMWOp op) {
  Type elem = op.getValue().getType().getElementType();
  if (!vectorAtomics || !elem.isF32() || op.getKind() != ReduceKind::Sum)
    return 1;
  const Layout l = layoutOf(op.getValue());
  int64_t vec = accessWidth(isAlignedAccess(op.getPtr()), l, elem,
                            op.getShape(), op.getOffsets());
  return l.duplicateRegMask() & (vec - 1) ? 1 : vec;
}

void Lowerer::lowerAtomic(AtomicRMWOp op) {
  Type elem = op.getValue().getType().getElementType();
  const LLVM::AtomicBinOp bin =
      op.getKind() == ReduceKind::Max   ? LLVM::AtomicBinOp::max
      : op.getKind() == ReduceKind::Min ? LLVM::AtomicBinOp::min
      : elem.isF32()                    ? LLVM::AtomicBinOp::fadd
                                        : LLVM::AtomicBinOp::add;
  const int64_t vec = atomicWidth(op);
  // red.global.add.v2/v4.f32 (sm_90): the NVVM dialect has no vector form.
  std::string ptx = "red.global.add.v" + std::to_string(vec) + ".f32 [$0], {";
  std::string constraints = "l";
  for (int64_t i = 0; i < vec; ++i) {
    ptx += (i ? ", $" : "$") + std::to_string(i + 1);
    constraints += ",f";
  }
  ptx += "};";
  writeBlock(*this, op.getValue(), op.getPtr(), op.getOffsets(), op.getShape(),
             op.getStrides(), vec > 1, vec,
             [&](const Regs &in, int64_t r, Value addr) {
               if (vec == 1) {
                 LLVM::AtomicRMWOp::create(b, loc, bin, addr, in.regs[r],
                                           LLVM::AtomicOrdering::monotonic);
                 return;
               }
               SmallVector<Value> operands{
                   LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), addr)};
               for (int64_t i = 0; i < vec; ++i)
                 operands.push_back(in.regs[r + i]);
               LLVM::InlineAsmOp::create(
                   b, loc, TypeRange{}, operands, ptx, constraints,
                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                   LLVM::TailCallKind::None, LLVM::AsmDialectAttr(),
                   ArrayAttr());
             });
}

void Lowerer::lowerStore(StoreOp op) {
  Type elem = op.getValue().getType().getElementType();
  const int64_t dup = layoutOf(op.getValue()).duplicateRegMask();
  // Consecutive registers along the row go out as one vector store (a
  // wgmma accumulator's column pairs: one 4-byte bf16x2 store instead of two
  // 2-byte ones), under the same conditions as vector loads.
  const bool aligned = isAlignedAccess(op.getPtr());
  int64_t vec = accessWidth(aligned, layoutOf(op.getValue()), elem,
                            op.getShape(), op.getOffsets());
  if (dup & (vec - 1))
    vec = 1;
  writeBlock(*this, op.getValue(), op.getPtr(), op.getOffsets(), op.getShape(),
             op.getStrides(), aligned, vec,
             [&](const Regs &in, int64_t r, Value addr) {
               if (vec == 1) {
                 LLVM::StoreOp::create(b, loc, in.regs[r], addr);
                 return;
               }
               Value packed =
                   LLVM::UndefOp::create(b, loc, VectorType::get({vec}, elem));
               for (int64_t i = 0; i < vec; ++i)
                 packed = LLVM::InsertElementOp::create(b, loc, packed,
                                                        in.regs[r + i], i32(i));
               LLVM::StoreOp::create(b, loc, packed, addr,
                                     /*alignment=*/vec * byteSize(elem));
             });
}

static Value combine(OpBuilder &b, Location loc, ReduceKind kind, Value x,
                     Value y) {
  bool f = isa<FloatType>(x.getType());
  switch (kind) {
  case ReduceKind::Sum:
    return f ? Value(arith::AddFOp::create(b, loc, x, y))
             : Value(arith::AddIOp::create(b, loc, x, y));
  case ReduceKind::Max:
    return f ? Value(arith::MaximumFOp::create(b, loc, x, y))
             : Value(arith::MaxSIOp::create(b, loc, x, y));
  case ReduceKind::Min:
    return f ? Value(arith::MinimumFOp::create(b, loc, x, y))
             : Value(arith::MinSIOp::create(b, loc, x, y));
  }
  return x;
}

Regs Lowerer::lowerReduce(ReduceOp op) {
  int64_t axis = op.getAxis();
  Layout out = layoutOf(op.getResult());
  Layout in = layoutOf(op.getSrc());
  Regs src = regsIn(op.getSrc(), in);
  Type elem = op.getType().getElementType();
  if (!elem.isF32() && !elem.isInteger(32))
    throw Error("GPU lowering: reductions of f32 and i32 tiles only (got a "
                "narrower type; convert with .to(f32) first)");
  // 1. Within the thread: registers that differ only along the axis.
  std::vector<int> keptBits, axisBits;
  for (size_t bit = 0; bit < in.reg.size(); ++bit)
    (in.reg[bit][axis] ? axisBits : keptBits).push_back(int(bit));
  SmallVector<Value> acc(int64_t(1) << keptBits.size());
  for (int64_t r = 0; r < in.numRegs(); ++r) {
    int64_t o = 0;
    for (size_t i = 0; i < keptBits.size(); ++i)
      o |= (r >> keptBits[i] & 1) << i;
    acc[o] = acc[o] ? combine(b, loc, op.getKind(), acc[o], src.regs[r])
                    : src.regs[r];
  }
  // 2. Across lanes: butterfly shuffles over the lane bits along the axis.
  for (size_t bit = 0; bit < in.lane.size(); ++bit) {
    if (!in.lane[bit][axis])
      continue;
    for (Value &a : acc) {
      Value other =
          NVVM::ShflOp::create(b, loc, a.getType(), i32(-1), a, i32(1 << bit),
                               i32(31), NVVM::ShflKind::bfly, UnitAttr());
      a = combine(b, loc, op.getKind(), a, other);
    }
  }
  // 3. Across warps: partial results through shared memory.
  std::vector<int> warpBits;
  for (size_t bit = 0; bit < in.warp.size(); ++bit)
    if (in.warp[bit][axis])
      warpBits.push_back(int(bit));
  if (!warpBits.empty()) {
    int64_t outN = out.numElements(), parts = int64_t(1) << warpBits.size();
    smemBytes = std::max(smemBytes, outN * parts * 4);
    Value part = i32(0);
    for (size_t i = 0; i < warpBits.size(); ++i)
      part = arith::OrIOp::create(
          b, loc, part,
          arith::ShLIOp::create(
              b, loc,
              arith::AndIOp::create(
                  b, loc,
                  arith::ShRUIOp::create(b, loc, warp, i32(warpBits[i])),
                  i32(1)),
              i32(i)));
    SmallVector<Value> tc = threadCoord(out);
    barrier();
    for (int64_t r = 0; r < out.numRegs(); ++r) {
      Value idx = linearIndex(*this, out, out.regCoord(r), tc);
      Value slot = arith::AddIOp::create(
          b, loc, idx, arith::MulIOp::create(b, loc, part, i32(outN)));
      LLVM::StoreOp::create(
          b, loc, acc[r], smemPtr(arith::MulIOp::create(b, loc, slot, i32(4))));
    }
    barrier();
    for (int64_t r = 0; r < out.numRegs(); ++r) {
      Value idx = linearIndex(*this, out, out.regCoord(r), tc);
      Value total;
      for (int64_t p = 0; p < parts; ++p) {
        Value slot = arith::AddIOp::create(b, loc, idx, i32(p * outN));
        Value v = LLVM::LoadOp::create(
            b, loc, elem, smemPtr(arith::MulIOp::create(b, loc, slot, i32(4))));
        total = total ? combine(b, loc, op.getKind(), total, v) : v;
      }
      acc[r] = total;
    }
  }
  return Regs{out, SmallVector<Value>(acc), {}};
}

} // namespace kiln::gpu
