//===- Attention.h - flash-attention forward in kiln's DSL ------*- C++ -*-===//
#ifndef KILN_KERNELS_ATTENTION_H
#define KILN_KERNELS_ATTENTION_H

#include "kiln/Compiler/Kernel.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::kernels {

/// The problem one attention kernel is built for. Q and O are (batch,
/// heads, seq, headDim) tensors with any strides, K and V (batch, kvHeads,
/// seq, headDim); LSE is (batch, heads, seqQ) fp32 and holds the
/// natural-log logsumexp of each row of scaled scores, for a backward pass.
struct AttentionShape {
  int64_t batch = 1, heads = 1, seqQ = 128, seqK = 128, headDim = 64;
  bool causal = false; ///< query i attends to keys j <= i
  DType dtype = DType::bf16;
  double scale = 0; ///< 0: 1/sqrt(headDim)
  /// K and V's heads (grouped-query attention: query head h reads K/V head
  /// h / (heads / kvHeads)), a divisor of heads; 0: heads. The group size
  /// heads / kvHeads is compiled in; with run-time shapes, H and B are not.
  int64_t kvHeads = 0;
  /// Keys per batch read from a `KLengths` tensor (B i32): batch b attends
  /// to its first L = KLengths[b] keys of Nk (a KV cache whose sequences
  /// hold different numbers of tokens), clamped to [0, Nk]; a row of no keys
  /// gets O = 0 and a logsumexp of -inf. Causal, the queries are the last Nq
  /// positions of the L (aligned at the bottom right: query i sees keys
  /// j <= L - Nq + i; a chunk of new tokens, their keys already in the
  /// cache). Run-time shapes, forward.
  bool keyLengths = false;
};

/// Query heads per K/V head (1 without grouped heads).
inline int64_t queryHeadsPerKv(const AttentionShape &s) {
  return s.kvHeads > 0 ? s.heads / s.kvHeads : 1;
}

