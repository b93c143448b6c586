//===- LowerGlobalAccess.cpp - block loads, stores and atomics ------------===//
//
// A block of a global tensor read into or written from registers: one
// address and bounds predicate per register (none along a dimension the
// block provably lies in), 16-byte vectors where the rows allow; cp.async
// copies into shared memory (LoadsAhead.cpp: which loads a loop fetches
// ahead).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

/// Addresses and in-bounds predicates of a block access, per register.
/// For every `step`-th register (the others get null values). Where the
/// tensor is specialised as aligned (`aligned`) the last dimension's stride is
/// the constant 1. With `rowLeft`, also the elements of the row from each
/// register's column to the row's end (i32, may be <= 0).
static void blockAddresses(Lowerer &L, const Layout &l, Value base,
                           bool unitLastStride, ValueRange offsets,
                           ValueRange shape, ValueRange strides, Type elem,
                           SmallVectorImpl<Value> &addrs,
                           SmallVectorImpl<Value> &inBounds, int64_t step = 1,
                           SmallVectorImpl<Value> *rowLeft = nullptr) {
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
      if (rowLeft)
        rowLeft->push_back({});
      continue;
    }
    Coord rc = l.regCoord(r);
    Value ok = arith::ConstantIntOp::create(b, L.loc, 1, 1);
    Value off = L.i64(0);
    for (int64_t d = 0; d < l.rank(); ++d) {
      Value c = arith::AddIOp::create(
          b, L.loc, L.scalarOf(offsets[d]),
          arith::AddIOp::create(b, L.loc, tc[d], L.i32(rc[d])));
      if (rowLeft && d + 1 == l.rank())
        rowLeft->push_back(
            arith::SubIOp::create(b, L.loc, L.scalarOf(shape[d]), c));
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

int64_t vectorWidth(const Layout &l) {
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

/// Elements per vector access of a block in layout `l` (1: none): a vector
/// starts at a multiple of its width along the row when the block's offset
/// is one; its bytes are then aligned in an aligned tensor.
int64_t accessWidth(bool aligned, const Layout &l, Type elem,
                    ValueRange offsets) {
  int64_t vec =
      aligned ? std::min<int64_t>(vectorWidth(l), 16 / byteSize(elem)) : 1;
  if (vec > 1 && knownDivisor(offsets.back()) % vec)
    vec = 1;
  return vec;
}

bool raggedVectors(int64_t vec, ValueRange shape) {
  // The row length: a constant, or a run-time dimension of a known class.
  return vec > 1 && knownDivisor(shape.back()) % vec != 0;
}

std::string raggedText(int64_t vec, ValueRange shape) {
  return raggedVectors(vec, shape)
             ? " (element by element where a row's end cuts a vector)"
             : "";
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
  const int64_t vec = accessWidth(aligned, l, elem, op.getOffsets());
  const bool ragged = raggedVectors(vec, op.getShape());
  SmallVector<Value> addrs, ok, left;
  blockAddresses(*this, l, scalarOf(op.getPtr()),
                 isContiguousAccess(op.getPtr()), op.getOffsets(),
                 op.getShape(), op.getStrides(), elem, addrs, ok, vec,
                 ragged ? &left : nullptr);
  Value pad = paddingValue(elem, op.getPadding().convertToDouble(), 1);
  bool unpadded = loadingFirstAhead;
  for (int64_t d = 0; unpadded && d < l.rank(); ++d)
    unpadded = blockWithin(op.getOffsets()[d], l.shape[d], op.getShape()[d],
                           /*ivsOutOfRange=*/{});
  auto padded = [&](Value inBounds, Value v, Value padding) {
    return unpadded ? v
                    : arith::SelectOp::create(b, loc, inBounds, v, padding)
                          .getResult();
  };
  Regs out{l, {}, {}};
  if (vec > 1) {
    auto vt = VectorType::get({vec}, elem);
    Value padVec = paddingValue(elem, op.getPadding().convertToDouble(), vec);
    for (int64_t r = 0; r < l.numRegs(); r += vec) {
      Value v;
      if (ragged) {
        // A vector the row's end cuts reads its elements one by one (a
        // vector load would read past the tensor in its last row).
        Value whole = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                            left[r], i32(vec));
        auto ifOp = scf::IfOp::create(b, loc, TypeRange{vt}, whole,
                                      /*withElse=*/true);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        scf::YieldOp::create(
            b, loc,
            ValueRange{LLVM::LoadOp::create(b, loc, vt, addrs[r],
                                            /*alignment=*/vec * byteSize(elem))
                           .getResult()});
        b.setInsertionPointToStart(ifOp.elseBlock());
        Value part = padVec;
        for (int64_t i = 0; i < vec; ++i) {
          Value in = arith::AndIOp::create(
              b, loc, ok[r],
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, left[r],
                                    i32(i)));
          Value at = arith::SelectOp::create(
              b, loc, in,
              LLVM::GEPOp::create(b, loc, addrs[r].getType(), elem, addrs[r],
                                  ValueRange{i32(i)}),
              addrs[r]);
          Value e = arith::SelectOp::create(
              b, loc, in, LLVM::LoadOp::create(b, loc, elem, at), pad);
          part = LLVM::InsertElementOp::create(b, loc, part, e, i32(i));
        }
        scf::YieldOp::create(b, loc, ValueRange{part});
        v = ifOp.getResult(0);
      } else {
        v = LLVM::LoadOp::create(b, loc, vt, addrs[r],
                                 /*alignment=*/vec * byteSize(elem));
      }
      v = padded(ok[r], v, padVec);
      for (int64_t i = 0; i < vec; ++i)
        out.regs.push_back(LLVM::ExtractElementOp::create(b, loc, v, i32(i)));
    }
    return out;
  }
  for (int64_t r = 0; r < l.numRegs(); ++r) {
    Value v = LLVM::LoadOp::create(b, loc, elem, addrs[r]);
    out.regs.push_back(padded(ok[r], v, pad));
  }
  return out;
}

