//===- DkDvKernel.cpp - the backward's dK and dV in kiln's DSL ------------===//
//
// One program per blockN keys of a (batch, K/V head): it loads K and V once
// and runs over the query blocks that see them (of each query head of its
// group, one after another, with grouped heads), accumulating dK and dV in
// registers and adding its part of dQ by atomics.
//
//===----------------------------------------------------------------------===//
#include "BackwardKernels.h"
#include "FoldedStats.h"
#include "HeadGroups.h"

#include <optional>

using namespace kiln::dsl;

namespace kiln::kernels::backward {

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

} // namespace kiln::kernels::backward
