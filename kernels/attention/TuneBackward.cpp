//===- TuneBackward.cpp - the backward's Config space for the autotuner ---===//
//
// A candidate is the whole backward (delta, dK/dV, dQ or its conversion),
// timed as one sequence of launches on the same inputs: dQ by its own
// kernel and dQ by atomics compete on what the user waits for. The winner is
// checked on a small problem (its classes of sizes kept) against the fp64
// reference, gradients poisoned.
//
//===----------------------------------------------------------------------===//
#include "ConfigFields.h"
#include "UntunedConfig.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/AttentionTune.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Launch.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace kiln::kernels {

/// The fields a backward config string names.
static const RecordField<AttentionBackwardConfig> kFields[] = {
    {"deterministic", &AttentionBackwardConfig::deterministic},
    {"blockM", &AttentionBackwardConfig::blockM},
    {"blockN", &AttentionBackwardConfig::blockN},
    {"warps", &AttentionBackwardConfig::warps},
    {"stages", &AttentionBackwardConfig::stages},
    {"dqBlockM", &AttentionBackwardConfig::dqBlockM},
    {"dqBlockN", &AttentionBackwardConfig::dqBlockN},
    {"dqWarps", &AttentionBackwardConfig::dqWarps},
    {"scoresByQueries", &AttentionBackwardConfig::scoresByQueries}};

std::string backwardConfigString(const AttentionBackwardConfig &c) {
  std::string out;
  for (const auto &[name, field] : kFields)
    std::visit(
        [&](auto member) {
          out += fmt::format("{}{}={}", out.empty() ? "" : " ", name,
                             int64_t(c.*member));
        },
        field);
  return out;
}

AttentionBackwardConfig parseBackwardConfigString(const std::string &text) {
  return parseConfigFields(text, kFields, "attention backward config");
}

/// The candidate of backward config `c` for `s`: its string, the kernels'
/// build and the pruning estimates.
static TuneCandidate backwardCandidateOf(const AttentionShape &s,
                                         const AttentionBackwardConfig &c) {
  const int64_t D = s.headDim, e = int64_t(dtypeSize(s.dtype));
  const int64_t bn = c.blockN, bm = c.blockM, stages = c.stages;
  const bool det = c.deterministic > 0, byQueries = c.scoresByQueries > 0;
  const int64_t threads = 32 * c.warps;
  TuneCandidate t;
  t.config = backwardConfigString(c);
  // K and V resident, Q and dO per stage; atomics stage dSᵀ and
  // the fp32 dQ part; scores by queries stage P and dS.
  const int64_t staged = byQueries ? 2 : det ? 0 : 1;
  t.sharedBytes = 2 * bn * D * e + stages * 2 * bm * D * e +
                  staged * bm * bn * e + (det ? 0 : bm * D * 4);
  // dK and dV, the scores and dP (fp32, either way round), and
  // dQ's part with atomics.
  t.registers = int((2 * bn * D + 2 * bn * bm + (det ? 0 : bm * D)) / threads);
  t.buildSequence = [s, c] { return attentionBackward(s, c); };
  return t;
}

std::vector<TuneCandidate>
attentionBackwardCandidates(const AttentionShape &s) {
  std::vector<TuneCandidate> out;
  for (int det : {1, 0})
    for (int64_t bn : {64, 128})
      for (int64_t bm : {64, 128})
        for (int stages : {2, 3})
          for (int64_t dqBm :
               det ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{0})
            for (int byQueries : {0, 1}) {
              AttentionBackwardConfig c;
              c.scoresByQueries = byQueries;
              c.deterministic = det;
              c.blockN = bn;
              c.blockM = bm;
              c.stages = stages;
              c.warps = int(std::max<int64_t>(4, bn / 16));
              c.dqBlockM = dqBm;
              c.dqBlockN = det ? 64 : 0;
              c.dqWarps = det ? int(std::max<int64_t>(4, dqBm / 16)) : 0;
              out.push_back(backwardCandidateOf(s, c));
            }
  return out;
}

std::string attentionBackwardTuneBucket(const AttentionShape &s) {
  return "backward " + attentionTuneBucket(s);
}

namespace {
/// One problem's tensors on the device: random inputs, O and LSE from the
/// forward, the workspaces and gradients.
struct BackwardBuffers {
  std::map<std::string, std::shared_ptr<cuda::Buffer>> owned;
  std::map<std::string, TensorRef> refs;

