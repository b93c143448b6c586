//===- Pipeline.cpp - kiln's pass order, in one place ---------------------===//
//
//   kiln IR (from the DSL)
//   0. kiln-overlap-dots              (schedule kiln.overlap_dots) a loop's
//                                     last dot one iteration behind (and
//                                     under kiln.peel_first_iteration its
//                                     first iteration peeled)
//   1. kiln-assign-layouts            a #kiln.layout on every tile, explicit
//                                     kiln.convert_layout where layouts differ
//   2. kiln-remove-layout-conversions recompute instead of moving, fold chains
//   3. cse                            merge the recomputed copies
//   4. convert-kiln-to-llvm           one thread's view: LLVM + NVVM dialects
//   5. scf -> cf; arith, math, cf -> llvm in one convert-to-llvm (through
//      the dialects' ConvertToLLVM interfaces); canonicalize; cse
//   then (Target/Compile.cpp) translation to LLVM IR, LLVM O3 and the NVPTX
//   backend's PTX.
//
//===----------------------------------------------------------------------===//
#include "kiln/Transforms/Passes.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace kiln {

void buildLayoutPipeline(OpPassManager &pm, const GpuPipelineOptions &o) {
  KilnAssignLayoutsOptions assign;
  assign.numWarps = o.numWarps;
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(createKilnOverlapDots());
  fn.addPass(createKilnAssignLayouts(assign));
  fn.addPass(createKilnRemoveLayoutConversions());
  fn.addPass(createCSEPass());
}

void buildLLVMLoweringPipeline(OpPassManager &pm, const GpuPipelineOptions &o) {
  ConvertKilnToLLVMOptions lower;
  lower.numStages = o.numStages;
  lower.reloadThreadIds = o.reloadThreadIds;
  lower.hasWgmma = o.hasWgmma;
  lower.sharedLimit = o.sharedLimit;
  pm.addPass(createConvertKilnToLLVM(lower));
  // One-shot conversions (no pattern rollback): none of these patterns
  // fails halfway, and rollback bookkeeping doubles the time on kiln's
  // unrolled code.
  SCFToControlFlowPassOptions scf;
  scf.allowPatternRollback = false;
  pm.addPass(createSCFToControlFlowPass(scf));
  ConvertToLLVMPassOptions toLLVM;
  toLLVM.allowPatternRollback = false;
  pm.addPass(createConvertToLLVMPass(toLLVM));
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

} // namespace kiln
