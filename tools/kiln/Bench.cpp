//===- Bench.cpp - kiln bench attention: TFLOP/s on the GPU ---------------===//
//
// The FlashAttention papers' shapes: B·N = 16k tokens, H·D = 2048. Each
// shape gets fresh random inputs and is timed as peers.py times its peers
// (backToBackMs: --reps samples of --batch back-to-back launches). TFLOP/s
// counts 4·B·H·N²·D (half when causal). With --json, writes rows that
// ../shared/bench/peers.py reads.
// --ragged adds sequence lengths that are not multiples of the blocks (nor
// of 4: LSE's rows are then not 16-byte aligned) and, beside each, the
// nearest multiple of 128, to compare with.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Json.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Launch.h"

#include <fmt/core.h>

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace kiln::cli {

/// Query-key pairs a row set attends: Nq*Nk, causal (top-left aligned) the
/// sum of min(i + 1, Nk) over rows i, except at Nq == Nk, where it is N^2/2
/// as the FlashAttention papers (and peers.py) count it.
static double attendedPairs(int64_t nq, int64_t nk, bool causal) {
  if (!causal)
    return double(nq) * double(nk);
  if (nq == nk)
    return 0.5 * double(nq) * double(nq);
  const double m = double(std::min(nq, nk));
  return m * (m + 1) / 2 + double(std::max<int64_t>(0, nq - nk)) * double(nk);
}

/// `kiln bench gemm`: C = A·B, bf16 in and out (as torch.matmul, the
/// cuBLAS row of peers.py), M = N = K = each of --sizes (or --size), or
/// each MxNxK of --mnk (an LM head's 8192x50264x768); timed as peers.py
/// does (backToBackMs); --shapes static, runtime or both (back to back).
static int benchGemm(Options &opts) {
  const int64_t size = opts.integer("size", -1);
  const std::string givenSizes = opts.string("sizes", "");
  const std::string mnk = opts.string("mnk", "");
  if (size != -1 && size < 1)
    throw UsageError("option --size: " + std::to_string(size) + " is not >= 1");
  if (!mnk.empty() && (size != -1 || !givenSizes.empty()))
    throw UsageError("kiln bench gemm: --mnk and --size/--sizes both given "
                     "(square sizes or MxNxK: one of them)");
  const std::string sizes = !givenSizes.empty()
                                ? givenSizes
                                : std::to_string(size != -1 ? size : 8192);
  int reps = positive32(opts, "reps", 30),
      batch = positive32(opts, "batch", 10);
  // Measured best on the H200 (same run): 128x256 blocks, a producer
  // warpgroup, 3 stages, 699 TFLOP/s; 256x128 with 16 warps and no producer
  // 675; 128x128 4 stages 666. C through TMA stores: 760 and 690 TFLOP/s
  // at 4096^3 and 8192^3 against 707 and 659 from registers (session 55).
  // Persistent CTAs in groups of 16 row blocks: gemmConfigs' first.
  kernels::GemmConfig c{.blockM = 128,
                        .blockN = 256,
                        .blockK = 64,
                        .warps = 8,
                        .stages = 3,
                        .wgmma = true};
  c.blockM = opts.integer("block-m", c.blockM);
  c.blockN = opts.integer("block-n", c.blockN);
  c.blockK = opts.integer("block-k", c.blockK);
  c.warps = opts.int32("warps", c.warps);
  c.stages = opts.int32("stages", c.stages);
  c.wgmma = opts.onOff("wgmma", true);
  c.tma = opts.onOff("tma", true);
  c.warpSpecialize = opts.onOff("warp-specialize", true);
  c.tmaStore = opts.onOff("tma-store", true);
  c.persistent = opts.onOff("persistent", true);
  c.groupM = opts.integer("group-m", 16);
  c.minBlocksPerSM = opts.int32("min-blocks-per-sm", 0);
  // Split-K adds into an fp32 C (the timing's launches keep adding).
  c.splitK = positive(opts, "split-k", 1);
  const DType cType = c.splitK > 1 ? DType::f32 : DType::bf16;
  const bool bias = opts.flag("bias");
  const bool bTransposed = opts.flag("b-transposed");
  const bool aTransposed = opts.flag("a-transposed");
  const kernels::GemmActivation activation = activationOption(opts);
  const std::string shapes = opts.string("shapes", "runtime");
  if (shapes != "static" && shapes != "runtime" && shapes != "both")
    throw UsageError("option --shapes: '" + shapes +
                     "' is not static, runtime or both");
  opts.checkAllUsed();
  std::vector<std::array<int64_t, 3>> problems;
  if (mnk.empty())
    for (int64_t n : positiveList(sizes, "sizes"))
      problems.push_back({n, n, n});
  for (llvm::StringRef rest = mnk; !rest.empty();) {
    auto [item, tail] = rest.split(',');
    rest = tail;
    llvm::SmallVector<llvm::StringRef, 3> dims;
    item.split(dims, 'x');
    std::array<int64_t, 3> p{};
    if (dims.size() != 3 || dims[0].getAsInteger(10, p[0]) ||
        dims[1].getAsInteger(10, p[1]) || dims[2].getAsInteger(10, p[2]) ||
        p[0] < 1 || p[1] < 1 || p[2] < 1)
      throw UsageError("option --mnk: '" + item.str() +
                       "' is not MxNxK of integers >= 1 (8192x50264x768)");
    problems.push_back(p);
  }
  std::string why;
  if (!cuda::available(&why))
    throw Error("kiln bench: no GPU here (" + why + ")");
  const cuda::DeviceInfo &dev = cuda::device();
  fmt::print(
      "# kiln bench gemm{}{}{}{} on {} ({}): blocks {}x{}x{}, {} warps, {} "
      "stages, {}{}{}, groups of {} row blocks\n",
      aTransposed ? " (A as AT, K x M)" : "",
      bTransposed ? " (B as BT, N x K)" : "", bias ? " +bias" : "",
      activation != kernels::GemmActivation::None
          ? std::string(" ") + kernels::gemmActivationName(activation)
          : "",
      dev.name, dev.arch(), c.blockM, c.blockN, c.blockK, c.warps, c.stages,
      c.wgmma ? (c.tma ? (c.warpSpecialize ? "wgmma, TMA, producer warpgroup"
                                           : "wgmma, TMA")
                       : "wgmma, cp.async")
              : "mma.sync",
      c.tmaStore ? ", C by TMA stores" : "",
      c.persistent ? ", persistent CTAs" : "", c.groupM);
  fmt::print("gemm,n,shapes,ms,tflops,registers,spill_bytes,smem\n");
  for (auto [m, n, kk] : problems)
    for (bool exact : {true, false}) {
      if ((exact && shapes == "runtime") || (!exact && shapes == "static"))
        continue;
      c.staticShapes = exact;
      kernels::GemmShape shape{m, n, kk, DType::bf16, cType, bias, activation};
      shape.bTransposed = bTransposed;
      shape.aTransposed = aTransposed;
      Kernel kernel = kernels::gemm(shape, c);
      cuda::Buffer a = randomDevice(DType::bf16, size_t(m * kk), 1),
                   b = randomDevice(DType::bf16, size_t(kk * n), 2),
                   out(size_t(m * n) * dtypeSize(cType)),
                   biasRow = randomDevice(DType::bf16, size_t(n), 3);
      std::map<std::string, TensorRef> refs{
          {aTransposed ? "AT" : "A",
           aTransposed ? TensorRef{a.data(), DType::bf16, {kk, m}, {m, 1}}
                       : TensorRef{a.data(), DType::bf16, {m, kk}, {kk, 1}}},
          {bTransposed ? "BT" : "B",
           bTransposed ? TensorRef{b.data(), DType::bf16, {n, kk}, {kk, 1}}
                       : TensorRef{b.data(), DType::bf16, {kk, n}, {n, 1}}},
          {"C", {out.data(), cType, {m, n}, {n, 1}}}};
      if (bias)
        refs["Bias"] = {biasRow.data(), DType::bf16, {n}, {1}};
      CompiledKernel compiled = compileForGpu(
          kernel, variantTarget(kernel, refs, {}, {.arch = dev.arch()}));
      GpuKernel g(compiled.spec());
      auto args = kernel.bind(refs);
      double ms = backToBackMs([&] { g.launch(args); }, reps, batch);
      cuda::FunctionAttributes attr = g.attributes();
      std::string size = m == n && n == kk ? std::to_string(n)
                                           : fmt::format("{}x{}x{}", m, n, kk);
      fmt::print("gemm,{},{},{:.3f},{:.1f},{},{},{}\n", size,
                 exact ? "static" : "runtime", ms,
                 2.0 * double(m) * double(n) * double(kk) / ms / 1e9,
                 attr.registers, attr.localBytes, compiled.sharedBytes);
      std::fflush(stdout);
    }
  return 0;
}

int cmdBench(Options &opts) {
  if (opts.positional.size() == 1 && opts.positional[0] == "gemm")
    return benchGemm(opts);
  if (opts.positional.size() != 1 || opts.positional[0] != "attention")
    throw UsageError("kiln bench: .attention. or 'gemm'");
  if (opts.flag("backward"))
    return benchAttentionBackward(opts);
  bool quick = opts.flag("quick");
  bool ragged = opts.flag("ragged");
  std::string dtypes = opts.string("dtypes", "bf16");
  std::string jsonPath = opts.string("json", "");
  int reps = positive32(opts, "reps", 30),
      batch = positive32(opts, "batch", 10);
  // B = tokens / N: the papers' 16k by default; another count compares two
  // N at one B (a ragged N against its neighbours, the work alone changing).
  const int64_t tokens = opts.integer("tokens", 16384, 1);
  // --seq-k M: every row attends to M keys (cross attention, chunked
  // prefill, decoding); --seqs then gives Nq.
  const int64_t seqK = opts.integer("seq-k", 0, 1);
  std::string onlyD = opts.string("head-dim", "");
  const std::string seqs = opts.string("seqs", "");
  const bool onlyCausal = causalOption(opts), // both: a usage error
      onlyNonCausal = opts.flag("non-causal");
  // --key-lengths random: each batch attends to a seeded random number of
  // keys in [1, Nk] (a KV cache's sequences); non-causal rows only, their
  // TFLOP/s counting the keys attended.
  const std::string lengthsOption = opts.string("key-lengths", "");
  if (!lengthsOption.empty() && lengthsOption != "random")
    throw UsageError("option --key-lengths: kiln bench takes `random`, got '" +
                     lengthsOption + "'");
  const bool keyLengths = !lengthsOption.empty();
  kernels::AttentionConfig cfg;
  forwardConfigFlags(opts, cfg);
  // Query heads per K/V head (grouped-query attention; H = 2048 / D).
  const int64_t group = benchGroupOption(opts, onlyD);
  // More configs (';' between them), each row timed under every one with
  // their samples in turn (one process: no drift of clocks or placement
  // between them).
  const std::vector<kernels::AttentionConfig> against =
      againstConfigs(cfg, opts.string("against", ""));
  std::string pipeline = opts.string("llvm-pipeline", "kiln");
  // Shapes compiled in, run-time, both (each row twice, back to back), or
  // the default's.
  const std::string shapes = opts.string("shapes", "default");
  std::vector<int> shapeModes = shapes == "static"    ? std::vector<int>{1}
                                : shapes == "runtime" ? std::vector<int>{0}
                                : shapes == "both"    ? std::vector<int>{1, 0}
                                : shapes == "default" ? std::vector<int>{-1}
                                                      : std::vector<int>{};
  if (shapeModes.empty())
    throw UsageError("option --shapes: '" + shapes +
                     "' is not default, static, runtime or both");
  // --shapes static|runtime|both sets every config's; under the default
  // each config keeps its own (--static-shapes, --against static-shapes=1).
  bool someStatic = cfg.staticShapes >= 0;
  for (const kernels::AttentionConfig &a : against)
    someStatic |= a.staticShapes >= 0;
  if (shapes != "default" && someStatic)
    throw UsageError("option --shapes " + shapes +
                     " sets every config's shapes: leave out --static-shapes "
                     "and --against's static-shapes");
  opts.checkAllUsed();
  std::string why;
  if (!cuda::available(&why))
    throw Error("kiln bench: no GPU here (" + why + ")");
  const cuda::DeviceInfo &dev = cuda::device();
  fmt::print(
      "# kiln bench attention on {} ({}, {} SMs, {:.0f} GB/s DRAM), blockM={} "
      "blockN={} warps={} stages={} (0: the head dim's default), median of {} "
      "samples of {} back-to-back launches\n",
      dev.name, dev.arch(), dev.smCount, dev.memoryBandwidth / 1e9, cfg.blockM,
      cfg.blockN, cfg.warps, cfg.stages, reps, batch);
  fmt::print("dtype,B,H,N,D,causal,shapes,ms,tflops,registers,spill_bytes,"
             "smem{}\n",
             seqK ? ",Nk" : "");

  const std::vector<int64_t> ns = benchSequenceLengths(
      seqs.empty() ? std::vector<int64_t>{} : positiveList(seqs, "seqs"), quick,
      ragged);
  llvm::json::Array rows;
  std::stringstream ds(dtypes);
  for (std::string dn; std::getline(ds, dn, ',');) {
    auto dtype = parseDType(dn);
    if (!dtype || (*dtype != DType::bf16 && *dtype != DType::f16))
      throw UsageError("kiln bench: --dtypes takes bf16 and fp16, got " + dn);
    for (int64_t D : {64, 128}) {
      if (!onlyD.empty() && std::to_string(D) != onlyD)
        continue;
      for (int64_t N : ns)
        for (bool causal : {false, true})
          for (int mode : shapeModes) {
            if ((onlyCausal && !causal) || (onlyNonCausal && causal) ||
                (keyLengths && causal))
              continue;
            int64_t B = std::max<int64_t>(1, tokens / N), H = 2048 / D,
                    Hk = H / group;
            const int64_t Nk = seqK ? seqK : N;
            kernels::AttentionShape s{B, H, N, Nk, D, causal, *dtype, 0, Hk};
            s.keyLengths = keyLengths;
            size_t n = size_t(B * H * N * D), nk = size_t(B * Hk * Nk * D);
            // Grouped heads' short non-causal queries as the library runs
            // them: the Hk-head problem of G·N rows on the same tensors.
            const std::optional<kernels::AttentionShape> packed =
                kernels::groupedRowsShape(s);
            const bool groupedRows = packed.has_value();
            if (groupedRows)
              s = *packed;
            uint64_t seed = uint64_t(N * 1000 + D + causal);
            cuda::Buffer q = randomDevice(*dtype, n, seed),
                         k = randomDevice(*dtype, nk, seed + 1),
                         v = randomDevice(*dtype, nk, seed + 2), o(n * 2),
                         lse(size_t(B * H * N) * 4);
            const int64_t Hq = s.heads, Nq = s.seqQ;
            std::vector<int64_t> shape{B, Hq, Nq, D},
                st{Hq * Nq * D, Nq * D, D, 1}, kShape{B, Hk, Nk, D},
                kSt{Hk * Nk * D, Nk * D, D, 1};
            std::map<std::string, TensorRef> refs{
                {"Q", {q.data(), *dtype, shape, st}},
                {"K", {k.data(), *dtype, kShape, kSt}},
                {"V", {v.data(), *dtype, kShape, kSt}},
                {"O", {o.data(), *dtype, shape, st}},
                {"LSE",
                 {lse.data(), DType::f32, {B, Hq, Nq}, {Hq * Nq, Nq, 1}}}};
            // Keys attended per query, summed over the batch.
            double attended = double(B) * double(attendedPairs(N, Nk, causal));
            cuda::Buffer lengths(size_t(B) * 4);
            if (keyLengths) {
              std::vector<int32_t> host;
              attended = 0;
              for (int64_t n : randomKeyLengths(B, Nk, seed)) {
                host.push_back(int32_t(n));
                attended += double(N) * double(n);
              }
              lengths.upload(host.data(), host.size() * 4);
              refs["KLengths"] = {lengths.data(), DType::i32, {B}, {1}};
            }
            // A config's kernels (two with split keys: the split one and
            // the combine), launched back to back as one sample.
            struct Timed {
              std::string name;
              std::vector<std::unique_ptr<GpuKernel>> g;
              std::vector<CompiledKernel> c;
              std::vector<std::vector<ArgValue>> args;
              std::vector<float> samples;
              std::vector<cuda::Buffer> workspace;
              void launch() {
                for (size_t i = 0; i < g.size(); ++i)
                  g[i]->launch(args[i]);
              }
            };
            std::vector<Timed> timed;
            for (size_t which = 0; which <= against.size(); ++which) {
              kernels::AttentionConfig modeCfg =
                  which ? against[which - 1] : cfg;
              if (mode >= 0)
                modeCfg.staticShapes = mode;
              std::string name =
                  kernels::resolveConfig(s, modeCfg).staticShapes > 0
                      ? "static"
                      : "runtime";
              if (which)
                name += "+" + againstLabel(which);
              Timed t{name, {}, {}, {}, {}, {}};
              std::map<std::string, TensorRef> mine = refs;
              // Key ranges: --split-keys, else the library's default; so
              // decoding's small tiles.
              modeCfg = kernels::launchConfig(s, modeCfg, dev.smCount,
                                              dev.memoryBandwidth);
              if (groupedRows)
                t.name += "+rows";
              if (keyLengths)
                t.name += "+lengths";
              if (modeCfg.smallTiles > 0)
                t.name += "+small";
              if (const int64_t S = modeCfg.splitKeys; S > 1) {
                t.name += fmt::format("+split{}", S);
                kernels::SplitKeysWorkspace ws(s, S);
                t.workspace.emplace_back(size_t(ws.elements) * 4);
                mine.merge(ws.refs(t.workspace.back().data()));
              }
              for (const Kernel &kernel :
                   kernels::attentionForwardKernels(s, modeCfg)) {
                std::map<std::string, TensorRef> in = kernel.tensorsIn(mine);
                GpuTarget target = variantTarget(
                    kernel, in, {},
                    GpuTarget{.arch = dev.arch(), .llvmPipeline = pipeline});
                t.c.push_back(compileForGpu(kernel, target));
                t.g.push_back(std::make_unique<GpuKernel>(t.c.back().spec()));
                t.args.push_back(kernel.bind(in));
              }
              timed.push_back(std::move(t));
            }
            // Samples in turn (one of each config, then again).
            for (Timed &t : timed)
              backToBackMs([&] { t.launch(); }, 1, batch);
            for (int i = 0; i < reps; ++i)
              for (Timed &t : timed)
                cuda::backToBackMs([&] { t.launch(); }, 1, batch, &t.samples);
            for (Timed &t : timed) {
              std::sort(t.samples.begin(), t.samples.end());
              double ms = t.samples[t.samples.size() / 2];
              double tflops = 4.0 * attended * H * D / ms / 1e9;
              cuda::FunctionAttributes a = t.g[0]->attributes();
              fmt::print("{},{},{},{},{},{},{},{:.3f},{:.1f},{},{},{}{}\n", dn,
                         B, H, N, D, int(causal), t.name, ms, tflops,
                         a.registers, a.localBytes, t.c[0].sharedBytes,
                         seqK ? fmt::format(",{}", Nk) : "");
              std::fflush(stdout);
              llvm::json::Object row =
                  attentionRow(*dtype, B, H, N, D, causal, ms, tflops);
              row["shapes"] = t.name;
              if (seqK)
                row["Nk"] = Nk;
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
