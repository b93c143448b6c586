//===- LowerWgmma.cpp - dots on Hopper's warpgroup MMA --------------------===//
//
// A dot whose accumulator layout gives each group of four warps (a
// warpgroup) whole 64-row bands becomes wgmma.mma_async m64nNk16. B, and A
// unless it is in registers, is read from shared memory through 64-bit
// matrix descriptors built here: start address, leading and stride byte
// offsets, 128-byte swizzle (PTX ISA, "Matrix Descriptor Format"; the
// canonical layouts are those of CUTLASS's cute/atom/mma_traits_sm90_gmma.hpp).
// A in registers (attention's P, which so never leaves them) takes the
// register form of the instruction, which MLIR's NVVM dialect lacks: inline
// PTX for that one instruction. The accumulator is kiln's mma layout: wgmma's
// m64 fragment is mma.sync's m16 fragment stacked over the four warps.
//
// A dot is a fence, its instructions and a commit; the wait comes when its
// result is read (Lowerer::waitFor), which in a pipelined loop can be the
// next iteration: an accumulation carried around the loop overlaps the
// barrier, the copies and the next dot's issue.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "kiln/runtime/Error.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace kiln::gpu {

namespace {
/// An operand read through descriptors: its tile and whether K is the
/// contiguous dimension.
struct DescOperand {
  SmemTile tile;
  bool kMajor;
};
} // namespace

/// The descriptor bits that do not depend on the address: leading and stride
/// byte offsets (in 16-byte units) and swizzle mode 1 (128 bytes) in 62..63.
static int64_t descriptorBits(int64_t leadingBytes, int64_t strideBytes) {
  return ((leadingBytes >> 4) & 0x3FFF) << 16 |
         ((strideBytes >> 4) & 0x3FFF) << 32 | int64_t(1) << 62;
}

/// Why a tile cannot be a descriptor operand; empty when it can.
static std::string descriptorProblem(const SmemTile &t, const char *name) {
  if (t.panelCols != 64)
    return std::string(name) + "'s contiguous dimension has " +
           std::to_string(t.cols) +
           " elements; the 128-byte swizzle needs a multiple of 64";
  if (t.shape[t.rowDim] % 8)
    return std::string(name) + "'s rows are not a multiple of 8";
  return "";
}

/// wgmma.mma_async with A in registers (four b32 of packed pairs), B by
/// descriptor: inline PTX, the NVVM dialect having only the descriptor form.
static Value registerFormMma(OpBuilder &b, Location loc, Type accTy, Value acc,
                             ArrayRef<Value> a, Value descB, int64_t n,
                             bool bf16, bool bKMajor, bool scale) {
  const int64_t nAcc = n / 2;
  std::string ptx =
      "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(2 * nAcc + 5) +
      ", 0;\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(n) +
      "k16.f32." + (bf16 ? "bf16.bf16" : "f16.f16") + " {";
  std::string constraints;
  SmallVector<Value> operands;
  for (int64_t i = 0; i < nAcc; ++i) {
    ptx += (i ? ", $" : "$") + std::to_string(i);
    constraints += "=f,";
  }
  for (int64_t i = 0; i < nAcc; ++i) { // read and written: tied
    operands.push_back(
        LLVM::ExtractValueOp::create(b, loc, acc, ArrayRef<int64_t>{i}));
    constraints += std::to_string(i) + ",";
  }
  ptx += "}, {";
  for (int i = 0; i < 4; ++i) {
    ptx += (i ? ", $" : "$") + std::to_string(2 * nAcc + i);
    operands.push_back(a[i]);
    constraints += "r,";
  }
  ptx += "}, $" + std::to_string(2 * nAcc + 4) + ", p, 1, 1, " +
         (bKMajor ? "0" : "1") + ";\n}";
  operands.push_back(descB);
  operands.push_back(arith::ConstantIntOp::create(b, loc, scale ? 1 : 0, 32));
  constraints += "l,r";
  return LLVM::InlineAsmOp::create(
             b, loc, accTy, operands, ptx, constraints,
             /*has_side_effects=*/true, /*is_align_stack=*/false,
             LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr())
      .getResult(0);
}

