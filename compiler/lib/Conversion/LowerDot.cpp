//===- LowerDot.cpp - tensor-core dots and their operands -----------------===//
//
// Dots become mma.sync.m16n8k16 (bf16/f16 in, f32 accumulate). Operands that
// are not already in an mma operand layout go through shared memory: written
// in their own row order with 16-byte chunks XOR-swizzled by row (so the 8
// rows an ldmatrix reads fall in distinct banks), read with ldmatrix, with
// .trans when the operand's K dimension is not the contiguous one.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace kiln::gpu {

void checkDotOnTensorCores(DotOp op) {
  auto at = op.getA().getType(), bt = op.getB().getType();
  int64_t M = at.getDimSize(0), K = at.getDimSize(1), N = bt.getDimSize(1);
  Type in = at.getElementType();
  if (!(in.isBF16() || in.isF16()))
    throw Error("GPU lowering: dot on tensor cores takes bf16 or f16 operands; "
                "f32 dots are not supported on the GPU yet");
  if (M % 16 || N % 8 || K % 16)
    throw Error("GPU lowering: dot shape must be multiples of 16x8x16, got M=" +
                std::to_string(M) + " N=" + std::to_string(N) +
                " K=" + std::to_string(K));
}

static int dimOf(const Coord &c) {
  for (size_t d = 0; d < c.size(); ++d)
    if (c[d])
      return int(d);
  return -1;
}

std::optional<SmemTile> Lowerer::tileGeometry(const Layout &from,
                                              int64_t elemBytes) {
  if (from.rank() != 2)
    return std::nullopt;
  // The source's contiguous dimension: where its first register (or lane)
  // bits run.
  int C = -1;
  int64_t vec = 1;
  for (const Coord &c : from.reg) {
    int d = dimOf(c);
    if (d < 0 || c[d] != vec || (C >= 0 && d != C))
      break;
    C = d;
    vec *= 2;
  }
  if (C < 0) {
    if (from.lane.empty() || dimOf(from.lane[0]) < 0 ||
        from.lane[0][dimOf(from.lane[0])] != 1)
      return std::nullopt;
    C = dimOf(from.lane[0]);
  }
  SmemTile t;
  t.shape = from.shape;
  t.colDim = C;
  t.rowDim = 1 - C;
  t.cols = from.shape[C];
  t.elemBytes = elemBytes;
  if (t.cols % t.chunkElems())
    return std::nullopt;
  t.panelCols = t.cols;
  // wgmma's and TMA's 128-byte swizzle: panels of 128-byte rows, 8-row atoms
  // of 1 KB.
  const int64_t panel = 128 / elemBytes;
  if (wgmma && t.cols > panel && t.cols % panel == 0 &&
      t.shape[t.rowDim] % 8 == 0)
    t.panelCols = panel;
  t.swz = std::min<int64_t>(t.panelCols / t.chunkElems(), 8);
  t.sourceVec = vec;
  return t;
}

std::optional<SmemTile> Lowerer::stage(const Regs &in, Type elem, Value base) {
  const Layout &from = *in.layout;
  const int64_t eb = byteSize(elem);
  if (eb != 2 && eb != 4)
    return std::nullopt;
  std::optional<SmemTile> g = tileGeometry(from, eb);
  if (!g)
    return std::nullopt;
  SmemTile t = *g;
  t.base = base;
  // One 16-byte store at most.
  int64_t vec = std::min<int64_t>(t.sourceVec, t.chunkElems());
  int64_t dup = from.duplicateRegMask();
  SmallVector<Value> ptrs = tilePtrs(t, from, vec);
  for (int64_t r = 0; r < from.numRegs(); r += vec) {
    if (r & dup)
      continue;
    Value ptr = ptrs[r / vec];
    if (vec == 1) {
      LLVM::StoreOp::create(b, loc, in.regs[r], ptr);
      continue;
    }
    Value v = LLVM::UndefOp::create(b, loc, VectorType::get({vec}, elem));
    for (int64_t i = 0; i < vec; ++i)
      v = LLVM::InsertElementOp::create(b, loc, v, in.regs[r + i], i32(i));
    LLVM::StoreOp::create(b, loc, v, ptr, /*alignment=*/vec * eb);
  }
  return t;
}

