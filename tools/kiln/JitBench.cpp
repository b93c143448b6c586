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
// --seqs N,N,...: the first call of each length in one process, as a
//       training or serving loop makes it: DSL build, compile or cache
//       lookup, module load and first launch (on a GPU) timed apart, and the
//       compiles it took (one per class with run-time shapes). --cache-dir
//       keeps the disk cache, so that a second process starts warm.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Json.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/kernels/Attention.h"
#include "kiln/runtime/Cuda.h"
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

struct FirstCall {
  int64_t n;
  bool compiled, fromDisk;
  double buildMs, compileMs, loadMs, launchMs, totalMs;
  /// Host microseconds per later launch of the fetched kernel: launch()
  /// alone (bound arguments kept), and bind + launch.
  double relaunchUs = 0, bindLaunchUs = 0;
};

/// Host microseconds per call of `call`: the median of 5 batches of 100
/// calls, the GPU drained between batches (so that a full launch queue never
/// blocks the host) and not timed.
template <typename F> static double hostMicros(F &&call) {
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    cuda::synchronize();
    auto t0 = Clock::now();
    for (int i = 0; i < 100; ++i)
      call();
    batches.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
        100);
  }
  cuda::synchronize();
  return median(batches);
}

/// The first call of attention at each length of `seqs`, one after another.
static std::vector<FirstCall> firstCalls(kernels::AttentionShape s,
                                         const std::vector<int64_t> &seqs,
                                         const GpuTarget &base) {
  auto ms = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::string why;
  const bool gpu = cuda::available(&why);
  std::vector<FirstCall> out;
  for (int64_t n : seqs) {
    s.seqQ = s.seqK = n;
    // Device buffers as a caller has them before its call (not timed).
    const std::vector<int64_t> shape{s.batch, s.heads, n, s.headDim},
        st{s.heads * n * s.headDim, n * s.headDim, s.headDim, 1};
    const size_t count = size_t(s.batch * s.heads * n * s.headDim);
    std::optional<cuda::Buffer> q, k, v, o, lse;
    std::map<std::string, TensorRef> refs;
    if (gpu) {
      q = randomDevice(s.dtype, count, 1);
      k = randomDevice(s.dtype, count, 2);
      v = randomDevice(s.dtype, count, 3);
      o.emplace(count * 2);
      lse.emplace(size_t(s.batch * s.heads * n) * 4);
      refs = {{"Q", {q->data(), s.dtype, shape, st}},
              {"K", {k->data(), s.dtype, shape, st}},
              {"V", {v->data(), s.dtype, shape, st}},
              {"O", {o->data(), s.dtype, shape, st}},
              {"LSE",
               {lse->data(),
                DType::f32,
                {s.batch, s.heads, n},
                {s.heads * n, n, 1}}}};
      cuda::synchronize();
    }
    const CompileCacheStats before = compileCacheStats();
    FirstCall c{n, false, false, 0, 0, 0, 0, 0};
    auto t0 = Clock::now();
    Kernel kernel = kernels::attentionForward(s);
    c.buildMs = ms(t0);
    auto t1 = Clock::now();
    GpuTarget target = base;
    if (gpu)
      target = variantTarget(kernel, refs, {}, base);
    compileCached(kernel, target);
    c.compileMs = ms(t1);
    if (gpu) {
      auto t2 = Clock::now();
      std::shared_ptr<GpuKernel> g = jitKernel(kernel, target);
      c.loadMs = ms(t2);
      auto t3 = Clock::now();
      g->launch(kernel.bind(refs));
      cuda::synchronize();
      c.launchMs = ms(t3);
      const std::vector<ArgValue> args = kernel.bind(refs);
      c.relaunchUs = hostMicros([&] { g->launch(args); });
      c.bindLaunchUs = hostMicros([&] { g->launch(kernel.bind(refs)); });
    }
    c.totalMs = ms(t0);
    const CompileCacheStats after = compileCacheStats();
    c.compiled = after.misses > before.misses;
    c.fromDisk = after.diskHits > before.diskHits;
    out.push_back(c);
  }
  return out;
}

