//===- Passes.h - kiln's passes and the GPU pipeline ------------*- C++ -*-===//
#ifndef KILN_TRANSFORMS_PASSES_H
#define KILN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>

namespace kiln {

#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "kiln/Transforms/Passes.h.inc"

/// What the GPU pipeline needs to know beyond the IR.
struct GpuPipelineOptions {
  int numWarps = 4;
  int numStages = 2;
  bool reloadThreadIds = false;
  bool hasWgmma = false; ///< sm_90a
  int64_t sharedLimit = 227 * 1024; ///< bytes of shared memory a block may take
};

/// Layout assignment and cleanup: kiln IR -> kiln IR with #kiln.layout
/// encodings and explicit conversions.
void buildLayoutPipeline(mlir::OpPassManager &pm, const GpuPipelineOptions &o);
/// Laid-out kiln IR -> LLVM dialect (with NVVM) ready for translation.
void buildLLVMLoweringPipeline(mlir::OpPassManager &pm,
                               const GpuPipelineOptions &o);

} // namespace kiln

#endif // KILN_TRANSFORMS_PASSES_H
