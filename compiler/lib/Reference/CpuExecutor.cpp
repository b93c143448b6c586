//===- CpuExecutor.cpp - the grid, programs and control flow on the CPU ---===//
#include "kiln/Reference/CpuExecutor.h"
#include "Program.h"

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

void Program::run(func::FuncOp func, const std::vector<ArgValue> &args) {
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

SmallVector<RtRef> Program::runBlock(mlir::Block &block) {
  for (Operation &op : block.without_terminator())
    exec(&op);
  SmallVector<RtRef> out;
  for (Value v : block.getTerminator()->getOperands())
    out.push_back(get(v));
  return out;
}

void Program::exec(Operation *op) {
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

void Program::execFor(scf::ForOp forOp) {
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
