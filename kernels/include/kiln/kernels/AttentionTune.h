//===- AttentionTune.h - attention's Config space for the autotuner -*- C++
//-*-===//
#ifndef KILN_KERNELS_ATTENTIONTUNE_H
#define KILN_KERNELS_ATTENTIONTUNE_H

#include "kiln/Compiler/Autotune.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"

#include <optional>
#include <string>

namespace kiln::kernels {

/// "blockM=128 blockN=64 warps=4 stages=2 reloadIds=1" and back. parse
/// throws kiln::Error naming a bad field.
std::string configString(const AttentionConfig &c);
AttentionConfig parseConfigString(const std::string &text);

/// Decoding: at most 16 queries on more keys. It tunes in a bucket of its
/// own, and launchConfig's small tiles are for it.
bool isDecoding(const AttentionShape &s);

/// Shapes tuned alike: head dim, causal, decoding (at most 16 queries on
/// more keys: "Nq<=16") or not, and max(Nq, Nk) rounded up to a power of two
/// (at least 512). Batch and heads do not split buckets.
std::string attentionTuneBucket(const AttentionShape &s);

/// The space searched: blockM {64, 128} x blockN {32, 64, 128} x warps
/// {4, 8} x stages {2, 3} x thread-id reload {0, 1}, with blockM >= 16 per
/// warp; for decoding, first, the small mma.sync tiles (16 rows on one warp
/// or 32 on two, blockN {32, 64}, stages {2, 3, 4}); each with its
/// shared-memory and accumulator-register estimates.
std::vector<TuneCandidate> attentionCandidates(const AttentionShape &s);

/// The forward's config for `s` on a GPU of `sms` SMs and `memoryBandwidth`
/// DRAM bytes a second as launchConfig resolves it with no tuned record, keys
/// not split (SplitKeys.cpp). tuneAttention times it first, whatever the
/// budget (TuneCandidate::baseline), so that no recorded winner is slower
/// than the schedule it replaces.
AttentionConfig untunedDefaultConfig(const AttentionShape &s, int64_t sms,
                                     double memoryBandwidth);

/// Tunes attention for `s` (its batch and heads give the timed problem):
/// random inputs in rotating buffer sets, the winner checked against the
/// NVRTC reference on fresh inputs with poisoned outputs. The untuned
/// default first; for decoding the small tiles before the square tiles.
TuneResult tuneAttention(const AttentionShape &s, const TuneOptions &options);

/// The tuned config recorded for `s` on this GPU, if any.
std::optional<AttentionConfig> tunedAttentionConfig(const AttentionShape &s);

/// The backward's config as "deterministic=0 blockM=64 blockN=64 ..." and
/// back (TuneBackward.cpp).
std::string backwardConfigString(const AttentionBackwardConfig &c);
AttentionBackwardConfig parseBackwardConfigString(const std::string &text);
/// "backward " + attentionTuneBucket(s).
std::string attentionBackwardTuneBucket(const AttentionShape &s);
/// The backward's space: dQ by its own kernel (dqBlockM {64, 128}) or by
/// atomics, x blockN {64, 128} x blockM {64, 128} x stages {2, 3}; each
/// candidate the whole sequence of kernels.
std::vector<TuneCandidate> attentionBackwardCandidates(const AttentionShape &s);
/// Tunes the backward for `s` (resolveBackwardConfig's untuned default
/// first, whatever the budget): the sequences timed on the same rotating
/// inputs (O and LSE from the forward), the winner checked against the fp64
/// reference on a small problem of the same size classes.
TuneResult tuneAttentionBackward(const AttentionShape &s,
                                 const TuneOptions &options);
/// The tuned backward config recorded for `s` on this GPU, if any.
std::optional<AttentionBackwardConfig>
tunedAttentionBackwardConfig(const AttentionShape &s);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTIONTUNE_H
