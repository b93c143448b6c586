//===- Problems.cpp - the kernels kiln run, report and bench build --------===//
//
// Attention, GEMM and softmax as the command line builds them from its
// options: the Kernel, its tensors (random, seeded) and references, and
// what the report says of their layouts (BackwardProblem.cpp: attention's
// backward).
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace kiln::cli {

/// GPU 0's SMs and DRAM GB/s, 0 without a GPU.
static int64_t gpuSmCount() {
  std::string why;
  return cuda::available(&why) ? cuda::device(0).smCount : 0;
}
static int64_t gpuMemoryGBps() {
  std::string why;
  return cuda::available(&why)
             ? int64_t(cuda::device(0).memoryBandwidth / 1e9 + 0.5)
             : 0;
}

static Problem attentionProblem(Options &opts, bool withData) {
  kernels::AttentionShape s = attentionShapeOptions(opts);
  const std::vector<int64_t> keyLengths =
      keyLengthsOption(opts, s, uint64_t(opts.integer("seed", 1)));
  std::string layout = layoutOption(opts);
  // Grouped heads' short non-causal queries as the library runs them.
  const std::string grouped = groupedRowsOption(
      opts, s, layout, opts.integer("lse-stride", s.seqQ) == s.seqQ);
  // First what the GPU's size decides, as the library decides it from the
  // options given (launchConfig): the key ranges (--split-keys, else the
  // default for --sms SMs, the GPU's where there is one; none without) and
  // whether decoding's small tiles apply (by --memory-gbps too).
  const int64_t sms = opts.integer("sms", gpuSmCount());
  if (sms < 0)
    throw UsageError("option --sms must be >= 0, got " + std::to_string(sms));
  const int64_t memoryGBps = opts.integer("memory-gbps", gpuMemoryGBps(), 0);
  kernels::AttentionConfig given;
  forwardConfigFlags(opts, given);
  const bool defaultSplit = given.splitKeys < 0,
             defaultSmall = given.smallTiles < 0;
  given = kernels::launchConfig(s, given, sms, double(memoryGBps) * 1e9);
  const int ranges = given.splitKeys;
  // The schedule's defaults depend on the choices given: resolved once for
  // the tensor-core path given (and small tiles or not), whose tile, stages,
  // thread-id and copy address choices (a tuned entry's, where one applies) are
  // the options' defaults; the rest stay unset unless given and are decided
  // again with what the options set (warps on the tile, the Hopper schedule on
  // the tile and stages).
  kernels::AttentionConfig c;
  c.wgmma = given.wgmma;
  c.smallTiles = given.smallTiles;
  c.splitKeys = ranges;
  const kernels::AttentionConfig resolved = kernels::resolveConfig(s, c);
  c.blockM = resolved.blockM;
  c.blockN = resolved.blockN;
  c.stages = resolved.stages;
  c.wgmma = resolved.wgmma;
  c.reloadThreadIds = resolved.reloadThreadIds;
  c.copyAddressesPerRegister = resolved.copyAddressesPerRegister;
  forwardConfigFlags(opts, c);
  c.splitKeys = ranges;
  c = kernels::resolveConfig(s, c);
  uint64_t seed = uint64_t(opts.integer("seed", 1));

  // LSE's row stride (per batch and head): --lse-stride, else seqQ.
  const int64_t lseStride =
      grouped.empty() ? opts.integer("lse-stride", s.seqQ) : s.seqQ;
  if (lseStride < s.seqQ)
    throw UsageError("option --lse-stride must be >= the sequence length " +
                     std::to_string(s.seqQ) + ", got " +
                     std::to_string(lseStride));
  // What bind refuses, refused for kiln report and ptx too (and before
  // H * S could overflow).
  if (lseStride > std::numeric_limits<int32_t>::max() / s.heads)
    throw UsageError("option --lse-stride: LSE's stride per batch, H*S = " +
                     std::to_string(s.heads) + "*" + std::to_string(lseStride) +
                     ", does not fit kiln's 32-bit index width");
  const bool bshd = layout == "bshd";
  const std::vector<int64_t> qShape{s.batch, s.heads, s.seqQ, s.headDim},
      kShape{s.batch, s.kvHeads, s.seqK, s.headDim},
      lShape{s.batch, s.heads, s.seqQ},
      qStrides = attentionStrides(qShape, bshd),
      kStrides = attentionStrides(kShape, bshd),
      lStrides{s.heads * lseStride, lseStride, 1};

  Problem p;
  if (c.splitKeys > 1) {
    // Two kernels (kiln run launches both); --part picks the one the
    // inspect commands compile.
    const std::string part = opts.string("part", "split");
    p.sequence = kernels::attentionForwardKernels(s, c);
    for (const Kernel &k : p.sequence)
      if (k.name() == "attention_fwd_" + part)
        p.kernel = k;
    if (!p.kernel)
      throw UsageError("option --part: '" + part + "' is not split or combine");
  } else
    p.kernel = kernels::attentionForward(s, c);
  p.dims = {{"B", s.batch}, {"H", s.heads}, {"Nq", s.seqQ}, {"Nk", s.seqK}};
  for (const char *name : {"Q", "O"})
    noteLayout(p, name, s.dtype, qStrides);
  for (const char *name : {"K", "V"})
    noteLayout(p, name, s.dtype, kStrides);
  noteLayout(p, "LSE", DType::f32, lStrides);
  if (s.keyLengths)
    noteLayout(p, "KLengths", DType::i32, {1});
  const std::vector<kernels::WorkspaceTensor> workspace =
      c.splitKeys > 1 ? kernels::SplitKeysWorkspace(s, c.splitKeys).tensors
                      : std::vector<kernels::WorkspaceTensor>{};
  for (const kernels::WorkspaceTensor &w : workspace)
    noteLayout(p, w.name, w.dtype, contiguousStrides(w.shape));
  p.summary = fmt::format(
      "attention B={} H={}{} Nq={} Nk={} D={} {} {} layout={} "
      "blockM={} blockN={}{} warps={} stages={}{}{}{}{}",
      s.batch, s.heads,
      s.kvHeads != s.heads ? fmt::format(" kv-heads={}", s.kvHeads) : "",
      s.seqQ, s.seqK, s.headDim, s.causal ? "causal" : "non-causal",
      dtypeName(s.dtype), layout, c.blockM, c.blockN,
      // The narrow end loop exists for run-time Nk of ragged key blocks.
      // The masked block (ragged end or diagonal) before the others.
      // (The split kernel has one loop of its own over each range.)
      c.splitKeys > 1                 ? std::string()
      : kernels::raggedEndFirst(s, c) ? std::string(" ragged-end=first")
      : kernels::diagonalFirst(s, c)  ? std::string(" diagonal-first")
      : !s.causal && c.staticShapes <= 0 && s.seqK % c.blockN != 0 &&
              (c.blockNRaggedEnd < c.blockN || c.raggedEndInLoop > 0)
          ? fmt::format(" ragged-end={}{}", c.blockNRaggedEnd,
                        c.raggedEndInLoop > 0 ? "+loop" : "")
      // Causal row blocks that end at Nq when it is 1 to N rows past a
      // multiple of blockM (kernels with the narrow step for it: "+diagonal"
      // where it joins the diagonal's first step).
      : kernels::rowsAlignedToEnd(s, c)
          ? fmt::format(" rows-to-end={}{}", c.blockNRaggedEnd,
                        kernels::narrowInDiagonal(s, c) ? "+diagonal" : "")
          : std::string(),
      c.warps, c.stages,
      c.wgmma > 0 ? (c.tma > 0 ? " wgmma tma" : " wgmma")
      : c.smallTiles > 0
          ? " small-tiles" + (!defaultSmall
                                  ? ""
                                  : fmt::format(" (default on {} SMs, {} GB/s)",
                                                sms, memoryGBps))
          : "",
      scheduleSwitches(c.warpSpecialize, c.pingpong, c.overlap,
                       int(c.minBlocksPerSM), c.persistent, c.dynamicTiles,
                       s.causal ? c.longestFirstGlobally : 0, c.headGroup),
      // A warpgroup whose rows all lie past Nq skips the key loops' work
      // (two warpgroups or more; the report says which loops).
      c.skipDeadRows > 0 && c.warps >= 8 ? " dead-row-skip" : "",
      c.oneShotLoads > 0 && kernels::oneShotLoadsApply(c) ? " one-shot-loads"
                                                          : "");
  p.summary += grouped;
  if (s.keyLengths) {
    std::string list;
    for (size_t b = 0; b < keyLengths.size() && b < 8; ++b)
      list += (b ? "," : "") + std::to_string(keyLengths[b]);
    p.summary += " key-lengths=" + list + (keyLengths.size() > 8 ? ",..." : "");
  }
  if (c.splitKeys > 1) {
    p.summary += fmt::format(
        " split-keys={}{} ({})", c.splitKeys,
        defaultSplit ? fmt::format(" (default on {} SMs)", sms) : "",
        p.kernel->name());
    // Only the tensors of the inspected kernel count for its variant.
    std::erase_if(p.unaligned, [&](const std::string &name) {
      for (const TensorParamInfo &t : p.kernel->tensors())
        if (t.name == name)
          return false;
      return true;
    });
  }
  if (!withData)
    return p;
  auto q = randomTensor(s.dtype, qShape, seed, qStrides);
  auto k = randomTensor(s.dtype, kShape, seed + 1, kStrides);
  auto v = randomTensor(s.dtype, kShape, seed + 2, kStrides);
  poisonPastKeyLengths(s, keyLengths, k, v);
  auto o = randomTensor(s.dtype, qShape, 0, qStrides);
  HostTensor lse(DType::f32, lShape, lStrides);
  o.poison();
  lse.poison();
  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, k, v, oRef, lseRef, keyLengths);
  if (s.keyLengths) {
    HostTensor lengths(DType::i32, {s.batch});
    for (int64_t b = 0; b < s.batch; ++b)
      lengths.flatSet(b, double(keyLengths[size_t(b)]));
    p.tensors.emplace("KLengths", std::move(lengths));
  }
  p.tensors.emplace("Q", std::move(q));
  p.tensors.emplace("K", std::move(k));
  p.tensors.emplace("V", std::move(v));
  p.tensors.emplace("O", std::move(o));
  p.tensors.emplace("LSE", std::move(lse));
  for (const kernels::WorkspaceTensor &w : workspace) {
    HostTensor t(w.dtype, w.shape); // poisoned: the split kernel writes it
    t.poison();
    p.tensors.emplace(w.name, std::move(t));
  }
  p.expected.emplace_back("O", std::move(oRef));
  p.expected.emplace_back("LSE", std::move(lseRef));
  return p;
}

