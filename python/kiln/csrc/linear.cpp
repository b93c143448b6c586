//===- linear.cpp - kiln.linear's common case from C++, with its gradient -===//
//
// kiln.linear with aligned bf16 operands (x (..., K) contiguous; a weight
// (K, N) with aligned rows, or an nn.Linear's contiguous (N, K) transposed;
// K and N multiples of 8) decided and launched in one call. With a gradient
// it is a torch::autograd::Function whose backward runs in autograd's
// device thread without the interpreter or the GIL: through the Python
// Function a training step of 8192x768x3072 took 242 us of host time
// against 195 us of GPU work (docs/experiments/2026-11-29-session59.txt).
// The kernels, their names for the operands and the gradients' formulas are
// the Python path's (python/kiln/gemm.py); anything else returns None and
// that path runs, with its copies, its KILN_LOG lines and its errors.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>

#include <optional>
#include <string_view>
#include <vector>

namespace kiln_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum Activation : int64_t { None = 0, Relu = 1, Gelu = 2 };

/// Whether x, w (= weight_t) and bias are the common case; *transposed
/// then says whether w is an nn.Linear's (N, K) weight transposed.
bool commonCase(const at::Tensor &x, const at::Tensor &w,
                const std::optional<at::Tensor> &bias, int64_t activation,
                bool *transposed) {
  if (!opFn || activation < None || activation > Gelu || !x.is_cuda() ||
      x.dim() != 2 || x.numel() == 0 || x.size(1) % 8 || !x.is_contiguous() ||
      !rowsAligned(x))
    return false;
  const int64_t K = x.size(1);
  if (w.device() != x.device() || w.scalar_type() != at::kBFloat16 ||
      w.dim() != 2 || w.size(0) != K || !aligned(w))
    return false;
  const int64_t N = w.size(1);
  *transposed = !w.is_contiguous();
  if (N == 0 || N % 8 ||
      (*transposed ? w.stride(0) != 1 || w.stride(1) != K : !rowsAligned(w)))
    return false;
  return !bias || (bias->device() == x.device() &&
                   bias->scalar_type() == at::kBFloat16 && bias->dim() == 1 &&
                   bias->size(0) == N && bias->is_contiguous());
}

/// act(A·B + bias) into a new (M, N) bf16 tensor, Z = A·B + bias into z
/// where defined. A is given as stored: "A" (M, K) or "AT" (K, M); B too:
/// "B" (K, N) or "BT" (N, K).
at::Tensor gemm(const char *aName, const at::Tensor &a, const char *bName,
                const at::Tensor &b, int64_t M, int64_t N,
                int64_t activation = None, const at::Tensor &bias = {},
                const at::Tensor &z = {}) {
  if (std::string_view(aName) == "AT" && activation == None &&
      !bias.defined() && !z.defined()) {
    // A weight gradient (A read as AT): where its few output tiles over a
    // long K leave SMs idle, split-K's partial products, summed here in a
    // fixed order (deterministic), as gemm.py's _gemm does.
    const int64_t K = a.size(0);
    const int64_t split = linearSplitKFn(
        M, N, K,
        at::cuda::getDeviceProperties(a.device().index())->multiProcessorCount);
    if (split > 1) {
      at::Tensor p = at::empty({split, M, N}, a.options().dtype(at::kFloat));
      launch("linear", None, {named(aName, a), named(bName, b), named("C", p)},
             a.device().index(), "kiln.linear");
      return at::sum(p, {0}).to(at::kBFloat16);
    }
  }
  at::Tensor c = at::empty({M, N}, a.options());
  std::vector<kiln_c_named_tensor> t{named(aName, a), named(bName, b),
                                     named("C", c)};
  if (bias.defined())
    t.push_back(named("Bias", bias));
  if (z.defined())
    t.push_back(named("Z", z));
  launch("linear", activation, t, a.device().index(), "kiln.linear");
  return c;
}

/// act(x @ w + bias); w is read as stored (an nn.Linear's (N, K) as BT).
at::Tensor forwardOf(const at::Tensor &x, const at::Tensor &w, bool transposed,
                     const at::Tensor &bias, int64_t activation,
                     const at::Tensor &z = {}) {
  return gemm("A", x, transposed ? "BT" : "B", transposed ? w.t() : w,
              x.size(0), w.size(1), activation, bias, z);
}

