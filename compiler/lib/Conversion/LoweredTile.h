//===- LoweredTile.h - a tile in registers or shared memory -----*- C++ -*-===//
//
// Internal to compiler/lib/Conversion: what a kiln IR tile becomes in the
// lowering, and the element types' sizes.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_CONVERSION_LOWEREDTILE_H
#define KILN_LIB_CONVERSION_LOWEREDTILE_H

#include "kiln/Dialect/Kiln/IR/Layout.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

namespace kiln::gpu {

/// A lowered tile: one register per bit pattern of the layout's register
/// bits, or a single scalar when the tile is uniform.
struct Regs {
  std::optional<Layout> layout;
  llvm::SmallVector<mlir::Value> regs;
  mlir::Value scalar; ///< uniform tiles
};

/// A 2-D tile of 16-bit (or 32-bit) elements in shared memory: rows of
/// `cols` elements with 16-byte chunks XOR-swizzled by row; `rowDim`/`colDim`
/// say which logical dimension runs along rows and along the contiguous
/// columns (a transpose is a view). For wgmma and TMA the columns are split
/// into panels of 128 bytes (64 16-bit elements; chunks XOR'ed with row % 8:
/// the hardware's 128-byte swizzle), each panel holding every row, one panel
/// after the other.
struct SmemTile {
  mlir::Value base; ///< i32 bytes from the start of dynamic shared memory
  std::vector<int64_t> shape;
  int rowDim = 0, colDim = 1;
  int64_t cols = 0, swz = 1;
  int64_t panelCols = 0; ///< columns per panel; == cols: a single panel
  int64_t elemBytes = 2;
  /// Elements per 16-byte chunk.
  int64_t chunkElems() const { return 16 / elemBytes; }
  int64_t rowBytes() const { return panelCols * elemBytes; }
  int64_t panelBytes() const { return shape[rowDim] * rowBytes(); }
  bool paneled() const { return panelCols != cols; }
  /// Consecutive elements along colDim that each thread of the source layout
  /// holds (what one staging store writes).
  int64_t sourceVec = 1;
};

/// Bytes of one element in memory (i1 takes a byte).
int64_t byteSize(mlir::Type t);

/// Element type of a tile or scalar type.
inline mlir::Type elementType(mlir::Type t) {
  if (auto rt = mlir::dyn_cast<mlir::RankedTensorType>(t))
    return rt.getElementType();
  return t;
}

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_LOWEREDTILE_H