kernels::GemmActivation activationOption(Options &opts) {
  const std::string name = opts.string("activation", "none");
  std::optional<kernels::GemmActivation> a = kernels::parseGemmActivation(name);
  if (!a)
    throw UsageError("option --activation: '" + name +
                     "' is not none, relu or gelu");
  return *a;
}

static Problem gemmProblem(Options &opts, bool withData) {
  kernels::GemmShape s;
  s.M = positive(opts, "m", 256);
  s.N = positive(opts, "n", 256);
  s.K = positive(opts, "k", 256);
  s.dtype = dtypeOption(opts, "bf16");
  s.outDtype = dtypeOption(opts, "fp32", "out-dtype");
  s.bias = opts.flag("bias");
  s.activation = activationOption(opts);
  s.bTransposed = opts.flag("b-transposed");
  s.aTransposed = opts.flag("a-transposed");
  s.preActivation = opts.flag("pre-activation");
  s.splitPartials = opts.flag("split-partials");
  kernels::GemmConfig c;
  c.blockM = positive(opts, "block-m", c.blockM);
  c.blockN = positive(opts, "block-n", c.blockN);
  c.blockK = positive(opts, "block-k", c.blockK);
  c.warps = opts.int32("warps", c.warps);
  c.stages = opts.int32("stages", c.stages);
  c.wgmma = opts.onOff("wgmma", c.wgmma);
  c.tma = opts.onOff("tma", c.tma);
  c.warpSpecialize = opts.onOff("warp-specialize", c.warpSpecialize);
  c.tmaStore = opts.onOff("tma-store", c.tmaStore);
  c.persistent = opts.onOff("persistent", c.persistent);
  c.groupM = opts.integer("group-m", c.groupM);
  c.minBlocksPerSM = opts.int32("min-blocks-per-sm", c.minBlocksPerSM);
  c.staticShapes = opts.onOff("static-shapes", c.staticShapes);
  c.splitK = positive(opts, "split-k", c.splitK);
  uint64_t seed = uint64_t(opts.integer("seed", 1));
  Problem p;
  p.kernel = kernels::gemm(s, c);
  p.dims = {{"M", s.M}, {"N", s.N}, {"K", s.K}};
  if (s.aTransposed)
    noteLayout(p, "AT", s.dtype, {s.M, 1});
  else
    noteLayout(p, "A", s.dtype, {s.K, 1});
  if (s.bTransposed)
    noteLayout(p, "BT", s.dtype, {s.K, 1});
  else
    noteLayout(p, "B", s.dtype, {s.N, 1});
  if (s.splitPartials)
    noteLayout(p, "C", s.outDtype, {s.M * s.N, s.N, 1});
  else
    noteLayout(p, "C", s.outDtype, {s.N, 1});
  if (s.bias)
    noteLayout(p, "Bias", s.dtype, {1});
  p.summary = fmt::format(
      "gemm M={} N={} K={}{}{} {} -> {}{}{} blockM={} blockN={} blockK={} "
      "warps={} stages={}{}{}",
      s.M, s.N, s.K, s.aTransposed ? " (A as AT, K x M)" : "",
      s.bTransposed ? " (B as BT, N x K)" : "", dtypeName(s.dtype),
      dtypeName(s.outDtype), s.bias ? " +bias" : "",
      s.activation != kernels::GemmActivation::None
          ? std::string(" ") + kernels::gemmActivationName(s.activation)
          : "",
      c.blockM, c.blockN, c.blockK, c.warps, c.stages, c.wgmma ? " wgmma" : "",
      c.splitK > 1 ? fmt::format(" split-k={}{}", c.splitK,
                                 s.splitPartials ? " (partials)" : "")
                   : "");
  if (!withData)
    return p;
  auto a = randomTensor(s.dtype, {s.M, s.K}, seed);
  auto b = randomTensor(s.dtype, {s.K, s.N}, seed + 1);
  if (s.splitPartials) {
    // Each range's product apart: range r's K steps are the kernel's
    // (whole blocks, the last range short or empty), against fp64.
    HostTensor parts(s.outDtype, {c.splitK, s.M, s.N}),
        ref(DType::f32, {c.splitK, s.M, s.N});
    parts.poison();
    const int64_t steps = (s.K + c.blockK - 1) / c.blockK,
                  perRange = (steps + c.splitK - 1) / c.splitK * c.blockK;
    for (int64_t r = 0; r < c.splitK; ++r)
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = 0; n < s.N; ++n) {
          double sum = 0;
          for (int64_t k = r * perRange; k < std::min((r + 1) * perRange, s.K);
               ++k)
            sum += a.flatAt(m * s.K + k) * b.flatAt(k * s.N + n);
          ref.flatSet((r * s.M + m) * s.N + n, sum);
        }
    p.tensors.emplace(s.aTransposed ? "AT" : "A",
                      s.aTransposed ? kernels::transposeMatrix(a) : a);
    p.tensors.emplace(s.bTransposed ? "BT" : "B",
                      s.bTransposed ? kernels::transposeMatrix(b) : b);
    p.tensors.emplace("C", std::move(parts));
    p.expected.emplace_back("C", std::move(ref));
    return p;
  }
  HostTensor cOut(s.outDtype, {s.M, s.N}), cRef(DType::f32, {s.M, s.N});
  if (c.splitK == 1) // split-K adds into C: it starts at zero
    cOut.poison();
  std::optional<HostTensor> bias;
  if (s.bias)
    bias = randomTensor(s.dtype, {s.N}, seed + 2);
  kernels::gemmReference(a, b, cRef, bias ? &*bias : nullptr, s.activation);
  if (s.preActivation) { // Z: the same without the activation
    HostTensor zOut(s.outDtype, {s.M, s.N}), zRef(DType::f32, {s.M, s.N});
    zOut.poison();
    kernels::gemmReference(a, b, zRef, bias ? &*bias : nullptr);
    p.tensors.emplace("Z", std::move(zOut));
    p.expected.emplace_back("Z", std::move(zRef));
  }
  if (bias)
    p.tensors.emplace("Bias", std::move(*bias));
  if (s.aTransposed)
    p.tensors.emplace("AT", kernels::transposeMatrix(a));
  else
    p.tensors.emplace("A", std::move(a));
  if (s.bTransposed)
    p.tensors.emplace("BT", kernels::transposeMatrix(b));
  else
    p.tensors.emplace("B", std::move(b));
  p.tensors.emplace("C", std::move(cOut));
  p.expected.emplace_back("C", std::move(cRef));
  return p;
}

