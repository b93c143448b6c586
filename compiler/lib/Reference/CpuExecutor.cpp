//===- CpuExecutor.cpp - kiln ops, control flow and the grid on the CPU ---===//
#include "kiln/Reference/CpuExecutor.h"
#include "RtValue.h"

#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/runtime/Error.h"

#include "llvm/ADT/DenseMap.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

using namespace mlir;

namespace kiln::ref {
namespace {

/// Reads one element of global memory of type `t` at `p`.
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

/// Calls f(flat index, multi-index) over a shape in row-major order.
template <class F> void forEachIndex(ArrayRef<int64_t> shape, F f) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  SmallVector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(k, ArrayRef<int64_t>(idx));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/// Runs one program of a kernel.
class Program {
public:
  Program(std::array<int64_t, 3> pid, std::array<int64_t, 3> grid)
      : pid_(pid), grid_(grid) {}

  void run(func::FuncOp func, const std::vector<ArgValue> &args) {
    mlir::Block &entry = func.getBody().front();
    for (auto [arg, a] : llvm::zip(entry.getArguments(), args)) {
      auto v = makeValue(isa<PointerType>(arg.getType())
                             ? cast<PointerType>(arg.getType()).getPointeeType()
                             : arg.getType());
      if (auto *p = std::get_if<void *>(&a)) {
        v->isPointer = true;
        v->ptr = static_cast<char *>(*p);
      } else if (auto *i = std::get_if<int64_t>(&a)) {
        v->i.assign(1, *i);
      } else {
        v->f.assign(1, float(std::get<double>(a)));
      }
      env_[arg] = v;
    }
    runBlock(entry);
  }

private:
  RtRef get(Value v) { return env_.lookup(v); }
  int64_t scalar(Value v) { return get(v)->i[0]; }

  /// Runs a block to its terminator; returns the terminator's operands.
  SmallVector<RtRef> runBlock(mlir::Block &block) {
    for (Operation &op : block.without_terminator())
      exec(&op);
    SmallVector<RtRef> out;
    for (Value v : block.getTerminator()->getOperands())
      out.push_back(get(v));
    return out;
  }

  void exec(Operation *op) {
    SmallVector<RtRef> in;
    for (Value v : op->getOperands())
      in.push_back(get(v));
    if (RtRef r = evalElementwise(op, in)) {
      env_[op->getResult(0)] = r;
      return;
    }
    if (auto forOp = dyn_cast<scf::ForOp>(op))
      return execFor(forOp);
    if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      Region &r = in[0]->i[0] ? ifOp.getThenRegion() : ifOp.getElseRegion();
      if (r.empty())
        return;
      for (auto [res, v] : llvm::zip(ifOp.getResults(), runBlock(r.front())))
        env_[res] = v;
      return;
    }
    RtRef r = execKiln(op, in);
    if (!r)
      fault(op, "unsupported operation");
    if (op->getNumResults())
      env_[op->getResult(0)] = r;
  }

  void execFor(scf::ForOp forOp) {
    int64_t lb = scalar(forOp.getLowerBound()),
            ub = scalar(forOp.getUpperBound()), step = scalar(forOp.getStep());
    if (step <= 0)
      fault(forOp, "loop step " + std::to_string(step) + " is not positive");
    SmallVector<RtRef> carried;
    for (Value v : forOp.getInitArgs())
      carried.push_back(get(v));
    mlir::Block &body = *forOp.getBody();
    Type ivType = forOp.getInductionVar().getType();
    for (int64_t iv = lb; iv < ub; iv += step) {
      auto ivVal = makeValue(ivType);
      ivVal->i[0] = iv;
      env_[forOp.getInductionVar()] = ivVal;
      for (auto [arg, v] : llvm::zip(forOp.getRegionIterArgs(), carried))
        env_[arg] = v;
      carried = runBlock(body);
    }
    for (auto [res, v] : llvm::zip(forOp.getResults(), carried))
      env_[res] = v;
  }

