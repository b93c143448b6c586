//===- Forward.cpp - flash-attention forward in kiln's DSL ----------------===//
//
// One program computes blockM rows of O for one (batch, head): it streams K
// and V in blocks of blockN keys, keeps a running row max and row sum, and
// rescales its accumulator when the max grows (online softmax). The row max is
// taken over the raw scores; the exponentials are exp2 of
// scores·k − max·k with k = scale·log2(e), which is one FMA per score.
//
//===----------------------------------------------------------------------===//
#include "AttentionLoops.h"
#include "HeadGroups.h"
#include "SplitCombine.h"

#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"

#include <cmath>
#include <optional>

using namespace kiln::dsl;

namespace kiln::kernels {

/// 1 when r > t, else 0, for 0 <= r < n and t < n: a run-time count turned
/// into a loop's trip count (0 or 1) without a branch.
static Index above(Index r, int64_t t, int64_t n) {
  return (r + (n - 1 - t)) / n;
}

/// attention_fwd, or with `split` attention_fwd_split: the keys in
/// c.splitKeys ranges of whole blocks, program y = (batch, head) pair *
/// ranges + range, each range's O and logsumexp to OSplit and LSESplit.
static Kernel buildForward(const AttentionShape &s,
                           const AttentionConfig &config, bool split) {
  const AttentionConfig c = resolveConfig(s, config);
  checkConfig(c);
  const int64_t S = split ? c.splitKeys : 1;
  const int64_t D = s.headDim, BM = c.blockM, BN = c.blockN;
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(D));
  const double toExp2 = scale * log2e; // scores to base-2 exponents
  const bool runtimeShapes = c.staticShapes <= 0;
  if (s.keyLengths && !runtimeShapes)
    throw Error("attention: key lengths per batch need run-time shapes "
                "(staticShapes 0)");
  // After an overlapped loop that does not run (a length of 0 or under one
  // block), the deferred P·V reads V's block at the loop's start: the
  // whole blocks' loop starts at key 0, where a cache's slots may hold NaN.
  if (s.keyLengths && !s.causal && !split && c.overlap > 0 &&
      !raggedEndFirst(s, c))
    throw Error("attention: key lengths per batch under overlap take the "
                "masked block first (maskedBlockFirst 1, the default)");
  // Run-time shapes are built for a class of Nk: whole key blocks (no mask
  // for keys past the end; bind refuses other Nk) or not.
  const bool wholeKeys = runtimeShapes ? wholeKeyBlocks(s, c) : false;

  // Causal row blocks differ in cost: the longest blocks of a group of heads
  // are dispatched first, one group after another (a 1-D grid).
  const bool longestFirst = s.causal && c.longestFirstGlobally > 0;
  KernelBuilder k(split ? "attention_fwd_split" : "attention_fwd");
  Index B = s.batch, H = s.heads, Nq = s.seqQ, Nk = s.seqK;
  if (runtimeShapes) {
    B = k.scalarArg("B");
    H = k.scalarArg("H");
    Nq = k.scalarArg("Nq");
    Nk = k.scalarArg("Nk", wholeKeys ? keyBlockMultiple(c) : 1);
  }
  const Index mBlocks = cdiv(Nq, BM), heads = B * H;
  if (longestFirst)
    k.setGrid({heads * mBlocks});
  else
    k.setGrid({mBlocks, split ? heads * S : heads});
  k.setWarps(c.warps);
  k.setStages(c.stages);
  k.setReloadThreadIds(c.reloadThreadIds > 0);
  if (c.minBlocksPerSM > 0)
    k.setMinBlocksPerSM(int(c.minBlocksPerSM));
  k.setCopyAddressesPerRegister(c.copyAddressesPerRegister > 0);
  // A main key loop that masks every step for the sake of its last.
  k.setSkipPassingMasks(runtimeShapes && !wholeKeys && !s.causal &&
                        (c.raggedEndInLoop > 0 || split));
  k.setWgmma(c.wgmma > 0);
  k.setTma(c.wgmma > 0 && c.tma > 0);
  k.setTmaStores(c.wgmma > 0 && c.tma > 0 && c.tmaStore > 0 && !split);
  k.setSkipDeadRows(c.skipDeadRows > 0);
  k.setOneShotLoads(c.oneShotLoads > 0);
  k.setWarpSpecialize(c.wgmma > 0 && c.warpSpecialize > 0);
  k.setPingpong(c.wgmma > 0 && c.pingpong > 0);
  k.setOverlapDots(c.overlap > 0);
  k.setPeelFirstIteration(c.overlap > 0 && c.peelFirstStep > 0);
  k.setPersistent(c.persistent > 0);
  k.setDynamicTiles(c.persistent > 0 && c.dynamicTiles > 0);
  // Grouped heads: G query heads read one K/V head.
  const int64_t G = queryHeadsPerKv(s);
  const Index Hk = kvHeadsArg(k, s, H, runtimeShapes);
  auto Q = k.tensorArg("Q", s.dtype, {B, H, Nq, D});
  auto K = k.tensorArg("K", s.dtype, {B, Hk, Nk, D});
  auto V = k.tensorArg("V", s.dtype, {B, Hk, Nk, D});
  auto O = split ? k.tensorArg("OSplit", f32, {S, B, H, Nq, D})
                 : k.tensorArg("O", s.dtype, {B, H, Nq, D});
  auto LSE = split ? k.tensorArg("LSESplit", f32, {S, B, H, Nq})
                   : k.tensorArg("LSE", f32, {B, H, Nq});
  // LSE's rows (Nq fp32) are 16-byte aligned only when Nq % 4 == 0: one
  // variant for every Nq of the class.
  if (runtimeShapes)
    k.keepUnspecialised(LSE);
  std::optional<TensorView> keyLengths;
  if (s.keyLengths)
    keyLengths = k.tensorArg("KLengths", i32, {B});

