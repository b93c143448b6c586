//===- CrossEntropy.h - softmax cross-entropy in kiln's DSL -----*- C++ -*-===//
#ifndef KILN_KERNELS_CROSSENTROPY_H
#define KILN_KERNELS_CROSSENTROPY_H

#include "kiln/Compiler/Kernel.h"

#include <string>
#include <vector>

namespace kiln::kernels {

/// Schedule: rows per program, vocabulary columns per step, warps.
struct CrossEntropyConfig {
  int64_t rows = 1;
  int64_t blockV = 4096;
  int warps = 8;
  std::string name() const; ///< "rows=1 blockV=4096 warps=8"
};

/// The Configs AutotunedKernel chooses among.
std::vector<CrossEntropyConfig> crossEntropyConfigs();

/// Softmax cross-entropy of bf16 logits X (R, V) against i64 Labels (R),
/// one pass over each row (an online logsumexp): LSE (R) = log Σ exp(X[r]),
/// Loss (R) = LSE[r] − X[r, Labels[r]], 0 where Labels[r] == ignoreIndex
/// (torch's reduction='none'). R and V are run-time arguments.
Kernel crossEntropyForward(const CrossEntropyConfig &config = {},
                           int64_t ignoreIndex = -100);

/// Its gradient: DX (R, V) bf16 = (exp(X[r] − LSE[r]) − onehot(Labels[r])) ·
/// Scale[0] (· DLoss[r] with `perRowGrad`), rows of ignored labels 0. Scale
/// (1) and DLoss (R) are f32: for torch's reduction='mean', Scale is the
/// loss's gradient over the count of labels not ignored; for 'none', DLoss
/// is the per-row gradient and Scale 1.
Kernel crossEntropyBackward(const CrossEntropyConfig &config = {},
                            int64_t ignoreIndex = -100,
                            bool perRowGrad = false);

} // namespace kiln::kernels

#endif // KILN_KERNELS_CROSSENTROPY_H
