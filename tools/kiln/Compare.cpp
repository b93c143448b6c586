//===- Compare.cpp - kiln compare attention: fused against unfused --------===//
//
// For each head dim, sequence length and causality, each lowering of the
// attention graph runs on fresh random inputs: the median time of the whole
// lowering (every kernel, CUDA events), TFLOP/s of attention's own work, the
// device memory it held (the driver's free memory before and after its
// allocations), its launches and the bytes its kernels read and write.
// A lowering that runs out of memory is reported and not tried at larger N.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Json.h"

#include "kiln/kernels/AttentionGraph.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace kiln::cli {

namespace {
struct Row {
  int64_t D, N;
  bool causal;
  graph::Fusion mode;
  bool oom = false;
  double ms = 0, tflops = 0;
  int64_t peakBytes = 0, plannedBytes = 0, bytesMoved = 0;
  size_t launches = 0;
};

Row runOne(const kernels::AttentionShape &s, graph::Fusion mode,
           std::map<std::string, TensorRef> io, int reps) {
  Row r{s.headDim, s.seqQ, s.causal, mode};
  graph::Lowered plan = graph::lower(kernels::attentionGraph(s), mode);
  r.plannedBytes = plan.peakBytes();
  r.bytesMoved = plan.bytesMoved();
  r.launches = plan.steps.size();
  size_t before = cuda::memoryInfo().free;
  try {
    graph::GpuGraph gpu(plan);
    // Q, K, V and O are allocated by the caller; count them as the plan does.
    int64_t io4 = plan.peakBytes() - plan.arenaBytes;
    r.peakBytes = int64_t(before - cuda::memoryInfo().free) + io4;
    gpu.launch(io);
    cuda::synchronize();
    cuda::Timer t;
    t.start();
    gpu.launch(io);
    float first = t.stop();
    // At most ~2 s per row: long runs at large N get fewer repetitions.
    int n = std::clamp(int(2000 / std::max(first, 0.01f)), 1, reps);
    std::vector<float> times{first};
    for (int i = 1; i < n; ++i) {
      t.start();
      gpu.launch(io);
      times.push_back(t.stop());
    }
    std::sort(times.begin(), times.end());
    r.ms = times[times.size() / 2];
    r.tflops = kernels::attentionFlops(s) / (r.ms * 1e-3) / 1e12;
  } catch (const cuda::OutOfMemory &) {
    r.oom = true;
  }
  return r;
}

std::string mib(int64_t b) {
  return fmt::format("{:.1f}", double(b) / (1 << 20));
}

const Row *find(const std::vector<Row> &rows, int64_t D, bool causal,
                graph::Fusion m, int64_t N) {
  for (const Row &r : rows)
    if (r.D == D && r.causal == causal && r.mode == m && r.N == N && !r.oom)
      return &r;
  return nullptr;
}

/// The answers, compare.json and the plots.
void writeCompareReport(const std::vector<Row> &rows, const std::string &dir,
                        int64_t maxSeq, int64_t batch, int64_t heads,
                        DType dtype) {
  using graph::Fusion;
  size_t free = cuda::memoryInfo().free;
  fmt::print("\n# answers\n");
  llvm::json::Array jsonRows, answers;
  for (const Row &r : rows)
    jsonRows.push_back(
        llvm::json::Object{{"D", r.D},
                           {"N", r.N},
                           {"causal", r.causal},
                           {"lowering", graph::fusionName(r.mode)},
                           {"oom", r.oom},
                           {"ms", r.ms},
                           {"tflops", r.tflops},
                           {"peak_bytes", r.peakBytes},
                           {"planned_bytes", r.plannedBytes},
                           {"launches", r.launches},
                           {"bytes_moved", r.bytesMoved}});
  auto answer = [&](const std::string &a) {
    fmt::print("{}\n", a);
    answers.push_back(a);
  };
  for (int64_t D : {64, 128})
    for (bool causal : {false, true}) {
      std::string tag =
          fmt::format("D={} {}", D, causal ? "causal" : "non-causal");
      for (Fusion m : {Fusion::None, Fusion::Elementwise, Fusion::Flash}) {
        int64_t ran = 0, oomAt = 0;
        for (const Row &r : rows)
          if (r.D == D && r.causal == causal && r.mode == m) {
            if (r.oom)
              oomAt = r.N;
            else
              ran = std::max(ran, r.N);
          }
        if (!ran && !oomAt)
          continue;
        std::string a = fmt::format("{}: the {} lowering ran up to N={}", tag,
                                    graph::fusionName(m), ran);
        if (oomAt)
          a += fmt::format(" and ran out of memory at N={}", oomAt);
        else if (ran >= maxSeq)
          a += " (--max-seq)";
        if (m == Fusion::Flash && ran) {
          const Row *r = find(rows, D, causal, m, ran);
          // Its memory is linear in N: Q, K, V and O.
          double fit = double(ran) * double(free + size_t(r->peakBytes)) /
                       double(r->peakBytes);
          a += fmt::format("; by its memory (linear in N) it fits up to "
                           "N~{:.0f}k on this GPU",
                           fit / 1024);
        }
        answer(a);
      }
      for (int64_t N : {1024, 2048, 4096}) {
        const Row *u = find(rows, D, causal, Fusion::None, N),
                  *e = find(rows, D, causal, Fusion::Elementwise, N),
                  *f = find(rows, D, causal, Fusion::Flash, N);
        if (u && e && f)
          answer(fmt::format("{} N={}: fused is {:.2f}x faster than unfused, "
                             "{:.2f}x than elementwise-fused, and holds "
                             "{:.1f}x less memory",
                             tag, N, u->ms / f->ms, e->ms / f->ms,
                             double(u->peakBytes) / double(f->peakBytes)));
      }
    }
  // The plots are drawn from this file by scripts/plot_compare.py
  // (matplotlib).
  llvm::json::Object meta{{"batch", batch},
                          {"heads", heads},
                          {"dtype", dtypeName(dtype)},
                          {"device", cuda::device().name}};
  writeJson(dir + "/compare.json",
            llvm::json::Object{{"meta", std::move(meta)},
                               {"rows", std::move(jsonRows)},
                               {"answers", std::move(answers)}});
  fmt::print("wrote {0}/compare.json; plots: python3 scripts/plot_compare.py "
             "{0}/compare.json {0}\n",
             dir);
}
} // namespace

