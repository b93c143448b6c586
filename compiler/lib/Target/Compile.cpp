//===- Compile.cpp - kiln IR to PTX, in process ---------------------------===//
//
// The MLIR passes run in the order Pipeline.cpp gives, on a copy of the
// kernel's module; then translation to LLVM IR, LLVM O3 for the NVPTX target
// machine, and PTX from LLVM's NVPTX backend.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/runtime/Error.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

using namespace mlir;

namespace kiln {

static std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

static std::string emitPtx(llvm::Module &m, const std::string &arch,
                           std::string &llvmIR) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    throw InternalError("NVPTX target: " + err);
  // Fuse multiplies and adds into FMAs, as nvcc does by default (--fmad=true).
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, arch, "+ptx80", options, std::nullopt, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm)
    throw Error("NVPTX: no target machine for " + arch);
  m.setTargetTriple(triple);
  m.setDataLayout(tm->createDataLayout());

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm.get());
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  {
    llvm::raw_string_ostream os(llvmIR);
    m.print(os, nullptr);
  }
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr,
                              llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("NVPTX cannot emit assembly");
  pm.run(m);
  return std::string(ptx.str());
}

namespace {
struct Cache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const CompiledKernel>> compiled;
  std::map<std::string, std::shared_ptr<GpuKernel>> loaded;
  CompileCacheStats stats;
};
Cache &cache() {
  static Cache c;
  return c;
}

std::string cacheKey(const Kernel &kernel, const GpuTarget &t) {
  std::string ir;
  llvm::raw_string_ostream os(ir);
  OpPrintingFlags flags;
  flags.printGenericOpForm().enableDebugInfo(false);
  kernel.impl().module->print(os, flags);
  return "kiln " KILN_VERSION "|" + t.arch + "|w" + std::to_string(t.numWarps) +
         "|s" + std::to_string(t.numStages) + "|a" +
         std::to_string(t.assumeAligned) + "|r" +
         std::to_string(t.reloadThreadIds) + "|" + ir;
}
} // namespace

std::shared_ptr<const CompiledKernel> compileCached(const Kernel &kernel,
                                                    const GpuTarget &target) {
  std::string key = cacheKey(kernel, target);
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.compiled.find(key); it != c.compiled.end()) {
      ++c.stats.hits;
      return it->second;
    }
    ++c.stats.misses;
  }
  // Compile outside the lock: other threads' compiles go on meanwhile.
  auto compiled =
      std::make_shared<const CompiledKernel>(compileForGpu(kernel, target));
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.compiled.emplace(key, compiled).first->second;
}

std::shared_ptr<GpuKernel> jitKernel(const Kernel &kernel,
                                     const GpuTarget &target) {
  std::shared_ptr<const CompiledKernel> compiled =
      compileCached(kernel, target);
  std::string key = cacheKey(kernel, target);
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto &slot = c.loaded[key];
  if (!slot)
    slot = std::make_shared<GpuKernel>(compiled->spec());
  return slot;
}

CompileCacheStats compileCacheStats() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  CompileCacheStats s = c.stats;
  s.entries = int64_t(c.compiled.size());
  return s;
}

bool tensorsAligned(const Kernel &kernel,
                    const std::map<std::string, TensorRef> &tensors) {
  for (const TensorParamInfo &t : kernel.tensors()) {
    auto it = tensors.find(t.name);
    if (it == tensors.end())
      return false;
    const TensorRef &r = it->second;
    if (reinterpret_cast<uintptr_t>(r.data) % 16 || r.strides.empty() ||
        r.strides.back() != 1)
      return false;
    for (size_t d = 0; d + 1 < r.strides.size(); ++d)
      if ((r.strides[d] * int64_t(dtypeSize(r.dtype))) % 16)
        return false;
  }
  return true;
}