Value Lowerer::tileOffset(const SmemTile &t, Value row, Value col) {
  Value base = t.base, pcol = col;
  if (t.paneled()) {
    Value panel = arith::ShRUIOp::create(b, loc, col, i32(log2i(t.panelCols)));
    base = arith::AddIOp::create(
        b, loc, base,
        arith::MulIOp::create(b, loc, panel, i32(t.panelBytes())));
    pcol = arith::AndIOp::create(b, loc, col, i32(t.panelCols - 1));
  }
  const int64_t ce = t.chunkElems();
  Value chunk = arith::XOrIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, pcol, i32(log2i(ce))),
      arith::AndIOp::create(b, loc, row, i32(t.swz - 1)));
  Value off = arith::AddIOp::create(
      b, loc, base, arith::MulIOp::create(b, loc, row, i32(t.rowBytes())));
  off = arith::AddIOp::create(b, loc, off,
                              arith::ShLIOp::create(b, loc, chunk, i32(4)));
  return arith::AddIOp::create(
      b, loc, off,
      arith::ShLIOp::create(b, loc,
                            arith::AndIOp::create(b, loc, col, i32(ce - 1)),
                            i32(log2i(t.elemBytes))));
}

/// Whether register coordinates and thread coordinates occupy disjoint bits
/// of every dimension, each basis one bit: then a coordinate is the OR (and
/// the XOR, and the sum) of its register and thread parts.
static bool disjointBits(const Layout &l) {
  for (int64_t d = 0; d < l.rank(); ++d) {
    int64_t seen = 0;
    for (const auto *bases : {&l.reg, &l.lane, &l.warp})
      for (const Coord &c : *bases) {
        if (c[d] & (c[d] - 1) || c[d] & seen)
          return false;
        seen |= c[d];
      }
  }
  return true;
}

SmallVector<Value> Lowerer::tilePtrs(const SmemTile &t, const Layout &l,
                                     int64_t step, bool reduce) {
  SmallVector<Value> tc = threadCoord(l), out;
  int R = t.rowDim, C = t.colDim;
  Value base0 = tileOffset(t, tc[R], tc[C]);
  // Tile bases are 1 KB aligned (LowerFunction.cpp): a row of up to 1 KB
  // leaves base0's chunk bits to the thread's own chunk.
  bool reduced = reduce && disjointBits(l) && t.rowBytes() <= 1024;
  for (int64_t r = 0; r < l.numRegs(); r += step) {
    Coord rc = l.regCoord(r);
    Value off;
    if (reduced && rc[C] % t.chunkElems() == 0) {
      // Row bits above the thread's add whole rows (and column bits above a
      // panel whole panels); the register's chunk bits (its column's, XOR
      // its row's swizzle bits) flip the thread's.
      int64_t pc = rc[C] % t.panelCols;
      int64_t chunk = (pc / t.chunkElems()) ^ (rc[R] & (t.swz - 1));
      off = arith::AddIOp::create(
          b, loc, base0,
          i32(rc[R] * t.rowBytes() + rc[C] / t.panelCols * t.panelBytes()));
      if (chunk)
        off = arith::XOrIOp::create(b, loc, off, i32(chunk * 16));
    } else {
      off = tileOffset(t, arith::AddIOp::create(b, loc, tc[R], i32(rc[R])),
                       arith::AddIOp::create(b, loc, tc[C], i32(rc[C])));
    }
    out.push_back(LLVM::GEPOp::create(b, loc, smemBase.getType(), b.getI8Type(),
                                      smemBase, ValueRange{off}));
  }
  return out;
}

