//===- ops.cpp - kiln_c_op from C++: the library kernels' launches --------===//
//
// kiln.linear, kiln.rotary and kiln.cross_entropy reach kiln_c_op through
// ctypes: on the H200 a 16x3072x768 kiln.linear took 46 us of host time a
// call against torch's 14, of which 11 us were kiln_c_op itself and the
// rest the interpreter (the checks, the padding decisions, packing the
// tensors for ctypes; docs/experiments/2026-11-29-session58.txt). Here the
// same C function is called with the tensors packed in C++, and
// kiln.linear's common case (aligned bf16 operands, a weight (K, N) or an
// nn.Linear's (N, K) transposed, N a multiple of 8) is decided and launched
// in one call; anything else returns None and the Python path runs, with its
// copies, its KILN_LOG lines and its errors.
//
//===----------------------------------------------------------------------===//
#include "kiln_c.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln_ext {

using OpFn = decltype(&kiln_c_op);
OpFn opFn = nullptr;

namespace {

int dtypeCode(const at::Tensor &t) {
  switch (t.scalar_type()) {
  case at::kBFloat16:
    return KILN_C_BF16;
  case at::kHalf:
    return KILN_C_F16;
  case at::kFloat:
    return KILN_C_F32;
  case at::kInt:
    return KILN_C_I32;
  case at::kLong:
    return KILN_C_I64;
  default:
    TORCH_CHECK_TYPE(false, "kiln: tensors of ", t.scalar_type(),
                     " are not taken");
  }
}

kiln_c_named_tensor named(const char *name, const at::Tensor &t) {
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= 4, "kiln: tensor ", name,
                    " must have 1 to 4 dimensions, got ", t.dim());
  kiln_c_named_tensor n{name, dtypeCode(t), int(t.dim()), {}};
  n.tensor.data = t.data_ptr();
  for (int64_t i = 0; i < t.dim(); ++i) {
    n.tensor.sizes[i] = t.size(i);
    n.tensor.strides[i] = t.stride(i);
  }
  return n;
}

/// kiln_c_op on torch's current stream of `device`; the Python path's
/// exceptions (ValueError for refused input, else RuntimeError).
void launch(const char *op, int64_t option,
            const std::vector<kiln_c_named_tensor> &tensors, int device,
            const std::string &what) {
  TORCH_CHECK(opFn, what, ": the C++ path is not bound to libkiln_c");
  char error[2048] = {0};
  const int code = opFn(op, option, tensors.data(), int(tensors.size()),
                        c10::cuda::getCurrentCUDAStream(device).stream(),
                        device, error, sizeof error);
  if (code == KILN_C_OK)
    return;
  TORCH_CHECK_VALUE(code != KILN_C_BAD_INPUT, what, ": ", error);
  TORCH_CHECK(false, what, ": ", error);
}

bool aligned(const at::Tensor &t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

} // namespace

/// kiln_c_op(name, option, {names[i]: tensors[i]}) on `device`: _lib.op
/// without ctypes.
void op(const std::string &name, int64_t option,
        const std::vector<std::string> &names,
        const std::vector<at::Tensor> &tensors, int64_t device,
        const std::string &what) {
  TORCH_CHECK_VALUE(names.size() == tensors.size(), what,
                    ": one name per tensor");
  std::vector<kiln_c_named_tensor> packed;
  for (size_t i = 0; i < tensors.size(); ++i)
    packed.push_back(named(names[i].c_str(), tensors[i]));
  launch(name.c_str(), option, packed, int(device), what);
}

/// kiln.linear's common case: act(x @ weight_t + bias) into a new (M, N)
/// tensor, weight_t (K, N) contiguous or the transpose of a contiguous
/// (N, K) (passed as BT); None for anything else.
std::optional<at::Tensor> linear(const at::Tensor &x, const at::Tensor &w,
                                 const std::optional<at::Tensor> &bias,
                                 int64_t activation) {
  const auto bf16 = at::kBFloat16;
  if (!opFn || activation < 0 || activation > 2 || !x.is_cuda() ||
      x.scalar_type() != bf16 || x.dim() != 2 || x.numel() == 0 ||
      x.size(1) % 8 || !x.is_contiguous() || x.stride(0) % 8 || !aligned(x))
    return std::nullopt;
  const int64_t K = x.size(1);
  if (w.device() != x.device() || w.scalar_type() != bf16 || w.dim() != 2 ||
      w.size(0) != K || !aligned(w))
    return std::nullopt;
  const int64_t N = w.size(1);
  const bool transposed = !w.is_contiguous();
  if (N == 0 || N % 8 ||
      (transposed ? w.stride(0) != 1 || w.stride(1) != K : w.stride(0) % 8))
    return std::nullopt;
  if (bias &&
      (bias->device() != x.device() || bias->scalar_type() != bf16 ||
       bias->dim() != 1 || bias->size(0) != N || !bias->is_contiguous()))
    return std::nullopt;
  at::Tensor out = at::empty({x.size(0), N}, x.options());
  at::Tensor weight = transposed ? w.t() : w;
  std::vector<kiln_c_named_tensor> t{
      named("A", x), named(transposed ? "BT" : "B", weight), named("C", out)};
  if (bias)
    t.push_back(named("Bias", *bias));
  launch("linear", activation, t, x.device().index(), "kiln.linear");
  return out;
}

} // namespace kiln_ext