Regs Lowerer::lowerLoadIf(LoadOp ld, Value cond) {
  const Layout l = layoutOf(ld.getResult());
  Type elem = ld.getType().getElementType();
  SmallVector<Type> types(size_t(l.numRegs()), elem);
  // The branch is uniform: the induction variable is the same in every
  // thread.
  auto ifOp = scf::IfOp::create(b, loc, types, cond, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Regs in = lowerLoad(ld);
  scf::YieldOp::create(b, loc, in.regs);
  b.setInsertionPointToStart(ifOp.elseBlock());
  Value pad = paddingValue(elem, ld.getPadding().convertToDouble(), 1);
  scf::YieldOp::create(b, loc, SmallVector<Value>(types.size(), pad));
  return Regs{l, SmallVector<Value>(ifOp.getResults()), {}};
}

void Lowerer::issueAsyncCopy(LoadOp ld, const SmemTile &t, Value guard) {
  Layout l = layoutOf(ld.getResult());
  Type elem = ld.getType().getElementType();
  // A row whose length may not be a multiple of 8: its last vector copies
  // the bytes up to the row's end (cp.async zero-fills the rest).
  const bool ragged = raggedVectors(8, ld.getShape());
  SmallVector<Value> addrs, ok, left;
  blockAddresses(*this, l, scalarOf(ld.getPtr()), /*aligned=*/true,
                 ld.getOffsets(), ld.getShape(), ld.getStrides(), elem, addrs,
                 ok, 8, ragged ? &left : nullptr);
  SmallVector<Value> ptrs = tilePtrs(t, l, 8, !copyAddressesPerRegister);
  const int64_t eb = byteSize(elem);
  for (int64_t r = 0; r < l.numRegs(); r += 8) {
    Value copies = guard ? arith::AndIOp::create(b, loc, guard, ok[r]) : ok[r];
    Value full = i32(16);
    if (ragged)
      full = arith::MinSIOp::create(
          b, loc, arith::MulIOp::create(b, loc, left[r], i32(eb)), full);
    Value bytes = arith::SelectOp::create(b, loc, copies, full, i32(0));
    NVVM::CpAsyncOp::create(
        b, loc, ptrs[r / 8], addrs[r], b.getI32IntegerAttr(16),
        NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                             NVVM::LoadCacheModifierKind::CG),
        bytes);
  }
}

