//===- Memory.cpp - tensor views, blocks, loads, stores, atomics ----------===//
#include "BuilderState.h"

using namespace mlir;

namespace kiln::dsl {

using namespace detail;

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TensorView::TensorView(void *pointer, DType dtype, std::vector<Index> dims,
                       std::vector<Index> strides, std::string name)
    : pointer_(pointer), kernel_(currentSerial()), dtype_(dtype),
      dims_(std::move(dims)), strides_(std::move(strides)),
      name_(std::move(name)) {
  for (const Index &d : dims_)
    shape_.push_back(d.isConstant() ? d.constant() : kDynamicDim);
}

TensorView TensorView::operator[](IndexArg i) const {
  checkSameKernel(kernel_, i.loc, "indexing " + name_ + ": the view");
  if (shape_.size() < 2)
    userError(i.loc, "indexing " + name_ + ": a " + shapeToString(shape_) +
                         " view has no leading dimension to drop");
  if (i.value.isConstant() &&
      (i.value.constant() < 0 ||
       (shape_[0] != kDynamicDim && i.value.constant() >= shape_[0])))
    userError(i.loc, "indexing " + name_ + ": index " +
                         std::to_string(i.value.constant()) +
                         " is out of range for dimension 0 of " +
                         shapeToString(shape_));
  // Pointer offsets are i64: a view may start past 2^31 elements.
  OpBuilder &b = builder(i.loc);
  Location l = location(i.loc);
  Value idx =
      arith::ExtSIOp::create(b, l, b.getI64Type(), value(i.value.raw()));
  Value stride =
      arith::ExtSIOp::create(b, l, b.getI64Type(), value(strides_[0].raw()));
  Value off = arith::MulIOp::create(b, l, idx, stride);
  Value p =
      AddPtrOp::create(b, l, value(pointer_).getType(), value(pointer_), off);
  return TensorView(
      raw(p), dtype_, std::vector<Index>(dims_.begin() + 1, dims_.end()),
      std::vector<Index>(strides_.begin() + 1, strides_.end()), name_ + "[]");
}

TensorView TensorView::firstRows(Index n, Loc loc) const {
  checkSameKernel(kernel_, loc, "firstRows of " + name_ + ": the view");
  checkIndex(n, loc, "firstRows of " + name_ + ": the row count");
  if (shape_.empty())
    userError(loc, "firstRows of " + name_ + ": a 0-D view has no rows");
  if (n.isConstant() && (n.constant() < 0 || (shape_[0] != kDynamicDim &&
                                              n.constant() > shape_[0])))
    userError(loc, "firstRows of " + name_ + ": " +
                       std::to_string(n.constant()) +
                       " rows is out of range for dimension 0 of " +
                       shapeToString(shape_));
  std::vector<Index> dims = dims_;
  dims[0] = n;
  return TensorView(pointer_, dtype_, std::move(dims), strides_, name_);
}

Block TensorView::block(std::vector<Index> offsets, Shape blockShape,
                        Loc loc) const {
  checkSameKernel(kernel_, loc, "block of " + name_ + ": the view");
  if (offsets.size() != shape_.size())
    userError(loc, "block of " + name_ + ": " + std::to_string(offsets.size()) +
                       " offsets for a " + shapeToString(shape_) + " view");
  if (!blockShape.empty() && blockShape.size() != shape_.size())
    userError(loc, "block of " + name_ + ": block shape " +
                       shapeToString(blockShape) + " has rank " +
                       std::to_string(blockShape.size()) + ", the view " +
                       shapeToString(shape_) + " has rank " +
                       std::to_string(shape_.size()));
  for (int64_t d : blockShape)
    if (d < 1)
      userError(loc, "block of " + name_ + ": block shape " +
                         shapeToString(blockShape) + " has an empty dimension");
  return Block{*this, std::move(offsets), std::move(blockShape), loc};
}

static void blockOperands(const Block &blk, const Loc &loc,
                          SmallVectorImpl<Value> &offsets,
                          SmallVectorImpl<Value> &shape,
                          SmallVectorImpl<Value> &strides) {
  const std::string what = "block of " + blk.view.name() + ": ";
  checkInScope(value(blk.view.pointer()), loc, what + "the view");
  for (const Index &o : blk.offsets) {
    checkIndex(o, loc, what + "an offset");
    offsets.push_back(value(o.raw()));
  }
  for (const Index &d : blk.view.dims())
    shape.push_back(value(d.raw()));
  for (const Index &s : blk.view.strides())
    strides.push_back(value(s.raw()));
}

Tile load(const Block &blk, double padding, Loc loc) {
  if (blk.shape.empty())
    userError(loc, "load from " + blk.view.name() +
                       ": the block needs a shape (block(offsets, shape))");
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  auto type = RankedTensorType::get(
      blk.shape, mlirType(state(loc).ctx(), blk.view.dtype()));
  auto op = LoadOp::create(b, location(loc), type, value(blk.view.pointer()),
                           offsets, shape, strides, b.getF64FloatAttr(padding));
  return Tile::fromRaw(raw(op.getResult()));
}

/// Checks a tile written into a block (a store or an atomic): its dtype and
/// rank are the tensor's, its shape the block's when given.
static void checkWrittenTile(const Block &blk, RankedTensorType t,
                             const std::string &what, const Loc &loc) {
  if (dtypeOf(t.getElementType()) != blk.view.dtype())
    userError(loc, what + "tile is " + typeStr(t.getElementType()) +
                       " but the tensor holds " + dtypeName(blk.view.dtype()) +
                       " (convert with .to(...))");
  if ((size_t)t.getRank() != blk.view.shape().size())
    userError(loc, what + "a " + shapeStr(t.getShape()) + " tile into a " +
                       shapeToString(blk.view.shape()) +
                       " view (ranks differ)");
  if (!blk.shape.empty() && ArrayRef<int64_t>(blk.shape) != t.getShape())
    userError(loc, what + "store of the wrong shape: block is " +
                       shapeToString(blk.shape) + ", tile is " +
                       shapeStr(t.getShape()));
}

void store(const Block &blk, const Tile &tile, Loc loc) {
  RankedTensorType t = tileType(tile, loc, "store");
  checkWrittenTile(blk, t, "store to " + blk.view.name() + ": ", loc);
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  StoreOp::create(b, location(loc), value(tile.raw()),
                  value(blk.view.pointer()), offsets, shape, strides);
}

static void atomic(ReduceKind kind, const char *name, const Block &blk,
                   const Tile &tile, const Loc &loc) {
  RankedTensorType t = tileType(tile, loc, name);
  std::string what = std::string(name) + " to " + blk.view.name() + ": ";
  checkWrittenTile(blk, t, what, loc);
  Type elem = t.getElementType();
  if (kind == ReduceKind::Sum ? !(elem.isF32() || elem.isInteger(32))
                              : !elem.isInteger(32))
    userError(loc, what + (kind == ReduceKind::Sum ? "f32 or i32" : "i32") +
                       " tiles only, got " + typeStr(elem));
  OpBuilder &b = builder(loc);
  SmallVector<Value> offsets, shape, strides;
  blockOperands(blk, loc, offsets, shape, strides);
  AtomicRMWOp::create(b, location(loc), kind, value(tile.raw()),
                      value(blk.view.pointer()), offsets, shape, strides);
}

void atomicAdd(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Sum, "atomicAdd", blk, tile, loc);
}
void atomicMax(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Max, "atomicMax", blk, tile, loc);
}
void atomicMin(const Block &blk, const Tile &tile, Loc loc) {
  atomic(ReduceKind::Min, "atomicMin", blk, tile, loc);
}

} // namespace kiln::dsl