/// Y = act(X·W + b), W = weight_t. The backward: dZ from dY (GELU's from
/// the pre-activation Z the forward GEMM also wrote, ReLU's from Y), dX =
/// dZ·Wᵀ and dW = Xᵀ·dZ as GEMMs reading X, W and dZ as stored, db = Σ dZ
/// in fp32.
struct Linear : torch::autograd::Function<Linear> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x,
                            const at::Tensor &w,
                            const std::optional<at::Tensor> &bias,
                            int64_t activation, bool transposed) {
    at::Tensor z;
    if (activation == Gelu)
      z = at::empty({x.size(0), w.size(1)}, x.options());
    at::Tensor y =
        forwardOf(x, w, transposed, bias.value_or(at::Tensor()), activation, z);
    ctx->save_for_backward({x, w, activation == Relu ? y : at::Tensor(), z});
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["bias"] = bias.has_value();
    ctx->set_materialize_grads(false);
    return y;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor none;
    const at::Tensor &gradY = grads[0];
    if (!gradY.defined())
      return {none, none, none, none, none};
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1];
    const int64_t activation = ctx->saved_data["activation"].toInt();
    const bool transposed = ctx->saved_data["transposed"].toBool();
    at::Tensor dz = activation == Gelu ? at::gelu_backward(gradY, s[3], "tanh")
                    : activation == Relu
                        ? at::threshold_backward(gradY, s[2], 0)
                        : gradY;
    if (dz.scalar_type() != at::kBFloat16)
      dz = dz.to(at::kBFloat16);
    if (!rowsAligned(dz)) // autograd may hand dY expanded or offset
      dz = dz.clone(at::MemoryFormat::Contiguous);
    const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0))
      dx = gemm("A", dz, transposed ? "B" : "BT", transposed ? w.t() : w, M, K);
    if (ctx->needs_input_grad(1))
      // As W is stored: nn.Linear's (N, K) as dZᵀ·X, a (K, N) as Xᵀ·dZ.
      dw = transposed ? gemm("AT", dz, "B", x, N, K).t()
                      : gemm("AT", x, "B", dz, K, N);
    // needs_input_grad counts tensor arguments: bias is the third where
    // given, else not one.
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      db = at::sum(dz, {0}, false, at::kFloat).to(at::kBFloat16);
    return {dx, dw, db, none, none};
  }
};

/// x (..., K) as the GEMM's rows: a contiguous x's leading dimensions
/// merged (a view); the result's back by `unrows`.
at::Tensor rows(const at::Tensor &x) {
  return x.dim() == 2 || !x.is_contiguous() || x.dim() < 1
             ? x
             : x.view({-1, x.size(-1)});
}

at::Tensor unrows(const at::Tensor &y, const at::Tensor &x) {
  if (x.dim() == 2)
    return y;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(y.size(1));
  return y.view(shape);
}

/// kiln.linear's common case, recorded for autograd where `train`.
std::optional<at::Tensor> linearOf(const at::Tensor &x, const at::Tensor &w,
                                   const std::optional<at::Tensor> &bias,
                                   int64_t activation, bool train) {
  bool transposed = false;
  const at::Tensor r = rows(x);
  if (!commonCase(r, w, bias, activation, &transposed))
    return std::nullopt;
  // (bias optional, not an undefined tensor: autograd reads every tensor
  // argument's device.)
  return unrows(train ? Linear::apply(r, w, bias, activation, transposed)
                      : forwardOf(r, w, transposed, bias.value_or(at::Tensor()),
                                  activation),
                x);
}
} // namespace

std::optional<at::Tensor> linear(const at::Tensor &x, const at::Tensor &w,
                                 const std::optional<at::Tensor> &bias,
                                 int64_t activation) {
  return linearOf(x, w, bias, activation, false);
}

std::optional<at::Tensor> linearTrain(const at::Tensor &x, const at::Tensor &w,
                                      const std::optional<at::Tensor> &bias,
                                      int64_t activation) {
  return linearOf(x, w, bias, activation, true);
}

} // namespace kiln_ext
