//===- Backward.cpp - flash-attention backward in kiln's DSL --------------===//
//
// With S = scale·Q·Kᵀ, P = exp(S − LSE) (the forward's logsumexp), the
// gradients are dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − Delta) with
// Delta = rowsum(dO ∘ O), dQ = scale·dS·K and dK = scale·dSᵀ·Q.
// The dK/dV kernel works on the transposed scores Sᵀ = K·Qᵀ, so that Pᵀ and
// dSᵀ come out of a dot as the left operand of the next one (as P does in
// the forward), and the dQ kernel on S itself: no dot takes a transposed
// register tile.
//
//===----------------------------------------------------------------------===//
#include "HeadGroups.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/AttentionTune.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace kiln::dsl;

namespace kiln::kernels {

namespace {

/// What every backward kernel shares: the schedule's switches, the run-time
/// (or compiled-in) sizes and the exponent factor.
struct Common {
  const AttentionShape &s;
  const AttentionBackwardConfig &c;
  double scale, toExp2;
  bool runtimeShapes;
  /// dQ from the dK/dV kernel's atomics rather than a kernel of its own.
  bool atomicDq;
  /// ... converted by the last dK/dV program of each (batch, head).
  bool convertLast;
  /// ... by dq_convert beside the dK/dV kernel, each head once its
  /// programs have arrived.
  bool overlapConvert;

  Common(const AttentionShape &s, const AttentionBackwardConfig &c)
      : s(s), c(c) {
    scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.headDim));
    toExp2 = scale * log2e;
    runtimeShapes = c.staticShapes <= 0;
    atomicDq = c.deterministic <= 0;
    convertLast = atomicDq && c.convertDqLast > 0;
    overlapConvert = atomicDq && !convertLast && c.overlapDqConvert > 0 &&
                     c.separateDkDv <= 0;
  }

  struct Sizes {
    Index B, H, Nq, Nk;
  };
  /// Run-time arguments B, H, Nq (and Nk where the kernel reads keys).
  Sizes sizes(KernelBuilder &k, bool keys = true) const {
    if (!runtimeShapes)
      return {s.batch, s.heads, s.seqQ, s.seqK};
    Index B = k.scalarArg("B"), H = k.scalarArg("H"), Nq = k.scalarArg("Nq");
    return {B, H, Nq, keys ? k.scalarArg("Nk") : Index(s.seqK)};
  }

  void schedule(KernelBuilder &k, int warps) const {
    const bool producer = c.wgmma > 0 && c.tma > 0 && c.warpSpecialize > 0;
    k.setWarps(warps);
    k.setStages(c.stages);
    k.setWgmma(c.wgmma > 0);
    k.setTma(c.wgmma > 0 && c.tma > 0);
    k.setWarpSpecialize(producer);
    k.setPingpong(producer && c.pingpong > 0);
    k.setOverlapDots(c.overlap > 0);
    if (c.minBlocksPerSM > 0)
      k.setMinBlocksPerSM(c.minBlocksPerSM);
    k.setReloadThreadIds(c.reloadThreadIds > 0);
  }
};

/// The workspace the loops read: per row of queries LSE·log2(e) (base-2
/// units) and Delta = rowsum(dO ∘ O), fp32, as Stats[b][h][0] and [1]. Its
/// rows are statsRowLength(Nq) long (multiples of kStatsRowMultiple) and
/// contiguous; rows past Nq hold +inf and 0.
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

/// dQ accumulated in fp32 by the dK/dV kernel's atomics (unscaled): the
/// workspace (B, H, Nq, D), contiguous.
TensorView dqAccumArg(const Common &cm, KernelBuilder &k, Index B, Index H,
                      Index Nq) {
  auto acc = k.tensorArg("dQaccum", f32, {B, H, Nq, cm.s.headDim});
  k.requireContiguous(acc);
  return acc;
}

/// The dK/dV programs' arrival counters, kArrivalStride i32 per (batch,
/// head), contiguous.
TensorView arrivalsArg(KernelBuilder &k, Index B, Index H) {
  auto counts = k.tensorArg("dQarrivals", i32, {B, H, kArrivalStride});
  k.requireContiguous(counts);
  return counts;
}

