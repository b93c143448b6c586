//===- BenchBackward.cpp - kiln bench attention --backward ----------------===//
//
// The backward's kernels (workspace, dK/dV, dQ) timed together as peers.py
// times its peers (backToBackMs: --reps samples of --batch back-to-back
// backward passes), and each kernel alone the same way. Inputs
// standard normal (as peers.py's torch.randn); O and LSE from kiln's
// forward on them, so that P is what training sees. TFLOP/s counts 2.5x
// the forward's FLOPs, 10·B·H·Nq·Nk·D (half when causal), as the
// FlashAttention papers and peers.py --backward do. Each row also gives
// each kernel's own time.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Json.h"

#include "kiln/kernels/AttentionBackward.h"
#include "kiln/runtime/Launch.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <functional>

namespace kiln::cli {

int benchAttentionBackward(Options &opts) {
  const bool quick = opts.flag("quick"), ragged = opts.flag("ragged");
  const std::string dtypes = opts.string("dtypes", "bf16");
  const std::string jsonPath = opts.string("json", "");
  const int reps = positive32(opts, "reps", 30),
            batch = positive32(opts, "batch", 10);
  const int64_t tokens = opts.integer("tokens", 16384, 1); // B = tokens / N
  const std::string onlyD = opts.string("head-dim", "");
  const std::string seqs = opts.string("seqs", "");
  const kernels::AttentionBackwardConfig cfg = backwardConfigOptions(opts);
  // Query heads per K/V head (grouped-query attention; H = 2048 / D).
  const int64_t group = benchGroupOption(opts, onlyD);
  // More configs (';' between them), each row timed under every one with
  // their samples in turn (one process: no drift of clocks or placement
  // between them).
  std::vector<kernels::AttentionBackwardConfig> configs{cfg};
  for (kernels::AttentionBackwardConfig &c :
       againstBackwardConfigs(cfg, opts.string("against", "")))
    configs.push_back(c);
  const bool onlyCausal = causalOption(opts), // both: a usage error
      onlyNonCausal = opts.flag("non-causal");
  opts.checkAllUsed();
  std::string why;
  if (!cuda::available(&why))
    throw Error("kiln bench: no GPU here (" + why + ")");
  const cuda::DeviceInfo &dev = cuda::device();
  fmt::print("# kiln bench attention --backward on {} ({}), median of {} "
             "samples of {} back-to-back runs of the backward's kernels\n",
             dev.name, dev.arch(), reps, batch);
  fmt::print("dtype,B,H,N,D,causal,ms,tflops,kernels (name ms "
             "registers/spilled bytes){}\n",
             configs.size() > 1 ? ",config" : "");

  const std::vector<int64_t> ns = benchSequenceLengths(
      seqs.empty() ? std::vector<int64_t>{} : positiveList(seqs, "seqs"),
      quick, ragged);
  llvm::json::Array rows;
  for (const std::string &dn : commaList(dtypes)) {
    auto dtype = parseDType(dn);
    if (!dtype || (*dtype != DType::bf16 && *dtype != DType::f16))
      throw UsageError("kiln bench: --dtypes takes bf16 and fp16, got " + dn);
    for (int64_t D : {64, 128}) {
      if (!onlyD.empty() && std::to_string(D) != onlyD)
        continue;
      for (int64_t N : ns)
        for (bool causal : {false, true}) {
          if ((onlyCausal && !causal) || (onlyNonCausal && causal))
            continue;
          const int64_t B = std::max<int64_t>(1, tokens / N), H = 2048 / D,
                        Hk = H / group;
          kernels::AttentionShape s{B, H, N, N, D, causal, *dtype, 0, Hk};
          const size_t n = size_t(B * H * N * D), rowsN = size_t(B * H * N),
                       nk = size_t(B * Hk * N * D);
          const uint64_t seed = uint64_t(N * 1000 + D + causal);
          cuda::Buffer q = randomDevice(*dtype, n, seed),
                       k = randomDevice(*dtype, nk, seed + 1),
                       v = randomDevice(*dtype, nk, seed + 2),
                       dO = randomDevice(*dtype, n, seed + 3), o(n * 2),
                       dq(n * 2), dk(nk * 2), dv(nk * 2), lse(rowsN * 4);
          const kernels::BackwardWorkspace workspace(B, H, N, D);
          cuda::Buffer workspaceBytes(size_t(workspace.elements) * 4);
          const std::vector<int64_t> shape{B, H, N, D},
              st{H * N * D, N * D, D, 1};
          auto ref = [&](cuda::Buffer &b) -> TensorRef {
            return {b.data(), *dtype, shape, st};
          };
          auto kvRef = [&](cuda::Buffer &b) -> TensorRef {
            return {b.data(), *dtype, {B, Hk, N, D}, {Hk * N * D, N * D, D, 1}};
          };
          auto rowRef = [&](cuda::Buffer &b) -> TensorRef {
            return {b.data(), DType::f32, {B, H, N}, {H * N, N, 1}};
          };
          std::map<std::string, TensorRef> refs{
              {"Q", ref(q)},   {"K", kvRef(k)},   {"V", kvRef(v)},
              {"O", ref(o)},   {"dO", ref(dO)},   {"LSE", rowRef(lse)},
              {"dQ", ref(dq)}, {"dK", kvRef(dk)}, {"dV", kvRef(dv)}};
          refs.merge(workspace.refs(workspaceBytes.data()));
          { // O and LSE from the forward on these inputs.
            Kernel fwd = kernels::attentionForward(s);
            auto mine = fwd.tensorsIn(refs);
            jitKernel(fwd, mine)->launch(fwd.bind(mine));
          }
          struct Launch {
            std::shared_ptr<GpuKernel> g;
            std::vector<ArgValue> args;
          };
          struct Timed {
            kernels::AttentionBackwardKernels ks;
            std::vector<Launch> launches;
            std::vector<float> samples;
            void run() {
              for (Launch &l : launches)
                l.g->launch(l.args);
            }
          };
          std::vector<Timed> timed;
          for (const kernels::AttentionBackwardConfig &c : configs) {
            Timed t{kernels::attentionBackward(s, c), {}, {}};
            for (const Kernel &kern : t.ks) {
              auto mine = kern.tensorsIn(refs);
              t.launches.push_back({jitKernel(kern, mine), kern.bind(mine)});
            }
            timed.push_back(std::move(t));
          }
          // Samples in turn (one of each config, then again).
          for (Timed &t : timed)
            backToBackMs([&] { t.run(); }, 1, batch);
          for (int i = 0; i < reps; ++i)
            for (Timed &t : timed)
              cuda::backToBackMs([&] { t.run(); }, 1, batch, &t.samples);
          for (size_t which = 0; which < timed.size(); ++which) {
            Timed &t = timed[which];
            std::sort(t.samples.begin(), t.samples.end());
            const double ms = t.samples[t.samples.size() / 2];
            std::string each;
            for (size_t i = 0; i < t.launches.size(); ++i) {
              Launch &l = t.launches[i];
              cuda::FunctionAttributes attr = l.g->attributes();
              each += fmt::format(
                  "{}{} {:.3f} {}/{}", i ? "; " : "",
                  t.ks[i].name().substr(std::string("attention_bwd_").size()),
                  backToBackMs([&] { l.g->launch(l.args); }, reps, batch),
                  attr.registers, attr.localBytes);
            }
            const double tflops =
                10.0 * B * H * N * N * D * (causal ? 0.5 : 1.0) / ms / 1e9;
            const std::string config = againstLabel(which);
            fmt::print("{},{},{},{},{},{},{:.3f},{:.1f},{}{}\n", dn, B, H, N, D,
                       int(causal), ms, tflops, each,
                       timed.size() == 1 ? "" : "," + config);
            std::fflush(stdout);
            llvm::json::Object row =
                attentionRow(*dtype, B, H, N, D, causal, ms, tflops);
            row["pass"] = "backward";
            if (timed.size() > 1)
              row["config"] = config;
            rows.push_back(std::move(row));
          }
        }
    }
  }
  if (!jsonPath.empty()) {
    writeJson(jsonPath, llvm::json::Object{{"rows", std::move(rows)}});
    fmt::print("# wrote {}\n", jsonPath);
  }
  return 0;
}

} // namespace kiln::cli
