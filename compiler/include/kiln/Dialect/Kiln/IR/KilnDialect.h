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

#include "kiln/Dialect/Kiln/IR/Layout.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h.inc"
#include "kiln/Dialect/Kiln/IR/KilnEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnAttrs.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.h.inc"

namespace kiln {
/// Attribute names on a kernel's func.func.
inline constexpr llvm::StringLiteral kKernelAttr = "kiln.kernel";
/// Programs per axis; -1 (kiln::kDynamicDim) for an axis evaluated at launch,
/// whose GridExtent::str() formula kGridExtentsAttr then holds (one string per
/// axis).
inline constexpr llvm::StringLiteral kGridAttr = "kiln.grid";
inline constexpr llvm::StringLiteral kGridExtentsAttr = "kiln.grid_extents";

/// The layout of a tile type's #kiln.layout encoding, if it has one.
std::optional<Layout> layoutOf(mlir::Type type);
/// `type` with the encoding `layout`.
mlir::RankedTensorType withLayout(mlir::Type type, const Layout &layout);
/// Gives the value `v` the tile type `t` (same shape and element type), and
/// a constant's value attribute along with it.
void setTileType(mlir::Value v, mlir::RankedTensorType t);

/// Whether every use of `v` is a dot's a or b operand, through layout
/// conversions and transposes (b = kᵀ): a tile that lives only to be
/// multiplied, which the GPU lowering stages in shared memory.
bool onlyDotOperand(mlir::Value v);

/// Registers every dialect a kiln module may contain.
void registerKilnDialects(mlir::DialectRegistry &registry);
} // namespace kiln

#endif // KILN_DIALECT_KILN_IR_KILNDIALECT_H
