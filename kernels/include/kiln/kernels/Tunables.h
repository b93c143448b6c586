//===- Tunables.h - the library kernels' tuning spaces and keys -*- C++ -*-===//
//
// One definition of each library kernel's Configs, tuning-database name and
// key, shared by its launches (libkiln_c, for PyTorch) and by `kiln tune
// <name>` (registered in Tunables.cpp), so that a tuning on the command
// line is the record the launches find.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_TUNABLES_H
#define KILN_KERNELS_TUNABLES_H

#include "kiln/Compiler/Autotuned.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/RmsNorm.h"

#include <memory>
#include <string>

namespace kiln::kernels {

/// RMSNorm (layer = false) or LayerNorm over `cols` columns: database names
/// "rmsnorm" / "layernorm", key rowNormKey(rows, cols, types): the rows'
/// power of two is part of it (a tuning on 200 rows says little about
/// 16384), and the element types where any is not bf16.
std::unique_ptr<AutotunedKernel>
rowNormTuned(bool layer, int64_t cols, double eps, RowNormTypes types = {});
std::string rowNormKey(int64_t rows, int64_t cols, RowNormTypes types = {});
/// Their gradients: "rmsnorm_backward" / "layernorm_backward", the same
/// keys. Tuning compares DX alone: the partial rows of dW and dB differ by
/// Config (each splits the rows among the programs its own way); their sums
/// are what the tests check.
std::unique_ptr<AutotunedKernel> rowNormBackwardTuned(bool layer, int64_t cols,
                                                      double eps,
                                                      RowNormTypes types = {});
/// The backward's programs P (dW's partial rows) for `rows` on a GPU of
/// `sms` SMs: two per SM keep every SM busy; at most one a row.
int64_t rowNormBackwardPrograms(int64_t rows, int64_t sms);

/// Rotary embedding (or its inverse) of head dimension D: "kiln.rotary" /
/// "kiln.rotary_inverse", key rotaryKey(H, T, D).
std::unique_ptr<AutotunedKernel> rotaryTuned(int64_t headDim, bool inverse);
std::string rotaryKey(int64_t heads, int64_t tokens, int64_t headDim);

/// Cross-entropy forward or backward: "kiln.cross_entropy_fwd" / "_bwd",
/// key crossEntropyKey(R, V).
std::unique_ptr<AutotunedKernel>
crossEntropyTuned(bool backward, int64_t ignoreIndex, bool perRowGrad);
std::string crossEntropyKey(int64_t rows, int64_t vocab);

/// How kiln.linear's GEMM takes its operands and what it writes besides C
/// (GemmShape's fields of the same names): the forward's weight as BT, the
/// backward's X^T·dZ with A as AT, the pre-activation Z for the gradient.
struct LinearLayout {
  bool bTransposed = false, aTransposed = false, preActivation = false;
  /// C as splitK partial products (GemmShape::splitPartials): (splitK, M,
  /// N) fp32, no epilogue; the caller sums them. 1: C is (M, N).
  int64_t splitK = 1;
};
/// The GEMM with its epilogue, bf16 in and out, for compute capability
/// `sm` (90, 80): "kiln.linear", key linearKey(M, N, K, bias, act, layout).
std::unique_ptr<AutotunedKernel> linearTuned(bool bias, GemmActivation act,
                                             int sm, LinearLayout layout = {});
/// "M=2^13 N=50264 K=768 bf16 epilogue=bias+gelu" (or none, bias, relu...):
/// M by power of two, the epilogue named (each tunes on its own); then
/// " A=KxM", " B=NxK", " +Z", " split=S" for the layout's fields that are
/// set.
std::string linearKey(int64_t M, int64_t N, int64_t K, bool bias,
                      GemmActivation act, LinearLayout layout = {});
/// The K ranges a GEMM without epilogue takes on a GPU of `sms` SMs (1: not
/// split). Split where whole waves of 128x128 output tiles would leave SMs
/// idle (a weight gradient's 768x768 over 16384 rows: 36 tiles on 132
/// SMs): the fewest ranges whose tiles fill 80% of their waves, else the
/// ranges that fill the most (at least 15 points more than one range), each
/// range at least 1024 long.
int64_t linearSplitK(int64_t M, int64_t N, int64_t K, int64_t sms);

} // namespace kiln::kernels

#endif // KILN_KERNELS_TUNABLES_H
