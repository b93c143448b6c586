//===- ops.cpp - kiln_c_op from C++: the library kernels' launches --------===//
//
// kiln.linear, kiln.rotary and kiln.cross_entropy reach kiln_c_op through
// ctypes: on the H200 a 16x3072x768 kiln.linear took 46 us of host time a
// call against torch's 14, of which 11 us were kiln_c_op itself and the
// rest the interpreter (the checks, the padding decisions, packing the
// tensors for ctypes; docs/experiments/2026-11-29-session58.txt). Here the
// same C functions are called with the tensors packed in C++ (linear.cpp,
// rotary.cpp, norms.cpp: each op's common case decided and launched in one
// call); anything else returns None and the Python path runs, with its
// copies, its KILN_LOG lines and its errors.
//
//===----------------------------------------------------------------------===//
#include "ops.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <string>
#include <vector>

namespace kiln_ext {

decltype(&kiln_c_op) opFn = nullptr;
decltype(&kiln_c_row_norm) rowNormFn = nullptr;
decltype(&kiln_c_row_norm_backward) rowNormBackwardFn = nullptr;
decltype(&kiln_c_row_norm_backward_programs) rowNormBackwardProgramsFn =
    nullptr;
decltype(&kiln_c_linear_split_k) linearSplitKFn = nullptr;

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

void checkCode(int code, const std::string &what, const char *error) {
  if (code == KILN_C_OK)
    return;
  TORCH_CHECK_VALUE(code != KILN_C_BAD_INPUT, what, ": ", error);
  TORCH_CHECK(false, what, ": ", error);
}

void launch(const char *op, int64_t option,
            const std::vector<kiln_c_named_tensor> &tensors, int device,
            const std::string &what) {
  TORCH_CHECK(opFn, what, ": the C++ path is not bound to libkiln_c");
  char error[2048] = {0};
  const int code = opFn(op, option, tensors.data(), int(tensors.size()),
                        c10::cuda::getCurrentCUDAStream(device).stream(),
                        device, error, sizeof error);
  checkCode(code, what, error);
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

/// `t` as bf16 autocast casts a matmul's argument: float32 and float16 CUDA
/// tensors through autocast's cache (at::autocast::cached_cast), so a float32
/// parameter is cast once per autocast region, as torch's own ops cast it,
/// not once per call. The cache takes only leaves; a 2-D transpose of one
/// (kiln.linear's weight_t = layer.weight.t()) is the transpose of its
/// base's cached cast, differentiable as t() is.
at::Tensor autocastBf16(const at::Tensor &t) {
  if (!t.defined() ||
      (t.scalar_type() != at::kFloat && t.scalar_type() != at::kHalf))
    return t;
  if (!t.is_cuda()) // refused by the op's checks, as the Python path's cast
    return t.to(at::kBFloat16);
  if (t.is_view() && t.dim() == 2) {
    const at::Tensor base(t._base());
    if (base.scalar_type() == t.scalar_type() && base.dim() == 2 &&
        base.size(0) == t.size(1) && base.size(1) == t.size(0) &&
        base.stride(0) == t.stride(1) && base.stride(1) == t.stride(0) &&
        base.storage_offset() == t.storage_offset())
      return at::autocast::cached_cast(at::kBFloat16, base,
                                       c10::DeviceType::CUDA)
          .t();
  }
  return at::autocast::cached_cast(at::kBFloat16, t, c10::DeviceType::CUDA);
}

} // namespace kiln_ext
