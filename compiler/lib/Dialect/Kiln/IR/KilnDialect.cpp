//===- KilnDialect.cpp - kiln dialect, types and op verifiers -------------===//
//
// Verifier messages name the shapes involved: they are what a user sees when a
// hand-written .mlir file or a buggy pass produces a bad tile program.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/TensorArgs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Kiln/IR/KilnDialect.cpp.inc"
#include "kiln/Dialect/Kiln/IR/KilnEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnTypes.cpp.inc"

void KilnDialect::initialize() {
  registerLayoutAttr();
  addTypes<
#define GET_TYPEDEF_LIST
#include "kiln/Dialect/Kiln/IR/KilnTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"
      >();
}

void kiln::registerKilnDialects(DialectRegistry &registry) {
  registry.insert<KilnDialect, arith::ArithDialect, math::MathDialect,
                  scf::SCFDialect, func::FuncDialect>();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// "128x64", or "scalar" for rank 0.
static std::string shapeStr(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += "x";
    s += ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
  }
  return s;
}

static LogicalResult requireStatic(Operation *op, Type t, StringRef what) {
  auto rt = cast<RankedTensorType>(t);
  if (!rt.hasStaticShape())
    return op->emitOpError() << what << " must have a static shape, got "
                             << shapeStr(rt.getShape());
  return success();
}

static LogicalResult verifyBlockAccess(Operation *op, Type pointerType,
                                       RankedTensorType tile, size_t nOffsets,
                                       size_t nShape, size_t nStrides,
                                       StringRef tileName) {
  if (failed(requireStatic(op, tile, tileName)))
    return failure();
  Type pointee = cast<PointerType>(pointerType).getPointeeType();
  if (pointee != tile.getElementType())
    return op->emitOpError()
           << tileName << " element type " << tile.getElementType()
           << " differs from the pointer's element type " << pointee;
  int64_t rank = tile.getRank();
  if (rank < 1)
    return op->emitOpError() << tileName << " must have rank >= 1";
  if ((int64_t)nOffsets != rank || (int64_t)nShape != rank ||
      (int64_t)nStrides != rank)
    return op->emitOpError()
           << "block " << shapeStr(tile.getShape()) << " has rank " << rank
           << " but got " << nOffsets << " offsets, " << nShape
           << " shape values and " << nStrides << " strides";
  return success();
}

//===----------------------------------------------------------------------===//
// Op verifiers
//===----------------------------------------------------------------------===//

LogicalResult IotaOp::verify() {
  auto t = getResult().getType();
  if (t.getRank() != 1 || !t.hasStaticShape())
    return emitOpError() << "result must be a static 1-D tile, got "
                         << shapeStr(t.getShape());
  return success();
}

LogicalResult SplatOp::verify() {
  auto t = getResult().getType();
  if (failed(requireStatic(*this, t, "result")))
    return failure();
  if (t.getElementType() != getValue().getType())
    return emitOpError() << "scalar type " << getValue().getType()
                         << " differs from the tile's element type "
                         << t.getElementType();
  return success();
}

LogicalResult LoadOp::verify() {
  return verifyBlockAccess(*this, getPtr().getType(), getResult().getType(),
                           getOffsets().size(), getShape().size(),
                           getStrides().size(), "loaded tile");
}

LogicalResult GatherOp::verify() {
  RankedTensorType t = getResult().getType(), rows = getRows().getType();
  if (failed(requireStatic(*this, t, "gathered tile")))
    return failure();
  Type pointee = cast<PointerType>(getPtr().getType()).getPointeeType();
  if (pointee != t.getElementType())
    return emitOpError() << "gathered tile element type " << t.getElementType()
                         << " differs from the pointer's element type "
                         << pointee;
  if (t.getRank() != 2)
    return emitOpError() << "gathered tile must be 2-D, got "
                         << shapeStr(t.getShape());
  if (rows.getShape() != t.getShape() || !rows.getElementType().isInteger(32))
    return emitOpError() << "row indices must be an i32 tile of the result's "
                            "shape "
                         << shapeStr(t.getShape()) << ", got " << rows;
  if (getShape().size() != 2 || getStrides().size() != 2)
    return emitOpError() << "a 2-D tensor takes 2 shape values and 2 strides, "
                            "got "
                         << getShape().size() << " and " << getStrides().size();
  return success();
}

