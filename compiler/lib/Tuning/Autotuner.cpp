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
/// A candidate's kernels (one, or a sequence launched in order).
struct Compiled {
  std::vector<Kernel> kernels;
  std::vector<std::shared_ptr<const CompiledKernel>> compiled;
  /// Loaded on the device by the worker that compiled them: the driver's
  /// PTX-to-SASS compile (~0.4 s for a Hopper attention kernel) runs on the
  /// workers' threads too instead of one after another in the timing loop.
  std::vector<std::shared_ptr<GpuKernel>> loaded;
  std::string error;
  bool ok() const { return !compiled.empty(); }
  int64_t sharedBytes() const {
    int64_t most = 0;
    for (const auto &c : compiled)
      most = std::max(most, c->sharedBytes);
    return most;
  }
  /// Loads what the workers could not (reporting the driver's error).
  void load() {
    for (size_t k = 0; k < compiled.size(); ++k)
      if (!loaded[k])
        loaded[k] = std::make_shared<GpuKernel>(compiled[k]->spec());
  }
};

/// Milliseconds per pass of the kernels in order, timed as the peers' and
/// `kiln bench`'s figures are: `samples` samples of `batch` back-to-back
/// passes (after a warm-up), each pass on the next buffer set. A sample's
/// time over its passes is appended to `all`; returns their median. Back to
/// back an H100 runs at its power limit, ~10% below the boost clock a
/// single launch sees (docs/performance.md), and the two can rank
/// candidates differently. args[set][kernel].
double timeKernels(const std::vector<std::shared_ptr<GpuKernel>> &gs,
                   const std::vector<std::vector<std::vector<ArgValue>>> &args,
                   int samples, int batch, std::vector<float> *all = nullptr) {
  size_t next = 0;
  auto launch = [&] {
    const size_t set = next++ % args.size();
    for (size_t k = 0; k < gs.size(); ++k)
      gs[k]->launch(args[set][k]);
  };
  for (size_t i = 0; i < std::max<size_t>(2, args.size()); ++i)
    launch(); // warm-up: module load, clocks
  cuda::synchronize();
  return cuda::backToBackMs(launch, samples, batch, all);
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
    // The baseline runs today: the compiled figures alone judge it.
    if (c.baseline)
      todo.push_back(i);
    else if (c.sharedBytes > smemLimit)
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
  // Baselines first: compiled and timed whatever the budget.
  std::stable_partition(todo.begin(), todo.end(),
                        [&](size_t i) { return candidates[i].baseline; });
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
      if (!candidates[i].baseline && secondsSince(start) > o.budgetSeconds) {
        compiled[i].error = "skipped: time budget spent";
        continue;
      }
      Compiled &c = compiled[i];
      try {
        c.kernels = candidates[i].buildSequence
                        ? candidates[i].buildSequence()
                        : std::vector<Kernel>{candidates[i].build()};
        std::vector<std::shared_ptr<const CompiledKernel>> all;
        for (const Kernel &k : c.kernels) {
          GpuTarget t = target;
          if (harness.target) {
            t = harness.target(k);
            t.arch = dev.arch();
          }
          all.push_back(compileCached(k, t));
        }
        c.compiled = std::move(all);
      } catch (const std::exception &e) {
        c.error = std::string("compile error: ") + e.what();
      }
      c.loaded.resize(c.compiled.size());
      if (c.ok() && c.sharedBytes() <= smemLimit) {
        try {
          for (size_t k = 0; k < c.compiled.size(); ++k)
            c.loaded[k] = std::make_shared<GpuKernel>(c.compiled[k]->spec());
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
  std::vector<std::vector<std::vector<ArgValue>>> args;
  double best = 0;
  size_t bestIdx = candidates.size();
  // The harness's inputs are made on their first use (seconds for a
  // decoding problem's gigabytes of keys and values): not the budget's.
  double setupSeconds = 0;
  auto argsFor =
      [&](size_t i) -> const std::vector<std::vector<std::vector<ArgValue>>> & {
    const Clock::time_point t0 = Clock::now();
    args.clear();
    for (int s = 0; s < harness.sets; ++s) {
      args.emplace_back();
      for (const Kernel &k : compiled[i].kernels)
        args.back().push_back(harness.args(k, s));
    }
    setupSeconds += secondsSince(t0);
    return args;
  };
  auto estimateFits = [&](size_t i) {
    return candidates[i].registers <= 255 || candidates[i].baseline;
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
    if (candidates[i].baseline) {
      result.baselineConfig = t.config;
      result.baselineMs = t.ms;
    }
    if (estimateFits(i) && (best == 0 || t.ms < best)) {
      best = t.ms;
      bestIdx = i;
    }
  };
  // Spills of every loaded candidate: those past pruneSpillBytes are not
  // timed while another candidate does not spill.
  std::vector<int> spills(candidates.size(), -1);
  for (size_t i : todo)
    if (o.pruneSpillBytes > 0 && compiled[i].ok() &&
        compiled[i].sharedBytes() <= smemLimit) {
      try {
        compiled[i].load();
        spills[i] = 0;
        for (const auto &g : compiled[i].loaded)
          spills[i] += g->attributes().localBytes;
      } catch (const Error &) {
        // The timing loop loads it again and reports the error.
      }
    }
  const bool someSpillFree =
      std::find(spills.begin(), spills.end(), 0) != spills.end();
  for (size_t i : todo) {
    TunedTiming &t = result.timings[i];
    if (!compiled[i].ok()) {
      t.status = compiled[i].error;
      continue;
    }
    if (someSpillFree && !candidates[i].baseline &&
        spills[i] > o.pruneSpillBytes) {
      t.spillBytes = spills[i];
      t.status = fmt::format("pruned after compiling: {} B of register "
                             "spills (more than {}; other Configs have none)",
                             spills[i], o.pruneSpillBytes);
      continue;
    }
    if (!candidates[i].baseline &&
        secondsSince(start) - setupSeconds > o.budgetSeconds) {
      t.status = "skipped: time budget spent";
      continue;
    }
    // The estimate is a lower bound (layout conversions through shared
    // memory are not in it): the compiled figure decides.
    if (compiled[i].sharedBytes() > smemLimit) {
      t.status = fmt::format(
          "pruned after compiling: {} KB shared memory > {} KB (estimated "
          "{} KB)",
          compiled[i].sharedBytes() / 1024, smemLimit / 1024,
          candidates[i].sharedBytes / 1024);
      continue;
    }
    try {
      compiled[i].load();
      // A sequence reports its most registers and all its spills.
      t.registers = t.spillBytes = 0;
      for (const auto &g : compiled[i].loaded) {
        cuda::FunctionAttributes a = g->attributes();
        t.registers = std::max(t.registers, a.registers);
        t.spillBytes += a.localBytes;
      }
      t.ms = timeKernels(compiled[i].loaded, argsFor(i),
                         o.exhaustive ? 3 * o.reps : o.reps, o.backToBack);
      t.status = "ok";
      say(fmt::format(
          "  {:<56} {:8.3f} ms  {} regs{}{}", t.config, t.ms, t.registers,
          t.spillBytes ? fmt::format(", {} B spills", t.spillBytes) : "",
          candidates[i].baseline ? " (the untuned default)" : ""));
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
    if (t.status == "ok" &&
        (earlier || ((o.exhaustive || estimateFits(i)) && t.ms <= best * 1.05)))
      finalists.push_back(i);
  }
  if (finalists.size() > 1) {
    std::vector<std::vector<float>> samples(finalists.size());
    for (int round = 0; round < 5; ++round)
      for (size_t f = 0; f < finalists.size(); ++f)
        timeKernels(compiled[finalists[f]].loaded, argsFor(finalists[f]),
                    o.reps, o.backToBack, &samples[f]);
    best = 0;
    if (o.exhaustive) // the final round is the reference
      result.exhaustiveBestMs = 0;
    for (size_t f = 0; f < finalists.size(); ++f) {
      size_t i = finalists[f];
      std::vector<float> &v = samples[f];
      std::sort(v.begin(), v.end());
      TunedTiming &t = result.timings[i];
      t.ms = v[v.size() / 2];
      t.finalRound = true;
      say(fmt::format("  final round {:<44} {:8.3f} ms", t.config, t.ms));
      account(i);
    }
  }

  // The winner must compute the right thing before it is accepted.
  std::string bad;
  { // fresh modules
    const Compiled &w = compiled[bestIdx];
    std::vector<std::unique_ptr<GpuKernel>> fresh;
    std::vector<GpuKernel *> gs;
    for (const auto &c : w.compiled) {
      fresh.push_back(std::make_unique<GpuKernel>(c->spec()));
      gs.push_back(fresh.back().get());
    }
    if (candidates[bestIdx].buildSequence)
      bad = harness.checkSequence
                ? harness.checkSequence(w.kernels, gs)
                : "the harness has no check for kernel sequences";
    else
      bad = harness.check(w.kernels[0], *gs[0]);
  }
  if (!bad.empty())
    throw Error("autotune: the winner " + candidates[bestIdx].config +
                " failed its check against the reference: " + bad);
  if (previous)
    result.previousWinner = previous->config;
  result.config = candidates[bestIdx].config;
  result.ms = best;
  result.seconds = secondsSince(start);
  db.record(result.key, result.config, result.ms);
  say(fmt::format(
      "winner {} ({:.3f} ms{}), checked against the reference; "
      "recorded in {}",
      result.config, result.ms,
      result.baselineMs > 0
          ? fmt::format("; the untuned default {:.3f} ms", result.baselineMs)
          : "",
      db.path()));
  return result;
}

} // namespace kiln
