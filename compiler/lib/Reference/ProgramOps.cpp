//===- ProgramOps.cpp - kiln's compute ops in a CPU program ---------------===//
#include "Program.h"

#include "kiln/Compiler/KernelImpl.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

using namespace mlir;

namespace kiln::ref {

RtRef Program::execKiln(Operation *op, ArrayRef<RtRef> in) {
  Type rt = op->getNumResults() ? op->getResult(0).getType() : Type();
  if (auto p = dyn_cast<ProgramIdOp>(op)) {
    auto r = makeValue(rt);
    r->i[0] = pid_[p.getAxis()];
    return r;
  }
  if (auto p = dyn_cast<NumProgramsOp>(op)) {
    auto r = makeValue(rt);
    r->i[0] = grid_[p.getAxis()];
    return r;
  }
  if (isa<IotaOp>(op)) {
    auto r = makeValue(rt);
    for (int64_t k = 0; k < r->numel(); ++k)
      r->i[k] = k;
    return r;
  }
  if (isa<SplatOp>(op)) {
    auto r = makeValue(rt);
    if (r->isFloatTy())
      std::fill(r->f.begin(), r->f.end(), in[0]->f[0]);
    else
      std::fill(r->i.begin(), r->i.end(), in[0]->i[0]);
    return r;
  }
  if (isa<AddPtrOp>(op)) {
    auto r = std::make_shared<RtValue>(*in[0]);
    r->ptr += in[1]->i[0] * int64_t(dtypeSize(dtypeOf(r->elemType)));
    return r;
  }
  if (auto l = dyn_cast<LoadOp>(op))
    return execLoad(l, in);
  if (auto g = dyn_cast<GatherOp>(op))
    return execGather(g, in);
  if (auto li = dyn_cast<LoadIndexOp>(op)) {
    const RtValue &ptr = *in[0];
    if (!ptr.ptr)
      fault(op, "null pointer");
    int64_t i = scalar(li.getIndex()), n = scalar(li.getSize());
    auto r = makeValue(rt);
    r->i[0] = i < 0 || i >= n
                  ? li.getPadding()
                  : int64_t(readElem(ptr.ptr + i * scalar(li.getStride()) * 4,
                                     ptr.elemType));
    return r;
  }
  if (auto a = dyn_cast<ArriveOp>(op)) {
    const RtValue &ptr = *in[0];
    if (!ptr.ptr)
      fault(op, "null pointer");
    int64_t i = scalar(a.getIndex()), n = scalar(a.getSize());
    auto r = makeValue(rt);
    r->i[0] = -1;
    if (i >= 0 && i < n) {
      char *at = ptr.ptr + i * scalar(a.getStride()) * 4;
      std::lock_guard<std::mutex> lock(atomicMutex());
      int32_t old;
      std::memcpy(&old, at, 4);
      int32_t next = old + 1;
      std::memcpy(at, &next, 4);
      r->i[0] = old;
    }
    return r;
  }
  if (auto w = dyn_cast<WaitCountOp>(op)) {
    const RtValue &ptr = *in[0];
    if (!ptr.ptr)
      fault(op, "null pointer");
    int64_t i = scalar(w.getIndex()), n = scalar(w.getSize()),
            target = scalar(w.getTarget());
    if (i < 0 || i >= n)
      return std::make_shared<RtValue>();
    const char *at = ptr.ptr + i * scalar(w.getStride()) * 4;
    // Launches run one after another here: only this launch's other
    // programs (on other host threads) can still arrive; a second passes
    // for a count that is not coming.
    for (int tries = 0;; ++tries) {
      int32_t now;
      {
        std::lock_guard<std::mutex> lock(atomicMutex());
        std::memcpy(&now, at, 4);
      }
      if (now >= target)
        break;
      if (tries == 1000)
        fault(op, "waits for element " + std::to_string(i) + " to reach " +
                      std::to_string(target) + "; it holds " +
                      std::to_string(now) +
                      " and no launch before this one raises it");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::make_shared<RtValue>();
  }
  if (auto s = dyn_cast<StoreOp>(op)) {
    execStore(s, in);
    return std::make_shared<RtValue>();
  }
  if (auto a = dyn_cast<AtomicRMWOp>(op)) {
    execAtomic(a, in);
    return std::make_shared<RtValue>();
  }
  if (isa<DotOp>(op))
    return execDot(op, in);
  if (auto r = dyn_cast<ReduceOp>(op))
    return execReduce(r, *in[0]);
  if (isa<ConvertLayoutOp>(op)) // where elements live, not what they are
    return in[0];
  if (isa<ExpandDimsOp>(op)) {
    auto r = std::make_shared<RtValue>(*in[0]);
    r->shape = makeValue(rt)->shape;
    return r;
  }
  if (isa<BroadcastOp>(op)) {
    auto r = makeValue(rt);
    const RtValue &s = *in[0];
    SmallVector<int64_t> srcStrides(s.shape.size());
    for (int64_t d = int64_t(s.shape.size()) - 1, acc = 1; d >= 0; --d) {
      srcStrides[d] = s.shape[d] == 1 ? 0 : acc;
      acc *= s.shape[d];
    }
    forEachIndex(r->shape, [&](int64_t k, ArrayRef<int64_t> idx) {
      int64_t off = 0; // a rank-0 source has one element
      for (size_t d = 0; d < srcStrides.size(); ++d)
        off += idx[d] * srcStrides[d];
      if (r->isFloatTy())
        r->f[k] = s.f[off];
      else
        r->i[k] = s.i[off];
    });
    return r;
  }
  if (auto t = dyn_cast<TransOp>(op)) {
    auto r = makeValue(rt);
    const RtValue &s = *in[0];
    SmallVector<int64_t> srcStrides(s.shape.size());
    for (int64_t d = int64_t(s.shape.size()) - 1, acc = 1; d >= 0; --d) {
      srcStrides[d] = acc;
      acc *= s.shape[d];
    }
    ArrayRef<int32_t> order = t.getOrder();
    forEachIndex(r->shape, [&](int64_t k, ArrayRef<int64_t> idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        off += idx[d] * srcStrides[order[d]];
      if (r->isFloatTy())
        r->f[k] = s.f[off];
      else
        r->i[k] = s.i[off];
    });
    return r;
  }
  if (isa<ConvertOp>(op)) {
    auto r = makeValue(rt);
    const RtValue &s = *in[0];
    for (int64_t k = 0; k < r->numel(); ++k) {
      if (r->isFloatTy())
        r->f[k] =
            roundToType(r->elemType, s.isFloatTy() ? s.f[k] : float(s.i[k]));
      else if (s.isFloatTy())
        r->i[k] = r->elemType.isInteger(1)
                      ? s.f[k] != 0
                      : wrapToType(r->elemType, int64_t(std::trunc(s.f[k])));
      else
        r->i[k] = r->elemType.isInteger(1) ? s.i[k] != 0
                                           : wrapToType(r->elemType, s.i[k]);
    }
    return r;
  }
  return nullptr;
}

RtRef Program::execDot(Operation *op, ArrayRef<RtRef> in) {
  const RtValue &a = *in[0], &b = *in[1], &c = *in[2];
  int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
  auto r = makeValue(op->getResult(0).getType());
  r->f = c.f;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      float x = a.f[i * K + k];
      const float *brow = &b.f[k * N];
      float *crow = &r->f[i * N];
      for (int64_t j = 0; j < N; ++j)
        crow[j] += x * brow[j];
    }
  return r;
}

RtRef Program::execReduce(ReduceOp op, const RtValue &s) {
  auto r = makeValue(op.getType());
  int64_t axis = op.getAxis();
  int64_t outer = 1, len = s.shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s.shape[d];
  for (size_t d = axis + 1; d < s.shape.size(); ++d)
    inner *= s.shape[d];
  ReduceKind kind = op.getKind();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * len + j) * inner + i; };
      if (s.isFloatTy()) {
        float acc = s.f[at(0)];
        for (int64_t j = 1; j < len; ++j) {
          float x = s.f[at(j)];
          if (kind == ReduceKind::Sum)
            acc += x;
          else if (std::isnan(x) || std::isnan(acc))
            acc = NAN;
          else
            acc = kind == ReduceKind::Max ? std::max(acc, x) : std::min(acc, x);
        }
        r->f[o * inner + i] = roundToType(r->elemType, acc);
      } else {
        int64_t acc = s.i[at(0)];
        for (int64_t j = 1; j < len; ++j) {
          int64_t x = s.i[at(j)];
          acc = kind == ReduceKind::Sum   ? acc + x
                : kind == ReduceKind::Max ? std::max(acc, x)
                                          : std::min(acc, x);
        }
        r->i[o * inner + i] = wrapToType(r->elemType, acc);
      }
    }
  return r;
}

} // namespace kiln::ref