std::optional<Regs> Lowerer::lowerDotWgmma(DotOp op, std::string &why) {
  auto at = op.getA().getType(), bt = op.getB().getType();
  int64_t M = at.getDimSize(0), K = at.getDimSize(1), N = bt.getDimSize(1);
  Type in = at.getElementType();
  int wm, wn;
  Layout::mmaWarps(M, N, numWarps, wm, wn);
  const int64_t nW = N / wn; // a warpgroup's columns: the instruction's N
  auto fail = [&](std::string reason) -> std::optional<Regs> {
    why = std::move(reason);
    return std::nullopt;
  };
  if (!(in.isBF16() || in.isF16()))
    return fail("operands are not bf16 or f16");
  if (numWarps % 4 || wm < 4 || M % (16 * wm))
    return fail(
        "needs groups of 4 warps over 64 rows each (M=" + std::to_string(M) +
        ", " + std::to_string(numWarps) + " warps)");
  if (nW % 8 || nW > 256 || K % 16)
    return fail("a warpgroup's N=" + std::to_string(nW) +
                " is not a multiple of 8 up to 256, or K % 16 != 0");
  auto bIt = smemTiles.find(op.getB());
  if (bIt == smemTiles.end())
    return fail("B is not in shared memory");
  DescOperand B{bIt->second, bIt->second.colDim == 0};
  if (std::string p = descriptorProblem(B.tile, "B"); !p.empty())
    return fail(p);
  // N-major: a warpgroup's columns are whole 64-wide panels, or a part of
  // one that starts 2·column bytes into its swizzled 128-byte rows (the
  // swizzle is of the address, as for a K-major operand's k-steps).
  if (!B.kMajor && nW % 64 && 64 % nW)
    return fail("B is N-major and a warpgroup's N=" + std::to_string(nW) +
                " is neither a multiple nor a divisor of 64");
  Layout la = Layout::dotOperand(0, M, N, K, numWarps);
  Layout lc = Layout::mma(M, N, numWarps);
  std::optional<DescOperand> A;
  SmallVector<Value> aRegs;
  if (auto aIt = smemTiles.find(op.getA()); aIt != smemTiles.end()) {
    std::optional<SmallVector<Value>> hoisted;
    if (invariantAInRegisters)
      hoisted = invariantFragments(op.getA(), aIt->second, la);
    if (hoisted) {
      aRegs = *hoisted;
    } else {
      A = DescOperand{aIt->second, aIt->second.colDim == 1};
      if (std::string p = descriptorProblem(A->tile, "A"); !p.empty())
        return fail(p);
    }
  } else {
    aRegs = regsIn(op.getA(), la).regs;
  }
  // A zero accumulator is not read: the first k-step scales it by 0.
  bool zeroAcc = false;
  if (auto it = tiles.find(op.getAcc());
      it != tiles.end() && !it->second.layout)
    zeroAcc = matchPattern(it->second.scalar, m_AnyZeroFloat());
  Regs out{lc, regsIn(op.getAcc(), lc).regs, {}};

  // The warp bits above a warpgroup's first two: its rows and columns.
  SmallVector<Value> wc = threadCoord(lc, /*lanes=*/false);
  Value wgRow = arith::AndIOp::create(b, loc, wc[0], i32(~int64_t(63)));
  Value wgCol = wc[1];
  Value smemAddr = LLVM::PtrToIntOp::create(b, loc, b.getI32Type(), smemBase);
  // A descriptor for an operand whose warpgroup part starts `dynOff` bytes
  // into its tile; instructions add constant offsets (16-byte units) to it.
  auto descriptor = [&](const DescOperand &o, Value dynOff) -> Value {
    Value addr = arith::AddIOp::create(
        b, loc, smemAddr, arith::AddIOp::create(b, loc, o.tile.base, dynOff));
    Value lo = arith::AndIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, addr, i32(4)), i32(0x3FFF));
    Value wide = arith::ExtUIOp::create(b, loc, b.getI64Type(), lo);
    // K-major: the leading offset is unused (K per instruction stays in one
    // 128-byte row); MN-major: from one 64-wide panel to the next.
    int64_t lead = o.kMajor ? 16 : o.tile.panelBytes();
    return arith::OrIOp::create(b, loc, wide, i64(descriptorBits(lead, 1024)));
  };
  // Byte offset of element (mn, k) of an operand, mn a multiple of 64 (or of
  // 8 when K-major) and k of 16, from its tile's base.
  auto offsetOf = [](const DescOperand &o, int64_t mn, int64_t k) {
    const SmemTile &t = o.tile;
    if (o.kMajor)
      return k / 64 * t.panelBytes() + mn * 128 + k % 64 * 2;
    return mn / 64 * t.panelBytes() + k * 128;
  };
  auto dynamicPart = [&](const DescOperand &o, Value mn,
                         int64_t perWarpgroup) -> Value {
    if (o.kMajor)
      return arith::MulIOp::create(b, loc, mn, i32(128));
    Value panel = arith::MulIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, mn, i32(6)),
        i32(o.tile.panelBytes()));
    if (perWarpgroup % 64 == 0)
      return panel;
    return arith::AddIOp::create(
        b, loc, panel,
        arith::MulIOp::create(
            b, loc, arith::AndIOp::create(b, loc, mn, i32(63)), i32(2)));
  };
  Value descA = A ? descriptor(*A, dynamicPart(*A, wgRow, 64)) : Value();
  Value descB = descriptor(B, dynamicPart(B, wgCol, nW));

  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type(), i32Ty = b.getI32Type();
  const int64_t nAcc = nW / 2, mT = M / (16 * wm), kT = K / 16;
  auto accTy =
      LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(nAcc, f32));
  auto wgType = in.isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
  auto pairTy = VectorType::get({2}, in);
  auto pack = [&](int64_t i) -> Value {
    Value v = LLVM::UndefOp::create(b, loc, pairTy);
    v = LLVM::InsertElementOp::create(b, loc, v, aRegs[i], i32(0));
    v = LLVM::InsertElementOp::create(b, loc, v, aRegs[i + 1], i32(1));
    return LLVM::BitcastOp::create(b, loc, i32Ty, v);
  };
  // Every operand is ready before the fence: registers written between the
  // fence and the MMAs that read them make ptxas add waits of its own.
  struct Step {
    Value descA, descB;
    SmallVector<Value, 4> a;
  };
  std::vector<std::vector<Step>> steps(mT);
  std::vector<Value> accIn(mT);
  for (int64_t mi = 0; mi < mT; ++mi) {
    Value acc = LLVM::UndefOp::create(b, loc, accTy);
    if (!zeroAcc)
      for (int64_t i = 0; i < nAcc; ++i)
        acc = LLVM::InsertValueOp::create(b, loc, acc, out.regs[mi * nAcc + i],
                                          i);
    accIn[mi] = acc;
    for (int64_t ki = 0; ki < kT; ++ki) {
      Step st;
      st.descB = arith::AddIOp::create(b, loc, descB,
                                       i64(offsetOf(B, 0, ki * 16) >> 4));
      if (A)
        st.descA = arith::AddIOp::create(
            b, loc, descA, i64(offsetOf(*A, mi * 16 * wm, ki * 16) >> 4));
      else // a0..a3: m16n8k16's A registers of this warp
        for (int i = 0; i < 4; ++i)
          st.a.push_back(pack(((ki << 3) | (mi << (3 + log2i(kT)))) + 2 * i));
      steps[mi].push_back(st);
    }
  }
  const bool turn = pingpongDots.contains(op);
  if (turn)
    takeTurn();
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t mi = 0; mi < mT; ++mi) {
    Value acc = accIn[mi];
    for (int64_t ki = 0; ki < kT; ++ki) {
      const Step &st = steps[mi][ki];
      bool scale = !(zeroAcc && ki == 0);
      if (A) {
        acc = NVVM::WgmmaMmaAsyncOp::create(
            b, loc, accTy, acc, st.descA, st.descB,
            NVVM::MMAShapeAttr::get(ctx, 64, nW, 16), wgType, wgType,
            NVVM::WGMMATypes::f32,
            scale ? NVVM::WGMMAScaleOut::one : NVVM::WGMMAScaleOut::zero,
            NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
            A->kMajor ? NVVM::MMALayout::row : NVVM::MMALayout::col,
            B.kMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row,
            NVVM::MMAIntOverflowAttr());
        continue;
      }
      acc = registerFormMma(b, loc, accTy, acc, st.a, st.descB, nW, in.isBF16(),
                            B.kMajor, scale);
    }
    for (int64_t i = 0; i < nAcc; ++i)
      out.regs[mi * nAcc + i] =
          LLVM::ExtractValueOp::create(b, loc, acc, ArrayRef<int64_t>{i});
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  if (turn) // issued: the other warpgroup's MMAs may queue behind these
    passTurn();
  // In a pipelined loop the group stays in flight until its result is read
  // (at most one older group with it); otherwise the dot completes here.
  inFlight.push_back(op.getResult());
  if (!deferWaits)
    waitForAll();
  else if (inFlight.size() > 1)
    waitFor(inFlight[inFlight.size() - 2]);

  auto major = [](bool kMajor) { return kMajor ? "K-major" : "MN-major"; };
  note(op, "dot " + std::to_string(M) + "x" + std::to_string(N) + "x" +
               std::to_string(K) + ": wgmma m64n" + std::to_string(nW) +
               "k16 x" + std::to_string(mT * kT) + " per warpgroup (" +
               std::to_string(numWarps / 4) + " warpgroups), A " +
               (A ? std::string("descriptor, ") + major(A->kMajor) +
                        " shared memory"
                  : std::string("in registers")) +
               ", B descriptor, " + major(B.kMajor) +
               " shared memory, 128-byte swizzle");
  return out;
}

} // namespace kiln::gpu
