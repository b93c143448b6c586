//===- Toolkit.h - SASS and resource usage through the CUDA tools -*- C++
//-*-===//
//
// What only NVIDIA's assembler knows (registers, spills, the SASS) comes from
// running the CUDA toolkit's tools on the PTX when they are installed:
// ptxas, then cuobjdump or nvdisasm. Each is looked up in PATH, then
// $CUDA_HOME/bin, then /usr/local/cuda/bin.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_TOOLKIT_H
#define KILN_COMPILER_TOOLKIT_H

#include "kiln/Compiler/Compile.h"

#include <optional>
#include <string>

namespace kiln {

/// The path of a CUDA tool, or nothing when it is not installed.
std::optional<std::string> findCudaTool(const std::string &name);

/// The kernel assembled by `ptxas -v` for its arch.
struct Assembled {
  std::string cubin;
  std::string log; ///< what ptxas -v printed
  int registers = 0;
  int64_t stackBytes = 0, spillStoreBytes = 0, spillLoadBytes = 0;
  int64_t staticSharedBytes = 0;
};

/// Throws kiln::Error when ptxas is missing or rejects the PTX.
Assembled assembleWithPtxas(const CompiledKernel &kernel);

/// SASS of a cubin through cuobjdump -sass, else nvdisasm. Throws kiln::Error
/// naming both when neither is installed.
std::string disassemble(const std::string &cubin);

/// Blocks per SM from the architecture's limits (threads, registers in
/// 256-register warp allocations, shared memory, blocks), for use without a
/// GPU; `limiter` names the limit that binds.
struct Occupancy {
  int blocksPerSM = 0;
  int warpsPerSM = 0, maxWarpsPerSM = 0;
  std::string limiter;
};
Occupancy estimateOccupancy(const std::string &arch, int threads, int registers,
                            int64_t sharedBytes);

} // namespace kiln

#endif // KILN_COMPILER_TOOLKIT_H
