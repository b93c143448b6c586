//===- SplitKeys.cpp - what the GPU's size decides: key ranges, tiles -----===//
//
// One program per row block leaves SMs idle where the programs are few
// (decoding, short queries on long keys) or fill their last wave poorly.
// Splitting the keys in S ranges multiplies the programs by S and divides
// each one's work by S; the combine kernel and each range's prologue cost
// more with S. The rule reads the wave use of P * S programs on the GPU's
// CTA slots (H200 sweeps: docs/experiments/2026-11-27-session46.txt).
// Where the keys are not split, decoding's programs may take small mma.sync
// tiles if there are enough of them to fill the SMs. Grouped heads' short
// non-causal queries run as rows of one head (groupedRowsShape).
//
//===----------------------------------------------------------------------===//
#include "UntunedConfig.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionTune.h"

#include <algorithm>

namespace kiln::kernels {

/// Ranges that keep fewer key blocks than this cost more in the combine
/// and the ranges' prologues than the extra programs gain.
static constexpr int64_t kMinBlocksPerRange = 4;
/// Below this wave use of the unsplit programs the keys are split ...
static constexpr double kSplitBelow = 0.8;
/// ... into the fewest ranges that reach this one, else the best.
static constexpr double kEnoughUse = 0.9;

/// The CTAs of `c` a Hopper SM's shared memory holds (228 KB, 1 KB reserved
/// per CTA).
static int64_t ctasBySharedMemory(const AttentionShape &s,
                                  const AttentionConfig &c) {
  const int64_t perSm = sharedMemoryLimit("sm_90a") + 1024;
  return std::max<int64_t>(1, perSm / (attentionSharedBytes(s, c) + 1024));
}

/// The forward's CTAs an SM holds: one with a producer warpgroup (whose
/// compute warpgroups raise their registers to 240); else by shared memory,
/// at most 2 (8 warps or more at over 64 registers a thread).
static int64_t ctasPerSm(const AttentionShape &s, const AttentionConfig &c) {
  if (c.warpSpecialize > 0)
    return 1;
  return std::min<int64_t>(ctasBySharedMemory(s, c), 2);
}

/// The unsplit forward's programs: one per row block of each (batch, head).
static int64_t programsOf(const AttentionShape &s, const AttentionConfig &c) {
  return (s.seqQ + c.blockM - 1) / c.blockM * s.batch * s.heads;
}

/// The fraction of `slots` CTA slots busy over the waves `programs` of one
/// length take.
static double waveUse(int64_t programs, int64_t slots) {
  const int64_t waves = (programs + slots - 1) / slots;
  return double(programs) / double(waves * slots);
}

/// With key lengths per batch (whose keys end anywhere in 1..Nk: a KV
/// cache's sequences), at least as many ranges (powers of two, each keeping
/// kMinBlocksPerRange key blocks) as make this many waves of programs: the
/// short sequences' ranges end at once and free their SMs for the long
/// ones' (docs/experiments/2026-11-29-session65.txt, calls 3 and 6: kiln bench
/// attention --key-lengths random --group 4 against split-keys=1..16, and
/// the same shapes with twice the K/V heads, where a rule of ranges of at
/// most 2048 keys lost up to 2x).
static constexpr double kLengthsWaves = 1.5;

/// defaultSplitKeys without key lengths' own rule.
static int64_t splitByWaves(const AttentionShape &s, const AttentionConfig &c,
                            int64_t sms) {
  const int64_t slots = sms * ctasPerSm(s, c), programs = programsOf(s, c),
                keyBlocks = (s.seqK + c.blockN - 1) / c.blockN;
  if (waveUse(programs, slots) >= kSplitBelow)
    return 1;
  int64_t best = 1;
  for (int64_t S = 2; keyBlocks >= S * kMinBlocksPerRange; S *= 2) {
    // A larger S only for a clearly better use (its costs grow with S).
    if (waveUse(programs * S, slots) > waveUse(programs * best, slots) * 1.05)
      best = S;
    if (waveUse(programs * best, slots) >= kEnoughUse)
      break;
  }
  return best;
}

int64_t defaultSplitKeys(const AttentionShape &s, const AttentionConfig &config,
                         int64_t sms) {
  if (s.causal || sms <= 0)
    return 1;
  const AttentionConfig c = resolveConfig(s, config);
  int64_t S = splitByWaves(s, c, sms);
  if (s.keyLengths) {
    const int64_t slots = sms * ctasPerSm(s, c), programs = programsOf(s, c),
                  keyBlocks = (s.seqK + c.blockN - 1) / c.blockN;
    while (double(programs * S) < kLengthsWaves * double(slots) &&
           keyBlocks >= 2 * S * kMinBlocksPerRange)
      S *= 2;
  }
  return S;
}

int64_t splitKeysOf(const AttentionShape &s, const AttentionConfig &config,
                    int64_t sms) {
  if (config.splitKeys < 0)
    return defaultSplitKeys(s, config, sms);
  return std::max<int64_t>(config.splitKeys, 1);
}

/// Decoding's small tiles (AttentionConfig::smallTiles) need this many
/// waves' worth of programs on their CTA slots: fewer leave the SMs short of
/// warps to stream K and V (or need the keys split, which measured no
/// better than wgmma's split on an H200: docs/experiments/
/// 2026-11-28-session51.txt).
static constexpr double kSmallTilesFrom = 0.48;
/// They need this many DRAM bytes a second per SM: where the memory is
/// slower for the SMs, the wgmma kernel streams K and V as fast.
static constexpr double kSmallTilesFromBandwidthPerSm = 30e9;

/// Whether the forward for `s` under `c` (its keys' ranges decided) takes
/// decoding's small mma.sync tiles by default on `sms` SMs: at most 16
/// queries on at least 1024 keys, not causal, keys not split, the tiles and
/// the tensor-core path left to the defaults, programs for 48% of the small
/// tiles' CTA slots (4 an SM by shared memory: 254 on 132 SMs), no tuned
/// config for the shape on this GPU, and 30 GB/s of DRAM bandwidth an SM
/// (H200: 4.8 TB/s on 132 SMs, 36; H100 SXM: 3.35 TB/s, 25). Same process,
/// bf16, small tiles against the default (kiln bench attention --against
/// small-tiles=0|1, 1-16 queries on 1024-32768 keys): D=64 4.3-6.5% faster
/// at B*H = 512 and 2048 on an H200 (docs/experiments/
/// 2026-11-27-session48.txt), 1.1-1.7% slower at B*H = 512-1024 on an H100
/// (2026-11-28-session50.txt); D=128 (16 rows, 32-key blocks) 2.4-6.5%
/// faster at B*H = 256-2048 on an H200 (two calls), 0.6% faster to 1.4%
/// slower on an H100 (2026-11-28-session49.txt); at B*H = 256 (half their
/// slots busy, keys not split) on an H200, 1-16 queries on 1024-8192 keys,
/// D=128 1.5-8% faster, D=64 0-4.5% (2026-11-28-session51.txt); 32-row tiles
/// ran 14-28% slower at B*H = 128 (session 48).
static bool smallTilesByDefault(const AttentionShape &s,
                                const AttentionConfig &c, int64_t sms,
                                double memoryBandwidth, bool useTuned) {
  if (s.causal || sms <= 0 || c.splitKeys > 1 || c.blockM || c.blockN ||
      c.warps || c.wgmma >= 0 || dtypeSize(s.dtype) != 2 || !isDecoding(s) ||
      s.seqK < 1024)
    return false;
  if (memoryBandwidth < kSmallTilesFromBandwidthPerSm * double(sms))
    return false;
  // `kiln tune` timed the small tiles against wgmma on this GPU: its winner
  // decides (resolveConfig takes it).
  if (useTuned && tunedAttentionConfig(s))
    return false;
  AttentionConfig small = c;
  small.smallTiles = 1;
  small = resolveConfig(s, small);
  return double(programsOf(s, small)) >=
         kSmallTilesFrom * double(sms * ctasBySharedMemory(s, small));
}

AttentionConfig launchConfig(const AttentionShape &s,
                             const AttentionConfig &config, int64_t sms,
                             double memoryBandwidth) {
  AttentionConfig c = config;
  c.splitKeys = int(splitKeysOf(s, config, sms));
  if (c.smallTiles < 0)
    c.smallTiles = smallTilesByDefault(s, c, sms, memoryBandwidth,
                                       /*useTuned=*/true);
  return c;
}

// H200, GPU time of the same kernels packed by hand against not, bf16, H=32
// (docs/experiments/2026-11-29-session64.txt). Forward, D=128: Hk=8, Nq=1 or
// 4, B=4..64 at 2k-32k keys 1.50-2.75x, B=16 Nk=8192 Nq=1 Hk=1/2/4
// 7.9/5.5/3.3x; Nq=32 2.41x, 64 1.57x; 128 and 256 0.99x, prefill (Nq = Nk
// >= 1000, D=64/128) 0.99-1.06x. Forward and backward, Hk=8, Nk 1024-4096:
// Nq 1-16 1.26-1.75x at D=128, 2.2x at D=64; Nq=64 1.01-1.02x (D=64 1.51x),
// Nq=100 1.07-1.10x. Hence below one 128-row block a head.
static constexpr int64_t kGroupedRowsBelow = 128;

std::optional<AttentionShape> groupedRowsShape(const AttentionShape &s) {
  if (s.causal || s.kvHeads <= 0 || s.kvHeads >= s.heads ||
      s.heads % s.kvHeads || s.seqQ <= 0 || s.seqQ >= kGroupedRowsBelow)
    return std::nullopt;
  AttentionShape p = s;
  p.seqQ = s.seqQ * (s.heads / s.kvHeads);
  p.heads = s.kvHeads;
  p.kvHeads = 0;
  return p;
}

AttentionConfig untunedDefaultConfig(const AttentionShape &s, int64_t sms,
                                     double memoryBandwidth) {
  AttentionConfig c;
  c.splitKeys = 1;
  c.smallTiles = smallTilesByDefault(s, c, sms, memoryBandwidth,
                                     /*useTuned=*/false);
  return resolveUntunedConfig(s, c);
}

} // namespace kiln::kernels
