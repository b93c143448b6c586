//===- RmsNorm.h - RMSNorm and LayerNorm in kiln's DSL ----------*- C++ -*-===//
#ifndef KILN_KERNELS_RMSNORM_H
#define KILN_KERNELS_RMSNORM_H

#include "kiln/Compiler/Kernel.h"

#include <string>
#include <vector>

namespace kiln::kernels {

/// Schedule: rows per program (each row whole in registers) and warps.
struct RmsNormConfig {
  int64_t rows = 1;
  int warps = 4;
  std::string name() const; ///< "rows=2 warps=8"
};

/// The Configs AutotunedKernel chooses among: rows 1, 2, 4, 8 by warps 4, 8.
std::vector<RmsNormConfig> rmsNormConfigs();

/// Y = X / sqrt(mean(X^2 over a row) + eps) * W for bf16 X, Y (R, cols) and
/// W (cols); R is a run-time argument bound from the tensors. A row is one
/// tile of the power of two at or above cols (the columns past it load as
/// 0, are masked where they would count, and are not stored).
Kernel rmsNorm(int64_t cols, const RmsNormConfig &config = {},
               double eps = 1e-6);

/// Y = (X - mean) / sqrt(var + eps) * W + B over each row (torch's
/// layer_norm), bf16 X, Y (R, cols), W and B (cols), the same schedule
/// space, any cols.
Kernel layerNorm(int64_t cols, const RmsNormConfig &config = {},
                 double eps = 1e-5);

/// The gradients of rmsNorm: DX (R, cols) bf16 from X, W and DY, and dW in
/// fp32 partial sums DWP (P, cols), one row per program (P programs, bound
/// from DWP's rows; each takes the row blocks p, p + P, ...): dW is DWP's
/// sum over its rows, which the caller takes.
Kernel rmsNormBackward(int64_t cols, const RmsNormConfig &config = {},
                       double eps = 1e-6);

/// The gradients of layerNorm likewise: DX, and dW and dB as the sums of
/// DWP's and DBP's rows (P, cols).
Kernel layerNormBackward(int64_t cols, const RmsNormConfig &config = {},
                         double eps = 1e-5);

} // namespace kiln::kernels

#endif // KILN_KERNELS_RMSNORM_H
