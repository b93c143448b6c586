//===- Gemm.h - tiled matrix multiply in kiln's DSL -------------*- C++ -*-===//
#ifndef KILN_KERNELS_GEMM_H
#define KILN_KERNELS_GEMM_H

#include "kiln/Compiler/Kernel.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::kernels {

/// What the epilogue applies to A·B + bias before C is written.
enum class GemmActivation { None, Relu, GeluTanh };
/// "none", "relu", "gelu" (GELU's tanh form, as torch's approximate='tanh');
/// and back (nullopt for any other name).
const char *gemmActivationName(GemmActivation a);
std::optional<GemmActivation> parseGemmActivation(const std::string &name);

/// C (M x N, outDtype) = act(A (M x K, dtype) · B (K x N, dtype) + bias) + R,
/// fp32 accumulation and epilogue; bias, when asked for, is a tensor Bias
/// (N, dtype) added to every row.
struct GemmShape {
  int64_t M = 128, N = 128, K = 128;
  DType dtype = DType::bf16;
  DType outDtype = DType::f32;
  bool bias = false;
  GemmActivation activation = GemmActivation::None;
  /// A tensor R (M x N, dtype) added after the activation (a residual
  /// connection), read in the accumulator's layout.
  bool residual = false;
  /// B given as its transpose: a tensor BT (N x K, K contiguous) in place
  /// of B, as a torch nn.Linear stores its weight (out x in features), read
  /// as it is (wgmma takes B K-major; no transposing copy).
  bool bTransposed = false;
  /// A given as its transpose: a tensor AT (K x M, M contiguous) in place
  /// of A, as a weight gradient's X^T·dY reads the activations X (M x K)
  /// it was given, without a transposing copy.
  bool aTransposed = false;
  /// Also writes Z (M x N, outDtype): A·B + bias before the activation,
  /// what the activation's gradient needs in a backward pass.
  bool preActivation = false;
  /// Split-K's products kept apart: C is (splitK, M, N) fp32 and each K
  /// range stores its own product (GemmConfig::splitK ranges; one with
  /// splitK 1), for the caller to sum in a fixed order: deterministic,
  /// unlike atomics, and a rerun writes the same C (the tuner reruns
  /// candidates). No epilogue (bias, activation, residual, Z).
  bool splitPartials = false;
};

struct GemmConfig {
  int64_t blockM = 64, blockN = 64, blockK = 32;
  int warps = 4, stages = 3;
  bool wgmma = false; ///< dots on wgmma (sm_90a): see KernelBuilder::setWgmma
  /// Under wgmma, A and B through TMA (KernelBuilder::setTma).
  bool tma = true;
  /// With TMA, a producer warpgroup issues the copies
  /// (KernelBuilder::setWarpSpecialize).
  bool warpSpecialize = false;
  /// With TMA, C goes out through a swizzled staging tile and bulk copies
  /// (KernelBuilder::setTmaStores) rather than st.global from registers.
  bool tmaStore = false;
  /// One CTA per resident slot, looping over the output tiles
  /// (KernelBuilder::setPersistent).
  bool persistent = false;
  /// Launch order: groups of groupM row blocks walked column block by
  /// column block, so that the CTAs running at once share A's and B's
  /// blocks in L2 (8, `kiln bench gemm`'s default, measured 727 against 695
  /// TFLOP/s at bf16 8192^3 on the H200); 0 or 1: row blocks fastest.
  int64_t groupM = 0;
  /// CTAs an SM must hold at once (KernelBuilder::setMinBlocksPerSM): with
  /// 2, one CTA's epilogue runs beside another's MMAs; 0 leaves it to
  /// ptxas.
  int minBlocksPerSM = 0;
  /// M, N and K compiled in (a compile per shape) rather than run-time
  /// arguments bound from the tensors (one compile per class of their
  /// values).
  bool staticShapes = false;
  /// Split-K: each output tile's K steps in splitK ranges, one program
  /// each (the grid's last dimension), every range's product added into C
  /// by atomics: C must be fp32, hold its starting values (zeros for a
  /// plain product) and take no epilogue (bias, activation, residual, Z).
  /// For few output tiles over a long K (a weight gradient's 768x3072 over
  /// 8192 rows: 72 tiles of 128x256 on 132 SMs). With
  /// GemmShape::splitPartials each range stores its own product instead.
  int64_t splitK = 1;
};

/// The Configs AutotunedKernel chooses among for a GPU of compute
/// capability `sm` (90: wgmma, TMA, a producer warpgroup; else mma.sync),
/// each named ("128x256x64 s3").
std::vector<std::pair<std::string, GemmConfig>> gemmConfigs(int sm);

/// Builds the kernel; with run-time shapes (the default) it serves every M,
/// N and K, bound from the tensors (Kernel::bind).
Kernel gemm(const GemmShape &shape, const GemmConfig &config = {});

} // namespace kiln::kernels

#endif // KILN_KERNELS_GEMM_H
