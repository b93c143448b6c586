//===- Compile.h - a kernel to PTX ------------------------------*- C++ -*-===//
//
// The compiler's output and the contract with the runtime: PTX plus what a
// launch needs (name, parameters, grid, threads, dynamic shared memory).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_COMPILE_H
#define KILN_COMPILER_COMPILE_H

#include "kiln/Compiler/Kernel.h"
#include "kiln/Compiler/StageText.h"
#include "kiln/runtime/Launch.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct GpuTarget {
  std::string arch = "sm_90a"; ///< sm_80 or sm_90a
  int numWarps = 0;            ///< 0: the kernel's own (its Config's warps)
  int numStages = 0;           ///< 0: the kernel's own
  /// Re-read the thread id inside loops so that address arithmetic derived
  /// from it stays in the loop instead of living in registers across it:
  /// less register pressure, a little more ALU work. Or'ed with the kernel's.
  bool reloadThreadIds = false;
  /// Specialise each tensor argument for a last dimension that is contiguous
  /// (stride 1), other strides that are multiples of 16 bytes and a 16-byte
  /// aligned base: its loads and stores become 16-byte vectors, cp.async or
  /// TMA. Each tensor on its own: those named in `unalignedTensors` (or all,
  /// without assumeAligned) take element accesses, and the others keep their
  /// paths. The launcher checks each specialised tensor before every launch;
  /// unalignedTensors(kernel, tensors) says which to name for given tensors.
  bool assumeAligned = true;
  std::vector<std::string> unalignedTensors;
  /// Run-time integer arguments (KernelBuilder::scalarArg) specialised by
  /// their value's class: DivisibleBy16 lets offsets built from it keep
  /// vector accesses, One compiles the value in. The launcher checks each
  /// value; scalarClasses(kernel, values) gives the classes of given values.
  std::map<std::string, ScalarClass> scalarClasses;
  /// LLVM's middle end before the NVPTX backend: "kiln" (a short function
  /// pipeline for kiln's already-simplified, unrolled code; the default),
  /// LLVM's own "O1", "O2", "O3", or "passes:<text>" for any pipeline in
  /// `opt -passes=` syntax (for experiments).
  std::string llvmPipeline = "kiln";
};

/// Dynamic shared memory one block may take on `arch` (the opt-in limit:
/// 227 KB on sm_90/sm_90a, 163 KB on sm_80). Compiles past it are refused;
/// the lowering fits TMA staging tiles under it.
int64_t sharedMemoryLimit(const std::string &arch);

/// The tensors bound to a kernel that do not meet GpuTarget::assumeAligned,
/// sorted by name (GpuTarget::unalignedTensors for them); not those the
/// kernel keeps unspecialised (KernelBuilder::keepUnspecialised).
std::vector<std::string>
unalignedTensors(const Kernel &kernel,
                 const std::map<std::string, TensorRef> &tensors);

/// The class of each run-time integer argument's value in `values`, and of
/// each run-time dimension bound from `tensors` (GpuTarget::scalarClasses
/// for them).
std::map<std::string, ScalarClass>
scalarClasses(const Kernel &kernel,
              const std::map<std::string, int64_t> &values,
              const std::map<std::string, TensorRef> &tensors = {});

/// Whether the tensor `ref` meets GpuTarget::assumeAligned.
bool tensorAligned(const TensorRef &ref);
/// The same for a tensor's strides alone: one whose base will be 16-byte
/// aligned (device allocations are 256-byte aligned).
bool stridesAligned(DType dtype, const std::vector<int64_t> &strides);

struct CompiledKernel;
/// "aligned rows: Q, K, V, O; element accesses: LSE" for a compiled kernel.
std::string tensorSpecialisation(const CompiledKernel &kernel);

/// One stage of a compile: the kernel's IR after a pass (named by the pass's
/// argument, `cse.2` for its second run), or `kiln` (the DSL's output),
/// `verify` (of the lowered IR, no text), `llvm-ir` (translated), `llvm-opt`
/// (after LLVM O3), `ptx`; how long it took.
struct CompileStage {
  std::string name;
  StageText text; ///< kept for passes only under CompileOptions::keepPasses
  double ms = 0;
};

/// How much of a compile to keep for inspection.
struct CompileOptions {
  /// The IR after every pass (costs one print per pass).
  bool keepPasses = false;
  /// Run MLIR's verifier after every pass of the lowering to LLVM, not only
  /// after the kiln passes and at the end (costs ~20 ms on attention).
  bool verifyEachPass = false;
};