void Lowerer::loadFragments(const SmemTile &t, const Layout &to, int64_t ki,
                            SmallVectorImpl<Value> &out) {
  int opIdx = to.reg[0][1] == 1 ? 0 : 1; // A pairs along dim 1, B along dim 0
  int P = opIdx == 0 ? 1 : 0, Q = 1 - P;
  bool trans = t.colDim == Q;
  SmallVector<Value> wc = threadCoord(to, /*lanes=*/false);
  Value mat = arith::ShRUIOp::create(b, loc, lane, i32(3));
  Value j = arith::AndIOp::create(b, loc, lane, i32(7));
  Value bit0 = arith::AndIOp::create(b, loc, mat, i32(1));
  Value bit1 = arith::ShRUIOp::create(b, loc, mat, i32(1));
  // Which 8x8 matrix each lane group addresses: A takes (q,p) = (0,0),(8,0),
  // (0,8),(8,8) (registers a0a1, a2a3, a4a5, a6a7); B takes (0,0),(0,8),
  // (8,0),(8,8) (b0b1, b2b3 of one n8 tile, then of the next).
  Value qOff = arith::MulIOp::create(b, loc, opIdx == 0 ? bit0 : bit1, i32(8));
  Value pOff = arith::MulIOp::create(b, loc, opIdx == 0 ? bit1 : bit0, i32(8));
  Type i32Ty = b.getI32Type();
  // The lane's address for the tile's first fragment; every other fragment's
  // is that plus whole rows (affine) XOR whole 16-byte chunks: the swizzle
  // only permutes chunks within a row, and tile bases keep those bits clear.
  Value q0 = arith::AddIOp::create(b, loc, wc[Q], qOff);
  Value p0 = arith::AddIOp::create(b, loc, wc[P], pOff);
  Value row0 = arith::AddIOp::create(b, loc, trans ? p0 : q0, j);
  Value col0 = trans ? q0 : p0;
  Value base0 = tileOffset(t, row0, col0);
  auto load = [&](int64_t originReg, int num, ArrayRef<int64_t> dests) {
    Coord o = to.regCoord(originReg);
    int64_t dRow = trans ? o[P] : o[Q], dCol = trans ? o[Q] : o[P];
    Value off = arith::AddIOp::create(
        b, loc, base0,
        i32(dRow * t.rowBytes() + dCol / t.panelCols * t.panelBytes()));
    if (dCol % t.panelCols)
      off =
          arith::XOrIOp::create(b, loc, off, i32(dCol % t.panelCols / 8 * 16));
    Value ptr = LLVM::GEPOp::create(b, loc, smemBase.getType(), b.getI8Type(),
                                    smemBase, ValueRange{off});
    SmallVector<Type> fields(num, i32Ty);
    Type resTy = LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
    Value res = NVVM::LdMatrixOp::create(
        b, loc, resTy, ptr, uint32_t(num),
        trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        NVVM::LdStMatrixShapeAttr::get(b.getContext(), 8, 8),
        NVVM::LdStMatrixEltType::B16);
    for (int i = 0; i < num; ++i) {
      Value w = LLVM::ExtractValueOp::create(b, loc, res, ArrayRef<int64_t>{i});
      out[dests[i]] = w; // a packed pair; unpacked by the caller
    }
  };
  int64_t K = to.shape[P], kT = K / 16;
  if (opIdx == 0) {
    int64_t mT = to.numRegs() / (8 * kT); // m16 tiles per warp
    for (int64_t mi = 0; mi < mT; ++mi) {
      int64_t ab = (ki << 3) | (mi << (3 + log2i(kT)));
      load(ab, 4, {ab, ab + 2, ab + 4, ab + 6});
    }
  } else {
    int64_t nT = to.numRegs() / (4 * kT); // n8 tiles per warp
    for (int64_t ni = 0; ni < nT; ni += 2) {
      int64_t b0 = (ki << 2) | (ni << (2 + log2i(kT)));
      if (ni + 1 < nT) {
        int64_t b1 = (ki << 2) | ((ni + 1) << (2 + log2i(kT)));
        load(b0, 4, {b0, b0 + 2, b1, b1 + 2});
      } else {
        load(b0, 2, {b0, b0 + 2});
      }
    }
  }
}

/// Unpacks ldmatrix words (each a pair of 16-bit elements) at even indices.
static void unpackPairs(OpBuilder &b, Location loc, Type elem,
                        SmallVectorImpl<Value> &regs, Lowerer &L) {
  auto pairTy = VectorType::get({2}, elem);
  for (size_t r = 0; r < regs.size(); r += 2)
    if (regs[r] && regs[r].getType().isInteger(32)) {
      Value pair = LLVM::BitcastOp::create(b, loc, pairTy, regs[r]);
      regs[r] = LLVM::ExtractElementOp::create(b, loc, pair, L.i32(0));
      regs[r + 1] = LLVM::ExtractElementOp::create(b, loc, pair, L.i32(1));
    }
}

std::optional<SmallVector<Value>>
Lowerer::invariantFragments(Value a, const SmemTile &t, const Layout &la) {
  Value base = t.base;
  if (!currentLoop || !base ||
      currentLoop->isAncestor(base.getParentBlock()->getParentOp()))
    return std::nullopt;
  auto it = hoistedA.find(a);
  if (it != hoistedA.end())
    return it->second;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(currentLoop);
  Value savedLane = lane, savedWarp = warp;
  lane = outerLane;
  warp = outerWarp;
  SmallVector<Value> out = readFragments(t, la, elementType(a.getType()));
  lane = savedLane;
  warp = savedWarp;
  hoistedA[a] = out;
  return out;
}

SmallVector<Value> Lowerer::readFragments(const SmemTile &t, const Layout &to,
                                          Type elem) {
  SmallVector<Value> out(to.numRegs(), Value());
  int P = to.reg[0][1] == 1 ? 1 : 0;
  for (int64_t ki = 0; ki < to.shape[P] / 16; ++ki)
    loadFragments(t, to, ki, out);
  unpackPairs(b, loc, elem, out, *this);
  for (Value v : out)
    if (!v)
      throw InternalError("ldmatrix of fragments left a register unset");
  return out;
}

