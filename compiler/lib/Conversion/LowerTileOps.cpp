//===- LowerTileOps.cpp - layout changes, reductions, barriers -----------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <functional>
#include <map>

#include "llvm/ADT/SetVector.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

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
  ++barrierCount;
  // What this thread wrote to shared memory (st.shared, cp.async) becomes
  // visible to wgmma's operand reads, which go through the async proxy.
  if (wgmma)
    fenceSharedForAsync();
  if (divergentBarriers) {
    // barrier.sync without .aligned: warps meet here and at the skipped
    // warpgroup's barrier, another instruction (an aligned barrier must be
    // the same instruction in every thread; compute-sanitizer's synccheck
    // reports it).
    SmallVector<Value> args{i32(consumerBarriers ? 1 : 0)};
    if (consumerBarriers)
      args.push_back(i32(32 * numWarps));
    // Named from LLVM's enum, so that a wrong name fails to build (a spelled
    // one failed at translation, for the kernels that took it only).
    llvm::Intrinsic::ID id = consumerBarriers
                                 ? llvm::Intrinsic::nvvm_barrier_cta_sync_count
                                 : llvm::Intrinsic::nvvm_barrier_cta_sync_all;
    LLVM::CallIntrinsicOp::create(
        b, loc, b.getStringAttr(llvm::Intrinsic::getBaseName(id)),
        ValueRange(args));
  } else if (consumerBarriers) // named barrier 1 over the compute warps only
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
  // Registers that hold consecutive elements of a row move as one vector
  // (up to 16 bytes): their row-major positions are consecutive, and the
  // first one's is a multiple of the width (no thread or warp moves an
  // element along the bits the registers span).
  auto widthOf = [&](const Layout &l) -> int64_t {
    if (elem.isInteger(1))
      return 1;
    return std::min<int64_t>(vectorWidth(l), std::max<int64_t>(1, 16 / esize));
  };
  SmallVector<Value> tc = threadCoord(from);
  int64_t dup = from.duplicateRegMask();
  const int64_t vin = widthOf(from);
  for (int64_t r = 0; r < from.numRegs(); r += vin) {
    if (r & dup)
      continue;
    Value idx = linearIndex(*this, from, from.regCoord(r), tc);
    Value v = in.regs[r];
    if (elem.isInteger(1))
      v = arith::ExtUIOp::create(b, loc, b.getI8Type(), v);
    if (vin > 1) {
      v = LLVM::UndefOp::create(b, loc, VectorType::get({vin}, elem));
      for (int64_t i = 0; i < vin; ++i)
        v = LLVM::InsertElementOp::create(b, loc, v, in.regs[r + i], i32(i));
    }
    Value off = arith::MulIOp::create(b, loc, idx, i32(esize));
    LLVM::StoreOp::create(b, loc, v, smemPtr(off), /*alignment=*/vin * esize);
  }
  barrier();
  SmallVector<Value> tcTo = threadCoord(to);
  const int64_t vout = widthOf(to);
  for (int64_t r = 0; r < to.numRegs(); r += vout) {
    Value idx = linearIndex(*this, to, to.regCoord(r), tcTo);
    Value off = arith::MulIOp::create(b, loc, idx, i32(esize));
    if (vout > 1) {
      Value v = LLVM::LoadOp::create(b, loc, VectorType::get({vout}, elem),
                                     smemPtr(off), /*alignment=*/vout * esize);
      for (int64_t i = 0; i < vout; ++i)
        out.push_back(LLVM::ExtractElementOp::create(b, loc, v, i32(i)));
      continue;
    }
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
