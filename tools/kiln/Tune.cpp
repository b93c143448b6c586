//===- Tune.cpp - kiln tune attention: the autotuner on the command line --===//
#include "Commands.h"

#include "kiln/Compiler/Autotuned.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/RmsNorm.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/HostTensor.h"

#include <fmt/core.h>

#include <cstdio>

namespace kiln::cli {

/// kiln tune rmsnorm|layernorm: the row norms' Configs timed on random
/// bf16 tensors by the AutotunedKernel that kiln.rms_norm / layer_norm use
/// (same name and key), so that they find the record.
static int tuneRowNorm(Options &opts, bool layer) {
  const int64_t C = opts.integer("cols", 4096), R = opts.integer("rows", 16384);
  TuneOptions o;
  o.budgetSeconds = double(opts.integer("budget", 30));
  o.force = true;
  opts.checkAllUsed();
  if (R < 1 || C < 1 || (C & (C - 1)))
    throw UsageError("kiln tune: --rows must be positive and --cols a power "
                     "of two");
  const std::vector<kernels::RmsNormConfig> configs = kernels::rmsNormConfigs();
  std::vector<std::string> names;
  for (const kernels::RmsNormConfig &c : configs)
    names.push_back(c.name());
  AutotunedKernel k(layer ? "layernorm" : "rmsnorm", names,
                    [&](size_t i) {
                      return layer ? kernels::layerNorm(C, configs[i])
                                   : kernels::rmsNorm(C, configs[i]);
                    },
                    {.outputs = {"Y"}, .tolerance = 1e-2, .tune = o});
  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}), b(DType::bf16, {C});
  x.fillRandom(1, -3, 3);
  w.fillRandom(2);
  b.fillRandom(3);
  std::map<std::string, cuda::Buffer> buffers;
  std::map<std::string, TensorRef> t;
  for (auto [name, h] : {std::pair<const char *, HostTensor *>{"X", &x},
                         {"W", &w},
                         {"B", &b},
                         {"Y", &x}}) {
    if (!layer && std::string(name) == "B")
      continue;
    cuda::Buffer &buf = buffers[name] = cuda::Buffer(h->storageBytes());
    buf.upload(h->data(), h->storageBytes());
    t[name] = h->ref();
    t[name].data = buf.data();
  }
  const std::string key = "cols=" + std::to_string(C) + " bf16";
  fmt::print("kiln tune {} rows={} {} (the key kiln.{} uses)\n",
             layer ? "layernorm" : "rmsnorm", R, key,
             layer ? "layer_norm" : "rms_norm");
  k.launch(key, t);
  cuda::synchronize();
  fmt::print("{:<18} {:>9}  {}\n", "candidate", "ms", "status");
  for (const TunedTiming &tt : k.lastTuning()->timings)
    fmt::print("{:<18} {:>9}  {}\n", tt.config,
               tt.ms ? fmt::format("{:.4f}", tt.ms) : "-", tt.status);
  const double bytes =
      2.0 * double(x.storageBytes()) + double(w.storageBytes()) * (layer + 1);
  fmt::print("winner {}: {:.4f} ms, {:.2f} TB/s; recorded in {}\n",
             k.lastTuning()->config, k.lastTuning()->ms,
             bytes / k.lastTuning()->ms / 1e9, tuningDatabasePath());
  return 0;
}

int cmdTune(Options &opts) {
  if (opts.positional.size() == 1 &&
      (opts.positional[0] == "rmsnorm" || opts.positional[0] == "layernorm"))
    return tuneRowNorm(opts, opts.positional[0] == "layernorm");
  if (opts.positional.size() != 1 ||
      (opts.positional[0] != "attention" &&
       opts.positional[0] != "attention-backward"))
    throw UsageError("kiln tune: 'attention', 'attention-backward', "
                     "'rmsnorm' and 'layernorm' have tuning spaces");
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