int cmdCompare(Options &opts) {
  if (opts.positional.size() != 1 || opts.positional[0] != "attention")
    throw UsageError("kiln compare: only 'attention' is compared");
  int64_t batch = positive(opts, "batch", 1),
          heads = positive(opts, "heads", 16);
  int64_t minSeq = positive(opts, "min-seq", 256);
  int64_t maxSeq = positive(opts, "max-seq", 131072);
  DType dtype = dtypeOption(opts, "bf16");
  int reps = positive32(opts, "reps", 10);
  std::string dir = opts.string("out", "compare");
  std::string dims = opts.string("head-dims", "64,128");
  opts.checkAllUsed();
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw UsageError("kiln compare: --dtype must be bf16 or fp16");
  std::string why;
  if (!cuda::available(&why))
    throw Error("kiln compare: no GPU here (" + why + ")");
  std::filesystem::create_directories(dir);
  const cuda::DeviceInfo &dev = cuda::device();
  fmt::print("# kiln compare attention on {}: B={} H={} {}, {:.1f} GiB free\n",
             dev.name, batch, heads, dtypeName(dtype),
             double(cuda::memoryInfo().free) / (1 << 30));
  fmt::print("D,causal,N,lowering,ms,tflops,peak_MiB,launches,moved_MiB,"
             "GB/s,speedup_vs_unfused\n");

  const graph::Fusion modes[] = {
      graph::Fusion::None, graph::Fusion::Elementwise, graph::Fusion::Flash};
  std::vector<Row> rows;
  for (int64_t D : {64, 128}) {
    if (dims.find(std::to_string(D)) == std::string::npos)
      continue;
    std::map<std::pair<bool, int>, bool> stopped;
    for (int64_t N = minSeq; N <= maxSeq; N *= 2) {
      size_t n = size_t(batch * heads * N * D);
      std::vector<int64_t> shape{batch, heads, N, D};
      std::vector<int64_t> st = contiguousStrides(shape);
      cuda::Buffer q = randomDevice(dtype, n, uint64_t(N + D)),
                   k = randomDevice(dtype, n, uint64_t(N + D + 1)),
                   v = randomDevice(dtype, n, uint64_t(N + D + 2)), o(n * 2);
      std::map<std::string, TensorRef> io{{"Q", {q.data(), dtype, shape, st}},
                                          {"K", {k.data(), dtype, shape, st}},
                                          {"V", {v.data(), dtype, shape, st}},
                                          {"O", {o.data(), dtype, shape, st}}};
      for (bool causal : {false, true}) {
        double unfusedMs = 0;
        for (graph::Fusion mode : modes) {
          if (stopped[{causal, int(mode)}])
            continue;
          o.fill(0xFF);
          kernels::AttentionShape s{batch, heads, N, N, D, causal, dtype, 0};
          Row r = runOne(s, mode, io, reps);
          if (r.oom)
            stopped[{causal, int(mode)}] = true;
          if (mode == graph::Fusion::None)
            unfusedMs = r.oom ? 0 : r.ms;
          if (r.oom)
            fmt::print("{},{},{},{},out of memory (needs {} MiB),,,,,,\n", D,
                       int(causal), N, graph::fusionName(mode),
                       mib(r.plannedBytes));
          else
            fmt::print("{},{},{},{},{:.3f},{:.1f},{},{},{},{:.0f},{}\n", D,
                       int(causal), N, graph::fusionName(mode), r.ms, r.tflops,
                       mib(r.peakBytes), r.launches, mib(r.bytesMoved),
                       double(r.bytesMoved) / (r.ms * 1e-3) / 1e9,
                       unfusedMs > 0 ? fmt::format("{:.2f}", unfusedMs / r.ms)
                                     : "");
          std::fflush(stdout);
          rows.push_back(r);
        }
      }
    }
  }
  writeCompareReport(rows, dir, maxSeq, batch, heads, dtype);
  return 0;
}

} // namespace kiln::cli
