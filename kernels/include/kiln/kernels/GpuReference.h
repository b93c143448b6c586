//===- GpuReference.h - reference kernels run on the GPU --------*- C++ -*-===//
//
// Plain CUDA C++ kernels in fp32 arithmetic, compiled with NVRTC when first
// used: the independent check of kiln's GPU results at sizes where the fp64
// host reference would take too long.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_GPUREFERENCE_H
#define KILN_KERNELS_GPUREFERENCE_H

#include "kiln/kernels/Attention.h"
#include "kiln/runtime/HostTensor.h"

namespace kiln::kernels {

/// The CUDA C++ source of the reference kernels.
const char *gpuReferenceSource();

/// Attention forward on device memory: q, k, v are (B,H,N,D) device tensors
/// with any strides; o is a contiguous fp32 (B,H,Nq,D) and lse a contiguous
/// fp32 (B,H,Nq) device buffer. Synchronises before returning.
void attentionReferenceGpu(const AttentionShape &s, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v, void *o,
                           void *lse);

} // namespace kiln::kernels

#endif // KILN_KERNELS_GPUREFERENCE_H