  RtRef execKiln(Operation *op, ArrayRef<RtRef> in) {
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
          fault(op, "waits for element " + std::to_string(i) +
                        " to reach " + std::to_string(target) + "; it holds " +
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

  /// Byte offset of a block element, or -1 when it lies outside the tensor.
  struct BlockAddr {
    SmallVector<int64_t> offsets, shape, strides;
    int64_t elemSize;
    int64_t byteOffset(ArrayRef<int64_t> idx) const {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        int64_t g = offsets[d] + idx[d];
        if (g < 0 || g >= shape[d])
          return -1;
        off += g * strides[d];
      }
      return off * elemSize;
    }
  };

  BlockAddr blockAddr(Operation *op, const RtValue &ptr, ValueRange offsets,
                      ValueRange shape, ValueRange strides) {
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

  RtRef execLoad(LoadOp op, ArrayRef<RtRef> in) {
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

  RtRef execGather(GatherOp op, ArrayRef<RtRef> in) {
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

  void execStore(StoreOp op, ArrayRef<RtRef> in) {
    const RtValue &val = *in[0], &ptr = *in[1];
    BlockAddr a =
        blockAddr(op, ptr, op.getOffsets(), op.getShape(), op.getStrides());
    forEachIndex(val.shape, [&](int64_t k, ArrayRef<int64_t> idx) {
      int64_t off = a.byteOffset(idx);
      if (off >= 0)
        writeElem(ptr.ptr + off, ptr.elemType, val, k);
    });
  }

  /// Programs run on several host threads: one lock makes each
  /// read-modify-write atomic (and orders a program's writes before its
  /// arrival at a counter with the reads of the program that arrives after).
  static std::mutex &atomicMutex() {
    static std::mutex mutex;
    return mutex;
  }

  void execAtomic(AtomicRMWOp op, ArrayRef<RtRef> in) {
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

  RtRef execDot(Operation *op, ArrayRef<RtRef> in) {
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

  RtRef execReduce(ReduceOp op, const RtValue &s) {
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
              acc =
                  kind == ReduceKind::Max ? std::max(acc, x) : std::min(acc, x);
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

  std::array<int64_t, 3> pid_, grid_;
  llvm::DenseMap<Value, RtRef> env_;
};

} // namespace
} // namespace kiln::ref

namespace kiln {

void runOnCpu(const Kernel &kernel, const std::vector<ArgValue> &args,
              const CpuRunOptions &options) {
  func::FuncOp func = kernel.impl().func();
  if (!func)
    throw InternalError("kernel " + kernel.name() + " has no function");
  kernel.checkTileShapes();
  const auto &params = kernel.params();
  if (args.size() != params.size())
    throw Error("kernel " + kernel.name() + " takes " +
                std::to_string(params.size()) + " arguments, got " +
                std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    bool isPtr = std::holds_alternative<void *>(args[i]);
    if (isPtr != (params[i].kind == ParamInfo::Kind::Pointer))
      throw Error("kernel " + kernel.name() + ": argument " + params[i].name +
                  (isPtr ? " must be a scalar" : " must be a pointer"));
    if (isPtr && !std::get<void *>(args[i]))
      throw Error("kernel " + kernel.name() + ": argument " + params[i].name +
                  " is a null pointer");
  }
  std::array<int64_t, 3> grid = kernel.gridFor(args);
  int64_t total = checkedMul(checkedMul(grid[0], grid[1], kernel.name()),
                             grid[2], kernel.name());
  unsigned nThreads = options.threads
                          ? options.threads
                          : std::max(1u, std::thread::hardware_concurrency());
  nThreads = unsigned(std::min<int64_t>(nThreads, total));

  std::atomic<int64_t> next{0};
  std::exception_ptr firstError;
  std::mutex errorMutex;
  auto worker = [&] {
    try {
      for (int64_t p; (p = next++) < total;) {
        std::array<int64_t, 3> pid{p % grid[0], (p / grid[0]) % grid[1],
                                   p / (grid[0] * grid[1])};
        ref::Program(pid, grid).run(func, args);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(errorMutex);
      if (!firstError)
        firstError = std::current_exception();
      next = total; // stop the other workers
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < nThreads; ++t)
    threads.emplace_back(worker);
  worker();
  for (auto &t : threads)
    t.join();
  if (firstError)
    std::rethrow_exception(firstError);
}

} // namespace kiln
