//===- BackwardProblem.cpp - `kiln ... attention-backward` ----------------===//
//
// The backward's three kernels as one problem: `kiln run` launches them in
// order and checks dQ, dK and dV against fp64; the inspect
// commands compile the one --part names.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Reference.h"

#include <fmt/format.h>

namespace kiln::cli {

std::string backwardPartName(const Kernel &k) {
  return k.name().substr(std::string("attention_bwd_").size());
}

Problem attentionBackwardProblem(Options &opts, bool withData) {
  kernels::AttentionShape s = attentionShapeOptions(opts);
  std::string layout = layoutOption(opts);
  // Grouped heads' short non-causal queries as the library runs them.
  const std::string grouped = groupedRowsOption(opts, s, layout);
  kernels::AttentionBackwardConfig c =
      kernels::resolveBackwardConfig(s, backwardConfigOptions(opts));
  const std::string part = opts.string("part", "");
  const uint64_t seed = uint64_t(opts.integer("seed", 1));

  const bool bshd = layout == "bshd";
  const std::vector<int64_t> qShape{s.batch, s.heads, s.seqQ, s.headDim},
      kShape{s.batch, s.kvHeads, s.seqK, s.headDim},
      lShape{s.batch, s.heads, s.seqQ},
      qStrides = attentionStrides(qShape, bshd),
      kStrides = attentionStrides(kShape, bshd);

  Problem p;
  p.sequence = kernels::attentionBackward(s, c);
  std::string parts;
  for (const Kernel &k : p.sequence) {
    const std::string name = backwardPartName(k);
    parts += (parts.empty() ? "" : ", ") + name;
    if (name == part || (part.empty() && k.name() == p.sequence[1].name()))
      p.kernel = k;
  }
  if (!p.kernel)
    throw UsageError("option --part: '" + part + "' is not one of " + parts);
  p.dims = {{"B", s.batch}, {"H", s.heads}, {"Nq", s.seqQ}, {"Nk", s.seqK}};
  for (const char *name : {"Q", "O", "dO", "dQ"})
    noteLayout(p, name, s.dtype, qStrides);
  for (const char *name : {"K", "V", "dK", "dV"})
    noteLayout(p, name, s.dtype, kStrides);
  // Only the tensors of the inspected kernel count for its variant.
  std::erase_if(p.unaligned, [&](const std::string &name) {
    for (const TensorParamInfo &t : p.kernel->tensors())
      if (t.name == name)
        return false;
    return true;
  });
  // The schedule the defaults chose, as the user would ask for it.
  std::string dq =
      c.deterministic > 0
          ? fmt::format("dQ kernel {}x{}", c.dqBlockM, c.dqBlockN)
          : std::string(c.convertDqLast > 0
                            ? "dQ by atomics, converted by each head's last"
                        : c.overlapDqConvert > 0
                            ? "dQ by atomics, converted beside dK/dV"
                            : "dQ by atomics");
  p.summary = fmt::format(
      "attention-backward B={} H={}{} Nq={} Nk={} D={} {} {} layout={} "
      "dK/dV {}x{} {} warps={} stages={}{}{}{}{}{}{}",
      s.batch, s.heads,
      s.kvHeads != s.heads ? fmt::format(" kv-heads={}", s.kvHeads) : "",
      s.seqQ, s.seqK, s.headDim, s.causal ? "causal" : "non-causal",
      dtypeName(s.dtype), layout, c.blockN, c.blockM, dq, c.warps, c.stages,
      c.wgmma > 0 ? (c.tma > 0 ? " wgmma tma" : " wgmma") : "",
      scheduleSwitches(c.warpSpecialize, c.pingpong, c.overlap,
                       c.minBlocksPerSM, c.persistent, c.dynamicTiles,
                       s.causal ? c.longestFirst : 0, c.headGroup),
      c.kvInRegisters > 0 ? " kv-in-registers" : "",
      c.scoresByQueries > 0 ? " scores-by-queries" : "",
      c.foldStatistics > 0 ? " folded-statistics" : "",
      c.tmaStore > 0 ? " tma-store" : "");
  p.summary += grouped;
  if (!withData)
    return p;

  HostTensor q = randomTensor(s.dtype, qShape, seed, qStrides),
             k = randomTensor(s.dtype, kShape, seed + 1, kStrides),
             v = randomTensor(s.dtype, kShape, seed + 2, kStrides),
             dO = randomTensor(s.dtype, qShape, seed + 3, qStrides),
             o(s.dtype, qShape, qStrides), lse(DType::f32, lShape);
  {
    HostTensor oRef(DType::f32, qShape);
    kernels::attentionReference(s, q, k, v, oRef, lse);
    for (int64_t i = 0; i < o.numel(); ++i)
      o.flatSet(i, oRef.flatAt(i));
  }
  HostTensor dqRef(DType::f32, qShape), dkRef(DType::f32, kShape),
      dvRef(DType::f32, kShape);
  kernels::attentionBackwardReference(s, q, k, v, dO, dqRef, dkRef, dvRef);
  p.expected.emplace_back("dQ", std::move(dqRef));
  p.expected.emplace_back("dK", std::move(dkRef));
  p.expected.emplace_back("dV", std::move(dvRef));
  for (auto [name, strides, shape] : {std::tuple{"dQ", qStrides, qShape},
                                      {"dK", kStrides, kShape},
                                      {"dV", kStrides, kShape}}) {
    HostTensor g(s.dtype, shape, strides);
    g.poison();
    p.tensors.emplace(name, std::move(g));
  }
  // The workspaces the kernels take, poisoned: the first kernel writes or
  // zeroes each.
  for (const kernels::WorkspaceTensor &w :
       kernels::BackwardWorkspace(s.batch, s.heads, s.seqQ, s.headDim).tensors)
    for (const Kernel &kern : p.sequence)
      for (const TensorParamInfo &t : kern.tensors())
        if (t.name == w.name && !p.tensors.count(w.name)) {
          HostTensor h(w.dtype, w.shape);
          h.poison();
          p.tensors.emplace(w.name, std::move(h));
        }
  for (auto &[name, t] : {std::pair<const char *, HostTensor *>{"Q", &q},
                          {"K", &k},
                          {"V", &v},
                          {"O", &o},
                          {"dO", &dO},
                          {"LSE", &lse}})
    p.tensors.emplace(name, std::move(*t));
  return p;
}

} // namespace kiln::cli
