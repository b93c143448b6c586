//===- AttentionGraph.h - attention as whole-tensor operations --*- C++ -*-===//
#ifndef KILN_KERNELS_ATTENTIONGRAPH_H
#define KILN_KERNELS_ATTENTIONGRAPH_H

#include "kiln/dsl/Graph.h"
#include "kiln/kernels/Attention.h"

namespace kiln::kernels {

/// O = softmax(causalMask(Q·Kᵀ·scale))·V over inputs Q, K, V of shape
/// [batch, heads, seq, headDim] (the mask only when causal).
graph::Graph attentionGraph(const AttentionShape &shape);

/// 4·B·H·Nq·Nk·D, halved when causal: the work of attention itself, the
/// same for every lowering.
double attentionFlops(const AttentionShape &shape);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTIONGRAPH_H
