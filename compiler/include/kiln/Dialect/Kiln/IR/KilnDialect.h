//===- KilnDialect.h - the kiln tile dialect --------------------*- C++ -*-===//
#ifndef KILN_DIALECT_KILN_IR_KILNDIALECT_H
#define KILN_DIALECT_KILN_IR_KILNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h.inc"
#include "kiln/Dialect/Kiln/IR/KilnEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnTypes.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.h.inc"

namespace kiln {
/// Attribute names on a kernel's func.func.
inline constexpr llvm::StringLiteral kKernelAttr = "kiln.kernel";
inline constexpr llvm::StringLiteral kGridAttr = "kiln.grid";

/// Registers every dialect a kiln module may contain.
void registerKilnDialects(mlir::DialectRegistry &registry);
} // namespace kiln

#endif // KILN_DIALECT_KILN_IR_KILNDIALECT_H
