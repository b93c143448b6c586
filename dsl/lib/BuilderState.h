//===- BuilderState.h - the DSL's per-kernel build state --------*- C++ -*-===//
//
// Internal to dsl/lib: the OpBuilder and kernel under construction, reached
// through a thread-local pointer so that the DSL's free functions and
// operators need no builder argument.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_LIB_BUILDERSTATE_H
#define KILN_DSL_LIB_BUILDERSTATE_H

#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/dsl/Dsl.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace kiln::dsl {

struct KernelBuilder::State {
  std::shared_ptr<Kernel::Impl> kernel;
  mlir::OpBuilder builder;
  mlir::func::FuncOp func;
  Loc createdAt;
  bool gridSet = false; ///< by the constructor or setGrid
  /// This builder's number (1, 2, ... per process): tiles and Indexes carry
  /// it, so that one made for another kernel is refused, not dereferenced.
  uint64_t serial = 0;
  /// "file:line" of the first forRange whose body was left by an exception:
  /// its loop holds part of a body, so the kernel cannot be finished.
  std::string abandonedLoop;

  explicit State(std::shared_ptr<mlir::MLIRContext> ctx) : builder(ctx.get()) {
    kernel = std::make_shared<Kernel::Impl>();
    kernel->context = std::move(ctx);
  }
  mlir::MLIRContext *ctx() { return kernel->context.get(); }
};

namespace detail {
/// The builder of the kernel under construction on this thread; throws a
/// kiln::Error at `loc` when there is none.
KernelBuilder::State &state(const Loc &loc);
mlir::OpBuilder &builder(const Loc &loc);
mlir::Location location(const Loc &loc);
[[noreturn]] void userError(const Loc &loc, const std::string &message);

inline mlir::Value value(void *raw) {
  return mlir::Value::getFromOpaquePointer(raw);
}
inline void *raw(mlir::Value v) { return v.getAsOpaquePointer(); }
mlir::RankedTensorType tileType(const Tile &t, const Loc &loc, const char *op);
/// `a` (a tile, a number or an Index) as a tensor of `shape` and element
/// type `elem`: a tile as it is (broadcast from rank 0), a number or an
/// Index (i32 only) splatted; throws at `loc` naming `opName` (TileOps.cpp).
mlir::Value materialize(const TileArg &a, mlir::Type elem,
                        llvm::ArrayRef<int64_t> shape, const char *opName,
                        const Loc &loc);
/// The serial of the kernel under construction on this thread, 0 if none.
uint64_t currentSerial();
/// The state of the kernel under construction on this thread, or null.
KernelBuilder::State *currentState();
/// Throws at `loc` when `serial` (a Tile's or an Index's) is not the current
/// builder's.
void checkSameKernel(uint64_t serial, const Loc &loc, const std::string &what);
/// Throws at `loc` when `v` was made inside a loop body (forRange) that the
/// insertion point is not in: values leave a loop through carry().
void checkInScope(mlir::Value v, const Loc &loc, const std::string &what);
/// Both checks for a run-time Index used at `loc` (a constant serves
/// anywhere).
void checkIndex(const Index &i, const Loc &loc, const std::string &what);
// libkiln's own (MLIR types): not exported.
#pragma GCC visibility push(hidden)
std::string shapeStr(llvm::ArrayRef<int64_t> shape);
std::string typeStr(mlir::Type elementType);
#pragma GCC visibility pop
mlir::Value i32Constant(int64_t v, const Loc &loc);
} // namespace detail

} // namespace kiln::dsl

#endif // KILN_DSL_LIB_BUILDERSTATE_H
