//===- ops.cpp - kiln_c_op from C++: the library kernels' launches --------===//
//
// kiln.linear, kiln.rotary and kiln.cross_entropy reach kiln_c_op through
// ctypes: on the H200 a 16x3072x768 kiln.linear took 46 us of host time a
// call against torch's 14, of which 11 us were kiln_c_op itself and the
// rest the interpreter (the checks, the padding decisions, packing the
// tensors for ctypes; docs/experiments/2026-11-29-session58.txt). Here the
// same C functions are called with the tensors packed in C++, and the row
// norms' common case (a contiguous bf16 x) is decided and launched in one
// call (linear.cpp: kiln.linear's); anything else returns None and the
// Python path runs, with its copies, its KILN_LOG lines and its errors.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace kiln_ext {

decltype(&kiln_c_op) opFn = nullptr;
decltype(&kiln_c_row_norm) rowNormFn = nullptr;

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

} // namespace

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

/// kiln.rms_norm (kind 0) or kiln.layer_norm (kind 1) of a contiguous bf16
/// x's rows into a new tensor shaped like x, contiguous 1-D parameters on
/// x's device, no gradient to record; None for anything else (the Python path checks it and names
/// the problem).
std::optional<at::Tensor> rowNorm(int64_t kind, const at::Tensor &x,
                                  const at::Tensor &w,
                                  const std::optional<at::Tensor> &b,
                                  double eps) {
  if (!rowNormFn || (kind != 0 && kind != 1) || !x.is_cuda() ||
      x.scalar_type() != at::kBFloat16 || x.dim() < 1 || x.numel() == 0 ||
      !x.is_contiguous() || !std::isfinite(eps) || eps < 0)
    return std::nullopt;
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  auto parameter = [&](const at::Tensor &t) {
    return t.device() == x.device() && t.scalar_type() == at::kBFloat16 &&
           t.dim() == 1 && t.size(0) == cols && t.is_contiguous();
  };
  if (!parameter(w) || b.has_value() != (kind == 1) || (b && !parameter(*b)))
    return std::nullopt;
  // A gradient to record: the Python path's autograd Function.
  if (at::GradMode::is_enabled() &&
      (x.requires_grad() || w.requires_grad() || (b && b->requires_grad())))
    return std::nullopt;
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  auto matrix = [&](const at::Tensor &t) {
    return kiln_c_tensor{t.data_ptr(), {rows, cols, 0, 0}, {cols, 1, 0, 0}};
  };
  auto vector = [&](const at::Tensor &t) {
    return kiln_c_tensor{t.data_ptr(), {cols, 0, 0, 0}, {1, 0, 0, 0}};
  };
  const kiln_c_tensor tx = matrix(x), ty = matrix(y), tw = vector(w),
                      tb = vector(b ? *b : w);
  const int device = x.device().index();
  char error[1024] = {0};
  const int code = rowNormFn(int(kind), &tx, &tw, &tb, &ty, eps,
                             c10::cuda::getCurrentCUDAStream(device).stream(),
                             device, error, sizeof error);
  const char *what = kind ? "kiln.layer_norm" : "kiln.rms_norm";
  TORCH_CHECK_VALUE(code != KILN_C_BAD_INPUT, what, ": ", error);
  TORCH_CHECK(code == KILN_C_OK, what, ": ", error);
  return y;
}

} // namespace kiln_ext