struct CompiledKernel {
  std::string name;
  std::string arch;
  GridExtents grid{1, 1, 1}; ///< constants or formulas of the arguments
  int threads = 128;
  int64_t sharedBytes = 0; ///< dynamic shared memory per CTA
  /// The grid's programs run on persistent CTAs (LaunchSpec::persistent).
  bool persistent = false;
  /// Dynamic tiles: the kernel takes a tile counter last
  /// (LaunchSpec::tileCounter).
  bool tileCounter = false;
  /// Launched to start before the previous launch ends
  /// (LaunchSpec::overlapPrevious).
  bool overlapPrevious = false;
  std::vector<ParamInfo> params;
  /// The kernel's tensors, each with the specialisation it was compiled for
  /// (TensorParamInfo::aligned).
  std::vector<TensorParamInfo> tensors;
  /// TMA tensor maps the kernel takes after `params` (the launcher encodes
  /// them).
  std::vector<TensorMapInfo> tensorMaps;
  // Every stage, for inspection.
  std::string layouts; ///< the layout assigned to each tile value
  StageText loweredIR; ///< LLVM + NVVM dialect
  StageText llvmIR;    ///< optimised LLVM IR
  std::string ptx;
  /// The driver's compile of `ptx` per device architecture, kept in the disk
  /// cache entry once a process has loaded the kernel (LaunchSpec::images).
  std::map<std::string, LaunchSpec::Image> images;
  std::string kilnIR; ///< the DSL's IR, as the compile saw it
  /// What each load and dot became (wgmma or mma.sync; cp.async or plain
  /// loads), with the user's source line; a fallback says why.
  std::vector<std::string> report;
  /// Every stage in order, with its compile time.
  std::vector<CompileStage> stages;
  double compileMs = 0; ///< all stages together

  /// A stage's text: the IR after a pass (kept under keepPasses), or the
  /// field that holds it for the kiln, llvm-opt and ptx stages.
  const std::string &textOf(const CompileStage &stage) const;

  /// What the runtime needs to load and launch it.
  LaunchSpec spec() const;
};

/// Writes every stage of `kernel` under `dir`/<name>-<arch>-<hash>/ as
/// NN-<stage>.{mlir,ll,ptx} plus stages.txt (times); returns that folder.
/// compileForGpu calls it for every compile when KILN_DUMP_DIR is set.
std::string dumpStages(const CompiledKernel &kernel, const std::string &dir);

/// Compiles a kernel for a GPU target. Throws kiln::Error when the kernel
/// uses something the GPU path does not support, naming it.
CompiledKernel compileForGpu(const Kernel &kernel, const GpuTarget &target = {},
                             const CompileOptions &options = {});

/// JIT per shape: the compiled kernel from the in-process cache, else from
/// the disk cache (DiskCache::fromEnvironment), compiling it on a miss of
/// both. Two kernels built alike share one entry and nothing else does: see
/// compileCacheKey. Thread-safe.
std::shared_ptr<const CompiledKernel>
compileCached(const Kernel &kernel, const GpuTarget &target = {});

/// The same, loaded on the device and ready to launch. With KILN_LOG
/// naming `launch` (KILN_LOG=launch, or a comma list), each variant the
/// process loads prints one line to stderr: the kernel, its tensors'
/// specialisation and the path of each load, dot and store.
std::shared_ptr<GpuKernel> jitKernel(const Kernel &kernel,
                                     const GpuTarget &target = {});

/// `target` with unalignedTensors and scalarClasses set from these tensors
/// (their alignment, their run-time dimensions' classes) and integer values:
/// the variant a launch with them takes (each specialised on its own, as the
/// launch will check).
GpuTarget variantTarget(const Kernel &kernel,
                        const std::map<std::string, TensorRef> &tensors,
                        const std::map<std::string, int64_t> &scalars = {},
                        GpuTarget target = {});

/// What a target specialises a kernel for, as text: the tensors without
/// the aligned paths and the integers' classes (",LSE;Nk=div16"). Two
/// targets alike but for these give the same text exactly when they are the
/// same variant (part of compileCacheKey; a map key for callers that keep
/// loaded variants).
std::string specialisationKey(const GpuTarget &target);

/// The variant for these tensors and integer values (variantTarget's).
std::shared_ptr<GpuKernel>
jitKernel(const Kernel &kernel, const std::map<std::string, TensorRef> &tensors,
          const std::map<std::string, int64_t> &scalars = {},
          GpuTarget target = {});

/// One line: the kernel, arch, tensorSpecialisation and each report line's
/// path ("load 128x128: TMA | dot 128x128x128: wgmma ..."), as KILN_LOG=launch
/// prints it.
std::string variantSummary(const CompiledKernel &kernel);

/// The cache key (64 hex digits): BLAKE3 of the compiler's build id, every
/// GpuTarget field and the kernel's canonical IR (generic form, without
/// locations; it holds the shape constants and the Config).
std::string compileCacheKey(const Kernel &kernel, const GpuTarget &target);

struct CompileCacheStats {
  int64_t hits = 0;     ///< found in the process
  int64_t diskHits = 0; ///< found on disk
  int64_t misses = 0;   ///< compiled
  int64_t entries = 0;  ///< in the process now
};
CompileCacheStats compileCacheStats();
/// Forgets the in-process entries (the disk cache stays).
void clearInProcessCompileCache();

} // namespace kiln

#endif // KILN_COMPILER_COMPILE_H
