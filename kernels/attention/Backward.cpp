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
#include "FoldedStats.h"
#include "HeadGroups.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/AttentionBackward.h"

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
  /// LSE and Delta added by the dK/dV kernel's Sᵀ and dPᵀ dots.
  bool foldStats;

  Common(const AttentionShape &s, const AttentionBackwardConfig &c)
      : s(s), c(c) {
    scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.headDim));
    toExp2 = scale * log2e;
    runtimeShapes = c.staticShapes <= 0;
    atomicDq = c.deterministic <= 0;
    convertLast = atomicDq && c.convertDqLast > 0;
    overlapConvert = atomicDq && !convertLast && c.overlapDqConvert > 0 &&
                     c.separateDkDv <= 0;
    foldStats = c.foldStatistics > 0; // resolved: never with scoresByQueries
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
  // Grouped heads: a program's keys are read by the G query heads of its
  // K/V head; it runs their query blocks one head after another.
  const int64_t G = queryHeadsPerKv(s);
  const Index Hk = kvHeadsArg(k, s, H, cm.runtimeShapes);
  const Index nBlocks = cdiv(Nk, BN), pairs = B * Hk;
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
  auto K = k.tensorArg("K", s.dtype, {B, Hk, Nk, D});
  auto dO = k.tensorArg("dO", s.dtype, {B, H, Nq, D});
  auto Stats = statsArg(cm, k, B, H, Nq);
  Index bh = programId(1), n0 = programId(0) * BN;
  if (longestFirst) { // key block 0 sees every query
    // Grouped heads: groups that divide the pairs (a program runs G heads'
    // queries, so a short last group's long blocks would run alone).
    const int64_t rowBytes = D * int64_t(dtypeSize(s.dtype));
    Index perGroup = cm.c.headGroup > 0 ? min(Index(cm.c.headGroup), pairs)
                     : G > 1            ? fullHeadGroups(Nq, rowBytes, pairs)
                                        : headGroupFor(Nq, rowBytes, pairs);
    GroupedProgram p =
        longestFirstProgram(programId(0), perGroup, pairs, nBlocks);
    bh = p.pair;
    // Clamped at 0, which it never is below, so that the compiler sees that
    // dQ's bulk reductions start at rows >= 0 (else they take a guard and a
    // red.global copy in the loop: 4-8 more bytes of spills at D=128).
    n0 = max(p.rank, Index(0)) * BN;
  }
  Index b = bh / Hk, hk = bh % Hk;
  std::optional<TensorView> foldedAll;
  if (cm.foldStats)
    foldedAll = foldedStatsArg(k, B, H, Stats.dims()[3]);
  // What a step reads of query head h's rows.
  struct HeadRows {
    Index h;
    TensorView q, dout, lse2, delta;
    std::optional<TensorView> folded;
  };
  auto rowsOf = [&](Index h) {
    HeadRows r{h, Q[b][h], dO[b][h], Stats[b][h][0], Stats[b][h][1], {}};
    if (foldedAll)
      r.folded = (*foldedAll)[b][h];
    return r;
  };
  std::optional<HeadRows> headRows; // without grouped heads: the program's
  if (G == 1)
    headRows = rowsOf(hk);
  std::optional<Tile> lseSelector, deltaSelector;
  if (cm.foldStats) {
    lseSelector = foldedStatsSelector(BN, kFoldedLse);
    deltaSelector = foldedStatsSelector(BN, kFoldedDelta);
  }
  Tile kTile = load(K[b][hk].block({n0, 0}, {BN, D}));
  Tile keys = arange(BN) + n0;
  Carry carried;
  Tile dk = zeros({BN, D}, f32), dv = zeros({BN, D}, f32), vTile;
  std::optional<TensorView> dqAccum;
  if (wantDk && cm.atomicDq)
    dqAccum = dqAccumArg(cm, k, B, H, Nq);
  if (wantDk) {
    auto V = k.tensorArg("V", s.dtype, {B, Hk, Nk, D});
    vTile = load(V[b][hk].block({n0, 0}, {BN, D}));
    carried.tiles.push_back(&dk);
  }
  if (wantDv)
    carried.tiles.push_back(&dv);

  // The scores transposed, Sᵀ = K·Qᵀ: Pᵀ and dSᵀ come out as the left
  // operands of dV's and dK's dots, from registers; only dSᵀ is staged (for
  // dQ); a thread's LSE and Delta are one per column of its accumulator,
  // unless the dots add them (folded: Sᵀ - LSE/scale and dPᵀ - Delta).
  auto stepKeysByQueries = [&](const HeadRows &r, Index m0, bool mask) {
    Tile qTile = load(r.q.block({m0, 0}, {BM, D}));
    Tile doTile = load(r.dout.block({m0, 0}, {BM, D}));
    std::optional<Tile> stats;
    if (r.folded) // rows past kFoldedStatsRows read as zeros
      stats = load(r.folded->block({0, m0}, {kFoldedStepK, BM}));
    // +inf past Nq (folded: -1e30) makes those columns of Pᵀ zero.
    Tile sT = dot(kTile, transpose(qTile));
    if (stats)
      sT = dot(*lseSelector, *stats, sT);
    // Issued before Pᵀ is computed and dV's dot after it, so that each of
    // those dots runs under the elementwise work that follows it.
    Tile dpT = wantDk ? dot(vTile, transpose(doTile)) : Tile();
    if (stats && wantDk)
      dpT = dot(*deltaSelector, *stats, dpT);
    if (mask)
      sT = where(column(keys) <= row(arange(BM) + m0), sT, -inf);
    Tile pT =
        stats ? exp2(sT * cm.toExp2)
              : exp2(sT * cm.toExp2 - row(load(r.lse2.block({m0}, {BM}), inf)));
    if (wantDv)
      dv = dot(pT.to(s.dtype), doTile, dv);
    if (wantDk) {
      Tile dsT =
          (pT * (stats ? dpT : dpT - row(load(r.delta.block({m0}, {BM})))))
              .to(s.dtype);
      // dQ's part from these keys, dS·K over the keys of every warp, issued
      // before dK's dot: its result is read first, and dK's dot runs under
      // the reduction.
      Tile dq = dqAccum ? dot(transpose(dsT), kTile) : Tile();
      dk = dot(dsT, qTile, dk);
      if (dqAccum)
        atomicAdd((*dqAccum)[b][r.h].block({m0, 0}), dq);
    }
  };
  // The scores as S = Q·Kᵀ: a thread's LSE and Delta are one per row of
  // its accumulator (2 per 64 queries instead of 32 per 128 in Sᵀ, which
  // spill beside 128-query steps), dS feeds dQ's dot from registers, and
  // P and dS are staged for dV's and dK's.
  auto stepQueriesByKeys = [&](const HeadRows &r, Index m0, bool mask) {
    Tile qTile = load(r.q.block({m0, 0}, {BM, D}));
    Tile doTile = load(r.dout.block({m0, 0}, {BM, D}));
    Tile sc = dot(qTile, transpose(kTile));
    Tile dp = wantDk ? dot(doTile, transpose(vTile)) : Tile();
    if (mask)
      sc = where(row(keys) <= column(arange(BM) + m0), sc, -inf);
    Tile p = exp2(sc * cm.toExp2 - column(load(r.lse2.block({m0}, {BM}), inf)));
    if (wantDv)
      dv = dot(transpose(p.to(s.dtype)), doTile, dv);
    if (wantDk) {
      Tile ds =
          (p * (dp - column(load(r.delta.block({m0}, {BM}))))).to(s.dtype);
      Tile dq = dqAccum ? dot(ds, kTile) : Tile();
      dk = dot(transpose(ds), qTile, dk);
      if (dqAccum)
        atomicAdd((*dqAccum)[b][r.h].block({m0, 0}), dq);
    }
  };
  auto step = [&](const HeadRows &r, Index m0, bool mask) {
    if (cm.c.scoresByQueries > 0)
      stepQueriesByKeys(r, m0, mask);
    else
      stepKeysByQueries(r, m0, mask);
  };
  // The query blocks from m0 = lo while m0 < hi, of the program's head, or
  // of each of the G heads of its group in turn: one loop of G·blocks steps,
  // each step's head and block from its number.
  auto queryLoop = [&](Index lo, Index hi, bool mask) {
    if (G == 1) {
      forRange(lo, hi, BM, carried,
               [&](Index m0) { step(*headRows, m0, mask); });
      return;
    }
    Index blocks = cdiv(max(hi - lo, Index(0)), BM);
    forRange(0, blocks * G, 1, carried, [&](Index i) {
      Index g = i / blocks;
      step(rowsOf(hk * G + g), lo + (i - g * blocks) * BM, mask);
    });
  };
  if (s.causal) {
    // Queries before n0 see none of these keys; those in blocks that reach
    // below n0 + BN see some (masked); the rest see all of them.
    // (split stays a multiple of BM, past Nq or not, so that the loads of
    // the second loop keep their vector width at any Nq.)
    Index first = n0 / BM * BM, split = cdiv(n0 + BN, BM) * BM;
    queryLoop(first, min(split, Nq), true);
    queryLoop(split, Nq, false);
  } else {
    queryLoop(0, Nq, false);
  }
  if (wantDk) {
    auto dK = k.tensorArg("dK", s.dtype, {B, Hk, Nk, D});
    store(dK[b][hk].block({n0, 0}), (dk * cm.scale).to(s.dtype));
  }
  if (wantDv) {
    auto dV = k.tensorArg("dV", s.dtype, {B, Hk, Nk, D});
    store(dV[b][hk].block({n0, 0}), dv.to(s.dtype));
  }
  // dQ's counts are per query head: every program of a K/V head arrives at
  // each head of its group.
  if (dqAccum && cm.overlapConvert) { // dq_convert waits for the head's count
    auto arrivals = arrivalsArg(k, B, H);
    for (int64_t g = 0; g < G; ++g)
      arrive(arrivals[b][G > 1 ? hk * G + g : hk], 0);
  }
  if (dqAccum && cm.convertLast) {
    // Every program of the head arrives (those that saw no query too); the
    // last of the nBlocks, whose count before is nBlocks - 1, converts.
    auto arrivals = arrivalsArg(k, B, H);
    auto dQ = k.tensorArg("dQ", s.dtype, {B, H, Nq, D});
    for (int64_t g = 0; g < G; ++g) {
      Index h = G > 1 ? hk * G + g : hk;
      Index before = arrive(arrivals[b][h], 0);
      Index last = (before + 1) / nBlocks;
      convertDq(cm, (*dqAccum)[b][h], dQ[b][h], last * Nq);
    }
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
