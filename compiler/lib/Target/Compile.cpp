//===- Compile.cpp - kiln IR to PTX, in process ---------------------------===//
//
// The MLIR passes run in the order Pipeline.cpp gives, on a copy of the
// kernel's module; then translation to LLVM IR, LLVM's middle end (kiln's short
// pipeline, or O3) for the NVPTX target machine, and PTX from LLVM's NVPTX
// backend.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "EmitPtx.h"
#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/TensorArgs.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/runtime/Error.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>

using namespace mlir;

namespace kiln {

static std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

using Clock = std::chrono::steady_clock;
static double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

namespace {
/// Records each pass as a stage: its time, and its output IR when asked.
/// Pass adaptors (nesting into functions) have no argument and are skipped.
class StageRecorder : public PassInstrumentation {
public:
  StageRecorder(std::vector<CompileStage> &stages, ModuleOp top, bool keep)
      : stages_(stages), top_(top), keep_(keep) {}
  void runBeforePass(Pass *pass, Operation *) override {
    if (!pass->getArgument().empty())
      start_ = Clock::now();
  }
  void runAfterPass(Pass *pass, Operation *) override {
    if (pass->getArgument().empty())
      return;
    CompileStage s;
    s.ms = msSince(start_);
    s.name = pass->getArgument().str();
    int seen = 1;
    for (const CompileStage &prev : stages_)
      seen += prev.name == s.name || prev.name.rfind(s.name + ".", 0) == 0;
    if (seen > 1)
      s.name += "." + std::to_string(seen);
    if (keep_) {
      std::string text;
      llvm::raw_string_ostream os(text);
      OpPrintingFlags flags;
      flags.enableDebugInfo(false);
      top_->print(os, flags);
      s.text = std::move(text);
    }
    stages_.push_back(std::move(s));
  }

private:
  std::vector<CompileStage> &stages_;
  ModuleOp top_;
  bool keep_;
  Clock::time_point start_;
};
} // namespace

int64_t sharedMemoryLimit(const std::string &arch) {
  return (arch == "sm_80" ? 163 : 227) * int64_t(1024);
}

/// Puts kiln.aligned on the pointer argument of every tensor the target
/// specialises as aligned, and says so in `tensors`.
static void specialiseTensors(func::FuncOp func, const GpuTarget &target,
                              std::vector<TensorParamInfo> &tensors) {
  for (const std::string &name : target.unalignedTensors)
    if (llvm::none_of(tensors, [&](auto &t) { return t.name == name; }))
      throw Error("compileForGpu: GpuTarget::unalignedTensors names " + name +
                  ", which is not a tensor of kernel " +
                  func.getSymName().str());
  for (TensorParamInfo &t : tensors) {
    t.aligned = target.assumeAligned && t.specialisable &&
                !llvm::is_contained(target.unalignedTensors, t.name);
    if (t.aligned)
      func.setArgAttr(t.pointerParam, kAlignedArgAttr,
                      UnitAttr::get(func.getContext()));
  }
}

/// What kiln.divisibility says of argument i already (the kernel's own
/// scalarArg multipleOf), 1 without it.
static int64_t knownMultiple(func::FuncOp func, unsigned i) {
  auto d = func.getArgAttrOfType<IntegerAttr>(i, kDivisibilityArgAttr);
  return d ? d.getInt() : 1;
}

/// Run-time integers by class: kiln.divisibility on those divisible by 16
/// (offsets built from them keep vector accesses), the constant 1 in place
/// of those that are 1; `params` records what the launcher checks.
static void specialiseScalars(func::FuncOp func, const GpuTarget &target,
                              std::vector<ParamInfo> &params) {
  for (const auto &[name, c] : target.scalarClasses) {
    auto it = llvm::find_if(params, [&](auto &p) { return p.name == name; });
    if (it == params.end() || it->kind != ParamInfo::Kind::Scalar)
      throw Error("compileForGpu: GpuTarget::scalarClasses names " + name +
                  ", which is not an integer argument of kernel " +
                  func.getSymName().str());
    const unsigned i = unsigned(it - params.begin());
    it->assumed = c;
    if (c == ScalarClass::DivisibleBy16)
      func.setArgAttr(
          i, kDivisibilityArgAttr,
          IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                           std::max<int64_t>(16, knownMultiple(func, i))));
    if (c == ScalarClass::One) {
      OpBuilder b(func.getContext());
      b.setInsertionPointToStart(&func.getBody().front());
      Value one = arith::ConstantIntOp::create(b, func.getLoc(), 1, 32);
      func.getArgument(i).replaceAllUsesWith(one);
      // A tensor dimension it held is the constant 1 now (what TMA's
      // matching of the tensor's extents reads).
      for (unsigned a = 0; a < func.getNumArguments(); ++a) {
        auto dims =
            func.getArgAttrOfType<DenseI32ArrayAttr>(a, kTensorDimsAttr);
        auto shape =
            func.getArgAttrOfType<DenseI64ArrayAttr>(a, kTensorShapeAttr);
        if (!dims || !shape || !llvm::is_contained(dims.asArrayRef(), int(i)))
          continue;
        SmallVector<int32_t> d(dims.asArrayRef());
        SmallVector<int64_t> sh(shape.asArrayRef());
        for (size_t k = 0; k < d.size(); ++k)
          if (d[k] == int(i))
            d[k] = -1, sh[k] = 1;
        func.setArgAttr(a, kTensorShapeAttr, b.getDenseI64ArrayAttr(sh));
        if (llvm::all_of(d, [](int32_t x) { return x < 0; }))
          func.removeArgAttr(a, kTensorDimsAttr);
        else
          func.setArgAttr(a, kTensorDimsAttr, b.getDenseI32ArrayAttr(d));
      }
    }
  }
}