/// Schedule: tile sizes, warps, pipeline stages, the tensor-core path and
/// register-pressure hints. Zero / -1 pick the defaults measured on an H200:
/// wgmma, 128x64 blocks, 8 warps (two warpgroups of 64 rows), 2 stages,
/// thread ids re-read in the loop at D=128 non-causal. Under mma.sync
/// (wgmma = 0): 4 warps, and 128x32 at D=128 causal.
struct AttentionConfig {
  int64_t blockM = 0, blockN = 0;
  /// warps 0: 8 under wgmma, else 4 (blockM / 16 for small tiles); stages
  /// 0: 2 (3 for small tiles).
  int warps = 0, stages = 0;
  /// Decoding (a few queries on long keys, keys not split): mma.sync tiles
  /// of 16 rows on one warp, 64-key blocks at D=64 and 32-key ones at
  /// D=128, three stages, each field taken where the config leaves it unset:
  /// 1 yes, 0 no, -1 default (launchConfig decides it from the GPU's SMs
  /// and memory bandwidth; resolveConfig alone reads -1 as no).
  int smallTiles = -1;
  int reloadThreadIds = -1;  ///< -1: default, 0: no, 1: yes
  /// K/V copy destinations: 1 one full offset per register, 0 base plus
  /// constants; -1: 1 for non-causal D=128, else 0 (measured on the H200).
  int copyAddressesPerRegister = -1;
  int64_t blockNDiagonal = 0; ///< causal: key block on the diagonal; 0: blockN
  /// Run-time non-causal Nk that is not whole key blocks: the keys of a
  /// narrower masked end step, taken (in a loop of its own) when the ragged
  /// keys fit in it, else one blockN step; 0: default (32 under wgmma but
  /// for a non-causal end in the main loop, else blockN: no narrower step).
  int64_t blockNRaggedEnd = 0;
  /// There, a ragged end wider than blockNRaggedEnd as the main key loop's
  /// last step (every step of it masked; a check per thread skips the mask
  /// where all its keys are in bounds) rather than a loop of its own: 1 yes,
  /// 0 no, -1 default (yes at D=64 under wgmma without a producer warpgroup).
  int raggedEndInLoop = -1;
  /// Under overlap, the masked key block first, its P·V in the first
  /// iteration of the loop over the whole blocks (kiln-overlap-dots makes
  /// the two loops one), instead of a masked step after that loop: causal,
  /// the diagonal block (where it is as tall as the row block); non-causal
  /// with run-time Nk that is not whole key blocks, the ragged block (the
  /// blocks then end at Nk: the first starts before key 0). 1 yes, 0 no, -1
  /// default (no).
  int maskedBlockFirst = -1;
  /// Causal, run-time shapes, Nk not whole key blocks: when Nq % blockM is
  /// 1 to blockNRaggedEnd rows, the row blocks end at Nq instead of starting
  /// at 0, so that the short block is the first (which sees the fewest
  /// keys) rather than the last (which sees them all); each other block
  /// then takes the Nq % blockM keys left of its diagonal in one narrow
  /// masked step. 1 yes, 0 no, -1 default (yes at D=128 where
  /// blockNRaggedEnd < blockN, blockM >= 128 and the diagonal block does not
  /// go first; no at D=64, where it measured slower).
  int alignRowsToEnd = -1;
  /// There, the narrow keys left of a shifted block's diagonal in the
  /// diagonal's first step (both key tiles' scores in one online-softmax
  /// update) rather than in a masked step of their own: 1 yes, 0 no, -1
  /// default (yes where the stage ring, which then holds the narrow K and V
  /// besides the diagonal's, fits in shared memory).
  int narrowStepInDiagonal = -1;
  /// Causal: launch order of the row blocks. 0: each head's blocks longest
  /// first, one head after another; 1: the longest blocks of every head in
  /// a group of `headGroup` (batch, head) pairs first, one group after
  /// another; -1: default (1).
  int longestFirstGlobally = -1;
  /// Dots on Hopper's warpgroup MMA (sm_90a; elsewhere mma.sync, as the
  /// lowering report says): 1 yes, 0 no (mma.sync), -1 default (yes).
  int wgmma = -1;
  /// K/V through TMA (tensor maps and mbarriers) under wgmma rather than
  /// cp.async: 1 yes, 0 no, -1 default (yes under wgmma).
  int tma = -1;
  /// Warp roles under TMA: 1 a producer warpgroup issues the copies and the
  /// `warps` compute; 0 (and -1, the default) every warp does both.
  int warpSpecialize = -1;
  /// With the producer warpgroup: the two compute warpgroups take turns
  /// issuing Q·Kᵀ (named barriers), one's softmax beside the other's MMAs:
  /// 1 yes, 0 no, -1 default (yes with the producer warpgroup and 8 warps).
  int pingpong = -1;
  /// P·V one iteration behind, issued after the next Q·Kᵀ, so that the
  /// softmax overlaps it (kiln-overlap-dots): 1 yes, 0 no, -1 default (yes
  /// at D=128 under TMA from N=2k, causal from 8k, with a producer
  /// warpgroup).
  int overlap = -1;
  /// Under overlap, a key loop with no masked block before it as its first
  /// iteration (non-causal whole key blocks) starts with its first step
  /// peeled (KernelBuilder::setPeelFirstIteration), whose P·V then runs in
  /// the loop's first iteration instead of the dot of a zero tile: 1 yes, 0
  /// no, -1 default (yes non-causal with whole key blocks up to 2048 keys).
  int peelFirstStep = -1;
  /// Persistent CTAs (KernelBuilder::setPersistent): as many as the GPU
  /// runs at once, each looping over row blocks in launch order, the
  /// producer warpgroup fetching the next block's K/V while this one ends:
  /// 1 yes, 0 no, -1 default.
  int persistent = -1;
  /// Causal, longest first: (batch, head) pairs per group; the CTAs running
  /// at once then read the K/V of fewer heads, which L2 can hold. 0: as many
  /// as have 16 MiB of K/V (1 to 16, to 8 at D=128 in 16 bits) where blocks
  /// are handed out as CTAs free up (dynamic tiles, or not persistent), else
  /// every pair.
  int64_t headGroup = 0;
  /// Persistent with the producer warpgroup: row blocks handed out to CTAs
  /// as they become free (KernelBuilder::setDynamicTiles) rather than in
  /// fixed rounds: 1 yes, 0 no, -1 default (yes when causal).
  int dynamicTiles = -1;
  /// O through TMA (KernelBuilder::setTmaStores) where its staging tile fits
  /// in shared memory: 1 yes, 0 no, -1 default (with TMA).
  int tmaStore = -1;
  /// Where a row block ends past Nq (or starts before row 0), a compute
  /// warpgroup whose rows all lie outside skips the key loops' work, keeping
  /// only their waits and releases (the compiler's dead-row skip): 1 yes, 0
  /// no, -1 default (yes).
  int skipDeadRows = -1;
  /// Shapes: 1 compiles B, H, Nq and Nk in (a compile per shape); 0 makes
  /// them run-time arguments bound from the tensors (one compile per class:
  /// head dim, causal, dtype, schedule, whether Nk is a whole number of key
  /// blocks, and the values' specialisation classes); -1 default (0).
  int staticShapes = -1;
  /// CTAs per SM ptxas keeps registers for (KernelBuilder::setMinBlocksPerSM):
  /// 0 no hint, -1 default (2 at D=64 non-causal under wgmma without a
  /// producer warpgroup where a ragged end takes a loop of its own).
  int minBlocksPerSM = -1;
  /// Without a producer warpgroup, Q by TMA once, waited for after the key
  /// loop's first copies rather than loaded to registers before them
  /// (KernelBuilder::setOneShotLoads): 1 yes, 0 no, -1 default (causal, and
  /// non-causal up to 1024 keys; resolveConfig gives the figures).
  int oneShotLoads = -1;
  /// Non-causal: the keys split into this many ranges of whole key blocks,
  /// one program per (row block, range), each writing its rows' O and
  /// logsumexp in fp32; a second kernel combines them (flash-decoding: for
  /// few row blocks, decoding or short queries on long keys, where one
  /// program per row block leaves SMs idle). 1 (and 0) no split; -1 default:
  /// defaultSplitKeys for the GPU attentionForwardKernels is given, none
  /// without one. Built by attentionForwardKernels; attentionForward refuses
  /// S > 1 and reads -1 as no split.
  int splitKeys = -1;
};

