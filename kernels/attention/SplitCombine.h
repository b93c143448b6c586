//===- SplitCombine.h - the forward's split-keys combine kernel -*- C++ -*-===//
#ifndef KILN_KERNELS_ATTENTION_SPLITCOMBINE_H
#define KILN_KERNELS_ATTENTION_SPLITCOMBINE_H

#include "kiln/kernels/Attention.h"

namespace kiln::kernels {

/// attention_fwd_combine: each row's O and logsumexp from the `ranges`
/// partial ones attention_fwd_split wrote (OSplit, LSESplit), weighted by
/// exp(LSE_r - max_r LSE_r); B, H and Nq run-time where `runtimeShapes`.
Kernel splitCombineKernel(const AttentionShape &shape, int64_t ranges,
                          bool runtimeShapes);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_SPLITCOMBINE_H
