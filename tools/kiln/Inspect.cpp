//===- Inspect.cpp - every stage of a compile, resources, the disk cache --===//
#include "Commands.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Launch.h"

#include <fmt/core.h>

#include <algorithm>
#include <ctime>

namespace kiln::cli {

GpuTarget targetOptions(Options &opts) {
  GpuTarget target;
  target.arch = opts.string("arch", "sm_90a");
  target.numWarps = opts.int32("warps", 0);
  target.numStages = opts.int32("stages", 0);
  target.reloadThreadIds = opts.onOff("reload-ids", false);
  target.llvmPipeline = opts.string("llvm-pipeline", target.llvmPipeline);
  return target;
}

/// The text of a stage by name (`cse.2`), by number (`07`, `7`) or by the
/// older aliases layouts, lowered, llvm.
static std::string stageText(const CompiledKernel &c, const std::string &want) {
  if (want == "layouts")
    return c.layouts;
  if (want == "lowered")
    return c.loweredIR;
  if (want == "llvm")
    return c.llvmIR;
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CompileStage &s = c.stages[i];
    bool byNumber = !want.empty() && want.size() < 6 &&
                    want.find_first_not_of("0123456789") == std::string::npos &&
                    std::stoul(want) == i;
    if (s.name == want || byNumber)
      return c.textOf(s);
  }
  std::string names;
  for (const CompileStage &s : c.stages)
    names += " " + s.name;
  throw UsageError("no stage '" + want + "'; the stages are:" + names +
              " (or layouts, lowered, llvm; --stage list shows them)");
}

static void printStageList(const CompiledKernel &c) {
  fmt::print("{:>3}  {:<32} {:>9} {:>10}\n", "#", "stage", "ms", "bytes");
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CompileStage &s = c.stages[i];
    fmt::print("{:>3}  {:<32} {:9.2f} {:>10}\n", i, s.name, s.ms,
               c.textOf(s).size());
  }
  fmt::print("     {:<32} {:9.2f}\n", "total", c.compileMs);
}

/// Compiles keeping every pass's IR; prints the stage list or one stage.
static int printStage(const Kernel &k, const GpuTarget &target,
                      const std::string &stage) {
  CompiledKernel c = compileForGpu(k, target, {.keepPasses = true});
  if (stage == "list")
    printStageList(c);
  else
    fmt::print("{}", stageText(c, stage));
  return 0;
}

/// What every inspect command reads last (after its own options): the
/// target options and the kernel with its shape, with no option left over.
struct Inspected {
  GpuTarget target;
  Problem problem;
};
static Inspected toInspect(Options &opts) {
  Inspected in{targetOptions(opts),
               makeProblem(kernelName(opts), opts, /*withData=*/false)};
  // --unaligned Q,K: as for views at an odd offset or with padded rows.
  std::vector<std::string> unaligned = in.problem.unaligned;
  std::string given = opts.string("unaligned", "");
  for (const std::string &name :
       given.empty() ? std::vector<std::string>{} : commaList(given)) {
    const auto &tensors = in.problem.kernel->tensors();
    if (std::none_of(
            tensors.begin(), tensors.end(),
            [&](const TensorParamInfo &t) { return t.name == name; })) {
      std::string names, parts;
      for (const TensorParamInfo &t : tensors)
        names += (names.empty() ? "" : ", ") + t.name;
      // A problem of several kernels (the backward): the parts that have it.
      for (const Kernel &k : in.problem.sequence)
        for (const TensorParamInfo &t : k.tensors())
          if (t.name == name)
            parts += (parts.empty() ? "" : ", ") + backwardPartName(k);
      throw UsageError("option --unaligned: kernel " +
                       in.problem.kernel->name() + " has no tensor '" + name +
                       "' (its tensors: " + names + ")" +
                       (parts.empty() ? "" : "; --part " + parts + " has it"));
    }
    unaligned.push_back(name);
  }
  std::sort(unaligned.begin(), unaligned.end());
  unaligned.erase(std::unique(unaligned.begin(), unaligned.end()),
                  unaligned.end());
  opts.checkAllUsed();
  // The variant `kiln run` launches for these tensors.
  in.target.unalignedTensors = unaligned;
  in.target.scalarClasses = scalarClasses(*in.problem.kernel, in.problem.dims);
  return in;
}

