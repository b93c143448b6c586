//===- Compile.h - a kernel to PTX ------------------------------*- C++ -*-===//
//
// The compiler's output and the contract with the runtime: PTX plus what a
// launch needs (name, parameters, grid, threads, dynamic shared memory).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_COMPILE_H
#define KILN_COMPILER_COMPILE_H

#include "kiln/Compiler/Kernel.h"
#include "kiln/runtime/Launch.h"

#include <array>
#include <string>
#include <vector>

namespace kiln {

struct GpuTarget {
  std::string arch = "sm_90a"; ///< sm_80 or sm_90a
  int numWarps = 0;            ///< 0: the kernel's own (its Config's warps)
};

struct CompiledKernel {
  std::string name;
  std::string arch;
  std::array<int64_t, 3> grid{1, 1, 1};
  int threads = 128;
  int64_t sharedBytes = 0; ///< dynamic shared memory per CTA
  std::vector<ParamInfo> params;
  std::vector<TensorParamInfo> tensors;
  // Every stage, for inspection.
  std::string layouts;   ///< the layout assigned to each tile value
  std::string loweredIR; ///< LLVM + NVVM dialect
  std::string llvmIR;    ///< optimised LLVM IR
  std::string ptx;

  /// What the runtime needs to load and launch it.
  LaunchSpec spec() const { return {name, ptx, grid, threads, sharedBytes, params}; }
};

/// Compiles a kernel for a GPU target. Throws kiln::Error when the kernel
/// uses something the GPU path does not support, naming it.
CompiledKernel compileForGpu(const Kernel &kernel, const GpuTarget &target = {});

} // namespace kiln

#endif // KILN_COMPILER_COMPILE_H