/// Throws kiln::Error naming the problem when `shape` is out of range (sizes
/// < 1, D not 64 or 128, kvHeads not a divisor of heads, extents past
/// kiln's 32-bit index width); every
/// function below checks it first.
void checkAttentionShape(const AttentionShape &shape);

/// The config with its zero fields filled in for `shape`. With blockM and
/// blockN both 0, the config `kiln tune` recorded for this GPU and the
/// shape's bucket is taken first (tile sizes, warps, stages, reload).
AttentionConfig resolveConfig(const AttentionShape &shape,
                              AttentionConfig config);

/// Dynamic shared memory the kernel takes under `config` (blockN 0 reads as
/// 128): Q resident, K and V `stages` deep, V for the dot after each loop
/// under `overlap` (two loops when causal or seqK is not a multiple of the
/// key block), a 1 KB block of TMA
/// mbarriers under wgmma, and O's staging tile for a TMA store where it
/// fits. A lower bound where layout conversions go through shared memory.
int64_t attentionSharedBytes(const AttentionShape &shape,
                             const AttentionConfig &config);

/// Whether the kernel for `shape` under the resolved `config` aligns its
/// row blocks to the end (AttentionConfig::alignRowsToEnd): causal, run-time
/// shapes, Nk not whole key blocks. It then shifts them when Nq % blockM is
/// 1 to blockNRaggedEnd (a run-time choice) and has a narrow key loop for
/// the keys left of each shifted block's diagonal.
bool rowsAlignedToEnd(const AttentionShape &shape,
                      const AttentionConfig &config);
/// Whether that kernel takes the narrow keys in the diagonal's first step
/// (AttentionConfig::narrowStepInDiagonal).
bool narrowInDiagonal(const AttentionShape &shape,
                      const AttentionConfig &config);
/// Whether that kernel takes its masked key block before the whole ones
/// (AttentionConfig::maskedBlockFirst, under overlap): causal with rows not
/// aligned to the end, the diagonal block (as tall as the row block);
/// non-causal with run-time Nk not whole key blocks, the ragged one.
bool diagonalFirst(const AttentionShape &shape, const AttentionConfig &config);
bool raggedEndFirst(const AttentionShape &shape, const AttentionConfig &config);
/// Whether one-shot loads can apply under the resolved `config`: no
/// producer warpgroup and no persistent CTAs (under them Q is the
/// producer's, and AttentionConfig::oneShotLoads changes nothing).
bool oneShotLoadsApply(const AttentionConfig &config);