/// Writes a tile's elements to a block of a global tensor (a store or an
/// atomic): each element once (by the thread that owns it, its first
/// register), in bounds only, `vec` consecutive registers per access (the
/// last vector of a row the row's end cuts element by element); `write`
/// emits the access of `width` registers from register r at `addr` under
/// that predicate.
static void writeBlock(
    Lowerer &L, Value value, Value ptr, ValueRange offsets, ValueRange shape,
    ValueRange strides, bool aligned, int64_t vec,
    llvm::function_ref<void(const Regs &, int64_t r, int64_t width, Value addr)>
        write) {
  OpBuilder &b = L.b;
  Layout l = L.layoutOf(value);
  Regs in = L.regsIn(value, l);
  Type elem = cast<RankedTensorType>(value.getType()).getElementType();
  const int64_t dup = l.duplicateRegMask();
  const bool ragged = raggedVectors(vec, shape);
  SmallVector<Value> addrs, ok, left;
  blockAddresses(L, l, L.scalarOf(ptr), aligned || isContiguousAccess(ptr),
                 offsets, shape, strides, elem, addrs, ok, vec,
                 ragged ? &left : nullptr);
  Value owner = L.isOwner(l);
  for (int64_t r = 0; r < l.numRegs(); r += vec) {
    if (r & dup)
      continue; // another register holds the same element
    Value pred = arith::AndIOp::create(b, L.loc, ok[r], owner);
    auto ifOp = scf::IfOp::create(b, L.loc, pred, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    if (!ragged) {
      write(in, r, vec, addrs[r]);
      continue;
    }
    Value whole = arith::CmpIOp::create(b, L.loc, arith::CmpIPredicate::sge,
                                        left[r], L.i32(vec));
    auto split = scf::IfOp::create(b, L.loc, whole, /*withElse=*/true);
    b.setInsertionPointToStart(split.thenBlock());
    write(in, r, vec, addrs[r]);
    b.setInsertionPointToStart(split.elseBlock());
    // The vector's first element is in the row (`ok`); the rest up to its
    // end.
    write(in, r, 1, addrs[r]);
    for (int64_t i = 1; i < vec; ++i) {
      auto one = scf::IfOp::create(
          b, L.loc,
          arith::CmpIOp::create(b, L.loc, arith::CmpIPredicate::sgt, left[r],
                                L.i32(i)),
          /*withElse=*/false);
      OpBuilder::InsertionGuard g2(b);
      b.setInsertionPointToStart(one.thenBlock());
      write(in, r + i, 1,
            LLVM::GEPOp::create(b, L.loc, addrs[r].getType(), elem, addrs[r],
                                ValueRange{L.i32(i)}));
    }
  }
}

int64_t Lowerer::atomicWidth(AtomicRMWOp op) {
  Type elem = op.getValue().getType().getElementType();
  if (!vectorAtomics || !elem.isF32() || op.getKind() != ReduceKind::Sum)
    return 1;
  const Layout l = layoutOf(op.getValue());
  int64_t vec =
      accessWidth(isAlignedAccess(op.getPtr()), l, elem, op.getOffsets());
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
             [&](const Regs &in, int64_t r, int64_t width, Value addr) {
               if (width == 1) {
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

int64_t Lowerer::storeWidth(StoreOp op) {
  // Consecutive registers along the row go out as one vector store (a
  // wgmma accumulator's column pairs: one 4-byte bf16x2 store instead of two
  // 2-byte ones), under the same conditions as vector loads.
  const Layout l = layoutOf(op.getValue());
  const int64_t vec =
      accessWidth(isAlignedAccess(op.getPtr()), l,
                  op.getValue().getType().getElementType(), op.getOffsets());
  return l.duplicateRegMask() & (vec - 1) ? 1 : vec;
}

void Lowerer::lowerStore(StoreOp op) {
  Type elem = op.getValue().getType().getElementType();
  writeBlock(*this, op.getValue(), op.getPtr(), op.getOffsets(), op.getShape(),
             op.getStrides(), isAlignedAccess(op.getPtr()), storeWidth(op),
             [&](const Regs &in, int64_t r, int64_t width, Value addr) {
               if (width == 1) {
                 LLVM::StoreOp::create(b, loc, in.regs[r], addr);
                 return;
               }
               Value packed = LLVM::UndefOp::create(
                   b, loc, VectorType::get({width}, elem));
               for (int64_t i = 0; i < width; ++i)
                 packed = LLVM::InsertElementOp::create(b, loc, packed,
                                                        in.regs[r + i], i32(i));
               LLVM::StoreOp::create(b, loc, packed, addr,
                                     /*alignment=*/width * byteSize(elem));
             });
}

std::string accessText(int64_t vec, Type elem, ValueRange shape,
                       const char *what) {
  if (vec == 1)
    return std::string("element ") + what + "s";
  return std::to_string(vec * byteSize(elem)) + "-byte vector " + what + "s" +
         raggedText(vec, shape);
}

void Lowerer::noteLoads() {
  src.walk([&](LoadOp ld) {
    const std::string shape = shapeText(ld.getType().getShape());
    const std::string within = boundsChecksText(ld.getOffsets(), ld.getShape(),
                                                ld.getType().getShape());
    Type elem = ld.getType().getElementType();
    const std::string vectors =
        accessText(accessWidth(isAlignedAccess(ld.getPtr()),
                               layoutOf(ld.getResult()), elem, ld.getOffsets()),
                   elem, ld.getShape(), "load");
    std::string ahead;
    if (smemBufferBytes.count(ld.getResult()))
      ahead =
          (producerWarps
               ? "by the producer warpgroup, up to " + std::to_string(numStages)
               : std::to_string(
                     prefetchDistance(cast<scf::ForOp>(ld->getParentOp())))) +
          " iteration(s) ahead (" + std::to_string(numStages) + " buffers)";
    else if (residentMbarrier.count(ld.getResult()))
      ahead = "by the producer warpgroup once per tile (a full and an empty "
              "mbarrier of its own), released after its last reader";
    else if (oneShotMbarrier.count(ld.getResult()))
      ahead = "once, issued where it stands by one thread (an mbarrier of its "
              "own), waited for before its first reader (in a pipelined "
              "loop, after the loop's first copies are issued)";
    if (auto t = tmaLoads.find(ld.getResult()); t != tmaLoads.end())
      note(ld, "load " + shape + ": TMA (cp.async.bulk.tensor, " +
                   std::to_string(t->second.panels) + " box(es) of " +
                   std::to_string(t->second.rows) +
                   "x64, 128-byte swizzle, mbarrier completion) into shared "
                   "memory, " +
                   ahead);
    else if (smemBufferBytes.count(ld.getResult()))
      note(ld, "load " + shape + ": cp.async (16 bytes) into shared memory, " +
                   ahead +
                   (tmaFallback.count(ld.getResult())
                        ? "; not TMA: " + tmaFallback[ld.getResult()]
                        : std::string()));
    else if (!sharedOperands.count(ld.getResult()) && loadsAhead(ld))
      note(ld, "load " + shape + ": " + vectors +
                   " to registers, 1 iteration ahead" + within +
                   (isAlignedAccess(ld.getPtr())
                        ? std::string()
                        : "; " + unalignedReason(ld.getPtr())));
    else if (!isAlignedAccess(ld.getPtr()))
      note(ld, "load " + shape + ": element loads to registers" +
                   (sharedOperands.count(ld.getResult())
                        ? ", stored to shared memory (not pipelined)"
                        : "") +
                   within + "; " + unalignedReason(ld.getPtr()));
    else if (sharedOperands.count(ld.getResult()))
      note(ld, "load " + shape + ": " + vectors +
                   " to registers, stored to shared memory "
                   "(not pipelined: outside a loop or not prefetchable)" +
                   within +
                   (tmaFallback.count(ld.getResult())
                        ? "; not TMA: " + tmaFallback[ld.getResult()]
                        : std::string()));
    else
      note(ld, "load " + shape + ": " + vectors + " to registers" + within);
  });
}

} // namespace kiln::gpu
