//===- Tune.cpp - kiln tune: the autotuner on the command line ------------===//
#include "Commands.h"

#include "kiln/Compiler/Autotuned.h"
#include "kiln/Compiler/Tunable.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/HostTensor.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>

#include <dlfcn.h>

namespace kiln::cli {

/// --budget S (seconds, >= 1) and --threads T (compile threads, >= 0; 0:
/// one per core).
static TuneOptions budgetAndThreads(Options &opts, int64_t budget) {
  TuneOptions o;
  o.budgetSeconds = double(positive(opts, "budget", budget));
  o.threads = opts.int32("threads", 0);
  if (o.threads < 0)
    throw UsageError("option --threads must be >= 0 (0: one per core), got " +
                     std::to_string(o.threads));
  return o;
}

/// A candidate's status in the table: a final-round time is the one the
/// winner was chosen by, re-measured in turns with the other near-best ones
/// (the first pass's can differ by a few percent as the clocks drift).
static std::string statusText(const TunedTiming &t) {
  return t.finalRound ? t.status + ", final round" : t.status;
}

/// The candidate column: at least `least` wide, else the longest name's.
static int candidateWidth(const std::vector<TunedTiming> &timings,
                          size_t least) {
  for (const TunedTiming &t : timings)
    least = std::max(least, t.config.size());
  return int(least);
}

static void printFinalRoundNote(const std::vector<TunedTiming> &timings) {
  if (std::any_of(timings.begin(), timings.end(),
                  [](const TunedTiming &t) { return t.finalRound; }))
    fmt::print("final round: the candidates within 5% of the first pass's "
               "best, timed again in turns; the winner is its fastest (the "
               "other times are the first pass's)\n");
}

/// kiln tune <name>: a kernel of the registry (kiln/Compiler/Tunable.h):
/// the library's (rmsnorm, layernorm, rotary, cross-entropy, linear...) and
/// those a user's library registers (--load). Its problem for the sizes
/// (defaults, --<size> N, --sizes a=N,b=M) is tuned with every Config, on
/// random inputs, and the winner recorded under the name and key the
/// kernel's launches use.
static int tuneRegistered(Options &opts, const std::string &name) {
  const auto &all = tunableKernels();
  auto it = all.find(name);
  if (it == all.end()) {
    std::string names;
    for (const auto &[n, k] : all)
      names += (names.empty() ? "" : ", ") + n;
    throw UsageError("kiln tune: no tunable kernel '" + name +
                     "' (attention, attention-backward, " + names +
                     "; a library's own with --load)");
  }
  const TunableKernel &k = it->second;
  TuneSizes sizes;
  for (const auto &[size, fallback] : k.sizes)
    sizes[size] = opts.integer(size, fallback);
  const std::string given = opts.string("sizes", "");
  for (size_t at = 0; at < given.size();) {
    size_t end = given.find(',', at);
    std::string item = given.substr(at, end - at);
    at = end == std::string::npos ? given.size() : end + 1;
    size_t eq = item.find('=');
    std::string size = item.substr(0, eq);
    if (eq == std::string::npos || !sizes.count(size))
      throw UsageError("option --sizes: '" + item + "' is not size=N for " +
                       name + "'s sizes");
    try {
      size_t used = 0;
      sizes[size] = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1)
        throw std::invalid_argument(item);
    } catch (const std::exception &) {
      throw UsageError("option --sizes: '" + item + "' is not size=N");
    }
  }
  TuneOptions o = budgetAndThreads(opts, 60);
  o.force = true;
  opts.checkAllUsed();
  std::string why;
  if (!cuda::available(&why) && name == "linear") // its Configs are per GPU
    throw Error("kiln tune " + name + ": no GPU here (" + why +
                "): tuning times every Config on one");
  TuneProblem p;
  try {
    p = k.problem(sizes);
  } catch (const cuda::CudaError &) {
    throw;
  } catch (const Error &e) {
    throw UsageError("kiln tune " + name + ": " + e.what());
  }
  if (!cuda::available(&why))
    throw Error("kiln tune " + name + ": no GPU here (" + why +
                "): tuning times every Config on one");
  p.kernel->setTuneOptions(o);
  std::string text;
  for (const auto &[size, v] : sizes)
    text += " " + size + "=" + std::to_string(v);
  fmt::print("kiln tune {}{} (key '{}')\n", name, text, p.key);
  std::map<std::string, cuda::Buffer> buffers;
  std::map<std::string, TensorRef> t = uploadTensors(p.tensors, buffers);
  p.kernel->launch(p.key, t, p.scalars);
  cuda::synchronize();
  const TuneResult &r = *p.kernel->lastTuning();
  const int width = candidateWidth(r.timings, 24);
  fmt::print("{:<{}} {:>9}  {}\n", "candidate", width, "ms", "status");
  for (const TunedTiming &tt : r.timings)
    fmt::print("{:<{}} {:>9}  {}{}\n", tt.config, width,
               tt.ms ? fmt::format("{:.4f}", tt.ms) : "-", statusText(tt),
               tt.registers
                   ? fmt::format(" ({} registers{})", tt.registers,
                                 tt.spillBytes ? fmt::format(", {} B spills",
                                                             tt.spillBytes)
                                               : "")
                   : "");
  std::string rate;
  if (p.bytes)
    rate = fmt::format(", {:.2f} TB/s", p.bytes / r.ms / 1e9);
  else if (p.flops)
    rate = fmt::format(", {:.0f} TFLOP/s", p.flops / r.ms / 1e9);
  printFinalRoundNote(r.timings);
  fmt::print("winner {}: {:.4f} ms{}; recorded in {}\n", r.config, r.ms, rate,
             tuningDatabasePath());
  return 0;
}

