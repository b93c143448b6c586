//===- IndexFacts.h - what is known of an index -----------------*- C++ -*-===//
//
// Internal to compiler/lib/Conversion (IndexFacts.cpp): divisors, signs and
// bounds of the kiln IR's i32 values, which decide vector widths and the
// bounds checks an access can drop.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_CONVERSION_INDEXFACTS_H
#define KILN_LIB_CONVERSION_INDEXFACTS_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::gpu {

/// The largest power of two known to divide an i32 value of the kiln IR
/// (constants, products, sums, loop induction variables).
int64_t knownDivisor(mlir::Value v);
/// The value of an integer arith.constant.
std::optional<int64_t> constantInt(mlir::Value v);
/// Whether an i32 value of the kiln IR is provably >= 0 (program ids,
/// constants, sums, products, quotients by constants, loop induction
/// variables from such a lower bound).
bool knownNonNegative(mlir::Value v);
/// Whether a block of `length` elements from `offset` provably lies within
/// [0, dim): constants, or a loop's induction variable (not one lowered at
/// an iteration the loop may not run: `ivsOutOfRange`) whose upper bound is
/// at most `dim`, both multiples of `length` (IndexFacts.cpp).
bool blockWithin(mlir::Value offset, int64_t length, mlir::Value dim,
                 const llvm::DenseSet<mlir::Value> &ivsOutOfRange);
/// What the lowering report adds to a block access through registers: the
/// dimensions it takes no bounds checks along, if any.
std::string boundsChecksText(mlir::ValueRange offsets, mlir::ValueRange shape,
                             llvm::ArrayRef<int64_t> block);

} // namespace kiln::gpu

#endif // KILN_LIB_CONVERSION_INDEXFACTS_H
