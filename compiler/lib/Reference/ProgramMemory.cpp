//===- ProgramMemory.cpp - a CPU program's loads, gathers, stores, atomics ===//
#include "Program.h"

#include "kiln/Compiler/KernelImpl.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <cstring>

using namespace mlir;

namespace kiln::ref {

double readElem(const char *p, Type t) {
  if (t.isF32()) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (t.isBF16()) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return bf16ToFloat(v);
  }
  if (t.isF16()) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return halfToFloat(v);
  }
  if (t.isInteger(1))
    return *p != 0;
  if (t.isInteger(32)) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (t.isInteger(64)) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  throw InternalError("CPU executor: no memory format for element type");
}

void writeElem(char *p, Type t, const RtValue &v, int64_t k) {
  if (t.isF32()) {
    float x = v.f[k];
    std::memcpy(p, &x, 4);
    return;
  }
  if (t.isBF16()) {
    uint16_t x = floatToBf16(v.f[k]);
    std::memcpy(p, &x, 2);
    return;
  }
  if (t.isF16()) {
    uint16_t x = floatToHalf(v.f[k]);
    std::memcpy(p, &x, 2);
    return;
  }
  if (t.isInteger(1)) {
    *p = v.i[k] != 0;
    return;
  }
  if (t.isInteger(32)) {
    int32_t x = int32_t(v.i[k]);
    std::memcpy(p, &x, 4);
    return;
  }
  if (t.isInteger(64)) {
    std::memcpy(p, &v.i[k], 8);
    return;
  }
  throw InternalError("CPU executor: no memory format for element type");
}

Program::BlockAddr Program::blockAddr(Operation *op, const RtValue &ptr,
                                      ValueRange offsets, ValueRange shape,
                                      ValueRange strides) {
  if (!ptr.ptr)
    fault(op, "null pointer");
  BlockAddr a;
  for (Value v : offsets)
    a.offsets.push_back(scalar(v));
  for (Value v : shape)
    a.shape.push_back(scalar(v));
  for (Value v : strides)
    a.strides.push_back(scalar(v));
  a.elemSize = int64_t(dtypeSize(dtypeOf(ptr.elemType)));
  return a;
}

RtRef Program::execLoad(LoadOp op, ArrayRef<RtRef> in) {
  const RtValue &ptr = *in[0];
  BlockAddr a =
      blockAddr(op, ptr, op.getOffsets(), op.getShape(), op.getStrides());
  auto r = makeValue(op.getType());
  double pad = op.getPadding().convertToDouble();
  forEachIndex(r->shape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t off = a.byteOffset(idx);
    double v = off < 0 ? pad : readElem(ptr.ptr + off, ptr.elemType);
    if (r->isFloatTy())
      r->f[k] = roundToType(r->elemType, float(v));
    else
      r->i[k] = int64_t(v);
  });
  return r;
}

RtRef Program::execGather(GatherOp op, ArrayRef<RtRef> in) {
  const RtValue &ptr = *in[0], &rows = *in[1];
  if (!ptr.ptr)
    fault(op, "null pointer");
  const int64_t col0 = scalar(op.getCol()), nRows = scalar(op.getShape()[0]),
                nCols = scalar(op.getShape()[1]),
                s0 = scalar(op.getStrides()[0]),
                s1 = scalar(op.getStrides()[1]),
                size = int64_t(dtypeSize(dtypeOf(ptr.elemType)));
  auto r = makeValue(op.getType());
  double pad = op.getPadding().convertToDouble();
  forEachIndex(r->shape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t row = rows.i[k], col = col0 + idx[1];
    double v =
        row < 0 || row >= nRows || col < 0 || col >= nCols
            ? pad
            : readElem(ptr.ptr + (row * s0 + col * s1) * size, ptr.elemType);
    if (r->isFloatTy())
      r->f[k] = roundToType(r->elemType, float(v));
    else
      r->i[k] = int64_t(v);
  });
  return r;
}

void Program::execStore(StoreOp op, ArrayRef<RtRef> in) {
  const RtValue &val = *in[0], &ptr = *in[1];
  BlockAddr a =
      blockAddr(op, ptr, op.getOffsets(), op.getShape(), op.getStrides());
  forEachIndex(val.shape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t off = a.byteOffset(idx);
    if (off >= 0)
      writeElem(ptr.ptr + off, ptr.elemType, val, k);
  });
}

std::mutex &Program::atomicMutex() {
  static std::mutex mutex;
  return mutex;
}

void Program::execAtomic(AtomicRMWOp op, ArrayRef<RtRef> in) {
  const RtValue &val = *in[0], &ptr = *in[1];
  BlockAddr a =
      blockAddr(op, ptr, op.getOffsets(), op.getShape(), op.getStrides());
  std::lock_guard<std::mutex> lock(atomicMutex());
  forEachIndex(val.shape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t off = a.byteOffset(idx);
    if (off < 0)
      return;
    char *at = ptr.ptr + off;
    if (val.isFloatTy()) {
      float old;
      std::memcpy(&old, at, 4);
      float x = old + val.f[k];
      std::memcpy(at, &x, 4);
      return;
    }
    int32_t old;
    std::memcpy(&old, at, 4);
    int64_t v = val.i[k];
    int64_t x = op.getKind() == ReduceKind::Sum   ? int64_t(old) + v
                : op.getKind() == ReduceKind::Max ? std::max<int64_t>(old, v)
                                                  : std::min<int64_t>(old, v);
    int32_t w = int32_t(uint32_t(x)); // i32 wraps as the GPU's
    std::memcpy(at, &w, 4);
  });
}

} // namespace kiln::ref