/// Checks the shape (D in {64, 128}, float dtype, positive sizes) and builds
/// the kernel; throws kiln::Error naming the bad field. With run-time shapes
/// (the default) the kernel serves every B, H, Nq and Nk of the shape's
/// class: its B, H, Nq and Nk arguments are bound from the tensors
/// (Kernel::bind), and Nk must be a whole number of key blocks where
/// s.seqK is one.
Kernel attentionForward(const AttentionShape &shape,
                        const AttentionConfig &config = {});

/// One workspace tensor, contiguous: its name (as the kernels bind it), type
/// and shape, and where it starts in the workspace's one allocation (in
/// 4-byte elements, 16-byte aligned).
struct WorkspaceTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t offset;
};

/// Workspace tensors in one allocation of `elements` 4-byte elements.
struct Workspace {
  std::vector<WorkspaceTensor> tensors;
  int64_t elements = 0;
  /// Each tensor at its offset from `base`, an allocation of `elements`
  /// 4-byte elements.
  std::map<std::string, TensorRef> refs(void *base) const;

protected:
  /// Appends a tensor, the next one 16-byte aligned.
  void add(const char *name, DType dtype, std::vector<int64_t> shape);
};

/// attention_fwd_split's workspaces for `shape` and `ranges` key ranges:
/// OSplit fp32 (S, B, H, Nq, D) and LSESplit fp32 (S, B, H, Nq). Every
/// caller that allocates or binds them (the benchmark, `kiln run`, the
/// tests) takes them from here.
struct SplitKeysWorkspace : Workspace {
  SplitKeysWorkspace(const AttentionShape &shape, int64_t ranges);
};

/// The key ranges the forward splits into by default on a GPU of `sms` SMs
/// (SplitKeys.cpp): 1 where causal, or where its P programs (row blocks x B
/// x H) keep the CTA slots at least 80% busy over their waves; else the
/// fewest of 2, 4, 8, ... that reach 90% (each range keeping at least 4 key
/// blocks). With key lengths, at least as many as make 1.5 waves of
/// programs (the batches' lengths differ). `sms` 0: 1.
int64_t defaultSplitKeys(const AttentionShape &shape,
                         const AttentionConfig &config, int64_t sms);

/// Non-causal grouped heads (kvHeads < heads) with under 128 queries a head
/// (decoding, short chunks): the Hk-head problem of G·Nq rows a head, G =
/// heads / kvHeads, whose head hk row g·Nq + n is query head hk·G + g's row
/// n. It computes the same O and LSE (exact without a causal mask, whose rows
/// would see other keys) and each of its programs reads its K/V head once,
/// not G programs each: 1.3-7.9x faster there on the H200 (SplitKeys.cpp).
/// Callers run it where their tensors' rows of a group are evenly spaced (a
/// view): the C API, kiln run and kiln bench. nullopt elsewhere.
std::optional<AttentionShape> groupedRowsShape(const AttentionShape &shape);

/// The forward's kernels in launch order (under launchConfig's config for
/// `sms` SMs and `memoryBandwidth`): attentionForward's alone, or, with S > 1
/// key ranges (config.splitKeys, or with -1 defaultSplitKeys on `sms` SMs),
/// attention_fwd_split (Q, K, V; the SplitKeysWorkspace's
/// OSplit and LSESplit, which it writes whole) then attention_fwd_combine
/// (OSplit, LSESplit; O, LSE). Each binds the tensors it takes
/// (Kernel::tensorsIn); splitKeysOf says how many ranges they take.
std::vector<Kernel> attentionForwardKernels(const AttentionShape &shape,
                                            const AttentionConfig &config = {},
                                            int64_t sms = 0,
                                            double memoryBandwidth = 0);
/// The ranges attentionForwardKernels splits the keys into (1: none).
int64_t splitKeysOf(const AttentionShape &shape, const AttentionConfig &config,
                    int64_t sms = 0);
/// `config` with what the GPU decides filled in, as attentionForwardKernels
/// launches it: splitKeys (splitKeysOf on `sms` SMs) and, left at -1,
/// smallTiles (decoding's small tiles where the keys are not split, their
/// programs fill half their CTA slots or more and `kiln tune` recorded no
/// winner for the shape,
/// only where `memoryBandwidth`, DRAM bytes a second as cuda::DeviceInfo
/// gives it, is high for the SM count; 0: unknown, no small tiles.
/// SplitKeys.cpp gives the rule). `sms` 0: neither.
AttentionConfig launchConfig(const AttentionShape &shape,
                             const AttentionConfig &config, int64_t sms = 0,
                             double memoryBandwidth = 0);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_H