  BackwardBuffers(const AttentionShape &s, uint64_t seed,
                  const std::map<std::string, HostTensor *> &inputs = {}) {
    const std::vector<int64_t> q{s.batch, s.heads, s.seqQ, s.headDim},
        k{s.batch, s.heads, s.seqK, s.headDim}, l{s.batch, s.heads, s.seqQ};
    std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, DType>>>
        all = {{"Q", {q, s.dtype}},  {"K", {k, s.dtype}},
               {"V", {k, s.dtype}},  {"dO", {q, s.dtype}},
               {"O", {q, s.dtype}},  {"LSE", {l, DType::f32}},
               {"dQ", {q, s.dtype}}, {"dK", {k, s.dtype}},
               {"dV", {k, s.dtype}}};
    for (const WorkspaceTensor &t :
         BackwardWorkspace(s.batch, s.heads, s.seqQ, s.headDim).tensors)
      all.push_back({t.name, {t.shape, t.dtype}});
    for (const auto &[name, spec] : all) {
      const auto &[shape, dtype] = spec;
      HostTensor h(dtype, shape);
      auto given = inputs.find(name);
      if (given != inputs.end())
        h = *given->second;
      else if (name == "Q" || name == "K" || name == "V" || name == "dO")
        h.fillRandom(seed++);
      else
        h.poison();
      auto b = std::make_shared<cuda::Buffer>(h.storageBytes());
      b->upload(h.data(), h.storageBytes());
      refs[name] = {b->data(), dtype, shape, contiguousStrides(shape)};
      owned[name] = std::move(b);
    }
    Kernel fwd = attentionForward(s);
    auto mine = fwd.tensorsIn(refs);
    jitKernel(fwd, mine)->launch(fwd.bind(mine));
  }
};

/// Sizes with the classes of `n` (1, multiples of 16, others) but small
/// enough for the fp64 reference.
int64_t smallLike(int64_t n, int64_t most) {
  if (n <= most)
    return n;
  return n % 16 == 0 ? most : most - 16 + n % 16;
}
} // namespace

TuneResult tuneAttentionBackward(const AttentionShape &s,
                                 const TuneOptions &options) {
  const int64_t bytes = s.batch * s.heads * (s.seqQ + s.seqK) * s.headDim *
                        int64_t(dtypeSize(s.dtype)) * 4;
  const int sets = int(
      std::clamp<int64_t>((256 << 20) / std::max<int64_t>(bytes, 1) + 1, 2, 8));
  auto data = std::make_shared<std::vector<BackwardBuffers>>();
  TuneHarness h;
  h.sets = sets;
  h.args = [=](const Kernel &kernel, int i) {
    while (int(data->size()) <= i)
      data->emplace_back(s, 2000 + 10 * data->size());
    return kernel.bind(kernel.tensorsIn((*data)[size_t(i)].refs));
  };
  // Set 0 made now: the compile threads read it for the variant.
  data->emplace_back(s, 2000);
  h.target = [=](const Kernel &kernel) {
    return variantTarget(kernel, kernel.tensorsIn((*data)[0].refs));
  };
  h.checkSequence = [=](const std::vector<Kernel> &kernels,
                        const std::vector<GpuKernel *> &) -> std::string {
    // The winner's kernels on a small problem of the same size classes.
    AttentionShape c = s;
    c.batch = std::min<int64_t>(s.batch, 2);
    c.heads = s.heads % 16 == 0 ? 16 : std::min<int64_t>(s.heads, 3);
    c.seqQ = smallLike(s.seqQ, 384);
    c.seqK = smallLike(s.seqK, 384);
    const std::vector<int64_t> qs{c.batch, c.heads, c.seqQ, c.headDim},
        ks{c.batch, c.heads, c.seqK, c.headDim};
    HostTensor q(c.dtype, qs), k(c.dtype, ks), v(c.dtype, ks), dO(c.dtype, qs);
    q.fillRandom(71, -2, 2);
    k.fillRandom(72, -2, 2);
    v.fillRandom(73);
    dO.fillRandom(74);
    BackwardBuffers d(c, 0, {{"Q", &q}, {"K", &k}, {"V", &v}, {"dO", &dO}});
    for (const Kernel &kern : kernels) {
      auto mine = kern.tensorsIn(d.refs);
      jitKernel(kern, mine)->launch(kern.bind(mine));
    }
    cuda::synchronize();
    HostTensor rq(DType::f32, qs), rk(DType::f32, ks), rv(DType::f32, ks);
    attentionBackwardReference(c, q, k, v, dO, rq, rk, rv);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 5e-3;
    for (auto [name, ref] : {std::pair{"dQ", &rq}, {"dK", &rk}, {"dV", &rv}}) {
      HostTensor got(c.dtype, ref->shape());
      d.owned.at(name)->download(got.data(), got.storageBytes());
      ErrorStats e = compareTensors(got, *ref);
      if (e.nonFinite || e.relative > tol)
        return fmt::format("{}: relative error {:.2e}, {} non-finite "
                           "(tolerance {:.0e})",
                           name, e.relative, e.nonFinite, tol);
    }
    return "";
  };
  // The schedule launches take untuned first, timed whatever the budget
  // (the forward's tuneAttention says why).
  std::vector<TuneCandidate> candidates = attentionBackwardCandidates(s);
  TuneCandidate base =
      backwardCandidateOf(s, resolveUntunedBackwardConfig(s, {}));
  base.baseline = true;
  std::erase_if(candidates, [&](const TuneCandidate &c) {
    return c.config == base.config;
  });
  candidates.insert(candidates.begin(), std::move(base));
  return autotune("attention-backward", attentionBackwardTuneBucket(s),
                  dtypeName(s.dtype), std::move(candidates), h, options);
}

std::optional<AttentionBackwardConfig>
tunedAttentionBackwardConfig(const AttentionShape &s) {
  std::optional<std::string> text = tunedConfig(
      "attention-backward", attentionBackwardTuneBucket(s), dtypeName(s.dtype));
  if (!text)
    return std::nullopt;
  return parseBackwardConfigString(*text);
}

} // namespace kiln::kernels
