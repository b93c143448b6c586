//===- GlobalAccess.h - global memory accesses ------------------*- C++ -*-===//
//
// Internal to compiler/lib/Conversion: how wide a block access through
// registers can be (LowerGlobalAccess.cpp), a guarded element read
// (LowerGather.cpp), and the lowering report's words for them.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_CONVERSION_GLOBALACCESS_H
#define KILN_LIB_CONVERSION_GLOBALACCESS_H

#include "kiln/Dialect/Kiln/IR/Layout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>

namespace kiln::gpu {

/// n where registers 0..n-1 of layout `l` hold n consecutive elements of the
/// last dimension (what one vector access can move).
int64_t vectorWidth(const Layout &l);
/// Elements per vector access of a block in layout `l` through a pointer
/// `aligned` or not (1: none): what the layout, the element size and the
/// block's offset along the row allow.
int64_t accessWidth(bool aligned, const Layout &l, mlir::Type elem,
                    mlir::ValueRange offsets);
/// Whether vectors of `vec` elements may run past the end of a row of
/// length `shape.back()` (not a known multiple of `vec`): the last vector of
/// a row then goes element by element.
bool raggedVectors(int64_t vec, mlir::ValueRange shape);
/// " (element by element where a row's end cuts a vector)" when
/// raggedVectors, else "": the report's words for it.
std::string raggedText(int64_t vec, mlir::ValueRange shape);
/// "16-byte vector loads", "element stores", ...: an access of `vec`
/// elements per instruction (`what`: "load" or "store"), for the report.
std::string accessText(int64_t vec, mlir::Type elem, mlir::ValueRange shape,
                       const char *what);

/// Why accesses through `ptr` take no vectors, cp.async or TMA: its tensor
/// argument is not specialised as aligned (kiln.aligned), for the report.
std::string unalignedReason(mlir::Value ptr);
/// A tile's shape as the report writes it: "64x128".
std::string shapeText(llvm::ArrayRef<int64_t> shape);
/// `access(address)` of element `index` (stride `stride`) of the i32 tensor
/// at `ptr` where 0 <= index < size, else `outside`, of access's type
/// (LowerGather.cpp).
mlir::Value guardedElement(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value ptr, mlir::Value index, mlir::Value size,
                           mlir::Value stride, mlir::Value outside,
                           llvm::function_ref<mlir::Value(mlir::Value)> access);

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_GLOBALACCESS_H
