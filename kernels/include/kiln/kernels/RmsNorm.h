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

/// The element types of a row norm's tensors, each bf16 or f32: X (and the
/// gradient DX), W (and B), Y (and the gradient DY). Under bf16 autocast a
/// norm reads the fp32 residual stream and fp32 parameters as they are and
/// writes bf16 (no cast kernels); the math is fp32 whatever they are.
struct RowNormTypes {
  DType x = DType::bf16, w = DType::bf16, y = DType::bf16;
  bool allBf16() const {
    return x == DType::bf16 && w == DType::bf16 && y == DType::bf16;
  }
  std::string name() const; ///< "x=f32 w=f32 y=bf16"
};

/// The longest row the norms take: a row is one tile in registers.
inline constexpr int64_t kRowNormMaxCols = int64_t(1) << 20;

/// Y = X / sqrt(mean(X^2 over a row) + eps) * W for X, Y (R, cols) and W
/// (cols) of `types` (bf16 by default); R is a run-time argument bound from the
/// tensors. A row is one tile of the power of two at or above cols (the columns
/// past it load as 0, are masked where they would count, and are not stored).
Kernel rmsNorm(int64_t cols, const RmsNormConfig &config = {},
               double eps = 1e-6, RowNormTypes types = {});

/// Y = (X - mean) / sqrt(var + eps) * W + B over each row (torch's
/// layer_norm), bf16 X, Y (R, cols), W and B (cols), the same schedule
/// space, any cols.
Kernel layerNorm(int64_t cols, const RmsNormConfig &config = {},
                 double eps = 1e-5, RowNormTypes types = {});

/// The gradients of rmsNorm: DX (R, cols) bf16 from X, W and DY, and dW in
/// fp32 partial sums DWP (P, cols), one row per program (P programs, bound
/// from DWP's rows; each takes the row blocks p, p + P, ...): dW is DWP's
/// sum over its rows, which the caller takes.
Kernel rmsNormBackward(int64_t cols, const RmsNormConfig &config = {},
                       double eps = 1e-6, RowNormTypes types = {});

/// The gradients of layerNorm likewise: DX, and dW and dB as the sums of
/// DWP's and DBP's rows (P, cols).
Kernel layerNormBackward(int64_t cols, const RmsNormConfig &config = {},
                         double eps = 1e-5, RowNormTypes types = {});

} // namespace kiln::kernels

#endif // KILN_KERNELS_RMSNORM_H
