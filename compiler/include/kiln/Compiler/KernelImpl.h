//===- KernelImpl.h - the MLIR side of a Kernel -----------------*- C++ -*-===//
//
// Internal: included by kiln's own MLIR-using translation units only.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_KERNELIMPL_H
#define KILN_COMPILER_KERNELIMPL_H

#include "kiln/Compiler/Kernel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace kiln {

struct Kernel::Impl {
  std::shared_ptr<mlir::MLIRContext> context;
  mutable mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string name;
  std::vector<ParamInfo> params;
  std::vector<TensorParamInfo> tensors;
  GridExtents grid{1, 1, 1};
  int numWarps = 4;             ///< the schedule's warps per program
  int numStages = 2;            ///< software-pipeline depth of loads in loops
  bool reloadThreadIds = false; ///< see GpuTarget::reloadThreadIds

  /// The kernel function: the func.func named `name` in the module.
  mlir::func::FuncOp func() const;
};

/// A context with every dialect of a kiln module loaded.
std::shared_ptr<mlir::MLIRContext> makeKilnContext();

// libkiln's own (MLIR types): not exported.
#pragma GCC visibility push(hidden)
/// The kiln DType of an MLIR element type; throws for others.
DType dtypeOf(mlir::Type t);
/// The MLIR element type of a DType.
mlir::Type mlirType(mlir::MLIRContext *ctx, DType t);
#pragma GCC visibility pop

} // namespace kiln

#endif // KILN_COMPILER_KERNELIMPL_H
