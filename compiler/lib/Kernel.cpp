//===- Kernel.cpp - kernel metadata, argument binding, IR text ------------===//
#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/runtime/Error.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <mutex>

using namespace mlir;

namespace kiln {

static std::shared_ptr<MLIRContext> newKilnContext() {
  DialectRegistry registry;
  registerKilnDialects(registry);
  // What the GPU lowering emits and translates to LLVM IR.
  registry
      .insert<LLVM::LLVMDialect, NVVM::NVVMDialect, cf::ControlFlowDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  // What convert-to-llvm converts, through each dialect's interface.
  arith::registerConvertArithToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  // NVVM ops without an LLVM intrinsic (wgmma.mma_async) become inline PTX.
  registerConvertNVVMToLLVMInterface(registry);
  // Kernels are small and built on the caller's thread; a per-context thread
  // pool would only cost start-up time.
  auto ctx =
      std::make_shared<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  return ctx;
}

std::shared_ptr<MLIRContext> makeKilnContext() {
  // Creating a context and loading its dialects costs ~0.8 ms, half of
  // building an attention kernel. A context no kernel holds any more (the
  // pool's reference is the only one left) is handed out again; it is never
  // shared between live kernels, so kernels stay independent across threads.
  // Each is retired after a number of kernels so that the attributes it
  // uniqued do not accumulate without bound.
  static std::mutex mutex;
  static std::vector<std::pair<std::shared_ptr<MLIRContext>, int>> pool;
  constexpr int kMaxUses = 256;
  constexpr size_t kMaxPooled = 8;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto &[ctx, uses] : pool)
    if (ctx.use_count() == 1 && uses < kMaxUses) {
      ++uses;
      return ctx;
    }
  std::erase_if(pool, [&](const auto &p) {
    return p.first.use_count() == 1 && p.second >= kMaxUses;
  });
  auto ctx = newKilnContext();
  if (pool.size() < kMaxPooled)
    pool.emplace_back(ctx, 1);
  return ctx;
}

DType dtypeOf(Type t) {
  if (t.isF32())
    return DType::f32;
  if (t.isF16())
    return DType::f16;
  if (t.isBF16())
    return DType::bf16;
  if (t.isInteger(1))
    return DType::i1;
  if (t.isInteger(32))
    return DType::i32;
  if (t.isInteger(64))
    return DType::i64;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  throw InternalError("no kiln dtype for MLIR type " + s);
}

Type mlirType(MLIRContext *ctx, DType t) {
  Builder b(ctx);
  switch (t) {
  case DType::f32:
    return b.getF32Type();
  case DType::f16:
    return b.getF16Type();
  case DType::bf16:
    return b.getBF16Type();
  case DType::i1:
    return b.getI1Type();
  case DType::i32:
    return b.getI32Type();
  case DType::i64:
    return b.getI64Type();
  }
  throw InternalError("bad DType");
}

func::FuncOp Kernel::Impl::func() const {
  return module->lookupSymbol<func::FuncOp>(name);
}

Kernel::Kernel(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
const std::string &Kernel::name() const { return impl_->name; }
const std::vector<ParamInfo> &Kernel::params() const { return impl_->params; }
const std::vector<TensorParamInfo> &Kernel::tensors() const {
  return impl_->tensors;
}
const GridExtents &Kernel::grid() const { return impl_->grid; }

std::array<int64_t, 3>
Kernel::gridFor(const std::vector<ArgValue> &args) const {
  return evaluateGrid(impl_->grid, impl_->params, args, impl_->name);
}
int Kernel::numWarps() const { return impl_->numWarps; }

std::string Kernel::ir(bool withLocations) const {
  std::string s;
  llvm::raw_string_ostream os(s);
  OpPrintingFlags flags;
  if (withLocations) {
    // Inline each op's file:line:col rather than #loc aliases at the end.
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
    flags.useLocalScope();
  }
  impl_->module->print(os, flags);
  return s;
}

/// "Forward.cpp:42" for an op the DSL built (its first file location).
static std::string userLine(Location loc) {
  std::string where;
  loc->walk([&](Location l) {
    if (auto fl = dyn_cast<FileLineColLoc>(l); fl && where.empty()) {
      where = fl.getFilename().str() + ":" + std::to_string(fl.getLine());
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return where.empty() ? "kiln IR" : where;
}

void Kernel::checkTileShapes() const {
  impl_->func().walk([&](DotOp dot) {
    auto at = dot.getA().getType(), bt = dot.getB().getType();
    int64_t M = at.getDimSize(0), K = at.getDimSize(1), N = bt.getDimSize(1);
    if (M % 16 || N % 8 || K % 16)
      throw Error(userLine(dot.getLoc()) + ": dot " + std::to_string(M) + "x" +
                  std::to_string(N) + "x" + std::to_string(K) + " (MxNxK) of kernel " +
                  impl_->name +
                  ": the GPU's tensor cores take multiples of 16x8x16");
  });
  impl_->func().walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t))
        for (int64_t d : rt.getShape())
          if (d < 1 || (d & (d - 1))) {
            std::string type;
            llvm::raw_string_ostream os(type);
            os << rt;
            throw Error(userLine(op->getLoc()) + ": tile dimension " +
                        std::to_string(d) + " of " + type +
                        " is not a power of two (kernel " + impl_->name +
                        "; GPU layouts spread tiles bit by bit)");
          }
  });
}

