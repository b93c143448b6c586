//===- EmitPtx.h - LLVM IR to PTX for kiln's kernels ------------*- C++ -*-===//
//
// Internal to compiler/lib/Target.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_LIB_TARGET_EMITPTX_H
#define KILN_COMPILER_LIB_TARGET_EMITPTX_H

#include "kiln/Compiler/Compile.h"

#include <string>

namespace llvm {
class Module;
} // namespace llvm

namespace kiln {

/// Optimises `m` for `arch` through `pipeline` (GpuTarget::llvmPipeline:
/// "kiln", "O1"-"O3" or "passes:<text>") and writes its PTX into `out.ptx`,
/// adding the "llvm-opt" and "ptx" stages (with the optimised IR when
/// `keep`).
void emitPtx(llvm::Module &m, const std::string &arch,
             const std::string &pipeline, CompiledKernel &out, bool keep);

} // namespace kiln

#endif // KILN_COMPILER_LIB_TARGET_EMITPTX_H