LogicalResult LoadIndexOp::verify() {
  Type pointee = cast<PointerType>(getPtr().getType()).getPointeeType();
  if (!pointee.isInteger(32))
    return emitOpError() << "reads an i32 tensor, not " << pointee;
  return success();
}

LogicalResult ArriveOp::verify() {
  Type pointee = cast<PointerType>(getPtr().getType()).getPointeeType();
  if (!pointee.isInteger(32))
    return emitOpError() << "counts in an i32 tensor, not " << pointee;
  return success();
}

LogicalResult WaitCountOp::verify() {
  Type pointee = cast<PointerType>(getPtr().getType()).getPointeeType();
  if (!pointee.isInteger(32))
    return emitOpError() << "waits on an i32 tensor, not " << pointee;
  return success();
}

LogicalResult StoreOp::verify() {
  return verifyBlockAccess(*this, getPtr().getType(), getValue().getType(),
                           getOffsets().size(), getShape().size(),
                           getStrides().size(), "stored tile");
}

LogicalResult AtomicRMWOp::verify() {
  if (failed(verifyBlockAccess(*this, getPtr().getType(), getValue().getType(),
                               getOffsets().size(), getShape().size(),
                               getStrides().size(), "combined tile")))
    return failure();
  Type elem = getValue().getType().getElementType();
  if (getKind() == ReduceKind::Sum ? !(elem.isF32() || elem.isInteger(32))
                                   : !elem.isInteger(32))
    return emitOpError() << stringifyReduceKind(getKind()) << " combines "
                         << (getKind() == ReduceKind::Sum ? "f32 or i32"
                                                          : "i32")
                         << " elements, not " << elem;
  return success();
}

LogicalResult DotOp::verify() {
  auto a = getA().getType(), b = getB().getType(), c = getResult().getType();
  for (auto [t, name] : {std::pair{a, "lhs"}, {b, "rhs"}, {c, "result"}}) {
    if (t.getRank() != 2)
      return emitOpError() << name << " must be 2-D, got "
                           << shapeStr(t.getShape());
    if (failed(requireStatic(*this, t, name)))
      return failure();
  }
  if (a.getElementType() != b.getElementType())
    return emitOpError() << "operand element types differ: lhs is "
                         << a.getElementType() << ", rhs is "
                         << b.getElementType();
  if (a.getDimSize(1) != b.getDimSize(0))
    return emitOpError() << "inner dimensions differ: lhs is "
                         << shapeStr(a.getShape()) << ", rhs is "
                         << shapeStr(b.getShape()) << " (rhs must be "
                         << a.getDimSize(1) << "xN)";
  if (c.getDimSize(0) != a.getDimSize(0) || c.getDimSize(1) != b.getDimSize(1))
    return emitOpError() << "result is " << shapeStr(c.getShape())
                         << " but lhs " << shapeStr(a.getShape())
                         << " times rhs " << shapeStr(b.getShape()) << " is "
                         << a.getDimSize(0) << "x" << b.getDimSize(1);
  return success();
}

LogicalResult ReduceOp::verify() {
  auto src = getSrc().getType(), res = getResult().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= src.getRank())
    return emitOpError() << "axis " << axis << " is out of range for a "
                         << shapeStr(src.getShape()) << " tile";
  SmallVector<int64_t> want(src.getShape());
  want.erase(want.begin() + axis);
  if (res.getShape() != ArrayRef<int64_t>(want))
    return emitOpError() << "reducing " << shapeStr(src.getShape())
                         << " along axis " << axis << " gives "
                         << shapeStr(want) << ", not "
                         << shapeStr(res.getShape());
  if (res.getElementType() != src.getElementType())
    return emitOpError() << "result element type " << res.getElementType()
                         << " differs from the source's "
                         << src.getElementType();
  return success();
}

LogicalResult ExpandDimsOp::verify() {
  auto src = getSrc().getType(), res = getResult().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis > src.getRank())
    return emitOpError() << "axis " << axis << " is out of range for a "
                         << shapeStr(src.getShape()) << " tile";
  SmallVector<int64_t> want(src.getShape());
  want.insert(want.begin() + axis, 1);
  if (res.getShape() != ArrayRef<int64_t>(want) ||
      res.getElementType() != src.getElementType())
    return emitOpError() << "expanding " << shapeStr(src.getShape())
                         << " at axis " << axis << " gives " << shapeStr(want)
                         << ", not " << shapeStr(res.getShape());
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto src = getSrc().getType(), res = getResult().getType();
  if (failed(requireStatic(*this, res, "result")))
    return failure();
  // A rank-0 tile (a reduction of a vector) broadcasts to any shape.
  bool ok = src.getElementType() == res.getElementType() &&
            (src.getRank() == 0 || src.getRank() == res.getRank());
  for (int64_t i = 0; ok && src.getRank() && i < src.getRank(); ++i)
    ok = src.getDimSize(i) == res.getDimSize(i) || src.getDimSize(i) == 1;
  if (!ok)
    return emitOpError() << "cannot broadcast " << shapeStr(src.getShape())
                         << " to " << shapeStr(res.getShape())
                         << ": element types must match, ranks too unless the "
                            "source is rank 0, and each dimension must be "
                            "equal or 1";
  return success();
}

