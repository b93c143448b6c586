//===- Tune.cpp - kiln tune attention: the autotuner on the command line --===//
#include "Commands.h"

#include "kiln/kernels/AttentionTune.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <cstdio>

namespace kiln::cli {

int cmdTune(Options &opts) {
  if (opts.positional.size() != 1 ||
      (opts.positional[0] != "attention" &&
       opts.positional[0] != "attention-backward"))
    throw UsageError("kiln tune: 'attention' and 'attention-backward' have "
                     "tuning spaces");
  const bool backward = opts.positional[0] == "attention-backward";
  kernels::AttentionShape s;
  s.seqQ = s.seqK = opts.integer("seq", 4096);
  s.headDim = opts.integer("head-dim", 128);
  s.causal = opts.flag("causal");
  // The benchmark's shapes: B*N = 16k tokens, H*D = 2048.
  s.batch = opts.integer("batch", std::max<int64_t>(1, 16384 / s.seqQ));
  s.heads = opts.integer("heads", 2048 / s.headDim);
  std::string dtype = opts.string("dtype", "bf16");
  auto t = parseDType(dtype);
  if (!t || (*t != DType::bf16 && *t != DType::f16))
    throw UsageError("option --dtype: '" + dtype + "' is not bf16 or fp16");
  s.dtype = *t;
  TuneOptions o;
  o.budgetSeconds = double(opts.integer("budget", 30));
  o.threads = opts.int32("threads", 0);
  o.reps = opts.int32("reps", 20);
  o.force = opts.flag("force");
  o.exhaustive = opts.flag("exhaustive");
  opts.checkAllUsed();
  o.progress = [](const std::string &line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  fmt::print("kiln tune {} B={} H={} N={} D={} {} {} ({})\n",
             opts.positional[0], s.batch, s.heads, s.seqQ, s.headDim,
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
  const int width = backward ? 92 : 56;
  fmt::print("\n{:<{}} {:>9}  {}\n", "candidate", width, "ms", "status");
  for (const TunedTiming &t : r.timings)
    fmt::print("{:<{}} {:>9}  {}\n", t.config, width,
               t.ms ? fmt::format("{:.3f}", t.ms) : "-", t.status);
  // The backward counted as 2.5x the forward's FLOPs (FlashAttention's
  // convention).
  double flops = (backward ? 10.0 : 4.0) * s.batch * s.heads * s.seqQ * s.seqK *
                 s.headDim * (s.causal ? 0.5 : 1.0);
  fmt::print("winner {}: {:.3f} ms, {:.0f} TFLOP/s; tuned in {:.1f} s\n",
             r.config, r.ms, flops / r.ms / 1e9, r.seconds);
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
