//===- SplitKeys.cpp - how many key ranges the forward splits into --------===//
//
// One program per row block leaves SMs idle where the programs are few
// (decoding, short queries on long keys) or fill their last wave poorly.
// Splitting the keys in S ranges multiplies the programs by S and divides
// each one's work by S; the combine kernel and each range's prologue cost
// more with S. The rule reads the wave use of P * S programs on the GPU's
// CTA slots (H200 sweeps: docs/experiments/2026-11-27-session46.txt).
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"

#include <algorithm>

namespace kiln::kernels {

/// Ranges that keep fewer key blocks than this cost more in the combine
/// and the ranges' prologues than the extra programs gain.
static constexpr int64_t kMinBlocksPerRange = 4;
/// Below this wave use of the unsplit programs the keys are split ...
static constexpr double kSplitBelow = 0.8;
/// ... into the fewest ranges that reach this one, else the best.
static constexpr double kEnoughUse = 0.9;

/// The forward's CTAs an SM holds: one with a producer warpgroup (whose
/// compute warpgroups raise their registers to 240); else by shared memory
/// (a Hopper SM's 228 KB, 1 KB reserved per CTA), at most 2 (8 warps or
/// more at over 64 registers a thread).
static int64_t ctasPerSm(const AttentionShape &s, const AttentionConfig &c) {
  if (c.warpSpecialize > 0)
    return 1;
  const int64_t perSm = sharedMemoryLimit("sm_90a") + 1024;
  return std::clamp<int64_t>(perSm / (attentionSharedBytes(s, c) + 1024), 1,
                             2);
}

/// The fraction of `slots` CTA slots busy over the waves `programs` of one
/// length take.
static double waveUse(int64_t programs, int64_t slots) {
  const int64_t waves = (programs + slots - 1) / slots;
  return double(programs) / double(waves * slots);
}

int64_t defaultSplitKeys(const AttentionShape &s, const AttentionConfig &config,
                         int64_t sms) {
  if (s.causal || sms <= 0)
    return 1;
  const AttentionConfig c = resolveConfig(s, config);
  const int64_t slots = sms * ctasPerSm(s, c),
                programs =
                    (s.seqQ + c.blockM - 1) / c.blockM * s.batch * s.heads,
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

int64_t splitKeysOf(const AttentionShape &s, const AttentionConfig &config,
                    int64_t sms) {
  if (config.splitKeys < 0)
    return defaultSplitKeys(s, config, sms);
  return std::max<int64_t>(config.splitKeys, 1);
}

} // namespace kiln::kernels