int cmdIr(Options &opts) {
  bool withLoc = opts.flag("loc");
  std::string stage = opts.string("stage", "");
  auto [target, p] = toInspect(opts);
  if (stage.empty()) {
    fmt::print("// {}\n{}", p.summary, p.kernel->ir(withLoc));
    return 0;
  }
  return printStage(*p.kernel, target, stage);
}

int cmdPtx(Options &opts) {
  std::string stage = opts.string("stage", "ptx");
  auto [target, p] = toInspect(opts);
  if (stage == "ptx") { // through the JIT's caches: instant the second time
    fmt::print("{}", compileCached(*p.kernel, target)->ptx);
    return 0;
  }
  return printStage(*p.kernel, target, stage);
}

int cmdLlvmIr(Options &opts) {
  bool unoptimized = opts.flag("unoptimized");
  auto [target, p] = toInspect(opts);
  CompiledKernel c =
      compileForGpu(*p.kernel, target, {.keepPasses = unoptimized});
  fmt::print("{}", unoptimized ? stageText(c, "llvm-ir") : c.llvmIR.str());
  return 0;
}

int cmdSass(Options &opts) {
  auto [target, p] = toInspect(opts);
  CompiledKernel c = compileForGpu(*p.kernel, target);
  Assembled a = assembleWithPtxas(c);
  fmt::print("{}", disassemble(a.cubin));
  return 0;
}

static void printResources(const Problem &p, const CompiledKernel &c) {
  fmt::print(
      "{}\n  {} threads per block, {} dynamic shared bytes, grid "
      "{}{}\n",
      p.summary, c.threads, c.sharedBytes, describeGrid(c.grid, c.params),
      c.persistent ? " (persistent: run on as many CTAs as fit at once)" : "");
  int registers = 0;
  int64_t staticShared = 0;
  if (findCudaTool("ptxas")) {
    Assembled a = assembleWithPtxas(c);
    registers = a.registers;
    staticShared = a.staticSharedBytes;
    fmt::print("  ptxas -arch={}: {} registers, {} bytes stack, {} bytes "
               "spill stores, {} bytes spill loads, {} bytes static shared\n",
               c.arch, a.registers, a.stackBytes, a.spillStoreBytes,
               a.spillLoadBytes, a.staticSharedBytes);
  } else {
    fmt::print("  ptxas: not installed (PATH, $CUDA_HOME/bin, "
               "/usr/local/cuda/bin): no register or spill counts without a "
               "GPU\n");
  }
  std::string why;
  if (cuda::available(&why) && cuda::device().arch() == c.arch) {
    GpuKernel k(c.spec());
    cuda::FunctionAttributes a = k.attributes();
    int blocks = k.blocksPerSM();
    registers = a.registers;
    fmt::print("  driver on {}: {} registers, {} bytes local (spills and "
               "stack) per thread, {} bytes static shared; {} blocks per SM "
               "({} of 64 warps)\n",
               cuda::device().name, a.registers, a.localBytes,
               a.staticSharedBytes, blocks, blocks * c.threads / 32);
  } else if (registers) {
    Occupancy o = estimateOccupancy(c.arch, c.threads, registers,
                                    c.sharedBytes + staticShared);
    fmt::print("  occupancy (from the {} limits, no {} GPU here): {} blocks "
               "per SM, {} of {} warps, limited by {}\n",
               c.arch, c.arch, o.blocksPerSM, o.warpsPerSM, o.maxWarpsPerSM,
               o.limiter);
  }
  fmt::print("  compile time {:.1f} ms:", c.compileMs);
  for (const CompileStage &s : c.stages)
    if (s.ms >= 1)
      fmt::print(" {} {:.1f}", s.name, s.ms);
  fmt::print("\n");
}

int cmdResources(Options &opts) {
  auto [target, p] = toInspect(opts);
  printResources(p, compileForGpu(*p.kernel, target));
  return 0;
}