/// "2x16xNx128": a tensor parameter's shape with its run-time dimensions
/// named.
static std::string shapeText(const TensorParamInfo &t,
                             const std::vector<ParamInfo> &params) {
  std::string s;
  for (size_t d = 0; d < t.shape.size(); ++d)
    s += (d ? "x" : "") + (t.shape[d] == kDynamicDim && d < t.dimParams.size()
                               ? params[t.dimParams[d]].name
                               : std::to_string(t.shape[d]));
  return s;
}

std::map<std::string, TensorRef>
Kernel::tensorsIn(const std::map<std::string, TensorRef> &all) const {
  std::map<std::string, TensorRef> out;
  for (const TensorParamInfo &t : impl_->tensors)
    if (auto it = all.find(t.name); it != all.end())
      out.insert(*it);
  return out;
}

std::vector<ArgValue>
Kernel::bind(const std::map<std::string, TensorRef> &tensors,
             const std::map<std::string, int64_t> &scalars) const {
  std::vector<ArgValue> args(impl_->params.size());
  std::vector<bool> set(args.size(), false);
  std::vector<std::string> boundFrom(args.size()); ///< the tensor, for dims
  for (const TensorParamInfo &t : impl_->tensors) {
    auto it = tensors.find(t.name);
    std::string where = "kernel " + impl_->name + ", tensor " + t.name;
    if (it == tensors.end())
      throw Error(where + ": no tensor given");
    const TensorRef &r = it->second;
    if (!r.data)
      throw Error(where + ": null pointer");
    if (r.dtype != t.dtype)
      throw Error(where + ": expected " + dtypeName(t.dtype) + ", got " +
                  dtypeName(r.dtype));
    bool shapeOk = r.shape.size() == t.shape.size();
    for (size_t d = 0; shapeOk && d < r.shape.size(); ++d)
      shapeOk = t.shape[d] == kDynamicDim ? r.shape[d] >= 1
                                          : r.shape[d] == t.shape[d];
    if (!shapeOk)
      throw Error(where + ": the kernel was compiled for shape " +
                  shapeText(t, impl_->params) + ", got " +
                  shapeToString(r.shape));
    // Run-time dimensions bind their integer parameters; two tensors that
    // share one must agree.
    for (size_t d = 0; d < t.dimParams.size(); ++d) {
      int p = t.dimParams[d];
      if (p < 0)
        continue;
      const std::string &dim = impl_->params[p].name;
      if (r.shape[d] > std::numeric_limits<int32_t>::max())
        throw Error(where + ": dimension " + std::to_string(d) + " (" + dim +
                    ") = " + std::to_string(r.shape[d]) +
                    " does not fit kiln's 32-bit index width");
      if (set[p] && std::get<int64_t>(args[p]) != r.shape[d])
        throw Error(where + ": dimension " + std::to_string(d) + " is " +
                    std::to_string(r.shape[d]) + " but " + dim + " = " +
                    std::to_string(std::get<int64_t>(args[p])) +
                    " from tensor " + boundFrom[p]);
      if (r.shape[d] % impl_->params[p].multipleOf)
        throw Error(where + ": dimension " + std::to_string(d) + " (" + dim +
                    ") = " + std::to_string(r.shape[d]) +
                    " is not a multiple of " +
                    std::to_string(impl_->params[p].multipleOf) +
                    ", which the kernel was built for");
      args[p] = r.shape[d];
      set[p] = true;
      boundFrom[p] = t.name;
    }
    if (r.strides.size() != r.shape.size())
      throw Error(where + ": " + std::to_string(r.strides.size()) +
                  " strides for a rank-" + std::to_string(r.shape.size()) +
                  " tensor");
    if (t.contiguous && r.strides.back() != 1)
      throw Error(where +
                  ": the kernel requires a contiguous last dimension "
                  "(stride 1), got stride " +
                  std::to_string(r.strides.back()));
    if (reinterpret_cast<uintptr_t>(r.data) % dtypeSize(r.dtype))
      throw Error(where + ": pointer is not aligned to its element size");
    args[t.pointerParam] = r.data;
    set[t.pointerParam] = true;
    for (size_t d = 0; d < r.strides.size(); ++d) {
      if (r.strides[d] < 0 ||
          r.strides[d] > std::numeric_limits<int32_t>::max())
        throw Error(where + ": stride " + std::to_string(r.strides[d]) +
                    " of dimension " + std::to_string(d) +
                    " does not fit kiln's 32-bit index width");
      args[t.strideParams[d]] = int64_t(r.strides[d]);
      set[t.strideParams[d]] = true;
    }
    // The byte offset of the last element (what the kernel's 64-bit address
    // arithmetic reaches) must fit in 64 bits.
    int64_t last = 0;
    for (size_t d = 0; d < r.shape.size(); ++d)
      if (__builtin_add_overflow(
              last, checkedMul(r.shape[d] - 1, r.strides[d], where), &last))
        throw Error(where + ": its last element's offset overflows 64-bit "
                            "integers");
    checkedMul(last + 1, int64_t(dtypeSize(r.dtype)), where);
  }
  for (auto &[name, ref] : tensors) {
    bool known = false;
    for (const TensorParamInfo &t : impl_->tensors)
      known |= t.name == name;
    if (!known)
      throw Error("kernel " + impl_->name + " has no tensor parameter " + name);
  }
  for (auto &[name, value] : scalars) {
    size_t i = 0;
    while (i < set.size() &&
           ((set[i] && boundFrom[i].empty()) || impl_->params[i].name != name ||
            impl_->params[i].kind != ParamInfo::Kind::Scalar))
      ++i;
    if (i == set.size())
      throw Error("kernel " + impl_->name + " has no integer argument " + name);
    if (value < std::numeric_limits<int32_t>::min() ||
        value > std::numeric_limits<int32_t>::max())
      throw Error("kernel " + impl_->name + ", argument " + name + " = " +
                  std::to_string(value) +
                  " does not fit kiln's 32-bit index width");
    if (value % impl_->params[i].multipleOf)
      throw Error("kernel " + impl_->name + ", argument " + name + " = " +
                  std::to_string(value) + " is not a multiple of " +
                  std::to_string(impl_->params[i].multipleOf) +
                  ", which the kernel was built for");
    if (set[i] && std::get<int64_t>(args[i]) != value)
      throw Error("kernel " + impl_->name + ", argument " + name + " = " +
                  std::to_string(value) + " but tensor " + boundFrom[i] +
                  " has " + std::to_string(std::get<int64_t>(args[i])));
    args[i] = value;
    set[i] = true;
  }
  for (size_t i = 0; i < set.size(); ++i)
    if (!set[i])
      throw Error("kernel " + impl_->name + ": parameter " +
                  impl_->params[i].name + " is not bound");
  // "H = 8 (from tensor Q)": parameter i, its value and where it came from.
  auto described = [&](size_t i) {
    return impl_->params[i].name + " = " +
           std::to_string(std::get<int64_t>(args[i])) +
           (boundFrom[i].empty() ? "" : " (from tensor " + boundFrom[i] + ")");
  };
  for (size_t i = 0; i < set.size(); ++i)
    if (int j = impl_->params[i].atLeastParam; j >= 0) {
      if (std::get<int64_t>(args[i]) < std::get<int64_t>(args[j]))
        throw Error("kernel " + impl_->name + ": " + described(i) +
                    " must be at least " + impl_->params[j].name + " = " +
                    std::to_string(std::get<int64_t>(args[j])));
    }
  for (size_t i = 0; i < set.size(); ++i)
    if (int j = impl_->params[i].productParam; j >= 0) {
      const int64_t f = impl_->params[i].productFactor;
      if (std::get<int64_t>(args[i]) != f * std::get<int64_t>(args[j]))
        throw Error("kernel " + impl_->name + ": " + described(i) +
                    " must be " + std::to_string(f) + " times " + described(j));
    }
  return args;
}

/// "file:line:col" for a file location, MLIR's form otherwise.
static void printLocation(llvm::raw_ostream &os, Location loc) {
  if (auto fl = dyn_cast<FileLineColLoc>(loc))
    os << fl.getFilename().getValue() << ":" << fl.getLine() << ":"
       << fl.getColumn();
  else
    os << loc;
}

std::string verifyModuleText(const std::string &text) {
  auto ctx = makeKilnContext();
  std::string diags;
  llvm::raw_string_ostream os(diags);
  ScopedDiagnosticHandler handler(ctx.get(), [&](Diagnostic &d) {
    printLocation(os, d.getLocation());
    os << ": " << d << "\n";
    return success();
  });
  ParserConfig config(ctx.get());
  // The parser verifies what it parsed and reports through the handler.
  OwningOpRef<Operation *> op =
      parseSourceString(text, config, /*sourceName=*/"input");
  if (!op && diags.empty())
    os << "input: could not parse\n";
  return diags;
}

} // namespace kiln