static Problem softmaxProblem(Options &opts, bool withData) {
  kernels::SoftmaxShape s;
  s.rows = positive(opts, "rows", 256);
  s.cols = positive(opts, "cols", 1000);
  s.dtype = dtypeOption(opts, "fp32");
  kernels::SoftmaxConfig c;
  c.blockRows = positive(opts, "block-rows", c.blockRows);
  c.blockCols = positive(opts, "block-cols", c.blockCols);
  c.staticShapes = opts.onOff("static-shapes", c.staticShapes);
  uint64_t seed = uint64_t(opts.integer("seed", 1));
  Problem p;
  p.kernel = kernels::softmax(s, c);
  p.dims = {{"rows", s.rows}, {"cols", s.cols}};
  noteLayout(p, "X", s.dtype, {s.cols, 1});
  noteLayout(p, "Y", s.dtype, {s.cols, 1});
  p.summary =
      fmt::format("softmax rows={} cols={} {} blockRows={} blockCols={}",
                  s.rows, s.cols, dtypeName(s.dtype), c.blockRows, c.blockCols);
  if (!withData)
    return p;
  HostTensor x(s.dtype, {s.rows, s.cols});
  x.fillRandom(seed, -4.0, 4.0);
  HostTensor y(s.dtype, {s.rows, s.cols}), yRef(DType::f32, {s.rows, s.cols});
  y.poison();
  kernels::softmaxReference(x, yRef);
  p.tensors.emplace("X", std::move(x));
  p.tensors.emplace("Y", std::move(y));
  p.expected.emplace_back("Y", std::move(yRef));
  return p;
}

Problem makeProblem(const std::string &kernel, Options &opts, bool withData) {
  if (kernel == "attention")
    return attentionProblem(opts, withData);
  if (kernel == "attention-backward")
    return attentionBackwardProblem(opts, withData);
  if (kernel == "gemm")
    return gemmProblem(opts, withData);
  if (kernel == "softmax")
    return softmaxProblem(opts, withData);
  throw UsageError("unknown kernel '" + kernel +
                   "' (attention, attention-backward, gemm, softmax)");
}

} // namespace kiln::cli