bool Lowerer::convertToDotOperand(const Regs &in, const Layout &to, Type elem,
                                  SmallVectorImpl<Value> &out) {
  barrier(); // earlier readers of the scratch area are done
  std::optional<SmemTile> t = stage(in, elem, scratchBaseValue());
  if (!t)
    return false;
  smemBytes = std::max(smemBytes, to.numElements() * 2);
  barrier();
  SmallVector<Value> regs = readFragments(*t, to, elem);
  out.assign(regs.begin(), regs.end());
  return true;
}

Regs Lowerer::lowerDot(DotOp op) {
  std::string why;
  if (wgmma) {
    if (std::optional<Regs> r = lowerDotWgmma(op, why))
      return *r;
    waitFor(op.getAcc()); // mma.sync reads the accumulator's registers
  }
  checkDotOnTensorCores(op);
  auto at = op.getA().getType(), bt = op.getB().getType();
  int64_t M = at.getDimSize(0), K = at.getDimSize(1), N = bt.getDimSize(1);
  Type in = at.getElementType();
  Layout la = Layout::dotOperand(0, M, N, K, numWarps);
  Layout lb = Layout::dotOperand(1, M, N, K, numWarps);
  Layout lc = Layout::mma(M, N, numWarps);
  // Operands in shared memory are read one k-slice at a time, just before
  // the MMAs that use it, so that only that slice occupies registers.
  auto aTile = smemTiles.find(op.getA()), bTile = smemTiles.find(op.getB());
  bool aSm = aTile != smemTiles.end(), bSm = bTile != smemTiles.end();
  SmallVector<Value> A, B;
  if (aSm)
    A.assign(la.numRegs(), Value());
  else
    A = regsIn(op.getA(), la).regs;
  if (bSm)
    B.assign(lb.numRegs(), Value());
  else
    B = regsIn(op.getB(), lb).regs;
  Regs C = regsIn(op.getAcc(), lc);
  int wm, wn;
  Layout::mmaWarps(M, N, numWarps, wm, wn);
  int64_t mT = M / 16 / wm, nT = N / 8 / wn, kT = K / 16;
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  auto pairTy = VectorType::get({2}, in);
  auto pack = [&](SmallVectorImpl<Value> &regs, int64_t i) -> Value {
    if (regs[i].getType().isInteger(32)) // straight from ldmatrix
      return in.isBF16()
                 ? regs[i]
                 : Value(LLVM::BitcastOp::create(b, loc, pairTy, regs[i]));
    Value v = LLVM::UndefOp::create(b, loc, pairTy);
    v = LLVM::InsertElementOp::create(b, loc, v, regs[i], i32(0));
    v = LLVM::InsertElementOp::create(b, loc, v, regs[i + 1], i32(1));
    if (in.isBF16()) // mma.sync takes bf16 pairs as b32
      return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
    return v;
  };
  auto structTy = LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
  NVVM::MMATypes ptxTy =
      in.isBF16() ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  Regs out{lc, C.regs, {}};
  for (int64_t ki = 0; ki < kT; ++ki) {
    if (aSm)
      loadFragments(aTile->second, la, ki, A);
    if (bSm)
      loadFragments(bTile->second, lb, ki, B);
    for (int64_t mi = 0; mi < mT; ++mi)
      for (int64_t ni = 0; ni < nT; ++ni) {
        int64_t cb = (ni << 2) | (mi << (2 + log2i(nT)));
        int64_t ab = (ki << 3) | (mi << (3 + log2i(kT)));
        int64_t bb = (ki << 2) | (ni << (2 + log2i(kT)));
        SmallVector<Value> a, bv,
            c(out.regs.begin() + cb, out.regs.begin() + cb + 4);
        for (int i = 0; i < 8; i += 2)
          a.push_back(pack(A, ab + i));
        for (int i = 0; i < 4; i += 2)
          bv.push_back(pack(B, bb + i));
        auto mma = NVVM::MmaOp::create(
            b, loc, structTy, a, bv, c, {16, 8, 16}, std::nullopt, std::nullopt,
            std::array<NVVM::MMATypes, 2>{ptxTy, ptxTy},
            std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                           NVVM::MMALayout::col});
        for (int i = 0; i < 4; ++i)
          out.regs[cb + i] =
              LLVM::ExtractValueOp::create(b, loc, mma, ArrayRef<int64_t>{i});
      }
  }
  note(op, "dot " + std::to_string(M) + "x" + std::to_string(N) + "x" +
               std::to_string(K) + ": mma.sync m16n8k16, A " +
               (aSm ? "ldmatrix from shared memory" : "in registers") + ", B " +
               (bSm ? "ldmatrix from shared memory" : "in registers") +
               (why.empty() ? "" : "; not wgmma: " + why));
  return out;
}

} // namespace kiln::gpu