/// dQ = scale·dQaccum in the tensors' type for the 64 rows from m0 of one
/// (batch, head).
constexpr int64_t kConvertRows = 64;
void convertDqRows(const Common &cm, TensorView acc, TensorView dQ, Index m0) {
  store(dQ.block({m0, 0}),
        (load(acc.block({m0, 0}, {kConvertRows, cm.s.headDim})) * cm.scale)
            .to(cm.s.dtype));
}

/// ... for the rows [0, end), 64 a step.
void convertDq(const Common &cm, TensorView acc, TensorView dQ, Index end) {
  forRange(0, end, kConvertRows,
           [&](Index m0) { convertDqRows(cm, acc, dQ, m0); });
}

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
  store(Stats[b][h][0].block({m0}),
        load(LSE[b][h].block({m0}, {BM}), inf) * log2e);
  store(Stats[b][h][1].block({m0}), reduceSum(o * dout, 1));
  if (cm.atomicDq) // the dK/dV kernel adds its parts of dQ into these rows
    store(dqAccumArg(cm, k, B, H, Nq)[b][h].block({m0, 0}),
          zeros({BM, D}, f32));
  if (cm.convertLast || cm.overlapConvert) // the head's: the same zeros
    store(arrivalsArg(k, B, H)[b][h].block({0}), zeros({kArrivalStride}, i32));
  return k.finish();
}

