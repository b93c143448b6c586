//===- AttentionBackward.h - flash-attention backward in the DSL -*- C++
//-*-===//
//
// The gradients of attention, as DSL kernels launched in order:
//   delta: a workspace Stats, fp32 (B, H, 2, statsRowLength(Nq)),
//          contiguous: LSE·log2(e) and Delta = rowsum(dO ∘ O) per query
//          (with foldStatistics also FoldedStats, the same as bf16 parts
//          that the dK/dV kernel's dots add);
//   dkdv:  a program per block of keys walks the query blocks, recomputes
//          Pᵀ from K·Qᵀ and the forward's LSE, and accumulates
//          dV += Pᵀ·dO and dK += dSᵀ·Q with dSᵀ = Pᵀ ∘ (V·dOᵀ − Delta)
//          (or two such kernels, one for each);
//   dq:    a program per block of queries walks the key blocks and
//          accumulates dQ += dS·K.
// In the deterministic mode every gradient is written by one program, with
// no atomics: the result is the same bit for bit on every run. Otherwise the
// dK/dV kernel also adds its part of dQ, dS·K, into an fp32 workspace
// dQaccum (B, H, Nq, D) with atomics (TMA bulk reductions on sm_90a), the
// first kernel zeroes it and a last one, dq_convert, scales and converts it
// (or, with convertDqLast, the dK/dV program that finishes last for its
// (batch, head) converts that head's rows). With overlapDqConvert,
// dq_convert runs beside the dK/dV kernel's last programs, each head's rows
// once that head's programs are done.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTIONBACKWARD_H
#define KILN_KERNELS_ATTENTIONBACKWARD_H

#include "kiln/kernels/Attention.h"

#include <map>
#include <string>
#include <vector>

