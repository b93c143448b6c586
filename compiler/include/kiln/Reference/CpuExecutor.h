//===- CpuExecutor.h - run a kiln kernel on the host ------------*- C++ -*-===//
//
// The reference every GPU result is checked against: an interpreter of the
// kiln IR that runs the kernel body once per program of the grid, in fp32
// arithmetic, rounding to bf16/f16 wherever the IR produces those types.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_REFERENCE_CPUEXECUTOR_H
#define KILN_REFERENCE_CPUEXECUTOR_H

#include "kiln/Compiler/Kernel.h"

namespace kiln {

struct CpuRunOptions {
  /// Host threads over which the programs are spread; 0 for one per core.
  unsigned threads = 0;
};

/// Runs every program of the kernel's grid over host memory. `args` has one
/// value per parameter (see Kernel::bind). Throws kiln::Error on bad
/// arguments or on a fault inside the kernel (naming the op's source line).
void runOnCpu(const Kernel &kernel, const std::vector<ArgValue> &args,
              const CpuRunOptions &options = {});

} // namespace kiln

#endif // KILN_REFERENCE_CPUEXECUTOR_H
