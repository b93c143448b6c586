//===- cross_entropy.cpp - kiln.cross_entropy from C++, with its gradient -===//
//
// kiln.cross_entropy's forward took 128 us of host time a call from Python
// (H200, session 58: the checks, the autograd Function, the reduction),
// though its launch through kiln_c_op took ~11. Here the common case (bf16
// logits (R, V) with unit column stride, int64 labels (R,) on its device)
// is checked and run in one call, and with a gradient a
// torch::autograd::Function whose backward runs without the interpreter.
// Kernels, tensors and reductions are python/kiln/fused.py's
// _CrossEntropy's (the same bits); anything else returns None and the
// Python path names the problem.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <optional>
#include <string>

namespace kiln_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum Reduction : int64_t { Mean = 0, Sum = 1, None = 2 };

constexpr const char *kWhat = "kiln.cross_entropy";

/// The per-row loss and logsumexp of `logits` against `labels`.
std::pair<at::Tensor, at::Tensor>
rows(const at::Tensor &logits, const at::Tensor &labels, int64_t ignoreIndex) {
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor lse = at::empty({logits.size(0)}, f32),
             loss = at::empty({logits.size(0)}, f32);
  launch("cross_entropy_fwd", ignoreIndex,
         {named("X", logits), named("Labels", labels), named("LSE", lse),
          named("Loss", loss)},
         logits.device().index(), kWhat);
  return {loss, lse};
}

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &logits,
                            const at::Tensor &labels, int64_t ignoreIndex,
                            int64_t reduction) {
    auto [loss, lse] = rows(logits, labels, ignoreIndex);
    at::Tensor count, out;
    if (reduction == Mean) {
      count = labels.ne(ignoreIndex).sum().to(at::kFloat);
      out = loss.sum() / count;
    } else {
      out = reduction == Sum ? loss.sum() : loss;
    }
    ctx->save_for_backward({logits, labels, lse, count});
    ctx->saved_data["ignore"] = ignoreIndex;
    ctx->saved_data["reduction"] = reduction;
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor none;
    if (!grads[0].defined())
      return {none, none, none, none};
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &logits = s[0], &labels = s[1], &lse = s[2], &count = s[3];
    const at::Tensor grad = grads[0].to(at::kFloat);
    at::Tensor dx = at::empty_like(logits);
    std::vector<kiln_c_named_tensor> t{named("X", logits),
                                       named("Labels", labels),
                                       named("LSE", lse), named("DX", dx)};
    at::Tensor dloss, scale;
    if (ctx->saved_data["reduction"].toInt() == None) {
      dloss = grad.contiguous();
      scale = at::ones({1}, grad.options());
      t.push_back(named("DLoss", dloss));
    } else {
      scale = grad.reshape({1});
      if (count.defined())
        scale = scale / count;
    }
    t.push_back(named("Scale", scale));
    launch("cross_entropy_bwd", ctx->saved_data["ignore"].toInt(), t,
           logits.device().index(), kWhat);
    return {dx, none, none, none};
  }
};

} // namespace

/// kiln.cross_entropy's common case: bf16 CUDA logits (R >= 1, V >= 1)
/// with unit column stride, contiguous int64 labels (R,) on their device,
/// reduction 0 (mean), 1 (sum) or 2 (none); None for anything else.
std::optional<at::Tensor> crossEntropy(const at::Tensor &logits,
                                       const at::Tensor &labels,
                                       int64_t ignoreIndex, int64_t reduction) {
  if (!opFn || !logits.is_cuda() || logits.scalar_type() != at::kBFloat16 ||
      logits.dim() != 2 || logits.size(0) < 1 || logits.size(1) < 1 ||
      logits.stride(1) != 1 || labels.device() != logits.device() ||
      labels.scalar_type() != at::kLong || labels.dim() != 1 ||
      labels.size(0) != logits.size(0) || !labels.is_contiguous() ||
      reduction < Mean || reduction > None)
    return std::nullopt;
  if (at::GradMode::is_enabled() && logits.requires_grad())
    return CrossEntropy::apply(logits, labels, ignoreIndex, reduction);
  auto [loss, lse] = rows(logits, labels, ignoreIndex);
  if (reduction == Mean)
    return loss.sum() / labels.ne(ignoreIndex).sum().to(at::kFloat);
  return reduction == Sum ? loss.sum() : loss;
}

} // namespace kiln_ext
