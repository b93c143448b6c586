//===- rotary.cpp - kiln.rotary's common case from C++, with its gradient -===//
//
// kiln.rotary from Python took 47 us of host time a call (H200, session 58),
// per layer for q and for k: a decoding step's rotations cost more host time
// than their kernels' GPU time. Here the checks, the views the kernel takes
// and the launch are one C++ call, and with a gradient a
// torch::autograd::Function whose backward (the inverse rotation) runs
// without the interpreter. The views, the positions and the kernel are
// those of python/kiln/fused.py's _rotary_run; anything its checks would
// refuse returns None here, and the Python path names the problem.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <map>
#include <optional>
#include <tuple>

namespace kiln_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// 0..n-1 for each of `batch` sequences (i32), kept per (device, batch, n)
/// as fused.py's _default_positions keeps them. Never freed: a static map
/// of CUDA tensors would be destroyed after the driver at exit.
const at::Tensor &defaultPositions(const at::Device &device, int64_t batch,
                                   int64_t n) {
  using Key = std::tuple<int, int64_t, int64_t>;
  static auto *cache = new std::map<Key, at::Tensor>();
  const Key key{device.index(), batch, n};
  auto it = cache->find(key);
  if (it == cache->end()) {
    if (cache->size() > 64)
      cache->clear();
    at::Tensor p =
        at::arange(n, at::TensorOptions().device(device).dtype(at::kInt));
    it = cache->emplace(key, batch > 1 ? p.repeat({batch}) : p).first;
  }
  return it->second;
}

/// The rotation (inverse: its transpose) of x, (B, N, H, D) when bshd else
/// (B, H, N, D), into a new tensor: the kernel sees (heads, tokens, D).
at::Tensor run(at::Tensor x, const at::Tensor &cos, const at::Tensor &sin,
               const std::optional<at::Tensor> &positions, bool bshd,
               bool inverse) {
  if (x.stride(0) != x.size(1) * x.stride(1) || x.stride(3) != 1)
    x = x.contiguous();
  const int64_t B = x.size(0), D = x.size(3);
  const int64_t N = bshd ? x.size(1) : x.size(2),
                H = bshd ? x.size(2) : x.size(1);
  auto seen = [&](const at::Tensor &t) {
    return bshd ? t.view({B * N, H, D}).transpose(0, 1) : t.view({B * H, N, D});
  };
  at::Tensor pos;
  if (!positions)
    pos = defaultPositions(x.device(), bshd ? B : 1, N);
  else if (bshd)
    pos = positions->to(at::kInt).repeat({B});
  else
    pos = positions->to(at::kInt).contiguous();
  at::Tensor y = at::empty_like(x);
  if (x.numel())
    launch("rotary", inverse,
           {named("X", seen(x)), named("Y", seen(y)), named("Pos", pos),
            named("Cos", cos), named("Sin", sin)},
           x.device().index(), "kiln.rotary");
  return y;
}

/// The Python checks' common case: bf16 CUDA x of 4 dimensions, D a power
/// of two >= 16, cos and sin contiguous fp32 (P, D/2) of one shape on x's
/// device, positions (N,) i32 or i64 there, or none where the table has a
/// row for each of 0..N-1.
bool commonCase(const at::Tensor &x, const at::Tensor &cos,
                const at::Tensor &sin,
                const std::optional<at::Tensor> &positions, bool bshd) {
  if (!opFn || !x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() != 4)
    return false;
  const int64_t D = x.size(3), N = bshd ? x.size(1) : x.size(2);
  if (D < 16 || (D & (D - 1)))
    return false;
  for (const at::Tensor *t : {&cos, &sin})
    if (t->device() != x.device() || t->scalar_type() != at::kFloat ||
        t->dim() != 2 || t->size(1) != D / 2 || !t->is_contiguous())
      return false;
  if (!cos.sizes().equals(sin.sizes()))
    return false;
  if (!positions) // the default 0..N-1 needs N rows of the table
    return cos.size(0) >= N;
  return (positions->device() == x.device() &&
          (positions->scalar_type() == at::kInt ||
           positions->scalar_type() == at::kLong) &&
          positions->dim() == 1 && positions->size(0) == N);
}

struct Rotary : torch::autograd::Function<Rotary> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x,
                            const at::Tensor &cos, const at::Tensor &sin,
                            const std::optional<at::Tensor> &positions,
                            bool bshd) {
    ctx->save_for_backward({cos, sin, positions.value_or(at::Tensor())});
    ctx->saved_data["bshd"] = bshd;
    ctx->set_materialize_grads(false);
    return run(x, cos, sin, positions, bshd, false);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor none;
    if (!grads[0].defined())
      return {none, none, none, none, none};
    const variable_list s = ctx->get_saved_variables();
    std::optional<at::Tensor> positions;
    if (s[2].defined())
      positions = s[2];
    // The rotation is orthogonal: its gradient rotates back.
    return {run(grads[0], s[0], s[1], positions,
                ctx->saved_data["bshd"].toBool(), true),
            none, none, none, none};
  }
};

} // namespace

std::optional<at::Tensor> rotary(const at::Tensor &x, const at::Tensor &cos,
                                 const at::Tensor &sin,
                                 const std::optional<at::Tensor> &positions,
                                 bool bshd) {
  if (!commonCase(x, cos, sin, positions, bshd))
    return std::nullopt;
  if (at::GradMode::is_enabled() && x.requires_grad())
    return Rotary::apply(x, cos, sin, positions, bshd);
  return run(x, cos, sin, positions, bshd, false);
}

} // namespace kiln_ext