namespace kiln::kernels {

/// Schedule of the backward kernels; zero / -1 pick the defaults.
struct AttentionBackwardConfig {
  /// dK/dV: blockN keys per program (0: 64; 128 with atomics at D = 128 or
  /// with scoresByQueries or foldStatistics at D <= 64), the queries in
  /// steps of blockM (0: 64; 128 with either at D <= 64).
  int64_t blockM = 0, blockN = 0;
  /// dQ: dqBlockM queries per program (0: 64), the keys in steps of
  /// dqBlockN (0: 64).
  int64_t dqBlockM = 0, dqBlockN = 0;
  /// dK/dV's warps; 0: a warpgroup per 64 of its blockN rows under wgmma,
  /// else 4.
  int warps = 0, stages = 2;
  int dqWarps = 0; ///< the dQ kernel's; 0: as above from dqBlockM
  /// Dots on Hopper's warpgroup MMA (sm_90a): 1 yes, 0 mma.sync, -1 yes.
  int wgmma = -1;
  /// Q, dO (dK/dV) and K, V (dQ) through TMA under wgmma: -1 yes.
  int tma = -1;
  /// A producer warpgroup issues the TMA copies: 1 yes, 0 no, -1 where
  /// measured faster (with dQ by atomics: one-warpgroup programs, two CTAs
  /// per SM, at D=64; programs of two warpgroups at D=128).
  int warpSpecialize = -1;
  /// Under the producer warpgroup: the compute warpgroups take turns on
  /// each loop's first dot (KernelBuilder::setPingpong): 1 yes, 0 no, -1
  /// where measured faster (non-causal scores by queries).
  int pingpong = -1;
  /// Each loop's last dot one iteration behind (kiln-overlap-dots): 1 yes,
  /// 0/-1 no.
  int overlap = -1;
  /// CTAs per SM ptxas keeps registers for; 0 no hint, -1 2 under the
  /// default producer warpgroup.
  int minBlocksPerSM = -1;
  /// dK and dV by two kernels (each with one accumulator, fewer registers)
  /// rather than one: 1 yes, 0/-1 no.
  int separateDkDv = -1;
  /// 1: dQ by a kernel of its own (no atomics: the same bits on every run);
  /// 0: the dK/dV kernel adds dS·K into an fp32 workspace with atomics and a
  /// last kernel converts it; -1 whichever measured faster (0, but 1 for
  /// causal D = 128 up to 768 keys).
  int deterministic = -1;
  /// 1 compiles B, H, Nq and Nk in; 0 (and -1) run-time arguments.
  int staticShapes = -1;
  /// dK/dV on persistent CTAs (its producer warpgroup fetches the next
  /// tile's K and V during this one's end): 1 yes, 0 no, -1 where measured
  /// faster (programs of two warpgroups: D=128 at every length, D=64
  /// non-causal at every length, D=64 causal up to 4096 keys; one
  /// warpgroup: causal D=64 up to 2048 keys; docs/experiments/
  /// 2026-11-26-session29.txt and earlier); dynamicTiles hands the tiles out
  /// from a counter (1, -1 with persistent), else in rounds.
  int persistent = -1, dynamicTiles = -1;
  /// dK/dV: K and V, loop-invariant left operands of the loop's first two
  /// dots, read into registers once (KernelBuilder::setInvariantAInRegisters)
  /// so that those MMAs read only Q and dO from shared memory: 1 yes, 0 no,
  /// -1 where measured faster (D = 64; at D = 128 the registers spill).
  int kvInRegisters = -1;
  /// dK/dV's scores as S = Q·Kᵀ (a thread's LSE and Delta one per row of
  /// its accumulator; P and dS staged in shared memory for dV's and dK's
  /// dots) rather than Sᵀ = K·Qᵀ (one per column; only dSᵀ staged): 1 yes,
  /// 0 no, -1 where measured faster (D = 64 with dQ by atomics, in 128x128
  /// steps; causal from 2048 keys; only where blockM, blockN and warps are
  /// left to the defaults, and without foldStatistics, which is faster).
  /// With it, blockM and blockN default to 128 at D <= 64.
  int scoresByQueries = -1;
  /// dK/dV in Sᵀ: LSE and Delta added by the Sᵀ and dPᵀ dots themselves, one
  /// more k16 step of each that reads them from a tile the delta kernel
  /// writes (FoldedStats), instead of a thread holding one of each per
  /// column of its accumulator: 1 yes, 0 no, -1 where measured faster (dQ
  /// by atomics; at D = 64 the default's 128x128 steps, causal or not, then
  /// take Sᵀ).
  int foldStatistics = -1;
  /// Causal dK/dV: the key blocks that see the most queries first, per
  /// group of headGroup (batch, head) pairs (0: those whose Q and dO take
  /// 16 MiB, 1 to 16, to 8 at D=128 in 16 bits; with grouped heads, pairs
  /// of a K/V head, that lowered to a divisor of the pairs down to half of
  /// it), on a 1-D grid: 1 yes, 0 no, -1 where measured faster.
  int longestFirst = -1;
  int64_t headGroup = 0;
  /// The dK/dV and dQ loops re-read the thread id in their bodies
  /// (KernelBuilder::setReloadThreadIds): 1 yes, 0 no, -1 under wgmma.
  int reloadThreadIds = -1;
  /// dK/dV written from a staging tile in shared memory by TMA
  /// (KernelBuilder::setTmaStores) rather than from registers: 1 yes, 0 no,
  /// -1 under wgmma and TMA with dQ by atomics.
  int tmaStore = -1;
  /// With dQ by atomics: the dK/dV program that arrives last at its
  /// (batch, head)'s counter (kiln::dsl::arrive) converts that head's dQ,
  /// from L2, while other programs still run: 1 yes, 0 a dq_convert kernel
  /// after the dK/dV kernel, -1 where measured faster (0: 1 was slower at
  /// every shape measured).
  int convertDqLast = -1;
  /// With dQ by atomics and a dq_convert kernel: every dK/dV program arrives
  /// at its (batch, head)'s counter (on persistent CTAs one program late,
  /// without waiting for its bulk reductions), and dq_convert starts before
  /// the dK/dV kernel ends (programmatic dependent launch, sm_90), on the
  /// SMs its CTAs leave, converting each head once all its programs have
  /// arrived: 1 yes, 0 after the dK/dV kernel, -1 where measured faster.
  int overlapDqConvert = -1;
};

/// The kernels in launch order: attention_bwd_delta, attention_bwd_dkdv
/// (or attention_bwd_dk and attention_bwd_dv), attention_bwd_dq (or, with
/// atomics, attention_bwd_dq_convert unless convertDqLast). Their tensors:
/// Q, K, V, O (the forward's output), dO, LSE (the forward's), Stats (fp32
/// (B, H, 2, statsRowLength(Nq)) with a contiguous last dimension, a
/// workspace the first kernel writes), dQaccum (fp32 (B, H, Nq, D),
/// contiguous, a workspace; taken only with atomics), dQarrivals (i32 (B,
/// H, kArrivalStride), contiguous, a workspace the first kernel zeroes;
/// taken only with convertDqLast or overlapDqConvert, where dq_convert also
/// takes K for its shape), FoldedStats (with foldStatistics; below), dQ,
/// dK, dV; each kernel binds the ones
/// it takes (Kernel::tensorsIn). BackwardWorkspace says where each
/// workspace goes in one allocation.
using AttentionBackwardKernels = std::vector<Kernel>;

/// What the workspace's row length is a multiple of: whole blocks of queries
/// (up to 128), so that a block of statistics at a block of queries that
/// starts below Nq lies within the row (its loads take no bounds checks),
/// and 16 bytes, so that they are aligned for every Nq.
inline constexpr int64_t kStatsRowMultiple = 128;
/// The length of the workspace's rows for Nq queries.
inline int64_t statsRowLength(int64_t seqQ) {
  return (seqQ + kStatsRowMultiple - 1) / kStatsRowMultiple * kStatsRowMultiple;
}

/// Rows per (batch, head) of FoldedStats, bf16 (B, H, kFoldedStatsRows,
/// statsRowLength(Nq)), contiguous, a workspace the first kernel writes with
/// foldStatistics: per query -LSE/scale and -Delta, each the sum of three
/// bf16 parts (rows 0-2 and 3-5; rows 6-7 zero). The dots read 16 rows, the
/// rest as zeros.
inline constexpr int64_t kFoldedStatsRows = 8;

/// i32 per (batch, head) in dQarrivals (the counter is the first: 64 bytes
/// apart, no two heads' counters in one L2 sector).
inline constexpr int64_t kArrivalStride = 16;

/// The backward's workspaces for (B, H, Nq, D) in one allocation of
/// `elements` 4-byte elements: Stats, dQaccum, dQarrivals and FoldedStats,
/// in that order (shapes above). Every caller that allocates or binds them
/// (the C API, the benchmark, the tuner, `kiln run`, the tests) takes them
/// from here.
struct BackwardWorkspace : Workspace {
  BackwardWorkspace(int64_t batch, int64_t heads, int64_t seqQ,
                    int64_t headDim);
};

/// The config with its zero fields filled in for `shape`.
AttentionBackwardConfig resolveBackwardConfig(const AttentionShape &shape,
                                              AttentionBackwardConfig config);

/// Checks the shape (as the forward does) and builds the kernels; throws
/// kiln::Error naming the bad field.
AttentionBackwardKernels
attentionBackward(const AttentionShape &shape,
                  const AttentionBackwardConfig &config = {});

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTIONBACKWARD_H
