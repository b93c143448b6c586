//===- AttentionArgs.h - the attention problem of the C API's tensors ----===//
//
// The problem (shape, dtype) of a call's q and k, the forward's launch config
// and workspace, and the view of its tensors a call launches on.
//
// Non-causal attention with grouped heads (k and v of Hk < H heads) where a
// head has few queries (decoding, short chunks) runs as the Hk-head problem
// of G·Nq rows a head (kernels::groupedRowsShape, which says when and why), on
// views of q, O, LSE (and in the backward dO, dQ) where each one's rows of a
// group are evenly spaced: Nq = 1, or a head's rows right after the previous
// head's.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_PYTHON_CAPI_ATTENTIONARGS_H
#define KILN_PYTHON_CAPI_ATTENTIONARGS_H

#include "CApi.h"
#include "kiln_c.h"

#include "kiln/Compiler/Log.h"
#include "kiln/kernels/Attention.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>

namespace kiln::capi {

/// Attention's dtypes: the 16-bit ones.
inline DType dtypeOf(int code) {
  const DType d = dtypeOfCode(code);
  if (d != DType::bf16 && d != DType::f16)
    throw Error("dtype code " + std::to_string(code) +
                " is neither bf16 (0) nor fp16 (1)");
  return d;
}

/// The problem of q and k (the C API's (B, H, N, D) views) under `o`.
inline kernels::AttentionShape shapeOf(const kiln_c_attention_options &o,
                                       const kiln_c_tensor &q,
                                       const kiln_c_tensor &k) {
  kernels::AttentionShape s;
  s.batch = q.sizes[0];
  s.heads = q.sizes[1];
  s.seqQ = q.sizes[2];
  s.seqK = k.sizes[2];
  s.headDim = q.sizes[3];
  // Grouped heads where k has fewer heads than q (a divisor of them:
  // checkAttentionShape says so otherwise).
  s.kvHeads = k.sizes[1] == q.sizes[1] ? 0 : k.sizes[1];
  s.causal = o.causal != 0;
  s.dtype = dtypeOf(o.dtype);
  s.scale = o.scale;
  return s;
}

/// The forward's config on `device`: the keys split where the row blocks
/// leave the device's SMs idle, and decoding's small tiles where their
/// programs fill them (at D=128 on fast memory; without a GPU nothing
/// launches: neither).
inline kernels::AttentionConfig forwardLaunch(const kernels::AttentionShape &s,
                                              int device) {
  std::string why;
  const cuda::DeviceInfo *gpu =
      cuda::available(&why) ? &cuda::device(device) : nullptr;
  return kernels::launchConfig(s, {}, gpu ? gpu->smCount : 0,
                               gpu ? gpu->memoryBandwidth : 0);
}

/// Floats of workspace the forward of `s` takes on `device`.
inline int64_t forwardWorkspaceElements(const kernels::AttentionShape &s,
                                        int device) {
  const int64_t ranges = forwardLaunch(s, device).splitKeys;
  return ranges > 1 ? kernels::SplitKeysWorkspace(s, ranges).elements : 0;
}

/// Whether `t`'s (B, H, N, ...) rows of consecutive heads are evenly spaced:
/// a view of G heads' rows as one head's.
inline bool rowsEvenlySpaced(const kiln_c_tensor &t) {
  return t.sizes[2] == 1 || t.strides[1] == t.sizes[2] * t.strides[2];
}

/// `t` (B, H, N, ...) as (B, H / g, g·N, ...): head h's row n is row
/// (h mod g)·N + n of head h / g.
inline kiln_c_tensor packedRows(const kiln_c_tensor &t, int64_t g) {
  kiln_c_tensor p = t;
  p.sizes[1] = t.sizes[1] / g;
  p.sizes[2] = t.sizes[2] * g;
  p.strides[1] = t.strides[1] * g;
  p.strides[2] = t.sizes[2] == 1 ? t.strides[1] : t.strides[2];
  return p;
}

/// G where a call packs its grouped heads' rows (above), else 1: a problem
/// groupedRowsShape packs, and q, the other tensors of q's rows (O, and in the
/// backward dO and dQ) and LSE of their shapes, each one's rows views of one
/// head's (other input is left to the usual checks).
inline int64_t packedGroup(const kiln_c_attention_options *options,
                           const kiln_c_tensor *q, const kiln_c_tensor *k,
                           std::span<const kiln_c_tensor *const> rows,
                           const kiln_c_tensor *lse) {
  if (!options || !q || !k || !lse || !lse->data ||
      (options->dtype != KILN_C_BF16 && options->dtype != KILN_C_F16) ||
      !kernels::groupedRowsShape(shapeOf(*options, *q, *k)) ||
      !rowsEvenlySpaced(*q) ||
      !std::equal(q->sizes, q->sizes + 3, lse->sizes) ||
      !rowsEvenlySpaced(*lse))
    return 1;
  for (const kiln_c_tensor *t : rows)
    if (!t || !t->data || !std::equal(q->sizes, q->sizes + 4, t->sizes) ||
        !rowsEvenlySpaced(*t))
      return 1;
  return q->sizes[1] / k->sizes[1];
}

/// KILN_LOG=launch: a line the first time a call of the forward or the
/// backward packs a problem's grouped heads (the kernels' own lines then
/// show the Hk-head problem).
inline void logPacked(bool backward, const kiln_c_attention_options &o,
                      const kiln_c_tensor &q, const kiln_c_tensor &k,
                      int64_t g) {
  if (!logs("launch"))
    return;
  static std::mutex mutex;
  static std::set<std::tuple<bool, int, double, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t, int>>
      logged;
  const kernels::AttentionShape s = shapeOf(o, q, k);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged
             .emplace(backward, int(s.dtype), s.scale, s.batch, s.heads,
                      s.kvHeads, s.seqQ, s.seqK, s.headDim, o.device)
             .second)
      return;
  }
  std::fprintf(stderr,
               "kiln[launch]: attention%s B=%lld H=%lld Hk=%lld Nq=%lld "
               "Nk=%lld D=%lld non-causal: grouped heads packed, %lld heads "
               "of %lld rows\n",
               backward ? " backward" : "", (long long)s.batch,
               (long long)s.heads, (long long)s.kvHeads, (long long)s.seqQ,
               (long long)s.seqK, (long long)s.headDim, (long long)s.kvHeads,
               (long long)(s.seqQ * g));
}

} // namespace kiln::capi

#endif // KILN_PYTHON_CAPI_ATTENTIONARGS_H
