//===- Program.h - one program of a kernel on the CPU -----------*- C++ -*-===//
//
// Internal to the CPU executor: CpuExecutor.cpp (the grid, control flow),
// ProgramOps.cpp (kiln's compute ops), ProgramMemory.cpp (global memory).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_REFERENCE_PROGRAM_H
#define KILN_LIB_REFERENCE_PROGRAM_H

#include "RtValue.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Reference/CpuExecutor.h"

#include "llvm/ADT/DenseMap.h"

#include <array>
#include <mutex>
#include <vector>

namespace kiln::ref {

/// Reads one element of global memory of type `t` at `p`.
double readElem(const char *p, mlir::Type t);
/// Writes element `k` of `v` to global memory of type `t` at `p`.
void writeElem(char *p, mlir::Type t, const RtValue &v, int64_t k);

/// Calls f(flat index, multi-index) over a shape in row-major order.
template <class F> void forEachIndex(llvm::ArrayRef<int64_t> shape, F f) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  llvm::SmallVector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(k, llvm::ArrayRef<int64_t>(idx));
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

  /// Runs the program: `func` on `args` (pointers and scalars).
  void run(mlir::func::FuncOp func, const std::vector<ArgValue> &args);

private:
  RtRef get(mlir::Value v) { return env_.lookup(v); }

  int64_t scalar(mlir::Value v) { return get(v)->i[0]; }

  /// Runs a block to its terminator; returns the terminator's operands.
  llvm::SmallVector<RtRef> runBlock(mlir::Block &block);

  void exec(mlir::Operation *op);

  void execFor(mlir::scf::ForOp forOp);

  RtRef execKiln(mlir::Operation *op, llvm::ArrayRef<RtRef> in);

  /// Byte offset of a block element, or -1 when it lies outside the tensor.
  struct BlockAddr {
    llvm::SmallVector<int64_t> offsets, shape, strides;
    int64_t elemSize;
    int64_t byteOffset(llvm::ArrayRef<int64_t> idx) const {
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

  BlockAddr blockAddr(mlir::Operation *op, const RtValue &ptr,
                      mlir::ValueRange offsets, mlir::ValueRange shape,
                      mlir::ValueRange strides);

  RtRef execLoad(LoadOp op, llvm::ArrayRef<RtRef> in);

  RtRef execGather(GatherOp op, llvm::ArrayRef<RtRef> in);

  void execStore(StoreOp op, llvm::ArrayRef<RtRef> in);

  /// Programs run on several host threads: one lock makes each
  /// read-modify-write atomic (and orders a program's writes before its
  /// arrival at a counter with the reads of the program that arrives after).
  static std::mutex &atomicMutex();

  void execAtomic(AtomicRMWOp op, llvm::ArrayRef<RtRef> in);

  RtRef execDot(mlir::Operation *op, llvm::ArrayRef<RtRef> in);

  RtRef execReduce(ReduceOp op, const RtValue &s);

  std::array<int64_t, 3> pid_, grid_;

  llvm::DenseMap<mlir::Value, RtRef> env_;
};

} // namespace kiln::ref

#endif // KILN_LIB_REFERENCE_PROGRAM_H
