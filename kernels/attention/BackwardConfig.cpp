//===- BackwardConfig.cpp - the attention backward's schedule defaults ----===//
//
// What the backward's kernels are built with: the Config's unset fields
// filled in from the tuning record or with the defaults measured on the
// H200 and H100 (each with its figures), as Config.cpp does for the
// forward.
//
//===----------------------------------------------------------------------===//
#include "ConfigFields.h"
#include "UntunedConfig.h"

#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <string>

namespace kiln::kernels {

/// resolveBackwardConfig, reading `kiln tune`'s record if `useTuned`.
static AttentionBackwardConfig
resolve(const AttentionShape &s, AttentionBackwardConfig c, bool useTuned) {
  checkAttentionShape(s);
  if (s.keyLengths)
    throw Error("attention backward: key lengths per batch are the "
                "forward's (decoding from a KV cache); the backward takes "
                "every key");
  checkSwitches("attention backward", c, attentionBackwardConfigFields());
  if (c.foldStatistics > 0 && c.scoresByQueries > 0)
    throw Error("attention backward: foldStatistics adds LSE and Delta in "
                "the transposed scores' dots; scoresByQueries 1 has none "
                "(ask for one of them)");
  // No block sizes chosen: the autotuner's winner for this GPU and shape
  // bucket (`kiln tune attention-backward`), unless it takes the other way
  // to dQ than the one asked for, or scores by queries where folded
  // statistics are.
  if (useTuned && !c.blockM && !c.blockN && !c.dqBlockM)
    if (std::optional<AttentionBackwardConfig> t =
            tunedAttentionBackwardConfig(s);
        t && (c.deterministic < 0 || c.deterministic == t->deterministic) &&
        !(c.foldStatistics > 0 && t->scoresByQueries > 0)) {
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
  // dQ by atomics beats its own kernel at both head dims, short causal D=128
  // included since the dK/dV programs gained a producer and ping-pong: H200,
  // same process, causal D=128 bf16, atomics against dQ's own kernel (the
  // default up to 768 keys until session 44) +11-27% at N=128-768 and
  // 4k-64k tokens (docs/experiments/2026-11-27-session44.txt, section 3;
  // earlier: 2026-11-24-h200-atomic-dq.txt, 2026-11-24-h200-backward-d128.txt).
  if (c.deterministic < 0)
    c.deterministic = 0;
  // Scores by queries in 128x128 steps at D = 64 (two warpgroups beside a
  // producer, one CTA per SM) against 64-key programs with K and V in
  // registers, H100: +5-9% non-causal at 512-16k keys; causal +3-7% from 4k,
  // +1-2% at 2k-3k, 2-5% slower up to 1k
  // (docs/experiments/2026-11-25-h100-session23.txt). In Sᵀ the same steps
  // spilled the LSE and Delta (32 registers each a thread) until they were
  // folded into the dots; now the default only without folding.
  const bool wideSteps = c.wgmma > 0 && c.deterministic == 0 &&
                         s.headDim <= 64 && !c.blockM && !c.blockN && !c.warps;
  // LSE and Delta folded into Sᵀ's and dPᵀ's dots (one more k16 step each)
  // rather than held by each thread, 32 + 32 registers per 128 queries at
  // D = 64, which spilled in 128x128 steps: H100, A B B A, D = 64 128x128
  // steps in Sᵀ against scores by queries +3-7% non-causal at 1000-8192
  // keys, causal +4-8.5% at 2048-8192, and against causal 64-key programs
  // +8-11.5% at 512-2047; D = 128 +2-5% non-causal at 1000-4096, causal
  // +1-3% (docs/experiments/2026-11-26-session37.txt).
  if (c.foldStatistics < 0)
    c.foldStatistics =
        c.wgmma > 0 && c.deterministic == 0 && c.scoresByQueries <= 0;
  if (c.scoresByQueries < 0)
    c.scoresByQueries =
        wideSteps && (!s.causal || s.seqK >= 2048) && c.foldStatistics <= 0;
  // 128x128 steps of two warpgroups at D = 64, in either form.
  const bool wide = s.headDim <= 64 && (c.scoresByQueries > 0 ||
                                        (wideSteps && c.foldStatistics > 0));
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
  // Folded statistics in Sᵀ: measured with it, causal too (above).
  if (c.pingpong < 0)
    c.pingpong =
        wide && c.warpSpecialize > 0 && (!s.causal || c.scoresByQueries <= 0);
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
  // (2026-11-26-session29.txt, section 5); since, D=64 past 4096 keys too:
  // same process on the H200 (kiln bench --backward --against), two
  // rounds, +4.0/+3.7% at 4097, +3.8/+3.3% at 6000, +2.9/+2.7% at 8191 and
  // 8192, +2.4% at 16384 (2026-11-27-session41.txt, sections 1-2).
  if (c.persistent < 0)
    c.persistent = c.warpSpecialize > 0 &&
                   (s.headDim > 64 ? c.warps == 8
                    : s.causal     ? (oneWarpgroup ? s.seqK <= 2048 : wide)
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

AttentionBackwardConfig resolveBackwardConfig(const AttentionShape &s,
                                              AttentionBackwardConfig c) {
  return resolve(s, c, /*useTuned=*/true);
}

AttentionBackwardConfig
resolveUntunedBackwardConfig(const AttentionShape &s,
                             AttentionBackwardConfig c) {
  return resolve(s, c, /*useTuned=*/false);
}

} // namespace kiln::kernels
