//===- RtValue.h - values of the CPU interpreter ----------------*- C++ -*-===//
//
// Internal to the CPU executor. A value is a scalar (shape {}) or a tile of
// floats or integers, or a pointer. Floats are held as float, already rounded
// to their MLIR element type; integers as int64_t, wrapped to their width.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_REFERENCE_RTVALUE_H
#define KILN_LIB_REFERENCE_RTVALUE_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::ref {

struct RtValue {
  mlir::Type elemType; ///< element type; the pointee type for pointers
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  char *ptr = nullptr;
  bool isPointer = false;

  bool isFloatTy() const;
  int64_t numel() const;
};
using RtRef = std::shared_ptr<const RtValue>;

/// A fresh value of `type` (a tensor, or a scalar int/float type) with storage.
std::shared_ptr<RtValue> makeValue(mlir::Type type);
float roundToType(mlir::Type t, float v);
int64_t wrapToType(mlir::Type t, int64_t v);

/// Evaluates an arith/math op on scalars or tiles; returns null when `op` is
/// not one it knows.
RtRef evalElementwise(mlir::Operation *op, llvm::ArrayRef<RtRef> operands);

/// Throws kiln::Error "CPU executor: <msg>" naming the op and its location.
[[noreturn]] void fault(mlir::Operation *op, const std::string &msg);

} // namespace kiln::ref

#endif // KILN_LIB_REFERENCE_RTVALUE_H
