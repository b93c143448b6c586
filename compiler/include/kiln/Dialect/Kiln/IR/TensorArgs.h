//===- TensorArgs.h - what a kernel knows of its tensor arguments -*- C++
//-*-===//
//
// A tensor argument is a pointer parameter (with a kiln.tensor_shape
// attribute, and kiln.tensor_dims for run-time dimensions) followed by one i32
// stride parameter per dimension. A compile specialises each pointer argument
// on its own: `kiln.aligned` on the pointer parameter says that the bound
// tensor's base is 16-byte aligned, its last dimension contiguous and its other
// strides multiples of 16 bytes, so that accesses through it may use 16-byte
// vectors, cp.async and TMA. Loads and stores of other tensors take element
// accesses without demoting these.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECT_KILN_IR_TENSORARGS_H
#define KILN_DIALECT_KILN_IR_TENSORARGS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {

/// On a tensor's pointer argument: its shape, -1 (kiln::kDynamicDim) for a
/// run-time dimension; when one is, kTensorDimsAttr holds per dimension the
/// function argument that holds it (-1 for those compiled in).
inline constexpr llvm::StringLiteral kTensorShapeAttr = "kiln.tensor_shape";
inline constexpr llvm::StringLiteral kTensorDimsAttr = "kiln.tensor_dims";
inline constexpr llvm::StringLiteral kAlignedArgAttr = "kiln.aligned";
/// On a tensor's pointer argument: its last dimension has stride 1 (the
/// kernel requires it; KernelBuilder::requireContiguous).
inline constexpr llvm::StringLiteral kContiguousArgAttr = "kiln.contiguous";
/// On an i32 argument: a power of two its value is a multiple of.
inline constexpr llvm::StringLiteral kDivisibilityArgAttr = "kiln.divisibility";
/// On an i32 argument: the number of an i32 argument its value is at least
/// (the launcher refuses others; KernelBuilder::requireAtLeast).
inline constexpr llvm::StringLiteral kAtLeastArgAttr = "kiln.at_least";

/// The argument of the enclosing function that a pointer derives from
/// through kiln.addptr, if it derives from one.
mlir::BlockArgument pointerArgumentOf(mlir::Value ptr);

/// Whether block accesses through `ptr` may assume its tensor argument's
/// argument's aligned specialisation (kAlignedArgAttr).
bool isAlignedAccess(mlir::Value ptr);
/// Whether the last dimension behind `ptr` has stride 1: aligned, or
/// required contiguous (kContiguousArgAttr).
bool isContiguousAccess(mlir::Value ptr);

/// The name a report gives the tensor behind `ptr`: its kiln.name (the DSL's
/// tensor name), else "argument N", else "a computed pointer".
std::string accessedTensorName(mlir::Value ptr);

/// Marks every pointer argument of `func` aligned (kiln-assign-layouts'
/// `aligned` option: all tensors at once, for hand-written IR).
void markAllPointersAligned(mlir::func::FuncOp func);

} // namespace kiln

#endif // KILN_DIALECT_KILN_IR_TENSORARGS_H
