//===- Autotuner.cpp - prune, compile in parallel, time, check, record ----===//
#include "kiln/Compiler/Autotune.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Launch.h"

#include "kiln/Compiler/TuningDb.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kiln {

using Clock = std::chrono::steady_clock;

static double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string tuningKey(const std::string &kernel, const std::string &bucket,
                      const std::string &dtype) {
  const cuda::DeviceInfo &d = cuda::device();
  return fmt::format("{}|sm{}|cc{}.{}|driver{}|kiln{}|{}|{}|{}", d.name,
                     d.smCount, d.major, d.minor, d.driverVersion, KILN_VERSION,
                     kernel, bucket, dtype);
}

std::optional<std::string> tunedConfig(const std::string &kernel,
                                       const std::string &bucket,
                                       const std::string &dtype) {
  TuningDb db(tuningDatabasePath());
  if (!db.hasAny()) // no GPU query when nothing was ever tuned
    return std::nullopt;
  if (!cuda::available())
    return std::nullopt;
  if (auto r = db.lookup(tuningKey(kernel, bucket, dtype)))
    return r->config;
  return std::nullopt;
}

namespace {
struct Compiled {
  std::optional<Kernel> kernel;
  std::shared_ptr<const CompiledKernel> compiled;
  /// Loaded on the device by the worker that compiled it: the driver's
  /// PTX-to-SASS compile (~0.4 s for a Hopper attention kernel) runs on the
  /// workers' threads too instead of one after another in the timing loop.
  std::shared_ptr<GpuKernel> loaded;
  std::string error;
};

/// Milliseconds of `reps` launches (after a warm-up), each on the next
/// buffer set, appended to `times`; returns their median.
double timeKernel(GpuKernel &g, const std::vector<std::vector<ArgValue>> &args,
                  int reps, std::vector<float> *all = nullptr) {
  for (size_t i = 0; i < std::max<size_t>(2, args.size()); ++i)
    g.launch(args[i % args.size()]); // warm-up: module load, clocks
  cuda::synchronize();
  std::vector<float> times;
  cuda::Timer t;
  for (int i = 0; i < reps; ++i) {
    const auto &a = args[size_t(i) % args.size()];
    t.start();
    g.launch(a);
    times.push_back(t.stop());
  }
  if (all)
    all->insert(all->end(), times.begin(), times.end());
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
} // namespace

TuneResult autotune(const std::string &kernelName, const std::string &bucket,
                    const std::string &dtype,
                    std::vector<TuneCandidate> candidates,
                    const TuneHarness &harness, const TuneOptions &o) {
  auto start = Clock::now();
  auto say = [&](const std::string &line) {
    if (o.progress)
      o.progress(line);
  };
  std::string why;
  if (!cuda::available(&why))
    throw Error("autotune: no GPU here (" + why + ")");
  const cuda::DeviceInfo &dev = cuda::device();
  TuneResult result;
  result.key = tuningKey(kernelName, bucket, dtype);
  TuningDb db(tuningDatabasePath());
  std::optional<TuningDb::Record> previous = db.lookup(result.key);
  if (!o.force && !o.exhaustive)
    if (auto r = previous) {
      result.config = r->config;
      result.ms = r->ms;
      result.fromDatabase = true;
      result.seconds = secondsSince(start);
      say("found in " + db.path() + ": " + r->config);
      return result;
    }

  // Prune on the estimates, before compiling anything.
  const int64_t smemLimit = dev.maxSharedPerBlockOptin;
  std::vector<size_t> todo;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const TuneCandidate &c = candidates[i];
    TunedTiming t{c.config, 0, "", 0, 0};
    if (c.sharedBytes > smemLimit)
      t.status = fmt::format("pruned: {} KB shared memory > {} KB",
                             c.sharedBytes / 1024, smemLimit / 1024);
    else if (c.registers > 255 && !o.exhaustive)
      t.status = fmt::format("pruned: ~{} accumulator registers per thread "
                             "> 255",
                             c.registers);
    else
      todo.push_back(i);
    result.timings.push_back(t);
  }
  say(fmt::format("{} candidates, {} pruned by shared memory or register "
                  "estimates",
                  candidates.size(), candidates.size() - todo.size()));

