//===- Backward.cpp - flash-attention backward in kiln's DSL --------------===//
//
// With S = scale·Q·Kᵀ, P = exp(S − LSE) (the forward's logsumexp), the
// gradients are dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − Delta) with
// Delta = rowsum(dO ∘ O), dQ = scale·dS·K and dK = scale·dSᵀ·Q.
// The dK/dV kernel (DkDvKernel.cpp) works on the transposed scores
// Sᵀ = K·Qᵀ, so that Pᵀ and dSᵀ come out of a dot as the left operand of the
// next one (as P does in the forward), and the dQ kernel on S itself: no
// dot takes a transposed register tile.
//
//===----------------------------------------------------------------------===//
#include "BackwardKernels.h"
#include "FoldedStats.h"
#include "HeadGroups.h"

using namespace kiln::dsl;

namespace kiln::kernels {

namespace backward {

TensorView statsArg(const Common &cm, KernelBuilder &k, Index B, Index H,
                    Index Nq) {
  Index rowLength = cm.runtimeShapes
                        ? k.scalarArg("StatsRow", kStatsRowMultiple)
                        : Index(statsRowLength(cm.s.seqQ));
  if (cm.runtimeShapes)
    k.requireAtLeast(rowLength, Nq);
  auto stats = k.tensorArg("Stats", f32, {B, H, 2, rowLength});
  k.requireContiguous(stats);
  return stats;
}

TensorView dqAccumArg(const Common &cm, KernelBuilder &k, Index B, Index H,
                      Index Nq) {
  auto acc = k.tensorArg("dQaccum", f32, {B, H, Nq, cm.s.headDim});
  k.requireContiguous(acc);
  return acc;
}

TensorView arrivalsArg(KernelBuilder &k, Index B, Index H) {
  auto counts = k.tensorArg("dQarrivals", i32, {B, H, kArrivalStride});
  k.requireContiguous(counts);
  return counts;
}

void convertDqRows(const Common &cm, TensorView acc, TensorView dQ, Index m0) {
  store(dQ.block({m0, 0}),
        (load(acc.block({m0, 0}, {kConvertRows, cm.s.headDim})) * cm.scale)
            .to(cm.s.dtype));
}

void convertDq(const Common &cm, TensorView acc, TensorView dQ, Index end) {
  forRange(0, end, kConvertRows,
           [&](Index m0) { convertDqRows(cm, acc, dQ, m0); });
}

} // namespace backward

namespace {

using namespace backward;

/// Fills the workspace, 64 rows per program (to the end of its rows).
Kernel deltaKernel(const Common &cm) {
  const int64_t D = cm.s.headDim, BM = 64;
  KernelBuilder k("attention_bwd_delta");
  auto [B, H, Nq, Nk] = cm.sizes(k, /*keys=*/false);
  (void)Nk;
  auto O = k.tensorArg("O", cm.s.dtype, {B, H, Nq, D});
  auto dO = k.tensorArg("dO", cm.s.dtype, {B, H, Nq, D});
  auto LSE = k.tensorArg("LSE", f32, {B, H, Nq});
  auto Stats = statsArg(cm, k, B, H, Nq);
  k.setGrid({cdiv(Stats.dims()[3], BM), B * H});
  k.setWarps(4);
  if (cm.runtimeShapes)
    k.keepUnspecialised(LSE);
  Index bh = programId(1), m0 = programId(0) * BM;
  Index b = bh / H, h = bh % H;
  Tile o = load(O[b][h].block({m0, 0}, {BM, D})).to(f32);
  Tile dout = load(dO[b][h].block({m0, 0}, {BM, D})).to(f32);
  Tile lse2 = load(LSE[b][h].block({m0}, {BM}), inf) * log2e;
  Tile delta = reduceSum(o * dout, 1);
  // Stats is read by the dK/dV kernel unless its dots add the folded
  // statistics, and by the deterministic mode's dQ kernel.
  if (!cm.foldStats || !cm.atomicDq) {
    store(Stats[b][h][0].block({m0}), lse2);
    store(Stats[b][h][1].block({m0}), delta);
  }
  if (cm.foldStats)
    store(foldedStatsArg(k, B, H, Stats.dims()[3])[b][h].block({0, m0}),
          foldedStats(cm.toExp2, lse2, delta, BM));
  if (cm.atomicDq) // the dK/dV kernel adds its parts of dQ into these rows
    store(dqAccumArg(cm, k, B, H, Nq)[b][h].block({m0, 0}),
          zeros({BM, D}, f32));
  if (cm.convertLast || cm.overlapConvert) // the head's: the same zeros
    store(arrivalsArg(k, B, H)[b][h].block({0}), zeros({kArrivalStride}, i32));
  return k.finish();
}

/// dQ = scale·dQaccum in the tensors' type, 64 rows per program. Beside
/// the dK/dV kernel (overlapConvert) a program first waits for its head's
/// cdiv(Nk, blockN) dK/dV programs (Nk from K's shape; K is not read).
Kernel dqConvertKernel(const Common &cm) {
  const int64_t D = cm.s.headDim, BM = kConvertRows;
  KernelBuilder k("attention_bwd_dq_convert");
  auto [B, H, Nq, Nk] = cm.sizes(k, /*keys=*/cm.overlapConvert);
  auto acc = dqAccumArg(cm, k, B, H, Nq);
  auto dQ = k.tensorArg("dQ", cm.s.dtype, {B, H, Nq, D});
  k.setGrid({cdiv(Nq, BM), B * H});
  k.setWarps(4);
  Index bh = programId(1), m0 = programId(0) * BM;
  Index b = bh / H, h = bh % H;
  if (cm.overlapConvert) {
    k.tensorArg("K", cm.s.dtype,
                {B, kvHeadsArg(k, cm.s, H, cm.runtimeShapes), Nk, D});
    k.overlapPreviousLaunch();
    waitCount(arrivalsArg(k, B, H)[b][h], 0, cdiv(Nk, cm.c.blockN));
  }
  convertDqRows(cm, acc[b][h], dQ[b][h], m0);
  return k.finish();
}

/// dQ for dqBlockM queries per program, over the key blocks they see (the
/// forward's loops: whole blocks unmasked, a ragged end and the causal
/// diagonal masked).
Kernel dqKernel(const Common &cm) {
  const AttentionShape &s = cm.s;
  const int64_t D = s.headDim, BM = cm.c.dqBlockM, BN = cm.c.dqBlockN;
  KernelBuilder k("attention_bwd_dq");
  auto [B, H, Nq, Nk] = cm.sizes(k);
  k.setGrid({cdiv(Nq, BM), B * H});
  cm.schedule(k, cm.c.dqWarps);
  const int64_t G = queryHeadsPerKv(s);
  const Index Hk = kvHeadsArg(k, s, H, cm.runtimeShapes);
  auto Q = k.tensorArg("Q", s.dtype, {B, H, Nq, D});
  auto K = k.tensorArg("K", s.dtype, {B, Hk, Nk, D});
  auto V = k.tensorArg("V", s.dtype, {B, Hk, Nk, D});
  auto dO = k.tensorArg("dO", s.dtype, {B, H, Nq, D});
  auto Stats = statsArg(cm, k, B, H, Nq);
  auto dQ = k.tensorArg("dQ", s.dtype, {B, H, Nq, D});

  Index bh = programId(1), mBlocks = cdiv(Nq, BM);
  // Causal: the longest rows first, so that the short ones fill the tail.
  Index m0 = (s.causal ? mBlocks - 1 - programId(0) : programId(0)) * BM;
  Index b = bh / H, h = bh % H, hk = G > 1 ? h / G : h;
  auto kk = K[b][hk], v = V[b][hk];
  Tile qTile = load(Q[b][h].block({m0, 0}, {BM, D}));
  Tile doTile = load(dO[b][h].block({m0, 0}, {BM, D}));
  Tile lse2 = load(Stats[b][h][0].block({m0}, {BM}), inf);
  Tile delta = load(Stats[b][h][1].block({m0}, {BM}));
  Tile dq = zeros({BM, D}, f32);
  Tile rows = arange(BM) + m0;

  auto step = [&](Index n0, bool mask) {
    Tile kTile = load(kk.block({n0, 0}, {BN, D}));
    Tile vTile = load(v.block({n0, 0}, {BN, D}));
    Tile scores = dot(qTile, transpose(kTile));
    Tile dp = dot(doTile, transpose(vTile)); // runs under P's computation
    if (mask) {
      Tile cols = arange(BN) + n0;
      Tile keep = row(cols) < Nk;
      if (s.causal)
        keep = keep && (column(rows) >= row(cols));
      scores = where(keep, scores, -inf);
    }
    Tile p = exp2(scores * cm.toExp2 - column(lse2));
    Tile ds = p * (dp - column(delta));
    dq = dot(ds.to(s.dtype), kTile, dq);
  };
  Index whole = Nk / BN * BN;
  Index split = s.causal ? min(m0 / BN * BN, whole) : whole;
  Index end = s.causal ? min(m0 + BM, Nk) : Nk;
  forRange(0, split, BN, carry(dq), [&](Index n0) { step(n0, false); });
  forRange(split, end, BN, carry(dq), [&](Index n0) { step(n0, true); });
  store(dQ[b][h].block({m0, 0}), (dq * cm.scale).to(s.dtype));
  return k.finish();
}

} // namespace

AttentionBackwardKernels
attentionBackward(const AttentionShape &shape,
                  const AttentionBackwardConfig &config) {
  const AttentionBackwardConfig c = resolveBackwardConfig(shape, config);
  Common cm(shape, c);
  AttentionBackwardKernels out{deltaKernel(cm)};
  if (c.separateDkDv > 0) {
    out.push_back(dkdvKernel(cm, true, false));
    out.push_back(dkdvKernel(cm, false, true));
  } else {
    out.push_back(dkdvKernel(cm, true, true));
  }
  if (!cm.atomicDq)
    out.push_back(dqKernel(cm));
  else if (!cm.convertLast)
    out.push_back(dqConvertKernel(cm));
  return out;
}

} // namespace kiln::kernels
