//===- Rotary.h - rotary position embedding in kiln's DSL -------*- C++ -*-===//
#ifndef KILN_KERNELS_ROTARY_H
#define KILN_KERNELS_ROTARY_H

#include "kiln/Compiler/Kernel.h"

#include <string>
#include <vector>

namespace kiln::kernels {

/// Schedule: tokens per program (every head of them) and warps.
struct RotaryConfig {
  int64_t tokens = 32;
  int warps = 4;
  std::string name() const; ///< "tokens=32 warps=4"
};

/// The Configs AutotunedKernel chooses among.
std::vector<RotaryConfig> rotaryConfigs();

/// Rotary position embedding (RoPE, the rotate-half form of GPT-NeoX and
/// Llama) of bf16 X (H, T, headDim) into Y (same shape; any strides, the
/// last dimension contiguous): with x1, x2 the halves of X[h, t] and c, s
/// rows Pos[t] of Cos and Sin (P, headDim/2, f32), Y[h, t] = (x1·c − x2·s,
/// x2·c + x1·s). `inverse` rotates the other way (−s): the gradient. H, T
/// and P are run-time arguments; Pos (T) is i32.
Kernel rotary(int64_t headDim, const RotaryConfig &config = {},
              bool inverse = false);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ROTARY_H