int cmdReport(Options &opts) {
  auto [target, p] = toInspect(opts);
  CompiledKernel c = compileForGpu(*p.kernel, target);
  fmt::print("lowering report ({}): what each load and dot became\n", c.arch);
  // The variant `kiln run` launches for its tensors (--layout, --lse-stride).
  fmt::print("  tensors: {}\n", tensorSpecialisation(c));
  bool roles = false;
  for (const std::string &line : c.report) {
    fmt::print("  {}\n", line);
    roles |= line.rfind("warp roles:", 0) == 0;
  }
  if (!roles) // the schedule did not ask for a producer warpgroup
    fmt::print("  warp roles: none, all {} warps load and compute\n",
               c.threads / 32);
  printResources(p, c);
  return 0;
}

static std::string age(int64_t when) {
  int64_t s = int64_t(std::time(nullptr)) - when;
  if (s < 120)
    return fmt::format("{} s ago", s);
  if (s < 7200)
    return fmt::format("{} min ago", s / 60);
  if (s < 172800)
    return fmt::format("{} h ago", s / 3600);
  return fmt::format("{} days ago", s / 86400);
}

int cmdCache(Options &opts) {
  if (opts.positional.empty())
    throw UsageError("kiln cache: say ls, info <key> or clear");
  std::string what = opts.positional[0];
  std::string stage = opts.string("stage", "");
  opts.checkAllUsed();
  // ls and clear take nothing more: `kiln cache clear <key>` would else clear
  // every entry.
  if (what == "ls" || what == "clear") {
    if (opts.positional.size() > 1)
      throw UsageError("kiln cache " + what + " takes no argument, got '" +
                       opts.positional[1] + "'");
    if (!stage.empty())
      throw UsageError("kiln cache " + what +
                       ": --stage goes with kiln cache info <key>");
  }
  DiskCache *cache = DiskCache::fromEnvironment();
  if (!cache)
    throw Error("the disk cache is off: " + DiskCache::offReason());
  if (what == "ls") {
    auto entries = cache->list();
    int64_t total = 0;
    fmt::print("{:<16}  {:<16} {:<7} {:>10} {:>11}  {:<12}  {}\n", "key",
               "kernel", "arch", "bytes", "compile ms", "used", "classes");
    for (const DiskCacheEntry &e : entries) {
      total += e.bytes;
      fmt::print("{:<16}  {:<16} {:<7} {:>10} {:>11.1f}  {:<12}  {}\n",
                 e.key.substr(0, 16), e.kernel, e.arch, e.bytes, e.compileMs,
                 age(e.lastUsed), e.classes);
    }
    fmt::print("{} entries, {:.1f} MB of {:.0f} MB in {}\n", entries.size(),
               total / 1048576.0, cache->maxBytes() / 1048576.0, cache->dir());
    return 0;
  }
  if (what == "clear") {
    int failed = 0;
    std::string why;
    int removed = cache->clear(&failed, &why);
    fmt::print("removed {} entries from {}\n", removed, cache->dir());
    if (failed)
      throw Error(fmt::format("kiln cache clear: {} entries could not be "
                              "removed ({})",
                              failed, why));
    return 0;
  }
  if (what == "info") {
    if (opts.positional.size() != 2)
      throw UsageError("kiln cache info: give one key (or its first digits, as "
                  "kiln cache ls prints them) or a kernel name");
    const std::string &prefix = opts.positional[1];
    std::vector<DiskCacheEntry> found;
    for (const DiskCacheEntry &e : cache->list())
      if (e.key.rfind(prefix, 0) == 0 || e.kernel == prefix)
        found.push_back(e);
    if (found.size() != 1)
      throw Error(fmt::format("kiln cache info: {} entries start with or "
                              "are kernel '{}'",
                              found.size(), prefix));
    std::optional<CompiledKernel> k = cache->load(found[0].key);
    if (!k)
      throw Error("kiln cache info: entry " + found[0].key +
                  " is corrupt (now removed)");
    if (!stage.empty()) {
      fmt::print("{}", stageText(*k, stage));
      return 0;
    }
    fmt::print("key      {}\nfile     {} ({} bytes)\nkernel   {} for {}, "
               "grid {}, {} threads, {} dynamic shared bytes\n",
               found[0].key, found[0].path, found[0].bytes, k->name, k->arch,
               describeGrid(k->grid, k->params), k->threads, k->sharedBytes);
    printStageList(*k);
    return 0;
  }
  throw UsageError("kiln cache: unknown action '" + what + "' (ls, info, clear)");
}

} // namespace kiln::cli
