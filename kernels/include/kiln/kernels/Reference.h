//===- Reference.h - plain C++ fp64 references ------------------*- C++ -*-===//
//
// Straightforward fp64 loops, independent of kiln's IR and executors: what
// kiln's results are checked against.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_REFERENCE_H
#define KILN_KERNELS_REFERENCE_H

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Softmax.h"
#include "kiln/runtime/HostTensor.h"

namespace kiln::kernels {

/// O (B,H,Nq,D) and LSE (B,H,Nq) from Q, K, V; every output element written.
/// With s.keyLengths, batch b takes its first keyLengths[b] keys (clamped to
/// [0, Nk]; none: O 0, LSE -inf), causal with its queries the last Nq of
/// them.
void attentionReference(const AttentionShape &s, const HostTensor &q,
                        const HostTensor &k, const HostTensor &v, HostTensor &o,
                        HostTensor &lse,
                        const std::vector<int64_t> &keyLengths = {});
/// dQ, dK, dV (shaped as Q, K, V) of attention given dO, with P recomputed
/// from Q and K and Delta taken as rowsum(P ∘ dP): nothing from a forward
/// kernel's O or LSE.
void attentionBackwardReference(const AttentionShape &s, const HostTensor &q,
                                const HostTensor &k, const HostTensor &v,
                                const HostTensor &dO, HostTensor &dq,
                                HostTensor &dk, HostTensor &dv);
/// c = act(a·b + bias) + residual in fp64, bias (N) added to every row and
/// residual (M x N) after the activation when given.
void gemmReference(const HostTensor &a, const HostTensor &b, HostTensor &c,
                   const HostTensor *bias = nullptr,
                   GemmActivation activation = GemmActivation::None,
                   const HostTensor *residual = nullptr);
/// The transpose of a matrix (R x C -> C x R, contiguous, same dtype): B
/// from the BT a GEMM with GemmShape::bTransposed reads, or back.
HostTensor transposeMatrix(const HostTensor &m);
void softmaxReference(const HostTensor &x, HostTensor &y);
/// RoPE's tables: cos and sin (positions, headDim/2) of p·10000^(-2i/D),
/// computed in fp64 and stored in their tensors' dtype.
void ropeTables(int64_t positions, int64_t headDim, HostTensor &cos,
                HostTensor &sin);
/// y = x / sqrt(mean(x^2 over a row) + eps) * w in fp64.
void rmsNormReference(const HostTensor &x, const HostTensor &w, HostTensor &y,
                      double eps = 1e-6);
void layerNormReference(const HostTensor &x, const HostTensor &w,
                        const HostTensor &b, HostTensor &y, double eps = 1e-5);

} // namespace kiln::kernels

#endif // KILN_KERNELS_REFERENCE_H
