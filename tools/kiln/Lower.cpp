//===- Lower.cpp - kiln lower: the kernels of one lowering of attention ---===//
#include "Commands.h"

#include "kiln/kernels/AttentionGraph.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

namespace kiln::cli {

int cmdLower(Options &opts) {
  if (opts.positional.size() != 1 || opts.positional[0] != "attention")
    throw UsageError("kiln lower: only 'attention' is written as a graph");
  kernels::AttentionShape s;
  s.batch = positive(opts, "batch", 1);
  s.heads = positive(opts, "heads", 16);
  s.seqQ = s.seqK = positive(opts, "seq", 4096);
  s.headDim = positive(opts, "head-dim", 128);
  s.causal = causalOption(opts);
  s.dtype = dtypeOption(opts, "bf16");
  graph::Fusion mode = graph::parseFusion(opts.string("mode", "fused"));
  bool json = opts.flag("json"), showGraph = opts.flag("graph");
  bool showIr = opts.flag("ir");
  opts.checkAllUsed();
  graph::Graph g = kernels::attentionGraph(s);
  graph::Lowered plan = graph::lower(g, mode);
  if (json) {
    fmt::print("{}\n", plan.json());
    return 0;
  }
  fmt::print("attention B={} H={} N={} D={} {} {}\n", s.batch, s.heads, s.seqQ,
             s.headDim, s.causal ? "causal" : "non-causal", dtypeName(s.dtype));
  if (showGraph)
    fmt::print("graph:\n{}", g.str());
  fmt::print("{}", plan.str());
  if (showIr)
    for (const graph::Step &st : plan.steps)
      fmt::print("\n// kernel {}\n{}", st.kernel.name(), st.kernel.ir());
  return 0;
}

} // namespace kiln::cli