LogicalResult TransOp::verify() {
  auto src = getSrc().getType(), res = getResult().getType();
  ArrayRef<int32_t> order = getOrder();
  SmallVector<bool> seen(src.getRank(), false);
  bool isPerm = (int64_t)order.size() == src.getRank();
  for (int32_t o : order) {
    if (!isPerm || o < 0 || o >= src.getRank() || seen[o]) {
      isPerm = false;
      break;
    }
    seen[o] = true;
  }
  if (!isPerm)
    return emitOpError() << "order is not a permutation of the "
                         << src.getRank() << " dimensions of a "
                         << shapeStr(src.getShape()) << " tile";
  SmallVector<int64_t> want;
  for (int32_t o : order)
    want.push_back(src.getDimSize(o));
  if (res.getShape() != ArrayRef<int64_t>(want) ||
      res.getElementType() != src.getElementType())
    return emitOpError() << "transposing " << shapeStr(src.getShape())
                         << " gives " << shapeStr(want) << ", not "
                         << shapeStr(res.getShape());
  return success();
}

OpFoldResult ConvertLayoutOp::fold(FoldAdaptor) {
  if (getSrc().getType() == getType())
    return getSrc();
  // A round trip through another layout is no conversion at all.
  if (auto inner = getSrc().getDefiningOp<ConvertLayoutOp>())
    if (inner.getSrc().getType() == getType())
      return inner.getSrc();
  return {};
}

LogicalResult ConvertOp::verify() {
  auto src = getSrc().getType(), res = getResult().getType();
  if (src.getShape() != res.getShape())
    return emitOpError() << "conversion changes the shape from "
                         << shapeStr(src.getShape()) << " to "
                         << shapeStr(res.getShape());
  return success();
}

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Tensor arguments (TensorArgs.h)
//===----------------------------------------------------------------------===//

BlockArgument kiln::pointerArgumentOf(Value ptr) {
  while (auto a = ptr.getDefiningOp<AddPtrOp>())
    ptr = a.getPtr();
  auto arg = dyn_cast<BlockArgument>(ptr);
  auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
  if (!func || arg.getOwner() != &func.getBody().front())
    return {};
  return arg;
}

static func::FuncOp ownerOf(BlockArgument arg) {
  return cast<func::FuncOp>(arg.getOwner()->getParentOp());
}

bool kiln::onlyDotOperand(Value v) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (isa<ConvertLayoutOp, TransOp>(user)) {
      if (!onlyDotOperand(user->getResult(0)))
        return false;
      continue;
    }
    if (!isa<DotOp>(user) || use.getOperandNumber() == 2)
      return false;
  }
  return !v.use_empty();
}

bool kiln::isAlignedAccess(Value ptr) {
  BlockArgument arg = pointerArgumentOf(ptr);
  return arg && ownerOf(arg).getArgAttr(arg.getArgNumber(), kAlignedArgAttr);
}

bool kiln::isContiguousAccess(Value ptr) {
  BlockArgument arg = pointerArgumentOf(ptr);
  return arg &&
         (ownerOf(arg).getArgAttr(arg.getArgNumber(), kAlignedArgAttr) ||
          ownerOf(arg).getArgAttr(arg.getArgNumber(), kContiguousArgAttr));
}

std::string kiln::accessedTensorName(Value ptr) {
  BlockArgument arg = pointerArgumentOf(ptr);
  if (!arg)
    return "a computed pointer";
  if (auto name = ownerOf(arg).getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                            "kiln.name"))
    return name.str();
  return "argument " + std::to_string(arg.getArgNumber());
}

void kiln::markAllPointersAligned(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (isa<PointerType>(func.getArgument(i).getType()))
      func.setArgAttr(i, kAlignedArgAttr, UnitAttr::get(func.getContext()));
}
