//===- JitBench.cpp - kiln bench jit: compile latency, no GPU needed ------===//
//
// cold: the DSL builds the attention kernel and compiles it to PTX with no
//       cache (median of --reps compiles, after one untimed compile that pays
//       the process's one-time set-up; that first compile is printed too).
// hit:  the DSL builds the kernel and compileCached finds it in the disk
//       cache (a private folder, the in-process map cleared before each
//       lookup): key, map, checksum and decode (the inspection texts stay in
//       the mapping until read). The in-process hit is printed beside it.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/kernels/Attention.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace kiln::cli {

using Clock = std::chrono::steady_clock;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int cmdBenchJit(Options &opts) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = opts.integer("seq", 4096);
  s.headDim = opts.integer("head-dim", 128);
  s.causal = opts.flag("causal");
  s.batch = 1;
  s.heads = 16;
  GpuTarget target = targetOptions(opts);
  int reps = opts.int32("reps", 5);
  bool json = opts.flag("json");
  opts.checkAllUsed();
  if (reps < 1)
    throw UsageError("option --reps must be >= 1");

  // The JIT's disk cache is a private folder, never the user's: the hits
  // measured here and the entries they leave go there and are removed.
  const std::string privateDir =
      (std::filesystem::temp_directory_path() /
       fmt::format("kiln-bench-jit-cache-{}", ::getpid()))
          .string();
  ::setenv("KILN_CACHE_DIR", privateDir.c_str(), 1);
  struct RemoveAtEnd {
    std::string dir;
    ~RemoveAtEnd() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } removeAtEnd{privateDir};
  auto ms = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  auto t0 = Clock::now();
  Kernel first = kernels::attentionForward(s);
  CompiledKernel firstCompiled = compileForGpu(first, target);
  double firstMs = ms(t0);

  std::vector<double> cold, build, hit, memHit, hitBuild, hitKey, hitLoad;
  for (int i = 0; i < reps; ++i) {
    t0 = Clock::now();
    Kernel k = kernels::attentionForward(s);
    build.push_back(ms(t0));
    compileForGpu(k, target);
    cold.push_back(ms(t0));
  }

  // A private disk cache holding this one kernel.
  std::string dir = (std::filesystem::temp_directory_path() /
                     fmt::format("kiln-bench-jit-{}", ::getpid()))
                        .string();
  {
    DiskCache disk(dir, int64_t(1) << 30);
    disk.store(compileCacheKey(first, target), firstCompiled);
    for (int i = 0; i < std::max(reps, 20); ++i) {
      t0 = Clock::now();
      Kernel k = kernels::attentionForward(s);
      double built = ms(t0);
      std::string key = compileCacheKey(k, target);
      double keyed = ms(t0);
      std::optional<CompiledKernel> c = disk.load(key);
      double t = ms(t0);
      hitBuild.push_back(built);
      hitKey.push_back(keyed - built);
      hitLoad.push_back(t - keyed);
      if (!c || c->ptx != firstCompiled.ptx)
        throw InternalError("bench jit: the disk cache lost the entry");
      hit.push_back(t);
      t0 = Clock::now();
      compileCached(k, target); // the first of these compiles or loads
      memHit.push_back(ms(t0));
    }
  }
  std::filesystem::remove_all(dir);
  memHit.erase(memHit.begin());

  double coldMs = median(cold), hitMs = median(hit);
  if (json) {
    fmt::print("{{\"cold_ms\": {:.2f}, \"hit_ms\": {:.3f}}}\n", coldMs, hitMs);
    return 0;
  }
  fmt::print("kiln bench jit: attention N={} D={} {} for {} ({} compiles)\n",
             s.seqQ, s.headDim, s.causal ? "causal" : "non-causal", target.arch,
             reps);
  fmt::print("  cold compile, DSL -> PTX   {:8.1f} ms  (median; DSL build "
             "{:.2f} ms of it; first in process {:.1f} ms)\n",
             coldMs, median(build), firstMs);
  fmt::print("  disk cache hit, DSL -> PTX {:8.3f} ms  (median; DSL build "
             "{:.3f}, key {:.3f}, disk load {:.3f}; in-process hit {:.3f} "
             "ms)\n",
             hitMs, median(hitBuild), median(hitKey), median(hitLoad),
             median(memHit));
  fmt::print("  stages of the last cold compile:");
  for (const CompileStage &st : firstCompiled.stages)
    if (st.ms >= 0.5)
      fmt::print(" {} {:.1f}", st.name, st.ms);
  fmt::print("\n");
  return 0;
}

} // namespace kiln::cli
