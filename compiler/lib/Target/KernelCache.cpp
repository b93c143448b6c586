//===- KernelCache.cpp - JIT per shape: memory, then disk, then compile ---===//
//
// compileCached looks a kernel up in the process's map, then in the disk
// cache, and compiles on a miss of both, publishing the result to both.
// Keys hash the compiler build, every GpuTarget field and the kernel's
// canonical IR, which holds its shape constants and Config (grid, warps,
// stages are attributes of the kernel function).
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/Compiler/KernelImpl.h"
#include "kiln/Compiler/Log.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

namespace kiln {

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
} // namespace

bool logs(std::string_view what) {
  const char *env = std::getenv("KILN_LOG");
  std::string_view list(env ? env : "");
  bool named = false;
  for (size_t at = 0; at < list.size();) {
    size_t comma = std::min(list.find(',', at), list.size());
    std::string_view item = list.substr(at, comma - at);
    if (item != "launch" && !item.empty())
      throw Error("KILN_LOG: unknown item '" + std::string(item) +
                  "' (known: launch; a comma-separated list)");
    named = named || item == what;
    at = comma + 1;
  }
  return named;
}

std::string compileCacheKey(const Kernel &kernel, const GpuTarget &t) {
  std::string ir;
  llvm::raw_string_ostream os(ir);
  mlir::OpPrintingFlags flags;
  // The DSL verified the kernel when it finished it: the printer need not.
  flags.printGenericOpForm().enableDebugInfo(false).assumeVerified();
  kernel.impl().module->print(os, flags);
  // The tensors compiled without the aligned paths, the integers' classes.
  const std::string classes = specialisationKey(t);
  return contentHash(
      compilerBuildId() + "|" + t.arch + "|w" + std::to_string(t.numWarps) +
      "|s" + std::to_string(t.numStages) + "|a" +
      std::to_string(t.assumeAligned) + classes + "|r" +
      std::to_string(t.reloadThreadIds) + "|" + t.llvmPipeline + "|" + ir);
}

/// compileCached for a key already computed (printing and hashing the IR
/// is most of an in-process hit).
static std::shared_ptr<const CompiledKernel>
lookupOrCompile(const Kernel &kernel, const GpuTarget &target,
                const std::string &key) {
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.compiled.find(key); it != c.compiled.end()) {
      ++c.stats.hits;
      return it->second;
    }
  }
  // Disk and compiler work happen outside the lock: other threads' lookups
  // and compiles go on meanwhile.
  DiskCache *disk = DiskCache::fromEnvironment();
  std::shared_ptr<const CompiledKernel> compiled;
  bool fromDisk = false;
  // KILN_DUMP_DIR asks for the stages of every kernel the process JITs: a
  // disk entry would skip the compile that writes them.
  const char *dump = std::getenv("KILN_DUMP_DIR");
  if (disk && !(dump && *dump))
    if (std::optional<CompiledKernel> k = disk->load(key)) {
      compiled = std::make_shared<const CompiledKernel>(std::move(*k));
      fromDisk = true;
    }
  if (!compiled) {
    compiled =
        std::make_shared<const CompiledKernel>(compileForGpu(kernel, target));
    if (disk)
      disk->store(key, *compiled);
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  ++(fromDisk ? c.stats.diskHits : c.stats.misses);
  return c.compiled.emplace(key, compiled).first->second;
}

std::shared_ptr<const CompiledKernel> compileCached(const Kernel &kernel,
                                                    const GpuTarget &target) {
  return lookupOrCompile(kernel, target, compileCacheKey(kernel, target));
}

std::shared_ptr<GpuKernel> jitKernel(const Kernel &kernel,
                                     const GpuTarget &target) {
  const bool logLaunch = logs("launch"); // before any work: it may throw
  std::string key = compileCacheKey(kernel, target);
  std::shared_ptr<const CompiledKernel> compiled =
      lookupOrCompile(kernel, target, key);
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto &slot = c.loaded[key];
  if (!slot) {
    LaunchSpec spec = compiled->spec();
    // The driver's compile of the PTX goes into the disk entry, so that a
    // later process (whose driver cache may be cold) loads it directly.
    DiskCache *disk = DiskCache::fromEnvironment();
    if (disk && DiskCache::keepsImages() && !std::getenv("KILN_DUMP_DIR"))
      spec.onImage = [disk, key](const std::string &arch,
                                 const LaunchSpec::Image &image) {
        disk->addImage(key, arch, image);
      };
    else
      spec.images.clear();
    slot = std::make_shared<GpuKernel>(std::move(spec));
    if (logLaunch)
      fmt::print(stderr, "kiln[launch]: {}\n", variantSummary(*compiled));
  }
  return slot;
}

std::shared_ptr<GpuKernel>
jitKernel(const Kernel &kernel, const std::map<std::string, TensorRef> &tensors,
          const std::map<std::string, int64_t> &scalars, GpuTarget target) {
  return jitKernel(kernel, variantTarget(kernel, tensors, scalars, target));
}

CompileCacheStats compileCacheStats() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  CompileCacheStats s = c.stats;
  s.entries = int64_t(c.compiled.size());
  return s;
}

void clearInProcessCompileCache() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.compiled.clear();
  c.loaded.clear();
}

} // namespace kiln