/// dK and dV (or one of them) for blockN keys per program, over the query
/// blocks that see them. Query rows past Nq read Q = dO = 0 and LSE = +inf,
/// so P = 0 there: no mask but the causal one. Rows of keys past Nk are
/// never stored.
Kernel dkdvKernel(const Common &cm, bool wantDk, bool wantDv) {
  const AttentionShape &s = cm.s;
  const int64_t D = s.headDim, BM = cm.c.blockM, BN = cm.c.blockN;
  KernelBuilder k(wantDk && wantDv ? "attention_bwd_dkdv"
                  : wantDk         ? "attention_bwd_dk"
                                   : "attention_bwd_dv");
  auto [B, H, Nq, Nk] = cm.sizes(k);
  const Index nBlocks = cdiv(Nk, BN), pairs = B * H;
  const bool longestFirst = s.causal && cm.c.longestFirst > 0;
  if (longestFirst)
    k.setGrid({pairs * nBlocks});
  else
    k.setGrid({nBlocks, pairs});
  cm.schedule(k, cm.c.warps);
  k.setInvariantAInRegisters(cm.c.kvInRegisters > 0);
  k.setTmaStores(cm.c.tmaStore > 0);
  k.setPersistent(cm.c.persistent > 0);
  k.setDynamicTiles(cm.c.persistent > 0 && cm.c.dynamicTiles > 0);
  // Without: 288-392 bytes of spills at D=128, 30% slower (H100).
  k.setFreshProgramValues(cm.c.persistent > 0);
  auto Q = k.tensorArg("Q", s.dtype, {B, H, Nq, D});
  auto K = k.tensorArg("K", s.dtype, {B, H, Nk, D});
  auto dO = k.tensorArg("dO", s.dtype, {B, H, Nq, D});
  auto Stats = statsArg(cm, k, B, H, Nq);
  Index bh = programId(1), n0 = programId(0) * BN;
  if (longestFirst) { // key block 0 sees every query
    Index G = cm.c.headGroup > 0
                  ? min(Index(cm.c.headGroup), pairs)
                  : headGroupFor(Nq, D * int64_t(dtypeSize(s.dtype)), pairs);
    GroupedProgram p = longestFirstProgram(programId(0), G, pairs, nBlocks);
    bh = p.pair;
    // Clamped at 0, which it never is below, so that the compiler sees that
    // dQ's bulk reductions start at rows >= 0 (else they take a guard and a
    // red.global copy in the loop: 4-8 more bytes of spills at D=128).
    n0 = max(p.rank, Index(0)) * BN;
  }
  Index b = bh / H, h = bh % H;
  auto q = Q[b][h], dout = dO[b][h], lse2 = Stats[b][h][0],
       delta = Stats[b][h][1];
  Tile kTile = load(K[b][h].block({n0, 0}, {BN, D}));
  Tile keys = arange(BN) + n0;
  Carry carried;
  Tile dk = zeros({BN, D}, f32), dv = zeros({BN, D}, f32), vTile;
  std::optional<TensorView> dqAccum;
  if (wantDk && cm.atomicDq)
    dqAccum = dqAccumArg(cm, k, B, H, Nq);
  if (wantDk) {
    auto V = k.tensorArg("V", s.dtype, {B, H, Nk, D});
    vTile = load(V[b][h].block({n0, 0}, {BN, D}));
    carried.tiles.push_back(&dk);
  }
  if (wantDv)
    carried.tiles.push_back(&dv);

  // The scores transposed, Sᵀ = K·Qᵀ: Pᵀ and dSᵀ come out as the left
  // operands of dV's and dK's dots, from registers; only dSᵀ is staged (for
  // dQ); a thread's LSE and Delta are one per column of its accumulator.
  auto stepKeysByQueries = [&](Index m0, bool mask) {
    Tile qTile = load(q.block({m0, 0}, {BM, D}));
    Tile doTile = load(dout.block({m0, 0}, {BM, D}));
    // +inf past Nq makes those columns of Pᵀ zero.
    Tile sT = dot(kTile, transpose(qTile));
    // Issued before Pᵀ is computed and dV's dot after it, so that each of
    // those dots runs under the elementwise work that follows it.
    Tile dpT = wantDk ? dot(vTile, transpose(doTile)) : Tile();
    if (mask)
      sT = where(column(keys) <= row(arange(BM) + m0), sT, -inf);
    Tile pT = exp2(sT * cm.toExp2 - row(load(lse2.block({m0}, {BM}), inf)));
    if (wantDv)
      dv = dot(pT.to(s.dtype), doTile, dv);
    if (wantDk) {
      Tile dsT = (pT * (dpT - row(load(delta.block({m0}, {BM}))))).to(s.dtype);
      // dQ's part from these keys, dS·K over the keys of every warp, issued
      // before dK's dot: its result is read first, and dK's dot runs under
      // the reduction.
      Tile dq = dqAccum ? dot(transpose(dsT), kTile) : Tile();
      dk = dot(dsT, qTile, dk);
      if (dqAccum)
        atomicAdd((*dqAccum)[b][h].block({m0, 0}), dq);
    }
  };
  // The scores as S = Q·Kᵀ: a thread's LSE and Delta are one per row of
  // its accumulator (2 per 64 queries instead of 32 per 128 in Sᵀ, which
  // spill beside 128-query steps), dS feeds dQ's dot from registers, and
  // P and dS are staged for dV's and dK's.
  auto stepQueriesByKeys = [&](Index m0, bool mask) {
    Tile qTile = load(q.block({m0, 0}, {BM, D}));
    Tile doTile = load(dout.block({m0, 0}, {BM, D}));
    Tile sc = dot(qTile, transpose(kTile));
    Tile dp = wantDk ? dot(doTile, transpose(vTile)) : Tile();
    if (mask)
      sc = where(row(keys) <= column(arange(BM) + m0), sc, -inf);
    Tile p = exp2(sc * cm.toExp2 - column(load(lse2.block({m0}, {BM}), inf)));
    if (wantDv)
      dv = dot(transpose(p.to(s.dtype)), doTile, dv);
    if (wantDk) {
      Tile ds = (p * (dp - column(load(delta.block({m0}, {BM}))))).to(s.dtype);
      Tile dq = dqAccum ? dot(ds, kTile) : Tile();
      dk = dot(transpose(ds), qTile, dk);
      if (dqAccum)
        atomicAdd((*dqAccum)[b][h].block({m0, 0}), dq);
    }
  };
  auto step = [&](Index m0, bool mask) {
    if (cm.c.scoresByQueries > 0)
      stepQueriesByKeys(m0, mask);
    else
      stepKeysByQueries(m0, mask);
  };
  if (s.causal) {
    // Queries before n0 see none of these keys; those in blocks that reach
    // below n0 + BN see some (masked); the rest see all of them.
    // (split stays a multiple of BM, past Nq or not, so that the loads of
    // the second loop keep their vector width at any Nq.)
    Index first = n0 / BM * BM, split = cdiv(n0 + BN, BM) * BM;
    forRange(first, min(split, Nq), BM, carried,
             [&](Index m0) { step(m0, true); });
    forRange(split, Nq, BM, carried, [&](Index m0) { step(m0, false); });
  } else {
    forRange(0, Nq, BM, carried, [&](Index m0) { step(m0, false); });
  }
  if (wantDk) {
    auto dK = k.tensorArg("dK", s.dtype, {B, H, Nk, D});
    store(dK[b][h].block({n0, 0}), (dk * cm.scale).to(s.dtype));
  }
  if (wantDv) {
    auto dV = k.tensorArg("dV", s.dtype, {B, H, Nk, D});
    store(dV[b][h].block({n0, 0}), dv.to(s.dtype));
  }
  if (dqAccum && cm.overlapConvert) // dq_convert waits for the head's count
    arrive(arrivalsArg(k, B, H)[b][h], 0);
  if (dqAccum && cm.convertLast) {
    // Every program of the head arrives (those that saw no query too); the
    // last of the nBlocks, whose count before is nBlocks - 1, converts.
    Index before = arrive(arrivalsArg(k, B, H)[b][h], 0);
    Index last = (before + 1) / nBlocks;
    auto dQ = k.tensorArg("dQ", s.dtype, {B, H, Nq, D});
    convertDq(cm, (*dqAccum)[b][h], dQ[b][h], last * Nq);
  }
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
    k.tensorArg("K", cm.s.dtype, {B, H, Nk, D});
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
  auto Q = k.tensorArg("Q", s.dtype, {B, H, Nq, D});
  auto K = k.tensorArg("K", s.dtype, {B, H, Nk, D});
  auto V = k.tensorArg("V", s.dtype, {B, H, Nk, D});
  auto dO = k.tensorArg("dO", s.dtype, {B, H, Nq, D});
  auto Stats = statsArg(cm, k, B, H, Nq);
  auto dQ = k.tensorArg("dQ", s.dtype, {B, H, Nq, D});

  Index bh = programId(1), mBlocks = cdiv(Nq, BM);
  // Causal: the longest rows first, so that the short ones fill the tail.
  Index m0 = (s.causal ? mBlocks - 1 - programId(0) : programId(0)) * BM;
  Index b = bh / H, h = bh % H;
  auto kk = K[b][h], v = V[b][h];
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

AttentionBackwardConfig resolveBackwardConfig(const AttentionShape &s,
                                              AttentionBackwardConfig c) {
  checkAttentionShape(s);
  // No block sizes chosen: the autotuner's winner for this GPU and shape
  // bucket (`kiln tune attention-backward`), unless it takes the other way
  // to dQ than the one asked for.
  if (!c.blockM && !c.blockN && !c.dqBlockM)
    if (std::optional<AttentionBackwardConfig> t =
            tunedAttentionBackwardConfig(s);
        t && (c.deterministic < 0 || c.deterministic == t->deterministic)) {
      c.deterministic = t->deterministic;
      c.blockM = t->blockM;
      c.blockN = t->blockN;
      c.warps = t->warps;
      c.stages = t->stages;
      c.dqBlockM = t->dqBlockM;
      c.dqBlockN = t->dqBlockN;
      c.dqWarps = t->dqWarps;
      c.scoresByQueries = t->scoresByQueries;
    }
  if (c.wgmma < 0)
    c.wgmma = 1;
  if (c.tma < 0)
    c.tma = c.wgmma;
  if (c.staticShapes < 0)
    c.staticShapes = 0;
  if (c.separateDkDv < 0)
    c.separateDkDv = 0;
  if (c.reloadThreadIds < 0)
    c.reloadThreadIds = c.wgmma > 0;
  // Measured on the H200 (docs/experiments/2026-11-24-h200-atomic-dq.txt,
  // 2026-11-24-h200-backward-d128.txt): dQ by atomics beats its own kernel
  // at both head dims; at D = 128 once the loops re-read the thread id (the
  // hoisted descriptors and addresses spilled before) and a producer
  // warpgroup feeds programs of 128 keys in two warpgroups. Not for causal
  // D = 128 up to 768 keys, where dQ's own kernel is 2-9% faster (too few
  // query blocks per 128 keys to hide the programs' start and end).
  if (c.deterministic < 0)
    c.deterministic = s.headDim > 64 && s.causal && s.seqK <= 768 ? 1 : 0;
  // Scores by queries in 128x128 steps at D = 64 (two warpgroups beside a
  // producer, one CTA per SM) against 64-key programs with K and V in
  // registers, H100: +5-9% non-causal at 512-16k keys; causal +3-7% from 4k,
  // +1-2% at 2k-3k, 2-5% slower up to 1k
  // (docs/experiments/2026-11-25-h100-session23.txt). In Sᵀ the same steps
  // spill the LSE and Delta (32 registers each a thread).
  if (c.scoresByQueries < 0)
    c.scoresByQueries = c.wgmma > 0 && c.deterministic == 0 &&
                        s.headDim <= 64 && (!s.causal || s.seqK >= 2048) &&
                        !c.blockM && !c.blockN && !c.warps;
  const bool wide = c.scoresByQueries > 0 && s.headDim <= 64;
  if (!c.blockN)
    c.blockN = (c.deterministic == 0 && s.headDim > 64) || wide ? 128 : 64;
  if (!c.blockM)
    c.blockM = wide ? 128 : 64;
  if (!c.dqBlockM)
    c.dqBlockM = 64;
  if (!c.dqBlockN)
    c.dqBlockN = 64;
  if (!c.warps) // wgmma: a warpgroup per 64 rows of the program's block
    c.warps = c.wgmma > 0 ? int(std::max<int64_t>(4, c.blockN / 16)) : 4;
  if (!c.dqWarps)
    c.dqWarps = c.wgmma > 0 ? int(std::max<int64_t>(4, c.dqBlockM / 16)) : 4;
  // A producer warpgroup with dQ by atomics: beside one-warpgroup programs,
  // two CTAs per SM (128 registers at launch, the compute warps raised to
  // 232) at D = 64 (H200: 0-3% faster, causal 5-11%); beside programs of two
  // warpgroups, one CTA per SM, at D = 128 (8-18%). Off elsewhere, as
  // measured: one-warpgroup programs at D = 128 spill, and D = 64's dQ
  // kernel was 5% slower (docs/experiments/2026-11-24-h200-backward-
  // producer.txt).
  const bool oneWarpgroup = c.warps == 4;
  if (c.warpSpecialize < 0)
    c.warpSpecialize = c.wgmma > 0 && c.tma > 0 && c.deterministic == 0 &&
                       (s.headDim <= 64 && !wide ? oneWarpgroup : c.warps == 8);
  // The two warpgroups of scores by queries take turns on the loop's first
  // dot: H100 +1-5% non-causal, even causal (same file, section 8).
  if (c.pingpong < 0)
    c.pingpong = wide && c.warpSpecialize > 0 && !s.causal;
  if (c.minBlocksPerSM < 0 && c.warpSpecialize > 0 && oneWarpgroup)
    c.minBlocksPerSM = 2;
  // Persistent dK/dV CTAs taking tiles from a counter: causal D = 64 up to
  // 2048 keys, 2-5% faster (H200; 2026-11-24-h200-backward-d128.txt); D =
  // 128 causal up to 2048 keys, H100 +7% at 1000, +1% at 2048 (even at
  // 4096); non-causal D = 128 at every length since the bounds proofs of
  // session 27, +2-3% at 2048 and, two rounds each, H100 +1.3-3.3% at
  // 3001-16384, H200 +1.9-2.8% at 3001-8192 (2026-11-25-session28.txt);
  // non-causal D = 64 (scores by queries) at every length since its
  // persistent CTAs keep a staged operand's copies (their compute-only
  // buffers placed by liveness within a tile): H200, A B C C B A, +3% at
  // 1000, +1.5% at 1536, +2.2% at 2048, +1% at 4096, +0.8% at 8192
  // (2026-11-26-session29.txt; before, without the copies: H100 +5% at 1000,
  // even at 2048, 2026-11-25-h100-session26.txt; H200 0.4-2.7% slower at
  // 2048-4096, session 28).
  // Causal with two warpgroups, on persistent CTAs that take their tiles
  // longest first (longestFirst's order is the grid's, which the tile
  // counter hands out): H200, A B B A, D=128 +1.5% at 1000, +3% at 2048,
  // +2.4% at 4096, +0.5% at 8192; D=64 +3% at 2048, even at 4096 and 8192
  // (2026-11-26-session29.txt, section 5).
  if (c.persistent < 0)
    c.persistent =
        c.warpSpecialize > 0 &&
        (s.headDim > 64 ? c.warps == 8
         : s.causal ? (oneWarpgroup ? s.seqK <= 2048 : wide && s.seqK <= 4096)
                    : wide);
  if (c.dynamicTiles < 0)
    c.dynamicTiles = c.persistent > 0;
  // dK and dV staged in shared memory and written by TMA (the bulk copies
  // run under the kernel's end, or the next tile's start): H100 +1-4%
  // non-causal at D = 128, +2-6% causal, D = 64 +0-1.5% and +2-6.5%
  // (docs/experiments/2026-11-25-h100-session26.txt; with dQ by atomics,
  // not measured in the deterministic mode).
  if (c.tmaStore < 0)
    c.tmaStore = c.wgmma > 0 && c.tma > 0 && c.deterministic == 0;
  // K and V read into registers for the loop's first two dots: H200 +3-12%
  // at D=64 non-causal (1k-8k), +1-2% causal; 40% slower at D=128, where
  // they spill (docs/experiments/2026-11-24-h200-backward-barriers.txt).
  if (c.kvInRegisters < 0)
    c.kvInRegisters = c.wgmma > 0 && s.headDim <= 64 && !wide;
  // Causal key blocks longest first per group of heads: +2-4% on the H200
  // at 2k-8k keys (D=128), +1-3% at 4k-8k (D=64); within the noise at 1k and
  // 16k (docs/experiments/2026-11-24-h200-backward-barriers.txt); on
  // persistent CTAs of two warpgroups too (above). Not for those of one
  // warpgroup (causal D=64 below 2048 keys: 1-2% slower at 1k).
  if (c.longestFirst < 0)
    c.longestFirst = s.causal && (c.persistent <= 0 || !oneWarpgroup);
  // dQ converted by the last dK/dV program of each head rather than by a
  // kernel of its own: H200, 2048-4096 keys, 1.5-3% slower at D=128
  // non-causal, 2-7% causal, 0-2% at D=64. Each arrival (its wait for the
  // program's bulk copies, barrier and atomic) costs ~2.5 us a tile at
  // D=128, and one program converting a head's 0.5-1 MB from L2 as much as
  // the dq_convert kernel does for all (docs/experiments/
  // 2026-11-26-session29.txt).
  if (c.convertDqLast < 0)
    c.convertDqLast = 0;
  // dq_convert overlapping the dK/dV kernel: H200, 1000-8192 keys, causal
  // and not, -0.9% to +0.5% with the arrivals made by a producer thread
  // (0-1.3% slower with a barrier per program): the SMs the dK/dV kernel's
  // last round leaves idle hold half of dq_convert at D=64
  // (docs/experiments/2026-11-26-session30.txt).
  if (c.overlapDqConvert < 0)
    c.overlapDqConvert = 0;
  for (int64_t b : {c.blockM, c.blockN, c.dqBlockM, c.dqBlockN})
    if (b < 16 || (b & (b - 1)))
      throw Error("attention backward: block sizes must be powers of two "
                  ">= 16, got " +
                  std::to_string(b));
  return c;
}

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
