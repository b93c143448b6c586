//===- Softmax.h - row softmax in kiln's DSL --------------------*- C++ -*-===//
#ifndef KILN_KERNELS_SOFTMAX_H
#define KILN_KERNELS_SOFTMAX_H

#include "kiln/Compiler/Kernel.h"

namespace kiln::kernels {

/// Y = softmax(X) along each row of a rows x cols tensor; fp32 math.
struct SoftmaxShape {
  int64_t rows = 128, cols = 128;
  DType dtype = DType::f32;
};

struct SoftmaxConfig {
  int64_t blockRows = 16, blockCols = 128;
  int warps = 4;
  /// rows and cols compiled in rather than run-time arguments bound from
  /// the tensors.
  bool staticShapes = false;
};

/// Builds the kernel; with run-time shapes (the default) it serves every
/// rows and cols, bound from the tensors (Kernel::bind).
Kernel softmax(const SoftmaxShape &shape, const SoftmaxConfig &config = {});

} // namespace kiln::kernels

#endif // KILN_KERNELS_SOFTMAX_H