static int benchFirstCalls(const kernels::AttentionShape &s,
                           const std::string &seqs, GpuTarget target,
                           const std::string &cacheDir, bool json) {
  const std::vector<int64_t> ns = positiveList(seqs, "seqs");
  std::string why;
  if (cuda::available(&why))
    target.arch = cuda::device().arch();
  ::setenv("KILN_CACHE_DIR", cacheDir.c_str(), 1);
  std::vector<FirstCall> calls = firstCalls(s, ns, target);
  const bool gpu = cuda::available();
  int compiles = 0, diskReads = 0;
  for (const FirstCall &c : calls)
    compiles += c.compiled, diskReads += c.fromDisk;
  if (json) {
    llvm::json::Array rows;
    for (const FirstCall &c : calls)
      rows.push_back(llvm::json::Object{{"N", c.n},
                                        {"compiled", c.compiled},
                                        {"from_disk", c.fromDisk},
                                        {"build_ms", c.buildMs},
                                        {"compile_ms", c.compileMs},
                                        {"load_ms", c.loadMs},
                                        {"launch_ms", c.launchMs},
                                        {"first_call_ms", c.totalMs},
                                        {"relaunch_us", c.relaunchUs},
                                        {"bind_launch_us", c.bindLaunchUs}});
    fmt::print("{}\n", jsonText(llvm::json::Object{{"compiles", compiles},
                                                   {"disk_reads", diskReads},
                                                   {"calls", std::move(rows)}},
                                0));
    return 0;
  }
  fmt::print("kiln bench jit: first calls of attention D={} {} B={} H={} for "
             "{} (disk cache {}){}\n",
             s.headDim, s.causal ? "causal" : "non-causal", s.batch, s.heads,
             target.arch, cacheDir,
             cuda::available(&why) ? "" : "; no GPU: no load or launch");
  fmt::print("  {:>6} {:>9} {:>9} {:>10} {:>8} {:>9} {:>10}\n", "N", "build",
             "compile", "load", "launch", "total", "");
  for (const FirstCall &c : calls)
    fmt::print("  {:>6} {:>6.2f} ms {:>6.2f} ms {:>7.2f} ms {:>5.2f} ms "
               "{:>6.2f} ms  {}\n",
               c.n, c.buildMs, c.compileMs, c.loadMs, c.launchMs, c.totalMs,
               c.compiled   ? "compiled"
               : c.fromDisk ? "read from disk"
                            : "in-process hit");
  fmt::print("  {} compile(s), {} disk read(s) for {} lengths\n", compiles,
             diskReads, calls.size());
  if (gpu) {
    fmt::print("  later launches, host time per call (median of 5 x 100):\n"
               "  {:>6} {:>12} {:>14}\n",
               "N", "launch()", "bind + launch");
    for (const FirstCall &c : calls)
      fmt::print("  {:>6} {:>9.2f} us {:>11.2f} us\n", c.n, c.relaunchUs,
                 c.bindLaunchUs);
  }
  return 0;
}

int cmdBenchJit(Options &opts) {
  kernels::AttentionShape s;
  s.seqQ = s.seqK = opts.integer("seq", 4096);
  s.headDim = opts.integer("head-dim", 128);
  s.causal = causalOption(opts);
  s.batch = 1;
  s.heads = 16;
  GpuTarget target = targetOptions(opts);
  int reps = opts.int32("reps", 5);
  bool json = opts.flag("json");
  const std::string seqs = opts.string("seqs", "");
  std::string cacheDir = opts.string("cache-dir", "");
  opts.checkAllUsed();
  if (!seqs.empty()) {
    struct RemoveAtEnd {
      std::string dir;
      ~RemoveAtEnd() {
        std::error_code ec;
        if (!dir.empty())
          std::filesystem::remove_all(dir, ec);
      }
    } removeAtEnd{cacheDir.empty()
                      ? (std::filesystem::temp_directory_path() /
                         fmt::format("kiln-bench-jit-seqs-{}", ::getpid()))
                            .string()
                      : std::string()};
    return benchFirstCalls(s, seqs, target,
                           cacheDir.empty() ? removeAtEnd.dir : cacheDir, json);
  }
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
    fmt::print("{}\n", jsonText(llvm::json::Object{{"cold_ms", coldMs},
                                                   {"hit_ms", hitMs}},
                                0));
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
