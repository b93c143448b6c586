//===- BackwardKernels.h - what the backward's kernels share ----*- C++ -*-===//
//
// Internal to kernels/attention: the switches and sizes every backward
// kernel reads (Common), the workspace arguments, dQ's conversion, and the
// dK/dV kernel (DkDvKernel.cpp) that Backward.cpp's attentionBackward lists
// with the others.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_BACKWARDKERNELS_H
#define KILN_KERNELS_ATTENTION_BACKWARDKERNELS_H

#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/AttentionBackward.h"

#include <cmath>
#include <cstdint>

namespace kiln::kernels::backward {

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
    toExp2 = scale * dsl::log2e;
    runtimeShapes = c.staticShapes <= 0;
    atomicDq = c.deterministic <= 0;
    convertLast = atomicDq && c.convertDqLast > 0;
    overlapConvert = atomicDq && !convertLast && c.overlapDqConvert > 0 &&
                     c.separateDkDv <= 0;
    foldStats = c.foldStatistics > 0; // resolved: never with scoresByQueries
  }

  struct Sizes {
    dsl::Index B, H, Nq, Nk;
  };
  /// Run-time arguments B, H, Nq (and Nk where the kernel reads keys).
  Sizes sizes(dsl::KernelBuilder &k, bool keys = true) const {
    if (!runtimeShapes)
      return {s.batch, s.heads, s.seqQ, s.seqK};
    dsl::Index B = k.scalarArg("B"), H = k.scalarArg("H"),
               Nq = k.scalarArg("Nq");
    return {B, H, Nq, keys ? k.scalarArg("Nk") : dsl::Index(s.seqK)};
  }

  void schedule(dsl::KernelBuilder &k, int warps) const {
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
dsl::TensorView statsArg(const Common &cm, dsl::KernelBuilder &k, dsl::Index B,
                         dsl::Index H, dsl::Index Nq);
/// dQ accumulated in fp32 by the dK/dV kernel's atomics (unscaled): the
/// workspace (B, H, Nq, D), contiguous.
dsl::TensorView dqAccumArg(const Common &cm, dsl::KernelBuilder &k,
                           dsl::Index B, dsl::Index H, dsl::Index Nq);
/// The dK/dV programs' arrival counters, kArrivalStride i32 per (batch,
/// head), contiguous.
dsl::TensorView arrivalsArg(dsl::KernelBuilder &k, dsl::Index B, dsl::Index H);

/// dQ = scale·dQaccum in the tensors' type for the kConvertRows rows from
/// m0 of one (batch, head).
constexpr int64_t kConvertRows = 64;
void convertDqRows(const Common &cm, dsl::TensorView acc, dsl::TensorView dQ,
                   dsl::Index m0);
/// ... for the rows [0, end), kConvertRows a step.
void convertDq(const Common &cm, dsl::TensorView acc, dsl::TensorView dQ,
               dsl::Index end);

/// dK and dV (or one of them) for blockN keys per program, over the query
/// blocks that see them (DkDvKernel.cpp).
Kernel dkdvKernel(const Common &cm, bool wantDk, bool wantDv);

} // namespace kiln::kernels::backward

#endif // KILN_KERNELS_ATTENTION_BACKWARDKERNELS_H