  Index bh = programId(1), mProgram = programId(0);
  std::optional<Index> range; // the split's key range
  if (split) {
    range = bh % S;
    bh = bh / S;
  }
  if (longestFirst) {
    // Program t: row block (t mod G·mBlocks) / G of the group's pair
    // (t mod G·mBlocks) mod G, where the last group may hold fewer pairs.
    // With run-time shapes and no group given, G is what has 16 MiB of K/V
    // (resolveConfig's rule, on the device: 1 to 16 pairs, 8 at D=128).
    Index G = min(Index(c.headGroup), heads);
    if (runtimeShapes && config.headGroup <= 0) // resolveConfig's rule
      G = forwardHeadGroup(c, Nk, D * int64_t(dtypeSize(s.dtype)), heads);
    GroupedProgram p = longestFirstProgram(programId(0), G, heads, mBlocks);
    mProgram = p.rank;
    bh = p.pair;
  }
  Index b = bh / H, h = bh % H;
  // Causal: the longest rows first, so that the short ones fill the tail.
  // (Clamped at 0, which it never is below, so that the compiler sees that
  // O's rows start at >= 0: a TMA store that may start at a negative row
  // takes a branch and a st.global copy, and 1-2% at D=64 on the H100.)
  Index mBlock = s.causal ? max(mBlocks - 1 - mProgram, Index(0)) : mProgram;
  Index m0 = mBlock * BM;
  // Causal Nq of 1 to w rows past a multiple of BM: the blocks end at Nq, so
  // that the short one is the first (rows from -(BM - rho), one key step)
  // rather than the last (every key).
  const bool alignEnd = rowsAlignedToEnd(s, c);
  const int64_t narrowKeys = c.blockNRaggedEnd;
  if (alignEnd) {
    Index rho = Nq % BM;
    Index shifted = above(rho, 0, BM) - above(rho, narrowKeys, BM);
    m0 = m0 - shifted * (BM - rho);
  }
  const Index hk = G > 1 ? h / G : h;
  auto q = Q[b][h], kv = K[b][hk], v = V[b][hk];
  // With key lengths, batch b's keys end at its own (the kernel's Nk from
  // here on). The masked steps read K and V through views that end there
  // too: a cache's slots past it may hold anything (NaN, which P's zeros
  // would not cancel), and read as zeros instead. Whole blocks inside take
  // the full views (TMA, whose bounds are the tensor's).
  auto kvEdge = kv, vEdge = v;
  if (keyLengths) {
    Nk = min(max(loadIndex(*keyLengths, b), Index(0)), Nk);
    kvEdge = kv.firstRows(Nk);
    vEdge = v.firstRows(Nk);
  }

  Tile qTile = load(q.block({m0, 0}, {BM, D}));
  Tile acc = zeros({BM, D}, f32);
  Tile rowMax = full({BM}, -inf, f32);
  Tile rowSum = zeros({BM}, f32);
  Tile rows = arange(BM) + m0;
  // Causal with key lengths: each row's key (rows aligned at the bottom
  // right of the batch's keys); rows before key 0 see none.
  std::optional<Tile> rowKeys;
  if (s.causal && keyLengths)
    rowKeys = rows + (Nk - Nq);

