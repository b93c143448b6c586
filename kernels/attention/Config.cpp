//===- Config.cpp - attention's shape checks and schedule defaults --------===//
//
// What the forward kernel is built with: the shape checked, the Config's
// zero fields filled in with the defaults measured on the H200 (each with
// its figures), and the shared memory a schedule takes.
//
//===----------------------------------------------------------------------===//
#include "AttentionLoops.h"
#include "ConfigFields.h"
#include "HeadGroups.h"
#include "UntunedConfig.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionTune.h"

#include <algorithm>
#include <limits>

namespace kiln::kernels {

/// Shared memory a CTA may take on sm_90a, where the defaults are decided.
static const int64_t kHopperSharedBytes = sharedMemoryLimit("sm_90a");

/// Before any arithmetic on the shape: sizes in range, a batch's H*N*D
/// elements (the contiguous tensors' largest stride) and the programs of
/// the grid within kiln's 32-bit index width.
void checkAttentionShape(const AttentionShape &s) {
  if (s.batch < 1 || s.heads < 1 || s.seqQ < 1 || s.seqK < 1)
    throw Error("attention: batch, heads and sequence lengths must be >= 1");
  if (s.headDim != 64 && s.headDim != 128)
    throw Error("attention: head dim " + std::to_string(s.headDim) +
                " is not supported (64 or 128)");
  if (!isFloat(s.dtype))
    throw Error(std::string("attention: dtype ") + dtypeName(s.dtype) +
                " is not a float type");
  if (s.kvHeads < 0 || s.kvHeads > s.heads ||
      (s.kvHeads > 0 && s.heads % s.kvHeads))
    throw Error("attention: " + std::to_string(s.kvHeads) +
                " K/V heads do not divide the " + std::to_string(s.heads) +
                " query heads into groups");
  constexpr int64_t kIndexMax = std::numeric_limits<int32_t>::max();
  const std::string what = "attention";
  for (int64_t n : {s.seqQ, s.seqK})
    if (checkedMul(checkedMul(s.heads, n, what), s.headDim, what) > kIndexMax)
      throw Error("attention: H*N*D = " + std::to_string(s.heads) + "*" +
                  std::to_string(n) + "*" + std::to_string(s.headDim) +
                  " elements per batch exceed kiln's 32-bit index width "
                  "(2^31 - 1)");
  const int64_t programs =
      checkedMul(checkedMul(s.batch, s.heads, what), (s.seqQ + 63) / 64, what);
  if (programs > kIndexMax)
    throw Error("attention: B*H*ceil(N/64) = " + std::to_string(programs) +
                " row blocks exceed the grid's 2^31 - 1");
}

/// resolveConfig, reading `kiln tune`'s record for the shape if `useTuned`.
static AttentionConfig resolve(const AttentionShape &s, AttentionConfig c,
                               bool useTuned) {
  checkAttentionShape(s);
  checkSwitches("attention", c, attentionConfigFields());
  // Run-time B, H, Nq and Nk: one compile serves every size of a class.
  if (c.staticShapes < 0)
    c.staticShapes = 0;
  if (c.splitKeys < -1)
    throw Error("attention: splitKeys must be >= -1 (the default), got " +
                std::to_string(c.splitKeys));
  if (c.splitKeys < 0) // the default split needs the GPU's SM count
    c.splitKeys = 0;
  if (c.splitKeys > 1 && s.causal)
    throw Error("attention: splitKeys (" + std::to_string(c.splitKeys) +
                ") splits the keys of non-causal attention only");
  // No tile sizes chosen: the autotuner's winner for this GPU and shape
  // bucket, when `kiln tune` recorded one.
  if (useTuned && !c.blockM && !c.blockN && c.smallTiles <= 0)
    if (std::optional<AttentionConfig> tuned = tunedAttentionConfig(s)) {
      tuned->blockNDiagonal = c.blockNDiagonal;
      tuned->blockNRaggedEnd = c.blockNRaggedEnd;
      tuned->raggedEndInLoop = c.raggedEndInLoop;
      tuned->maskedBlockFirst = c.maskedBlockFirst;
      tuned->peelFirstStep = c.peelFirstStep;
      tuned->alignRowsToEnd = c.alignRowsToEnd;
      tuned->narrowStepInDiagonal = c.narrowStepInDiagonal;
      tuned->longestFirstGlobally = c.longestFirstGlobally;
      tuned->headGroup = c.headGroup;
      tuned->dynamicTiles = c.dynamicTiles;
      tuned->tmaStore = c.tmaStore;
      tuned->skipDeadRows = c.skipDeadRows;
      tuned->oneShotLoads = c.oneShotLoads;
      tuned->splitKeys = c.splitKeys;
      c = *tuned;
    }
  bool wide = s.headDim >= 128;
  // Decoding's small tiles where launchConfig chose them (it knows the SM
  // count their rule needs; SplitKeys.cpp).
  if (c.smallTiles < 0)
    c.smallTiles = 0;
  if (c.smallTiles > 0) {
    if (c.wgmma > 0)
      throw Error("attention: smallTiles are mma.sync tiles; wgmma=1 "
                  "contradicts them");
    c.wgmma = 0;
    if (!c.blockM)
      c.blockM = 16;
    if (!c.warps)
      c.warps = int(std::max<int64_t>(1, c.blockM / 16));
    if (!c.blockN) // D=128: 4 CTAs an SM by shared memory, as D=64's
      c.blockN = wide ? 32 : 64;
    if (c.stages <= 0)
      c.stages = 3;
  }
  if (c.stages <= 0)
    c.stages = 2;
  // Hopper's warpgroup MMA by default (a target without it falls back to
  // mma.sync, and the lowering report says so): two warpgroups of 64 rows.
  if (c.wgmma < 0)
    c.wgmma = 1;
  if (c.tma < 0)
    c.tma = c.wgmma;
  if (c.tmaStore < 0)
    c.tmaStore = c.tma > 0;
  // Non-causal keys short of 384 that end 1-64 past a multiple of 128, and
  // D=128's 128: 64-key blocks, one narrow step where 128-key ones compute
  // 64 keys past the end (or, at 128, two steps to overlap). H200, same
  // process, bf16, 64 against 128: D=128 +3-55% at N=32-320 (129 +13-33%),
  // 3-6% slower at 65, 100, 200, within 3% at 448-576, 5-14% slower at 500
  // and from 600; D=64 +4-16% at 64-320, 3-11% slower at 100, 128, 256
  // (docs/experiments/2026-11-27-session44.txt, sections 2 and 4).
  // (Not where the Config asks for a narrower step wider than 64.)
  if (!c.blockN && !s.causal && c.wgmma > 0 && s.seqK < 384 &&
      ((s.seqK % 128 >= 1 && s.seqK % 128 <= 64) || (wide && s.seqK == 128)) &&
      c.blockNRaggedEnd <= 64 && c.blockNDiagonal <= 64)
    c.blockN = 64;
  // Decoding-like D=128 non-causal: queries within one warpgroup's 64 rows
  // on long keys take 64-key blocks, and the other warpgroup skips its work
  // (H200 A/B: docs/performance.md, few queries).
  const bool fewQueries = wide && !s.causal && c.wgmma > 0 && s.seqQ <= 64 &&
                          s.seqK >= 2048 && c.blockNRaggedEnd <= 64 &&
                          c.blockNDiagonal <= 64;
  if (!c.blockN && fewQueries)
    c.blockN = 64;
  // A warpgroup whose 64 rows all lie past Nq runs only the key loops'
  // pipeline. Same-process H200 A/B (kiln bench --against, median of 30),
  // bf16, skip on -> off, where it runs (Nq mod 128 in 1..64: 2049, 2100,
  // 3001, 4097) and where it does not (1000, 2048, 6000, 8191): causal
  // D=128 +1.2..1.8% / -0.3..+0.9%, causal D=64 +0.8..2.0% / -0.7..+0.4%,
  // non-causal D=64 +0.9..3.5% / -0.4..+1.1%; non-causal D=128 0.9-2.8%
  // slower at every N (ptxas schedules its key loop otherwise): off there
  // (docs/experiments/2026-11-27-session40.txt).
  if (c.skipDeadRows < 0)
    c.skipDeadRows = !(wide && !s.causal) || fewQueries;
  // Causal D=64 below N=2k: programs of one warpgroup, 64 queries by
  // 64-key blocks (no producer). Same-run H200 A/B (kiln bench attention
  // --ragged, twice): +16% at N=512, +7-9% at 1000-1024, +6% at 2049,
  // even at 2048 (and 6% slower there in kiln.bench), 1-3% slower from
  // 2944 and non-causal (docs/experiments/2026-11-24-h200-fwd64-small.txt).
  const bool shortCausal = !wide && s.causal && c.wgmma > 0 &&
                           c.warpSpecialize <= 0 && s.seqK < 2048;
  if (!c.blockM)
    c.blockM = shortCausal ? 64 : 128;
  if (!c.warps) // wgmma: a warpgroup per 64 rows
    c.warps = c.wgmma > 0 ? int(std::max<int64_t>(4, c.blockM / 16)) : 4;
  // mma.sync at D=128 causal is register-bound at 128x64; wgmma is not.
  // A producer warpgroup with 128-key blocks for causal D=128: same-run
  // H200 bench, bf16 TFLOP/s at N=1k..16k 233/331/447/542/608 against
  // 205/287/379/443/481 without; slower elsewhere (D=128 non-causal 566 vs
  // 592 at 4k, D=64 402 vs 436).
  // P·V one iteration behind Q·Kᵀ (kiln-overlap-dots), with the producer
  // warpgroup (which also fetches V for the dot after each loop), persistent
  // CTAs and 128-key blocks, at D=128 but causal N<1k: same-run H200 bench,
  // bf16 TFLOP/s at N=512..16k non-causal 342/474/579/648/690/710 against
  // 337/454/543/627/682/707 (the default before: overlap from 2k, not
  // persistent), causal 169/268/370/524/612/676 against 169/258/356/468/
  // 575/656; causal N=512 174 without overlap. D=64 about even.
  // ... where its shared memory fits: Q, the K/V stages, and V for the dot
  // after each loop (two loops when causal). Causal's two V buffers left no
  // room for O's TMA staging tile, which paid more up to N=2k; since the
  // tile gate (persistent CTAs whose buffers do not fit live across tiles)
  // overlap keeps O's TMA store and still loses up to N=2k: 0.83-0.95x at
  // N=512..2048, 1.00-1.07x from 2049 (docs/experiments/
  // 2026-11-24-h200-tile-gate.txt). Without TMA stores overlap wins from 1k.
  const bool hopper = c.wgmma > 0 && c.tma > 0;
  const int64_t causalOverlapFrom = c.tmaStore > 0 ? 2049 : 1024;
  auto fitsOverlapped = [&] {
    AttentionConfig overlapped = c;
    overlapped.overlap = 1;
    return attentionSharedBytes(s, overlapped) <= kHopperSharedBytes;
  };
  // The masked key block first, fused with the loop over the whole blocks
  // into one overlapped loop (kiln-overlap-dots): its P·V runs in that
  // loop's first iteration, not in a step after the loop's last P·V.
  // Same-process H100 A/B (kiln bench --against, median of 30 samples),
  // bf16 TFLOP/s: non-causal D=128 (the ragged end first) at N=1000/1023/
  // 2049/3001/4097/8191 +6.6-9.8/+7.4-10.2/+1.3/+4.1/+0.3-0.9/+0.9-1.2%;
  // causal D=128 (the diagonal first, with overlap at every N and rows not
  // aligned to the end) at 1000/1024/2048/2049/3001/4096/4097/8191
  // +6.3/+10.1/+11.7/+7.4/+9.3/+10.8/+3.2/+5.0%, 512 +5.1%
  // (docs/experiments/2026-11-26-session38.txt).
  // With key lengths (non-causal), the masked block first wherever the key
  // loop is overlapped: the buildForward check says why.
  if (c.maskedBlockFirst < 0)
    c.maskedBlockFirst = (wide && hopper && c.warpSpecialize != 0) ||
                         (s.keyLengths && !s.causal);
  if (c.overlap < 0)
    c.overlap =
        wide && hopper && c.warpSpecialize != 0 &&
        !(s.causal && s.seqK < causalOverlapFrom && c.maskedBlockFirst <= 0) &&
        fitsOverlapped();
  if (c.warpSpecialize < 0)
    c.warpSpecialize = wide && hopper && (s.causal || c.overlap > 0);
  // Ping-pong wherever the producer warpgroup is the default: same-run H200
  // bench, causal D=128 bf16 TFLOP/s at N=1k..16k 239/339/453/548/612
  // against 234/333/448/545/608 without; neutral with a producer at
  // non-causal D=128 (565 vs 566 at 4k), which keeps every warp computing.
  if (c.pingpong < 0)
    c.pingpong = c.warpSpecialize > 0 && c.warps == 8;
  // D=64 under wgmma: 128-key blocks, same-run H200 bench, bf16 TFLOP/s at
  // N=512..16k non-causal 369/448/496/522/530/515 against 329/389/424/444/
  // 454/442 with 64; causal with 64-key diagonal blocks 199/300/399/467/516/
  // 531 against 197/290/364/415/452/467 (148/220/292/349/381/400 with
  // 128-key diagonal blocks).
  if (!c.blockN)
    c.blockN = wide && (s.causal || c.warpSpecialize > 0)
                   ? (c.wgmma <= 0           ? 32
                      : c.warpSpecialize > 0 ? 128
                                             : 64)
               : !wide && c.wgmma > 0 && !shortCausal ? 128
                                                      : 64;
  if (!c.blockNDiagonal)
    c.blockNDiagonal =
        !wide && c.wgmma > 0 ? std::min<int64_t>(64, c.blockN) : c.blockN;
  // The first step peeled where no masked block goes first (non-causal,
  // whole key blocks), so that no iteration issues the dot of a zero tile.
  // H200, same process (kiln bench --against), D=128 bf16, default against
  // peel-first=0, two rounds: N=256 1.110/1.116, 512 1.119/1.127, 1024
  // 1.050/1.046, 2048 1.011/1.010, 4096x512 keys 1.122/1.122; against
  // peel-first=1: 4096 1.008/1.008, 8192 1.019/1.020 (why the peeled one
  // runs slower there is not known: its main loop is the same PTX, which
  // ptxas orders otherwise, and it loses as much without ping-pong;
  // docs/experiments/2026-11-27-session47.txt, session48.txt section 5).
  if (c.peelFirstStep < 0)
    c.peelFirstStep =
        !s.causal && wholeKeyBlocks(s, c) && s.seqK <= 2048 && c.overlap > 0;
  // The wider end in the main loop: same-run H200 bench, non-causal bf16
  // (median of 2 rounds, TFLOP/s at N=1000/2049/3001/4097), D=64 409/441/
  // 483/497 -> 425/463/484/504; D=128 517/582/630/671 -> 509/556/603/634
  // (docs/experiments/2026-11-24-h200-session21.txt).
  // With key lengths per batch, the end's loads go through views that end
  // at a batch's keys, which TMA cannot bound: in a loop of their own, the
  // whole blocks keep TMA.
  if (c.raggedEndInLoop < 0)
    c.raggedEndInLoop =
        !wide && c.wgmma > 0 && c.warpSpecialize <= 0 && !s.keyLengths;
  // Same-run H200 bench, non-causal D=128 bf16 (median of 4 rounds, TFLOP/s
  // at N=1000/1023/2049/3001/4097): one 128-key end step 523/553/560/634/
  // 660; 32 keys where they hold the end 522/541/591/639/672; 64 and 16:
  // 514/537/586/649/671 (each end loop that does not run costs ~1-3% at 1k):
  // docs/experiments/2026-11-24-h200-session20.txt. Non-causal with the end
  // in the main loop (D=64) takes no narrower step: H200, four readings
  // each, +1.3% at 8191, +2% at 3001, even at 4097, 1.7% slower at 2049
  // (where the 32-key step runs), 1000/1023 within the noise
  // (docs/experiments/2026-11-25-session28.txt, section 10). Causal keeps
  // it for the row blocks that end at Nq (alignRowsToEnd).
  if (!c.blockNRaggedEnd)
    c.blockNRaggedEnd = c.wgmma > 0 && (s.causal || c.raggedEndInLoop <= 0)
                            ? std::min<int64_t>(32, c.blockN)
                            : c.blockN;
  // Causal row blocks that end at Nq where it is a few rows past a multiple
  // of blockM (2049, 4097): the extra block then sees one key step, not all.
  // Same-run H100 bench, causal bf16 TFLOP/s, two rounds, without -> with:
  // D=128 N=2049 425/425 -> 433/441, 4097 552/549 -> 559/566; D=64 N=4097
  // 416/417 -> 434/426; even at 2048, 3001, 4096, 8192; the kernel with
  // the narrow loop costs 64-row blocks (D=64 below 2k) at N=1000 311/312
  // -> 299/303 (docs/experiments/2026-11-25-h100-session22.txt).
  // Not where the diagonal block goes first (maskedBlockFirst): that won
  // more (3-9% at 2049-4097, H100, same process). Nor at D=64 since session
  // 39: same process on the H200, two rounds, unaligned against aligned,
  // N=2049 -0.4..-0.6%, 2100 +3.6%, 3001 +3.7%, 4097 +1.5%, 4100 +1.4%,
  // 6000 +4.1%, 8191 +4.0%, 12289 +3.0% (the narrow loop's code cost every
  // N, the shift gained too little where it ran; docs/experiments/
  // 2026-11-26-session39.txt, section 7).
  if (c.alignRowsToEnd < 0) {
    AttentionConfig unaligned = c;
    unaligned.alignRowsToEnd = 0;
    c.alignRowsToEnd = wide && c.blockNRaggedEnd < c.blockN &&
                       c.blockM >= 128 && !diagonalFirst(s, unaligned);
  }
  // The narrow keys in the diagonal's first step, one softmax update for
  // both tiles: same-run H100 bench, causal bf16 TFLOP/s, two rounds, apart
  // -> together: D=128 N=2049 429/435 -> 449/451, 3001 518/511 -> 535/532,
  // 4097 568/562 -> 567/576, 8191 644/646 -> 662/660; D=64 4097 416/414 ->
  // 423/422, even elsewhere (docs/experiments/2026-11-25-h100-session24.txt).
  // The ring's stages then hold the narrow K and V too: where three stages
  // of them do not fit (D=128), the narrow step stays apart.
  if (c.narrowStepInDiagonal < 0) {
    AttentionConfig together = c;
    together.narrowStepInDiagonal = 1;
    c.narrowStepInDiagonal =
        attentionSharedBytes(s, together) <= kHopperSharedBytes;
  }
  // Thread ids re-read in the key loop at D=128 non-causal only. Same
  // process on the H200 (kiln bench --against "reload-ids=0", two rounds),
  // off against on: causal D=128 +0.3..+3.2% at N=1000..16384 (ragged N
  // too), non-causal +1.3..1.9% at 2048/4096 but 0.7-1.4% slower at 1000,
  // 2049, 3001, 4097 (docs/experiments/2026-11-27-session42.txt, 9-10).
  if (c.reloadThreadIds < 0)
    c.reloadThreadIds = wide && !s.causal;
  // Same-run A/Bs on the H200: one offset per register is 2% faster at D=128
  // non-causal; base plus constants 2-4% faster everywhere else.
  if (c.copyAddressesPerRegister < 0)
    c.copyAddressesPerRegister = wide && !s.causal;
  if (c.longestFirstGlobally < 0) // +4..10% causal on the H200 at N >= 4k
    c.longestFirstGlobally = s.causal;
  // Persistent CTAs wherever there is a producer warpgroup: it fetches the
  // next row block's Q and K/V (and V for the dot after an overlapped loop)
  // while the compute warps finish this one.
  if (c.persistent < 0)
    c.persistent = c.warpSpecialize > 0;
  if (c.dynamicTiles < 0)
    c.dynamicTiles = s.causal && c.persistent > 0 && c.warpSpecialize > 0;
  // Q by TMA, waited for after the key loop's first copies, where there is
  // no producer warpgroup: causal, and non-causal up to 1024 keys. H200,
  // D=64, same process, two rounds, on against off: causal +0.8..6.7% at
  // N=128-8192; non-causal +14-16% at 128, +4-6% at 384-1000, +0.5-2% at
  // 1024, 1.7% slower at 2048, 3.5-5% at 4096-8192 (docs/experiments/
  // 2026-11-27-session45.txt, section 1).
  if (c.oneShotLoads < 0)
    c.oneShotLoads = oneShotLoadsApply(c) && (s.causal || s.seqK <= 1024);
  // Two CTAs of 8 warps per SM at D=64 need 128 registers a thread; the
  // non-causal kernel with a ragged end's loop(s) took 129-139 and ran
  // one (H200 bench, bf16 TFLOP/s at N=2049/4097/8191: 310/360/390; with
  // the hint 443/496/516). The one-loop kernels take 127-128 without it and
  // slow down with it (ptxas gives N=1000 107 registers: 376 against 443).
  // Causal with run-time shapes took 129 (static: 128) and ran at 0.57-0.88x
  // the static kernel's speed (H200 bench, bf16, N=512..16k).
  if (c.minBlocksPerSM < 0)
    c.minBlocksPerSM = !wide && c.wgmma > 0 && c.warpSpecialize <= 0 &&
                               (!s.causal || c.staticShapes <= 0) &&
                               keyLoops(s, c) >= 2
                           ? 2
                           : 0;
  // Longest first over every head makes each round of persistent CTAs read
  // the K/V of ~130 heads: at causal N=2k, 2.7 TB/s from DRAM at a 40% L2
  // hit rate (ncu), against cuDNN's 0.76 TB/s at 75%. Smaller groups fix
  // that but unbalance fixed rounds (a round spans several lengths): same-run
  // H200 bench, causal D=128 bf16 TFLOP/s at N=512..16k, groups of 2:
  // 257/365/468/542/464/434; 8: 252/353/372/388/526/634; every head:
  // 236/323/411/559/634/665. Handed out dynamically, groups of 16 MiB of K/V
  // (16/8/4/2 heads at 2k/4k/8k/16k): 244/382/509/605/667/699 (another run:
  // fixed rounds over every head 237/325/413/561/639/677). The hardware
  // hands out the CTAs of a launch that is not persistent in the same way:
  // D=64 causal 197/289/364/418/451/454 in groups of 32 heads at 2k against
  // 187/265/337/410/450/470 over every head. At most 16: at N=512, groups
  // of 16 ran 264 against 244 in groups of 64 (no fewer bytes fit in L2);
  // at most 8 at D=128 (HeadGroups.cpp has the figures).
  if (c.headGroup <= 0)
    c.headGroup = forwardHeadGroup(c, s.seqK, s.headDim * dtypeSize(s.dtype),
                                   s.batch * s.heads);
  return c;
}

AttentionConfig resolveConfig(const AttentionShape &s, AttentionConfig c) {
  return resolve(s, c, /*useTuned=*/true);
}

AttentionConfig resolveUntunedConfig(const AttentionShape &s,
                                     AttentionConfig c) {
  return resolve(s, c, /*useTuned=*/false);
}

int64_t attentionSharedBytes(const AttentionShape &s,
                             const AttentionConfig &c) {
  const int64_t D = s.headDim, bn = c.blockN ? c.blockN : 128;
  // A stage holds one loop iteration's K and V: the widest loop's.
  int64_t stage = 2 * bn * D;
  if (narrowInDiagonal(s, c))
    stage = std::max(stage, 2 * (c.blockNDiagonal + c.blockNRaggedEnd) * D);
  int64_t elements = c.blockM * D + c.stages * stage;
  if (c.overlap > 0)
    elements += overlappedLoops(s, c) * bn * D;
  const int64_t bytes =
      elements * int64_t(dtypeSize(s.dtype)) + (c.wgmma > 0 ? 1024 : 0);
  // Under TMA the compiler stages O for a bulk store: in the bytes of Q and
  // the ring, whose last reader is the loop; persistent CTAs keep them live
  // across tiles where the staging tile still fits beside them, else the
  // producer waits for each tile's end and the staging tile takes Q's bytes.
  const int64_t staging = c.blockM * D * int64_t(dtypeSize(s.dtype));
  const int64_t withStaging =
      c.persistent > 0 && bytes + staging <= kHopperSharedBytes
          ? bytes + staging
          : std::max(bytes, 1024 + staging);
  const bool tmaStore = c.wgmma > 0 && c.tma != 0 && c.tmaStore != 0 &&
                        dtypeSize(s.dtype) == 2 &&
                        withStaging <= kHopperSharedBytes;
  return tmaStore ? withStaging : bytes;
}

} // namespace kiln::kernels