CompiledKernel compileForGpu(const Kernel &kernel, const GpuTarget &target,
                             const CompileOptions &opts) {
  auto start = Clock::now();
  const char *dumpDir = std::getenv("KILN_DUMP_DIR");
  CompileOptions inspect = opts;
  inspect.keepPasses |= dumpDir && *dumpDir;
  if (target.arch != "sm_80" && target.arch != "sm_90a" &&
      target.arch != "sm_90")
    throw Error("compileForGpu: target " + target.arch +
                " is not supported (sm_80, sm_90, sm_90a)");
  const std::string &pipe = target.llvmPipeline;
  if (pipe != "kiln" && pipe != "O1" && pipe != "O2" && pipe != "O3" &&
      !pipe.starts_with("passes:"))
    throw Error("compileForGpu: LLVM pipeline '" + pipe +
                "' is not one of kiln, O1, O2, O3, passes:<LLVM pipeline>");
  Kernel::Impl &impl = kernel.impl();
  MLIRContext *ctx = impl.context.get();
  int numWarps = target.numWarps ? target.numWarps : impl.numWarps;
  if (numWarps < 1 || numWarps > 32 || (numWarps & (numWarps - 1)))
    throw Error("compileForGpu: warps must be a power of two in [1, 32], got " +
                std::to_string(numWarps));
  kernel.checkTileShapes();
  func::FuncOp func = impl.func();
  // A tile spreads over the program's threads; far past the 255 registers a
  // thread has, the lowering would only unroll for minutes towards spills.
  func.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t);
          rt && rt.getNumElements() / (32 * numWarps) > 2048)
        throw Error("kernel " + impl.name + ": a tile of " +
                    std::to_string(rt.getNumElements()) + " elements is " +
                    std::to_string(rt.getNumElements() / (32 * numWarps)) +
                    " per thread at " + std::to_string(numWarps) +
                    " warps (the GPU has 255 registers a thread): use smaller "
                    "blocks or more warps");
  });
  std::string diags;
  llvm::raw_string_ostream dos(diags);
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    dos << d.getLocation() << ": " << d << "\n";
    return success();
  });

  CompiledKernel out;
  out.name = impl.name;
  out.arch = target.arch;
  out.grid = impl.grid;
  out.threads = 32 * numWarps;
  out.params = impl.params;
  out.tensors = impl.tensors;

  int numStages = target.numStages ? target.numStages : impl.numStages;
  if (numStages < 2 || numStages > 8)
    throw Error("compileForGpu: pipeline stages must be in [2, 8], got " +
                std::to_string(numStages));
  GpuPipelineOptions options{.numWarps = numWarps,
                             .numStages = numStages,
                             .reloadThreadIds =
                                 target.reloadThreadIds || impl.reloadThreadIds,
                             .hasWgmma = target.arch == "sm_90a",
                             .sharedLimit = sharedMemoryLimit(target.arch)};
  // The kernel's own module stays as the DSL built it (the CPU executor and
  // the cache key read it); the passes work on a copy.
  OwningOpRef<ModuleOp> lowered(cast<ModuleOp>(impl.module->clone()));
  specialiseTensors(lowered->lookupSymbol<func::FuncOp>(impl.name), target,
                    out.tensors);
  specialiseScalars(lowered->lookupSymbol<func::FuncOp>(impl.name), target,
                    out.params);
  {
    OpPrintingFlags flags;
    flags.enableDebugInfo(false);
    llvm::raw_string_ostream os(out.kilnIR);
    lowered->print(os, flags);
    out.stages.push_back({"kiln", "", 0});
  }
  auto run = [&](auto build, const char *what) {
    PassManager pm(ctx);
    // The kiln passes verify after each; the upstream conversions are
    // verified once, at the end, unless asked.
    bool layoutPasses = std::string(what) == "layout assignment";
    pm.enableVerifier(layoutPasses || inspect.verifyEachPass);
    pm.addInstrumentation(std::make_unique<StageRecorder>(out.stages, *lowered,
                                                          inspect.keepPasses));
    build(pm, options);
    if (succeeded(pm.run(*lowered))) {
      if (layoutPasses || inspect.verifyEachPass)
        return;
      auto t0 = Clock::now();
      bool valid = succeeded(verify(*lowered));
      out.stages.push_back({"verify", "", msSince(t0)});
      if (valid)
        return;
      throw InternalError("the lowering of kernel " + impl.name +
                          " produced invalid IR:\n" + diags + print(*lowered));
    }
    // The lowering reports what the GPU path does not support as a plain
    // error; everything else is a bug of kiln's.
    if (diags.find("internal error:") == std::string::npos &&
        std::string(what) == "lowering to LLVM")
      throw Error(diags.empty() ? "the GPU lowering of kernel " + impl.name +
                                      " failed without a diagnostic"
                                : diags);
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
  for (Attribute line :
       (*lowered)->getAttrOfType<ArrayAttr>("kiln.lowering_report"))
    out.report.push_back(cast<StringAttr>(line).str());
  if (auto extra =
          (*lowered)->getAttrOfType<IntegerAttr>("kiln.producer_warps"))
    out.threads += 32 * int(extra.getInt());
  out.persistent = (*lowered)->hasAttr("kiln.persistent");
  out.tileCounter = (*lowered)->hasAttr("kiln.tile_counter");
  out.overlapPrevious = (*lowered)->hasAttr("kiln.overlap_previous");
  // What no GPU of the architecture runs is rejected here, with the numbers,
  // not at the first launch.
  const int64_t sharedLimit = options.sharedLimit;
  if (out.sharedBytes > sharedLimit)
    throw Error(
        "kernel " + impl.name + " needs " + std::to_string(out.sharedBytes) +
        " bytes of shared memory per block; " + target.arch + " allows " +
        std::to_string(sharedLimit) + " (" + std::to_string(numStages) +
        " pipeline stages, " + std::to_string(numWarps) +
        " warps): use fewer stages or smaller blocks");
  if (out.threads > 1024)
    throw Error("kernel " + impl.name + " needs " +
                std::to_string(out.threads) +
                " threads per block (a producer warpgroup included); GPUs "
                "run at most 1024");
  if (auto maps = (*lowered)->getAttrOfType<ArrayAttr>("kiln.tensor_maps"))
    for (Attribute m : maps)
      out.tensorMaps.push_back(TensorMapInfo::parse(cast<StringAttr>(m).str()));
  out.layouts +=
      "// of them through shared memory (not ldmatrix, not register "
      "renames): " +
      std::to_string((*lowered)
                         ->getAttrOfType<IntegerAttr>("kiln.smem_conversions")
                         .getInt()) +
      "\n";

  auto t0 = Clock::now();
  llvm::LLVMContext llctx;
  std::unique_ptr<llvm::Module> m =
      translateModuleToLLVMIR(*lowered, llctx, impl.name);
  if (!m)
    throw InternalError("translating kernel " + impl.name +
                        " to LLVM IR failed:\n" + diags);
  out.stages.push_back({"llvm-ir", "", msSince(t0)});
  // The lowered module, translated, is printed on another thread while LLVM
  // optimizes the translation: ~7 ms off a cold compile.
  std::future<std::string> loweredText =
      std::async(std::launch::async, [&lowered] { return print(*lowered); });
  emitPtx(*m, target.arch, target.llvmPipeline, out, inspect.keepPasses);
  out.loweredIR = loweredText.get();
  out.compileMs = msSince(start);
  if (dumpDir && *dumpDir)
    dumpStages(out, dumpDir);
  return out;
}

} // namespace kiln