  // Whether keys past Nk can fall in a block of BN keys (they read as 0 and
  // are masked out).
  auto raggedKeys = [&](int64_t BN) {
    return runtimeShapes ? !wholeKeys : s.seqK % BN != 0;
  };
  // Which keys of a step are masked out: with `edges`, those past Nk (where
  // a block may hold such) and right of each row's diagonal (causal);
  // else those from `end` on (keys every row sees), or before key 0.
  struct Masked {
    bool edges = false;
    std::optional<Index> end;
    bool beforeZero = false;
  };
  // One step of the online softmax over the keys [n0, n0 + BN). With
  // `narrow`, also the narrowKeys keys from narrow->start, those from
  // narrow->end on masked out: one update of the row max and sum for both
  // tiles, their dots issued back to back.
  struct Narrow {
    Index start, end;
  };
  auto step = [&](Index n0, int64_t BN, const Masked &masked = {},
                  std::optional<Narrow> narrow = std::nullopt) {
    const bool edge = masked.edges && keyLengths && !rowKeys;
    Tile kTile = load((edge ? kvEdge : kv).block({n0, 0}, {BN, D}));
    std::optional<Tile> kNarrow;
    if (narrow)
      kNarrow = load(kv.block({narrow->start, 0}, {narrowKeys, D}));
    Tile scores = dot(qTile, transpose(kTile));
    std::optional<Tile> narrowScores;
    if (narrow)
      narrowScores = dot(qTile, transpose(*kNarrow));
    if (rowKeys) {
      // Keys before 0 (the first block starts there) and right of each
      // row's own.
      Tile cols = arange(BN) + n0;
      scores = where((row(cols) >= 0) & (column(*rowKeys) >= row(cols)), scores,
                     -inf);
    } else if (masked.beforeZero) {
      scores = where(row(arange(BN) + n0) >= 0, scores, -inf);
    } else if (masked.end) {
      scores = where(row(arange(BN) + n0) < *masked.end, scores, -inf);
    } else if (masked.edges) {
      Tile cols = arange(BN) + n0;
      if (s.causal && raggedKeys(BN)) // one compare per score, not two
        scores = where(column(min(rows, Nk - 1)) >= row(cols), scores, -inf);
      else if (raggedKeys(BN))
        scores = where(row(cols) < Nk, scores, -inf);
      else if (s.causal)
        scores = where(column(rows) >= row(cols), scores, -inf);
    }
    Tile blockMax = reduceMax(scores, 1);
    if (narrow) {
      narrowScores =
          where(row(arange(narrowKeys) + narrow->start) < narrow->end,
                *narrowScores, -inf);
      blockMax = max(blockMax, reduceMax(*narrowScores, 1));
    }
    Tile newMax = max(rowMax, blockMax);
    Tile scaledMax = newMax * toExp2;
    if (rowKeys) // a row that has seen no key yet: exp2 of -inf, not NaN
      scaledMax = where(newMax > -inf, scaledMax, 0.0);
    Tile p = exp2(scores * toExp2 - column(scaledMax));
    Tile alpha = exp2(rowMax * toExp2 - scaledMax);
    rowSum = rowSum * alpha + reduceSum(p, 1);
    std::optional<Tile> pNarrow;
    if (narrow) {
      pNarrow = exp2(*narrowScores * toExp2 - column(scaledMax));
      rowSum = rowSum + reduceSum(*pNarrow, 1);
    }
    Tile vTile = load((edge ? vEdge : v).block({n0, 0}, {BN, D}));
    std::optional<Tile> vNarrow;
    if (narrow)
      vNarrow = load(v.block({narrow->start, 0}, {narrowKeys, D}));
    acc = dot(p.to(s.dtype), vTile, acc * column(alpha));
    if (narrow)
      acc = dot(pNarrow->to(s.dtype), *vNarrow, acc);
    rowMax = newMax;
  };
  const int64_t BND = c.blockNDiagonal;
  if (split) {
    // Whole key blocks per range, the last range's end at Nk (masked where
    // Nk is not whole blocks; a per-thread check skips the mask elsewhere).
    // A range past Nk runs no step: its rows' sum stays 0.
    Index chunk = cdiv(cdiv(Nk, BN), S) * BN, k0 = *range * chunk;
    forRange(k0, min(k0 + chunk, Nk), BN, carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN, {.edges = true}); });
  } else if (rowKeys) {
    // The key blocks end at the batch's length (the first starts up to BN
    // keys before key 0, which TMA reads as zeros), so that no load reads
    // past it, whatever the cache holds there: every load takes the full
    // views (TMA). Each step masked (keys before 0, right of a row's).
    // A length of 0 starts a block before key 0 too: the P·V deferred past
    // an overlapped loop that does not run reads V at the loop's start.
    Index r = Nk % BN;
    Index start = r - above(r, 0, BN) * BN - (1 - min(Nk, Index(1))) * BN;
    forRange(start, min(m0 + BM + (Nk - Nq), Nk), BN,
             carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN, {.edges = true}); });
  } else if (s.causal && BM % BN == 0 && BM % BND == 0) {
    // Whole key blocks left of the diagonal need no mask; the diagonal ones
    // (and a ragged last block) do, in blocks of their own size; those right
    // of it are skipped.
    if (!alignEnd && diagonalFirst(s, c)) {
      // The diagonal block (as tall as the row block: one step) first, then
      // the whole blocks left of it: one overlapped loop to the compiler
      // (kiln-overlap-dots), the diagonal's P·V in the second loop's first
      // iteration. (Written so that the compiler sees the first runs at
      // most once.)
      Index split = min(m0, Nk / BN * BN), end = min(m0 + BM, Nk);
      forRange(max(split, end - BND), end, BND, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BND, {.edges = true}); });
      forRange(0, split, BN, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BN); });
    } else if (!alignEnd) {
      Index split = min(m0, Nk / BN * BN);
      forRange(0, split, BN, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BN); });
      forRange(split, min(m0 + BM, Nk), BND, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BND, {.edges = true}); });
    } else {
      // A shifted block's first rows start r = m0 - split < BN keys past a
      // whole block: those keys (every row sees them) in narrowKeys-wide
      // tiles when r <= narrowKeys, either with the diagonal's first step or
      // in a step of their own after the diagonal (as a non-causal ragged
      // end; between the other two loops it measured the same on the H100),
      // each in a loop that runs at most once; else (r past Nk) the diagonal
      // loop starts at split, as unshifted.
      Index first = max(m0, Index(0));
      Index split = min(first / BN * BN, Nk / BN * BN);
      forRange(0, split, BN, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BN); });
      Index r = min(first, Nk) - split;
      Index hasNarrow = above(r, 0, BN) - above(r, narrowKeys, BN);
      Index narrowEnd = split + hasNarrow * r;
      Index diagonalEnd = min(m0 + BM, Nk);
      if (narrowInDiagonal(s, c)) {
        // The narrow keys [split, narrowEnd) join the diagonal's first
        // step, a loop that runs hasNarrow times. Both loops are written so
        // that the compiler sees they run at most once where a diagonal
        // block is as tall as the row block (for (i = max(a, hi - step);
        // ...)): no V buffer for an overlapped P·V after them.
        Index withNarrowEnd = narrowEnd + hasNarrow * BND;
        Narrow keys{max(split, narrowEnd - narrowKeys), narrowEnd};
        forRange(max(narrowEnd, withNarrowEnd - BND), withNarrowEnd, BND,
                 carry(acc, rowMax, rowSum),
                 [&](Index n0) { step(n0, BND, {.edges = true}, keys); });
        forRange(BND == BM ? max(withNarrowEnd, diagonalEnd - BND)
                           : withNarrowEnd,
                 diagonalEnd, BND, carry(acc, rowMax, rowSum),
                 [&](Index n0) { step(n0, BND, {.edges = true}); });
      } else {
        forRange(narrowEnd, diagonalEnd, BND, carry(acc, rowMax, rowSum),
                 [&](Index n0) { step(n0, BND, {.edges = true}); });
        forRange(max(split, narrowEnd - narrowKeys), narrowEnd, narrowKeys,
                 carry(acc, rowMax, rowSum),
                 [&](Index n0) { step(n0, narrowKeys, {.end = narrowEnd}); });
      }
    }
  } else if (s.causal) {
    forRange(0, min(m0 + BM, Nk), BN, carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN, {.edges = true}); });
  } else if (raggedEndFirst(s, c)) {
    // The key blocks end at Nk: the first starts BN - r keys before key 0
    // (r = Nk mod BN; TMA reads zeros there) and masks those (none runs
    // where r = 0); the rest are whole. The two loops are one overlapped
    // loop to the compiler (kiln-overlap-dots): the first block's P·V runs
    // in the second loop's first iteration.
    Index r = Nk % BN;
    Index firstEnd = r - BN + above(r, 0, BN) * BN;
    forRange(max(r - BN, firstEnd - BN), firstEnd, BN,
             carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN, {.beforeZero = true}); });
    forRange(r, Nk, BN, carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN); });
  } else if (runtimeShapes) {
    // Whole key blocks unmasked; a ragged end of r keys in one masked step
    // of the narrowest width of raggedEndBlocks that holds them: one loop
    // per width, which runs once when r falls in its range (keyLoops). Under
    // raggedEndInLoop the widest is the main loop's last step instead, and
    // every step of that loop carries the mask.
    Index split = wholeKeys ? Nk : Nk / BN * BN;
    const std::vector<int64_t> widths = raggedEndBlocks(c);
    // The ragged keys, 0 <= r < BN: computed where first needed, before the
    // main loop when it takes the end, else after it (so that the kernels
    // with end loops of their own keep the IR, and the PTX, they had).
    Index r = Nk;
    auto aboveKeys = [&](int64_t t) { return above(r, t, BN); };
    const bool inLoop = !wholeKeys && c.raggedEndInLoop > 0;
    Index mainEnd = split;
    if (inLoop) {
      r = Nk - split;
      mainEnd = split + aboveKeys(widths.size() > 1 ? widths[1] : 0) * BN;
    }
    forRange(0, mainEnd, BN, carry(acc, rowMax, rowSum),
             [&](Index n0) { step(n0, BN, {.edges = inLoop}); });
    if (!wholeKeys && !inLoop)
      r = Nk - split;
    for (size_t i = inLoop ? 1 : 0; !wholeKeys && i < widths.size(); ++i) {
      const int64_t w = widths[i];
      Index runs = i + 1 < widths.size() ? aboveKeys(widths[i + 1]) : Index(1);
      if (i > 0)
        runs = runs - aboveKeys(w);
      Index end = split + runs * r;
      forRange(max(split, end - w), end, w, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, w, {.edges = true}); });
    }
  } else {
    // A ragged end in a masked loop of its own (keyLoops has the figures).
    const int64_t split = unmaskedKeys(s, BN);
    if (split > 0)
      forRange(0, split, BN, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, BN); });
    const int64_t endBlock = split > 0 ? BND : BN;
    if (split < s.seqK)
      forRange(split, s.seqK, endBlock, carry(acc, rowMax, rowSum),
               [&](Index n0) { step(n0, endBlock, {.edges = true}); });
  }

  // One reciprocal per row, then a multiply per element: an IEEE division per
  // element cost the H200 as many warp samples as the whole key loop at N=512
  // (MUFU.RCP, FCHK and a slow-path branch each). The logsumexp of the scaled
  // scores, in natural log: (max·k + log2(sum)) · ln 2.
  auto lse = [&] { return (rowMax * toExp2 + log2(rowSum)) * ln2; };
  if (split) {
    // A range with no keys: O 0 and logsumexp -inf (weight 0 when combined).
    Tile inverse = where(rowSum > 0.0, 1.0 / rowSum, 0.0);
    store(O[*range][b][h].block({m0, 0}), acc * column(inverse));
    store(LSE[*range][b][h].block({m0}), lse());
  } else {
    // A batch of no keys (key lengths): O 0 rather than 0/0.
    Tile inverse =
        keyLengths ? where(rowSum > 0.0, 1.0 / rowSum, 0.0) : 1.0 / rowSum;
    store(O[b][h].block({m0, 0}), (acc * column(inverse)).to(s.dtype));
    store(LSE[b][h].block({m0}), lse());
  }
  return k.finish();
}

Kernel attentionForward(const AttentionShape &s,
                        const AttentionConfig &config) {
  if (config.splitKeys > 1)
    throw Error("attention: splitKeys (" + std::to_string(config.splitKeys) +
                ") builds two kernels: attentionForwardKernels");
  return buildForward(s, config, false);
}

std::vector<Kernel> attentionForwardKernels(const AttentionShape &s,
                                            const AttentionConfig &config,
                                            int64_t sms,
                                            double memoryBandwidth) {
  const AttentionConfig c = launchConfig(s, config, sms, memoryBandwidth);
  if (c.splitKeys <= 1)
    return {buildForward(s, c, false)};
  return {buildForward(s, c, true),
          splitCombineKernel(s, c.splitKeys,
                             resolveConfig(s, c).staticShapes <= 0)};
}

} // namespace kiln::kernels