CompiledKernel compileForGpu(const Kernel &kernel, const GpuTarget &target) {
  if (target.arch != "sm_80" && target.arch != "sm_90a" &&
      target.arch != "sm_90")
    throw Error("compileForGpu: target " + target.arch +
                " is not supported (sm_80, sm_90, sm_90a)");
  Kernel::Impl &impl = kernel.impl();
  MLIRContext *ctx = impl.context.get();
  int numWarps = target.numWarps ? target.numWarps : impl.numWarps;
  if (numWarps < 1 || numWarps > 32 || (numWarps & (numWarps - 1)))
    throw Error("compileForGpu: warps must be a power of two in [1, 32], got " +
                std::to_string(numWarps));
  func::FuncOp func = impl.func();
  // Tile shapes must be powers of two: layouts spread them bit by bit.
  WalkResult bad = func.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t))
        for (int64_t d : rt.getShape())
          if (d & (d - 1)) {
            op->emitError("GPU lowering: tile dimension ")
                << d << " is not a power of two";
            return WalkResult::interrupt();
          }
    return WalkResult::advance();
  });
  std::string diags;
  llvm::raw_string_ostream dos(diags);
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    dos << d.getLocation() << ": " << d << "\n";
    return success();
  });
  if (bad.wasInterrupted())
    throw Error(diags);

  CompiledKernel out;
  out.name = impl.name;
  out.arch = target.arch;
  out.grid = impl.grid;
  out.threads = 32 * numWarps;
  out.params = impl.params;
  out.tensors = impl.tensors;

  out.aligned = target.assumeAligned;
  int numStages = target.numStages ? target.numStages : impl.numStages;
  if (numStages < 2 || numStages > 8)
    throw Error("compileForGpu: pipeline stages must be in [2, 8], got " +
                std::to_string(numStages));
  GpuPipelineOptions options{.numWarps = numWarps,
                             .aligned = out.aligned,
                             .numStages = numStages,
                             .reloadThreadIds = target.reloadThreadIds ||
                                                impl.reloadThreadIds};
  // The kernel's own module stays as the DSL built it (the CPU executor and
  // the cache key read it); the passes work on a copy.
  OwningOpRef<ModuleOp> lowered(cast<ModuleOp>(impl.module->clone()));
  auto run = [&](auto build, const char *what) {
    PassManager pm(ctx);
    build(pm, options);
    if (succeeded(pm.run(*lowered)))
      return;
    // The lowering reports what the GPU path does not support as a plain
    // error; everything else is a bug of kiln's.
    if (diags.find("internal error:") == std::string::npos &&
        std::string(what) == "lowering to LLVM")
      throw Error(diags);
    throw InternalError(std::string(what) + " of kernel " + impl.name +
                        " failed:\n" + diags + print(*lowered));
  };
  run(buildLayoutPipeline, "layout assignment");
  {
    OpPrintingFlags flags;
    flags.enableDebugInfo(false);
    llvm::raw_string_ostream os(out.layouts);
    lowered->print(os, flags);
    int converts = 0;
    lowered->walk([&](ConvertLayoutOp) { ++converts; });
    os << "// kiln.convert_layout ops left: " << converts << "\n";
  }
  run(buildLLVMLoweringPipeline, "lowering to LLVM");
  out.sharedBytes =
      (*lowered)->getAttrOfType<IntegerAttr>("kiln.shared_bytes").getInt();
  out.layouts +=
      "// of them through shared memory (not ldmatrix, not register "
      "renames): " +
      std::to_string((*lowered)
                         ->getAttrOfType<IntegerAttr>("kiln.smem_conversions")
                         .getInt()) +
      "\n";
  out.loweredIR = print(*lowered);

  llvm::LLVMContext llctx;
  std::unique_ptr<llvm::Module> m =
      translateModuleToLLVMIR(*lowered, llctx, impl.name);
  if (!m)
    throw InternalError("translating kernel " + impl.name +
                        " to LLVM IR failed:\n" + diags);
  out.ptx = emitPtx(*m, target.arch, out.llvmIR);
  return out;
}

} // namespace kiln
