//===- ops.h - kiln_c_op from C++: what ops.cpp and linear.cpp share ------===//
#pragma once

#include "kiln_c.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln_ext {

extern decltype(&kiln_c_op) opFn;
extern decltype(&kiln_c_row_norm) rowNormFn;
extern decltype(&kiln_c_row_norm_backward) rowNormBackwardFn;
extern decltype(&kiln_c_row_norm_backward_programs) rowNormBackwardProgramsFn;
extern decltype(&kiln_c_linear_split_k) linearSplitKFn;

/// `t`'s dtype as a KILN_C_* code (TypeError for one kiln takes nowhere).
int dtypeCode(const at::Tensor &t);
/// `t` as the C API takes it, under the kernel's name for it.
kiln_c_named_tensor named(const char *name, const at::Tensor &t);

/// Nothing for KILN_C_OK; else the Python path's exceptions: ValueError for
/// refused input, else RuntimeError, the C side's message after "what: ".
void checkCode(int code, const std::string &what, const char *error);

/// kiln_c_op on torch's current stream of `device`; the Python path's
/// exceptions (ValueError for refused input, else RuntimeError).
void launch(const char *op, int64_t option,
            const std::vector<kiln_c_named_tensor> &tensors, int device,
            const std::string &what);

/// A base address on 16 bytes (TMA's and vector accesses' requirement).
inline bool aligned(const at::Tensor &t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

/// A 2-D bf16 matrix whose rows the kernels read and write by TMA as it is
/// stored: unit column stride, a row stride of 16-byte multiples, an
/// aligned base.
inline bool rowsAligned(const at::Tensor &t) {
  return t.dim() == 2 && t.scalar_type() == at::kBFloat16 && t.stride(1) == 1 &&
         t.stride(0) % 8 == 0 && aligned(t);
}

/// The entries bound in attention_autograd.cpp's module (ops.cpp,
/// linear.cpp, rotary.cpp, norms.cpp,
/// cross_entropy.cpp); the optional ones return None for the
/// Python path.
void op(const std::string &name, int64_t option,
        const std::vector<std::string> &names,
        const std::vector<at::Tensor> &tensors, int64_t device,
        const std::string &what);
at::Tensor autocastBf16(const at::Tensor &t);
std::optional<at::Tensor> rowNorm(int64_t kind, const at::Tensor &x,
                                  const at::Tensor &w,
                                  const std::optional<at::Tensor> &b,
                                  double eps, bool yBf16);
std::optional<at::Tensor> linear(const at::Tensor &x, const at::Tensor &w,
                                 const std::optional<at::Tensor> &bias,
                                 int64_t activation);
std::optional<at::Tensor> rotary(const at::Tensor &x, const at::Tensor &cos,
                                 const at::Tensor &sin,
                                 const std::optional<at::Tensor> &positions,
                                 bool bshd);
std::optional<at::Tensor> crossEntropy(const at::Tensor &logits,
                                       const at::Tensor &labels,
                                       int64_t ignoreIndex, int64_t reduction);
std::optional<at::Tensor> linearTrain(const at::Tensor &x, const at::Tensor &w,
                                      const std::optional<at::Tensor> &bias,
                                      int64_t activation);

} // namespace kiln_ext
