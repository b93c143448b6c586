//===- BuilderState.cpp - the DSL's checks and its builder's state --------===//
//
// What every DSL call shares (BuilderState.h): the kernel under
// construction on this thread, the user's location, and the checks that
// name the user's line (a value from another kernel, or from inside a loop
// body, an empty tile, a constant past 32 bits).
//
//===----------------------------------------------------------------------===//
#include "BuilderState.h"

#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;

namespace kiln::dsl {

namespace detail {

KernelBuilder::State &state(const Loc &loc) {
  KernelBuilder::State *current = currentState();
  if (!current)
    userError(loc, "kiln DSL call outside a KernelBuilder");
  return *current;
}
OpBuilder &builder(const Loc &loc) { return state(loc).builder; }

Location location(const Loc &loc) {
  return FileLineColLoc::get(state(loc).ctx(), loc.file_name(), loc.line(),
                             loc.column());
}

void userError(const Loc &loc, const std::string &message) {
  throw Error(std::string(loc.file_name()) + ":" + std::to_string(loc.line()) +
              ": " + message);
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  return shapeToString(std::vector<int64_t>(shape.begin(), shape.end()));
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

void checkSameKernel(uint64_t serial, const Loc &loc, const std::string &what) {
  if (serial != state(loc).serial)
    userError(loc, what +
                       " was made while building another kernel (tiles, "
                       "Indexes and tensor views live as long as the "
                       "KernelBuilder that made them): build it again in "
                       "kernel '" +
                       state(loc).kernel->name + "'");
}

void checkInScope(Value v, const Loc &loc, const std::string &what) {
  mlir::Block *at = builder(loc).getInsertionBlock();
  Region *made = v.getParentRegion();
  if (at && made && !made->isAncestor(at->getParent()))
    userError(loc, what + " was made inside a loop body (forRange) and is used "
                          "outside it: a value leaves a loop through carry()");
}

void checkIndex(const Index &i, const Loc &loc, const std::string &what) {
  if (!i.kernelSerial())
    return;
  checkSameKernel(i.kernelSerial(), loc, what);
  checkInScope(value(i.raw()), loc, what);
}

RankedTensorType tileType(const Tile &t, const Loc &loc, const char *op) {
  if (!t.valid())
    userError(loc, std::string(op) + ": tile is empty (default-constructed)");
  const std::string what = std::string(op) + ": the tile";
  checkSameKernel(t.kernelSerial(), loc, what);
  checkInScope(value(t.raw()), loc, what);
  return cast<RankedTensorType>(value(t.raw()).getType());
}

Value i32Constant(int64_t v, const Loc &loc) {
  if (v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max())
    userError(loc, "constant " + std::to_string(v) +
                       " does not fit kiln's 32-bit index width");
  OpBuilder &b = builder(loc);
  return arith::ConstantIntOp::create(b, location(loc), v, 32);
}

} // namespace detail

} // namespace kiln::dsl
