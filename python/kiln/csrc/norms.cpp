//===- norms.cpp - kiln.rms_norm / kiln.layer_norm from C++, with gradients
//===//
//
// The norms' forward + backward through the Python autograd Function took
// 380-700 us of host time a call on the H200 against torch's 120-240 (its
// kernels' GPU time 29-187 us against torch's 49-325), though the forward
// and the backward's launch each took 20-40 us alone: the autograd engine's
// thread runs a Python backward under the interpreter's lock
// (docs/experiments/2026-11-29-session60.txt). Here the common case (a
// contiguous bf16 x, contiguous parameters on its device) is checked and
// launched in one call, and with a gradient a torch::autograd::Function
// whose backward (kiln_c_row_norm_backward, then the sums of the partial
// rows) runs without the interpreter. Kernels and formulas are norms.py's
// _RowNorm's; anything else returns None and the Python path names the
// problem. x and the parameters are bf16 or float32, read as they are:
// under bf16 autocast a float32 residual stream and float32 parameters
// reach the kernel without a cast kernel each (and dx is written float32),
// y is bf16 there and x's dtype elsewhere.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace kiln_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const char *nameOf(int64_t kind) {
  return kind ? "kiln.layer_norm" : "kiln.rms_norm";
}

void check(int code, const char *error, int64_t kind) {
  checkCode(code, nameOf(kind), error);
}

/// A contiguous tensor as the C API's (rows, cols) or (cols,).
kiln_c_tensor matrix(const at::Tensor &t, int64_t cols) {
  return {t.data_ptr(), {t.numel() / cols, cols, 0, 0}, {cols, 1, 0, 0}};
}
kiln_c_tensor vector(const at::Tensor &t) {
  return {t.data_ptr(), {t.size(0), 0, 0, 0}, {1, 0, 0, 0}};
}

int device(const at::Tensor &t) { return t.device().index(); }

void *stream(const at::Tensor &t) {
  return c10::cuda::getCurrentCUDAStream(device(t)).stream();
}

at::Tensor forwardOf(int64_t kind, const at::Tensor &x, const at::Tensor &w,
                     const std::optional<at::Tensor> &b, double eps,
                     at::ScalarType yType) {
  at::Tensor y =
      at::empty_like(x, x.options().dtype(yType), at::MemoryFormat::Contiguous);
  const int64_t cols = x.size(-1);
  const kiln_c_tensor tx = matrix(x, cols), ty = matrix(y, cols),
                      tw = vector(w), tb = vector(b ? *b : w);
  const kiln_c_row_norm_dtypes types{dtypeCode(x), dtypeCode(w), dtypeCode(y)};
  char error[1024] = {0};
  check(rowNormFn(int(kind), &types, &tx, &tw, &tb, &ty, eps, stream(x),
                  device(x), error, sizeof error),
        error, kind);
  return y;
}

/// The backward's programs, as kiln tunes them.
int64_t programs(int64_t rows, const at::Tensor &x) {
  return rowNormBackwardProgramsFn(
      rows, at::cuda::getDeviceProperties(device(x))->multiProcessorCount);
}

struct RowNorm : torch::autograd::Function<RowNorm> {
  // b optional: Function::apply asks each tensor argument for its device.
  static at::Tensor forward(AutogradContext *ctx, int64_t kind,
                            const at::Tensor &x, const at::Tensor &w,
                            const std::optional<at::Tensor> &b, double eps,
                            at::ScalarType yType) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["kind"] = kind;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["y"] = int64_t(yType);
    ctx->set_materialize_grads(false);
    return forwardOf(kind, x, w, b, eps, yType);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor none;
    if (!grads[0].defined())
      return {none, none, none, none, none, none};
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1];
    const int64_t kind = ctx->saved_data["kind"].toInt();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    // In y's dtype (autograd's own check), perhaps expanded.
    const at::Tensor dy =
        grads[0].to(at::ScalarType(ctx->saved_data["y"].toInt())).contiguous();
    at::Tensor dx = at::empty_like(x, at::MemoryFormat::Contiguous);
    // dW's (and dB's) partial rows in one buffer: one sum, one cast.
    const at::Tensor partial = at::empty({1 + kind, programs(rows, x), cols},
                                         x.options().dtype(at::kFloat));
    const kiln_c_tensor tx = matrix(x, cols), tdy = matrix(dy, cols),
                        tdx = matrix(dx, cols), tw = vector(w),
                        tdwp = matrix(partial[0], cols),
                        tdbp = matrix(partial[kind], cols);
    const kiln_c_row_norm_dtypes types{dtypeCode(x), dtypeCode(w),
                                       dtypeCode(dy)};
    char error[1024] = {0};
    check(rowNormBackwardFn(int(kind), &types, &tx, &tw, &tdy, &tdx, &tdwp,
                            &tdbp, ctx->saved_data["eps"].toDouble(), stream(x),
                            device(x), error, sizeof error),
          error, kind);
    const at::Tensor sums = partial.sum(1).to(w.scalar_type());
    return {none, dx, sums[0], kind ? sums[1] : none, none, none};
  }
};

} // namespace

/// kiln.rms_norm (kind 0) or kiln.layer_norm (kind 1) of a contiguous x's
/// rows into a new tensor shaped like x (bf16 where `yBf16`, else x's
/// dtype), with contiguous 1-D parameters on x's device, each bf16 or
/// float32 (b as w); with a gradient to record, through RowNorm. None for
/// anything else (the Python path checks it and names the problem).
std::optional<at::Tensor> rowNorm(int64_t kind, const at::Tensor &x,
                                  const at::Tensor &w,
                                  const std::optional<at::Tensor> &b,
                                  double eps, bool yBf16) {
  auto taken = [](const at::Tensor &t) {
    return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat;
  };
  if (!rowNormFn || !rowNormBackwardFn || !rowNormBackwardProgramsFn ||
      (kind != 0 && kind != 1) || !x.is_cuda() || !taken(x) || x.dim() < 1 ||
      x.numel() == 0 || !x.is_contiguous() || !std::isfinite(eps) || eps < 0)
    return std::nullopt;
  const int64_t cols = x.size(-1);
  auto parameter = [&](const at::Tensor &t) {
    return t.device() == x.device() && t.scalar_type() == w.scalar_type() &&
           taken(t) && t.dim() == 1 && t.size(0) == cols && t.is_contiguous();
  };
  if (!parameter(w) || b.has_value() != (kind == 1) || (b && !parameter(*b)))
    return std::nullopt;
  const at::ScalarType yType = yBf16 ? at::kBFloat16 : x.scalar_type();
  if (at::GradMode::is_enabled() &&
      (x.requires_grad() || w.requires_grad() || (b && b->requires_grad())))
    return RowNorm::apply(kind, x, w, b, eps, yType);
  return forwardOf(kind, x, w, b, eps, yType);
}

} // namespace kiln_ext