int cmdTune(Options &opts) {
  // A user's library registers its kernels when it is loaded.
  const std::string load = opts.string("load", "");
  if (!load.empty() && !dlopen(load.c_str(), RTLD_NOW | RTLD_GLOBAL))
    throw Error("kiln tune: --load " + load + ": " + dlerror());
  if (opts.flag("list")) {
    opts.checkAllUsed();
    fmt::print("attention, attention-backward: --seq N [--seq-k M] "
               "--head-dim D [--causal] ...\n");
    for (const auto &[name, k] : tunableKernels()) {
      std::string sizes;
      for (const auto &[size, v] : k.sizes)
        sizes += (sizes.empty() ? "" : ",") + size + "=" + std::to_string(v);
      fmt::print("{}: --sizes {}  ({})\n", name, sizes, k.help);
    }
    return 0;
  }
  if (opts.positional.size() != 1) {
    // A value after a flag-like option (--bias 2) lands here: name what was
    // left over.
    std::string got;
    for (const std::string &p : opts.positional)
      got += (got.empty() ? "" : " ") + ("'" + p + "'");
    throw UsageError("kiln tune: name one kernel (kiln tune --list)" +
                     (got.empty() ? std::string() : ", got " + got) +
                     "; a size is --<size> N or --sizes a=N,b=M");
  }
  if (opts.positional[0] != "attention" &&
      opts.positional[0] != "attention-backward")
    return tuneRegistered(opts, opts.positional[0]);
  const bool backward = opts.positional[0] == "attention-backward";
  kernels::AttentionShape s;
  s.seqQ = positive(opts, "seq", 4096);
  s.seqK = positive(opts, "seq-k", s.seqQ); // decoding: --seq 1 --seq-k 8192
  s.headDim = positive(opts, "head-dim", 128);
  s.causal = causalOption(opts);
  // The benchmark's shapes: B*N = 16k tokens, H*D = 2048.
  s.batch = positive(opts, "batch",
                     std::max<int64_t>(1, 16384 / std::max(s.seqQ, s.seqK)));
  s.heads = positive(opts, "heads", std::max<int64_t>(1, 2048 / s.headDim));
  std::string dtype = opts.string("dtype", "bf16");
  auto t = parseDType(dtype);
  if (!t || (*t != DType::bf16 && *t != DType::f16))
    throw UsageError("option --dtype: '" + dtype + "' is not bf16 or fp16");
  s.dtype = *t;
  TuneOptions o = budgetAndThreads(opts, 30);
  o.reps = positive32(opts, "reps", 10);
  o.backToBack = positive32(opts, "back-to-back", 10);
  o.force = opts.flag("force");
  o.exhaustive = opts.flag("exhaustive");
  opts.checkAllUsed();
  o.progress = [](const std::string &line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  fmt::print("kiln tune {} B={} H={} N={}{} D={} {} {} ({})\n",
             opts.positional[0], s.batch, s.heads, s.seqQ,
             s.seqK != s.seqQ ? fmt::format(" Nk={}", s.seqK) : "", s.headDim,
             s.causal ? "causal" : "non-causal", dtype,
             backward ? kernels::attentionBackwardTuneBucket(s)
                      : kernels::attentionTuneBucket(s));
  TuneResult r = backward ? kernels::tuneAttentionBackward(s, o)
                          : kernels::tuneAttention(s, o);
  if (r.fromDatabase) {
    fmt::print("winner {} ({:.3f} ms when tuned): from the tuning database, "
               "nothing tuned ({:.3f} s)\n",
               r.config, r.ms, r.seconds);
    return 0;
  }
  const int width = candidateWidth(r.timings, backward ? 92 : 56);
  fmt::print("\n{:<{}} {:>9}  {}\n", "candidate", width, "ms", "status");
  for (const TunedTiming &t : r.timings)
    fmt::print("{:<{}} {:>9}  {}\n", t.config, width,
               t.ms ? fmt::format("{:.3f}", t.ms) : "-", statusText(t));
  // The backward counted as 2.5x the forward's FLOPs (FlashAttention's
  // convention).
  double flops = (backward ? 10.0 : 4.0) * s.batch * s.heads * s.seqQ * s.seqK *
                 s.headDim * (s.causal ? 0.5 : 1.0);
  printFinalRoundNote(r.timings);
  fmt::print("winner {}: {:.3f} ms, {:.0f} TFLOP/s; tuned in {:.1f} s\n",
             r.config, r.ms, flops / r.ms / 1e9, r.seconds);
  if (r.baselineMs > 0)
    fmt::print("untuned default {}: {:.3f} ms (the winner {:.3f}x its "
               "speed)\n",
               r.baselineConfig, r.baselineMs, r.baselineMs / r.ms);
  if (o.exhaustive) {
    fmt::print("exhaustive best {}: {:.3f} ms (every candidate that "
               "compiles, {}x the launches); this run's winner is within "
               "{:.1f}% of it\n",
               r.exhaustiveBestConfig, r.exhaustiveBestMs, 3,
               100.0 * (r.ms / r.exhaustiveBestMs - 1.0));
    if (r.previousWinnerMs > 0)
      fmt::print("the earlier tuning's winner {} times {:.3f} ms here: "
                 "within {:.1f}% of the exhaustive best\n",
                 r.previousWinner, r.previousWinnerMs,
                 100.0 * (r.previousWinnerMs / r.exhaustiveBestMs - 1.0));
  }
  return 0;
}

} // namespace kiln::cli
