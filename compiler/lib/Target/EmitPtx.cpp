//===- EmitPtx.cpp - LLVM's middle end and NVPTX backend for kiln ---------===//
//
// The LLVM module the lowering produced, optimised for the NVPTX target
// machine (kiln's pipeline below, LLVM's O1-O3, or a pipeline the target
// names), then PTX from LLVM's NVPTX backend, each timed as a stage.
//
//===----------------------------------------------------------------------===//
#include "EmitPtx.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/OptBisect.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

#include <chrono>
#include <future>
#include <mutex>

namespace kiln {

using Clock = std::chrono::steady_clock;
static double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

namespace {
/// Turns one pass of LLVM's pipelines off, through the gate opt-bisect uses.
class SkipPass : public llvm::OptPassGate {
public:
  explicit SkipPass(const char *name) : name_(name) {}
  bool shouldRunPass(llvm::StringRef pass, llvm::StringRef) const override {
    return pass != name_;
  }
  bool isEnabled() const override { return true; }

private:
  const char *name_;
};
} // namespace

// LLVM's middle end for kiln's code: O3's function passes that change
// kiln's PTX, in O3's order. The lowering hands LLVM one function whose loop
// bodies are unrolled tiles, already canonicalized and CSE'd by MLIR, with no
// calls (no inlining, no libdevice: the math lowers to NVVM intrinsics) and
// no allocas, so most of O3's passes find nothing to do. The list is what is
// left of O3's flattened function pipeline after dropping, one at a time,
// every pass whose removal left the PTX of D=128 attention identical and
// that of causal attention, GEMM and softmax no further from O3's. It takes
// 55 of O3's 70 ms on causal D=128 attention (the SLP vectorizer, 12 ms of
// it, only pairs one bf16x2 conversion in the epilogue of D=128 attention;
// it stays, as measured on the H200). A shorter list (36 ms)
// changed a few address computations of the K/V loop and cost 3-5% at D=128
// on the H200. Codegen.KilnLlvmPipelineDoesO3sWork compares it with O3.
static std::string kilnLlvmPipeline() {
  const std::string combine =
      "instcombine<max-iterations=1;no-verify-fixpoint>";
  const std::string cfg =
      "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;"
      "switch-range-to-icmp;no-switch-to-arithmetic;no-switch-to-lookup;"
      "keep-loops;no-hoist-common-insts;no-hoist-loads-stores-with-cond-"
      "faulting;no-sink-common-insts;speculate-blocks;simplify-cond-branch;"
      "no-speculate-unpredictables>";
  const std::vector<std::string> passes = {
      "nvvm-intr-range",
      combine,
      "early-cse<memssa>",
      "speculative-execution<only-if-divergent-target>",
      "correlated-propagation",
      cfg,
      combine,
      "reassociate",
      "loop-mssa(loop-instsimplify,loop-simplifycfg,licm<no-allowspeculation>,"
      "loop-rotate<header-duplication;no-prepare-for-lto>,"
      "licm<allowspeculation>,simple-loop-unswitch<nontrivial;trivial>)",
      combine,
      "loop(loop-idiom,indvars,loop-deletion,loop-unroll-full)",
      "gvn<>",
      "sccp",
      "correlated-propagation",
      "loop-mssa(licm<allowspeculation>)",
      cfg,
      combine,
      "slp-vectorizer",
      "vector-combine",
      "loop-unroll<O3>",
      combine};
  std::string pipeline = "function(";
  for (size_t i = 0; i < passes.size(); ++i)
    pipeline += (i ? "," : "") + passes[i];
  return pipeline + ")";
}

void emitPtx(llvm::Module &m, const std::string &arch,
             const std::string &pipeline, CompiledKernel &out, bool keep) {
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
  // PTX ISA 8.1: sm_90's vector reductions (red.global.add.v2.f32).
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, arch, "+ptx81", options, std::nullopt, std::nullopt,
      // Default, not Aggressive: the backend's extra GVN runs at Aggressive
      // cost ~7 ms on attention and left kiln's PTX byte-identical.
      llvm::CodeGenOptLevel::Default));
  if (!tm)
    throw Error("NVPTX: no target machine for " + arch);
  m.setTargetTriple(triple);
  m.setDataLayout(tm->createDataLayout());
  if (keep) {
    std::string text;
    llvm::raw_string_ostream os(text);
    m.print(os, nullptr);
    out.stages.back().text = std::move(text);
  }

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
  auto t0 = Clock::now();
  if (pipeline == "O1" || pipeline == "O2" || pipeline == "O3") {
    auto level = pipeline == "O1"   ? llvm::OptimizationLevel::O1
                 : pipeline == "O2" ? llvm::OptimizationLevel::O2
                                    : llvm::OptimizationLevel::O3;
    pb.buildPerModuleDefaultPipeline(level).run(m, mam);
  } else {
    bool custom = pipeline.starts_with("passes:");
    std::string text = custom ? pipeline.substr(7) : kilnLlvmPipeline();
    llvm::ModulePassManager mpm;
    if (llvm::Error e = pb.parsePassPipeline(mpm, text)) {
      std::string why = llvm::toString(std::move(e));
      if (custom)
        throw Error("LLVM pipeline '" + text + "': " + why);
      throw InternalError("kiln's LLVM pipeline: " + why);
    }
    mpm.run(m, mam);
  }
  // The optimized IR is printed on another thread while the backend (which
  // rewrites the module) runs: ~5 ms off a cold compile. The copy goes
  // through bitcode into a context of its own: a clone in this context
  // shares its uniqued constants, types and metadata with the module the
  // backend changes (helgrind saw the race).
  llvm::SmallVector<char, 0> bitcode;
  {
    llvm::raw_svector_ostream os(bitcode);
    llvm::WriteBitcodeToFile(m, os);
  }
  std::future<std::string> llvmText =
      std::async(std::launch::async, [bitcode = std::move(bitcode),
                                      name = m.getModuleIdentifier()] {
        llvm::LLVMContext context;
        llvm::Expected<std::unique_ptr<llvm::Module>> copy =
            llvm::parseBitcodeFile(
                llvm::MemoryBufferRef(
                    llvm::StringRef(bitcode.data(), bitcode.size()), name),
                context);
        if (!copy)
          return "; could not re-read the optimized module: " +
                 llvm::toString(copy.takeError()) + "\n";
        std::string text;
        llvm::raw_string_ostream os(text);
        (*copy)->print(os, nullptr);
        return text;
      });
  out.stages.push_back({"llvm-opt", "", msSince(t0)});
  t0 = Clock::now();
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  // The backend's straight-line strength reduction is skipped: on kiln's
  // unrolled code (one block of thousands of address computations) its
  // basis search took ~150 of ~210 ms of this stage on D=128 attention, and
  // the lowering already emits shared-memory addresses as a thread base plus
  // constants (Lowerer::tilePtrs, loadFragments), the form it would
  // produce. Measured
  // on the H200 in one run: the same TFLOP/s within 1% on every attention
  // shape of `kiln bench attention`.
  static SkipPass noSlsr("slsr");
  m.getContext().setOptPassGate(noSlsr);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr,
                              llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("NVPTX cannot emit assembly");
  pm.run(m);
  out.ptx = std::string(ptx.str());
  out.llvmIR = llvmText.get();
  out.stages.push_back({"ptx", "", msSince(t0)});
}

} // namespace kiln