  // Compile in parallel: each worker builds its kernels itself, so that no
  // two threads share an MLIR context.
  std::vector<Compiled> compiled(candidates.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  int threads = o.threads > 0
                    ? o.threads
                    : int(std::max(1u, std::thread::hardware_concurrency()));
  GpuTarget target{.arch = dev.arch(),
                   .unalignedTensors = harness.unalignedTensors};
  auto worker = [&] {
    for (size_t j; (j = next++) < todo.size();) {
      size_t i = todo[j];
      if (secondsSince(start) > o.budgetSeconds) {
        compiled[i].error = "skipped: time budget spent";
        continue;
      }
      try {
        compiled[i].kernel = candidates[i].build();
        compiled[i].compiled = compileCached(*compiled[i].kernel, target);
      } catch (const std::exception &e) {
        compiled[i].error = std::string("compile error: ") + e.what();
      }
      if (compiled[i].compiled &&
          compiled[i].compiled->sharedBytes <= smemLimit) {
        try {
          compiled[i].loaded =
              std::make_shared<GpuKernel>(compiled[i].compiled->spec());
        } catch (const Error &) {
          // The timing loop loads it again and reports the error.
        }
      }
      ++done;
    }
  };
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < std::min<int>(threads, int(todo.size())); ++t)
      pool.emplace_back(worker);
    for (auto &t : pool)
      t.join();
  }
  say(fmt::format("compiled and loaded {} candidates on {} threads in {:.1f} "
                  "s",
                  done.load(), threads, secondsSince(start)));

  // Time one at a time on the GPU, over rotating input buffers.
  std::vector<std::vector<ArgValue>> args;
  double best = 0;
  size_t bestIdx = candidates.size();
  auto argsFor = [&](size_t i) -> const std::vector<std::vector<ArgValue>> & {
    args.clear();
    for (int s = 0; s < harness.sets; ++s)
      args.push_back(harness.args(*compiled[i].kernel, s));
    return args;
  };
  // A timing counts for the exhaustive reference, for the earlier winner's
  // figure and, unless the register estimate prunes it, for the winner.
  auto account = [&](size_t i) {
    const TunedTiming &t = result.timings[i];
    if (o.exhaustive &&
        (result.exhaustiveBestMs == 0 || t.ms < result.exhaustiveBestMs)) {
      result.exhaustiveBestMs = t.ms;
      result.exhaustiveBestConfig = t.config;
    }
    if (previous && previous->config == t.config)
      result.previousWinnerMs = t.ms;
    if (candidates[i].registers <= 255 && (best == 0 || t.ms < best)) {
      best = t.ms;
      bestIdx = i;
    }
  };
  for (size_t i : todo) {
    TunedTiming &t = result.timings[i];
    if (!compiled[i].compiled) {
      t.status = compiled[i].error;
      continue;
    }
    if (secondsSince(start) > o.budgetSeconds) {
      t.status = "skipped: time budget spent";
      continue;
    }
    // The estimate is a lower bound (layout conversions through shared
    // memory are not in it): the compiled figure decides.
    if (compiled[i].compiled->sharedBytes > smemLimit) {
      t.status = fmt::format(
          "pruned after compiling: {} KB shared memory > {} KB (estimated "
          "{} KB)",
          compiled[i].compiled->sharedBytes / 1024, smemLimit / 1024,
          candidates[i].sharedBytes / 1024);
      continue;
    }
    try {
      std::shared_ptr<GpuKernel> loaded = compiled[i].loaded;
      if (!loaded)
        loaded = std::make_shared<GpuKernel>(compiled[i].compiled->spec());
      GpuKernel &g = *loaded;
      cuda::FunctionAttributes a = g.attributes();
      t.registers = a.registers;
      t.spillBytes = a.localBytes;
      t.ms = timeKernel(g, argsFor(i), o.exhaustive ? 3 * o.reps : o.reps);
      t.status = "ok";
      say(fmt::format(
          "  {:<56} {:8.3f} ms  {} regs{}", t.config, t.ms, t.registers,
          t.spillBytes ? fmt::format(", {} B spills", t.spillBytes) : ""));
      account(i);
    } catch (const Error &e) {
      t.status = std::string("launch error: ") + e.what();
    }
  }
  if (bestIdx == candidates.size())
    throw Error("autotune " + kernelName + " " + bucket +
                ": no candidate compiled and ran");

  // A final round: the candidates within 5% of the best (and, when
  // exhaustive, the earlier winner) timed again in turns, so that drift of
  // the clocks across the first pass does not pick among near-equals.
  std::vector<size_t> finalists;
  for (size_t i : todo) {
    const TunedTiming &t = result.timings[i];
    bool earlier = o.exhaustive && previous && previous->config == t.config;
    if (t.status == "ok" && compiled[i].loaded &&
        (earlier || ((o.exhaustive || candidates[i].registers <= 255) &&
                     t.ms <= best * 1.05)))
      finalists.push_back(i);
  }
  if (finalists.size() > 1) {
    std::vector<std::vector<float>> samples(finalists.size());
    for (int round = 0; round < 5; ++round)
      for (size_t f = 0; f < finalists.size(); ++f)
        timeKernel(*compiled[finalists[f]].loaded, argsFor(finalists[f]),
                   o.reps, &samples[f]);
    best = 0;
    if (o.exhaustive) // the final round is the reference
      result.exhaustiveBestMs = 0;
    for (size_t f = 0; f < finalists.size(); ++f) {
      size_t i = finalists[f];
      std::vector<float> &v = samples[f];
      std::sort(v.begin(), v.end());
      TunedTiming &t = result.timings[i];
      t.ms = v[v.size() / 2];
      say(fmt::format("  final round {:<44} {:8.3f} ms", t.config, t.ms));
      account(i);
    }
  }

  // The winner must compute the right thing before it is accepted.
  GpuKernel g(compiled[bestIdx].compiled->spec()); // a fresh module
  std::string bad = harness.check(*compiled[bestIdx].kernel, g);
  if (!bad.empty())
    throw Error("autotune: the winner " + candidates[bestIdx].config +
                " failed its check against the reference: " + bad);
  if (previous)
    result.previousWinner = previous->config;
  result.config = candidates[bestIdx].config;
  result.ms = best;
  result.seconds = secondsSince(start);
  db.record(result.key, result.config, result.ms);
  say(fmt::format("winner {} ({:.3f} ms), checked against the reference; "
                  "recorded in {}",
                  result.config, result.ms, db.path()));
  return result;
}

} // namespace kiln
