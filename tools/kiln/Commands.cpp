//===- Commands.cpp - the kiln command line's kernels and runs ------------===//
#include "Commands.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Launch.h"

#include <fmt/core.h>

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kiln::cli {

int64_t Options::integer(const std::string &name, int64_t fallback,
                         int64_t lo, int64_t hi) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end())
    return fallback;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end)
    throw UsageError("option --" + name + ": '" + it->second +
                     "' is not an integer");
  if (errno == ERANGE || v < lo || v > hi)
    throw UsageError("option --" + name + ": " + it->second +
                     " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

int Options::int32(const std::string &name, int fallback) {
  return int(integer(name, fallback, std::numeric_limits<int>::min(),
                     std::numeric_limits<int>::max()));
}

std::string Options::string(const std::string &name,
                            const std::string &fallback) {
  used_.insert(name);
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

bool Options::flag(const std::string &name) {
  used_.insert(name);
  auto it = values_.find(name);
  return it != values_.end() && it->second != "0" && it->second != "false";
}

void Options::checkAllUsed() const {
  for (auto &[name, value] : values_)
    if (!used_.count(name))
      throw UsageError("unknown option --" + name + " for this command");
}

DType dtypeOption(Options &opts, const char *fallback, const char *option) {
  std::string name = opts.string(option, fallback);
  auto t = parseDType(name);
  if (!t || !isFloat(*t))
    throw UsageError(std::string("option --") + option + ": '" + name +
                     "' is not bf16, fp16 or fp32");
  return *t;
}

cuda::Buffer randomDevice(DType t, size_t n, uint64_t seed) {
  cuda::Buffer b(n * 2);
  std::vector<uint16_t> host(std::min<size_t>(n, size_t(1) << 24));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&x] { // in (0, 1]
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return float((x >> 40) + 1) / float(1 << 24);
  };
  for (size_t done = 0; done < n; done += host.size()) {
    size_t m = std::min(host.size(), n - done);
    for (size_t i = 0; i < m; i += 2) {
      // Box-Muller: two standard normal values from two uniform ones.
      float r = std::sqrt(-2.f * std::log(uniform())),
            a = 6.2831853f * uniform();
      for (size_t j = 0; j < 2 && i + j < m; ++j) {
        float f = r * (j ? std::sin(a) : std::cos(a));
        host[i + j] = t == DType::bf16 ? floatToBf16(f) : floatToHalf(f);
      }
    }
    b.upload(host.data(), m * 2, done * 2);
  }
  return b;
}

double backToBackMs(const std::function<void()> &calls, int samples,
                    int batch) {
  for (int i = 0; i < 5; ++i)
    calls();
  cuda::synchronize();
  return cuda::backToBackMs(calls, samples, batch);
}

int64_t positive(Options &opts, const std::string &name, int64_t fallback,
                 int64_t hi) {
  int64_t v =
      opts.integer(name, fallback, std::numeric_limits<int64_t>::min(), hi);
  if (v < 1)
    throw UsageError("option --" + name + " must be >= 1, got " +
                     std::to_string(v));
  return v;
}

std::vector<std::string> commaList(const std::string &text) {
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).split(items, ',');
  return std::vector<std::string>(items.begin(), items.end());
}

std::vector<int64_t> positiveList(const std::string &text,
                                  const std::string &option) {
  std::vector<int64_t> v;
  try {
    v = splitInts(text);
  } catch (const std::logic_error &) {
    v.clear();
  }
  if (v.empty() || *std::min_element(v.begin(), v.end()) < 1)
    throw UsageError("option --" + option + ": '" + text +
                     "' is not a comma-separated list of integers >= 1");
  return v;
}

int positive32(Options &opts, const std::string &name, int fallback) {
  return int(positive(opts, name, fallback, std::numeric_limits<int>::max()));
}

static std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size() - 1; i-- > 0;)
    st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::vector<int64_t> attentionStrides(const std::vector<int64_t> &s,
                                      bool bshd) {
  return bshd ? std::vector<int64_t>{s[2] * s[1] * s[3], s[3], s[1] * s[3], 1}
              : contiguousStrides(s);
}

// Device memory is 256-byte aligned: the strides decide.
void noteLayout(Problem &p, const std::string &name, DType t,
                const std::vector<int64_t> &strides) {
  if (!stridesAligned(t, strides)) {
    p.unaligned.push_back(name);
    std::sort(p.unaligned.begin(), p.unaligned.end());
  }
}

HostTensor randomTensor(DType t, std::vector<int64_t> shape, uint64_t seed,
                        std::vector<int64_t> strides) {
  HostTensor x =
      strides.empty() ? HostTensor(t, shape) : HostTensor(t, shape, strides);
  x.fillRandom(seed);
  return x;
}

bool causalOption(Options &opts) {
  const bool causal = opts.flag("causal");
  if (opts.flag("non-causal") && causal)
    throw UsageError("--causal and --non-causal: give one of them");
  return causal;
}

kernels::AttentionShape attentionShapeOptions(Options &opts) {
  kernels::AttentionShape s;
  s.batch = positive(opts, "batch", 1);
  s.heads = positive(opts, "heads", 2);
  s.seqQ = positive(opts, "seq", 256);
  s.seqK = positive(opts, "seq-k", s.seqQ);
  s.headDim = positive(opts, "head-dim", 64);
  s.causal = causalOption(opts);
  s.dtype = dtypeOption(opts, "bf16");
  return s;
}

std::vector<int64_t> benchSequenceLengths(std::vector<int64_t> ns, bool quick,
                                          bool ragged) {
  if (ns.empty())
    ns = quick ? std::vector<int64_t>{1024, 4096}
               : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384};
  if (ragged)
    for (int64_t n : {1000, 1023, 2049, 3001, 4097, 8191})
      for (int64_t m : {n, (n + 64) / 128 * 128})
        if (std::find(ns.begin(), ns.end(), m) == ns.end())
          ns.push_back(m);
  std::sort(ns.begin(), ns.end());
  return ns;
}

std::string scheduleSwitches(int warpSpecialize, int pingpong, int overlap,
                             int minBlocksPerSM, int persistent,
                             int dynamicTiles, int longestFirst,
                             int64_t headGroup) {
  std::string out;
  if (warpSpecialize > 0)
    out += " producer";
  if (pingpong > 0)
    out += " pingpong";
  if (overlap > 0)
    out += " overlap";
  if (minBlocksPerSM > 0)
    out += fmt::format(" min-blocks-per-sm={}", minBlocksPerSM);
  if (persistent > 0)
    out += dynamicTiles > 0 ? " persistent (dynamic tiles)" : " persistent";
  if (longestFirst > 0)
    out += headGroup > 0
               ? fmt::format(" longest-first (groups of {} heads)", headGroup)
               : " longest-first";
  return out;
}

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
  std::string layout = opts.string("layout", "bhsd");
  if (layout != "bhsd" && layout != "bshd")
    throw UsageError("option --layout: '" + layout + "' is not bhsd or bshd");
  uint64_t seed = uint64_t(opts.integer("seed", 1));

  // LSE's row stride (per batch and head): --lse-stride, else seqQ.
  const int64_t lseStride = opts.integer("lse-stride", s.seqQ);
  if (lseStride < s.seqQ)
    throw UsageError("option --lse-stride must be >= the sequence length " +
                std::to_string(s.seqQ) + ", got " + std::to_string(lseStride));
  // What bind refuses, refused for kiln report and ptx too (and before
  // H * S could overflow).
  if (lseStride > std::numeric_limits<int32_t>::max() / s.heads)
    throw UsageError("option --lse-stride: LSE's stride per batch, H*S = " +
                     std::to_string(s.heads) + "*" + std::to_string(lseStride) +
                     ", does not fit kiln's 32-bit index width");
  const bool bshd = layout == "bshd";
  const std::vector<int64_t> qShape{s.batch, s.heads, s.seqQ, s.headDim},
      kShape{s.batch, s.heads, s.seqK, s.headDim},
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
  const std::vector<kernels::WorkspaceTensor> workspace =
      c.splitKeys > 1 ? kernels::SplitKeysWorkspace(s, c.splitKeys).tensors
                      : std::vector<kernels::WorkspaceTensor>{};
  for (const kernels::WorkspaceTensor &w : workspace)
    noteLayout(p, w.name, w.dtype, contiguousStrides(w.shape));
  p.summary = fmt::format(
      "attention B={} H={} Nq={} Nk={} D={} {} {} layout={} "
      "blockM={} blockN={}{} warps={} stages={}{}{}{}{}",
      s.batch, s.heads, s.seqQ, s.seqK, s.headDim,
      s.causal ? "causal" : "non-causal", dtypeName(s.dtype), layout, c.blockM,
      c.blockN,
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
  auto o = randomTensor(s.dtype, qShape, 0, qStrides);
  HostTensor lse(DType::f32, lShape, lStrides);
  o.poison();
  lse.poison();
  HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
  kernels::attentionReference(s, q, k, v, oRef, lseRef);
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
  noteLayout(p, "C", s.outDtype, {s.N, 1});
  if (s.bias)
    noteLayout(p, "Bias", s.dtype, {1});
  p.summary = fmt::format(
      "gemm M={} N={} K={}{}{} {} -> {}{}{} blockM={} blockN={} blockK={} "
      "warps={} stages={}{}",
      s.M, s.N, s.K, s.aTransposed ? " (A as AT, K x M)" : "",
      s.bTransposed ? " (B as BT, N x K)" : "", dtypeName(s.dtype),
      dtypeName(s.outDtype), s.bias ? " +bias" : "",
      s.activation != kernels::GemmActivation::None
          ? std::string(" ") + kernels::gemmActivationName(s.activation)
          : "",
      c.blockM, c.blockN, c.blockK, c.warps, c.stages, c.wgmma ? " wgmma" : "");
  if (!withData)
    return p;
  auto a = randomTensor(s.dtype, {s.M, s.K}, seed);
  auto b = randomTensor(s.dtype, {s.K, s.N}, seed + 1);
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

std::string kernelName(Options &opts) {
  if (opts.positional.size() != 1)
    throw UsageError(
        "name one kernel: attention, attention-backward, gemm or softmax");
  return opts.positional[0];
}

std::map<std::string, TensorRef>
uploadTensors(std::map<std::string, HostTensor> &tensors,
              std::map<std::string, cuda::Buffer> &buffers) {
  std::map<std::string, TensorRef> refs;
  for (auto &[n, t] : tensors) {
    cuda::Buffer &buf = buffers[n] = cuda::Buffer(t.storageBytes());
    buf.upload(t.data(), t.storageBytes());
    refs[n] = t.ref();
    refs[n].data = buf.data();
  }
  return refs;
}

int cmdRun(Options &opts) {
  bool cpu = opts.flag("cpu");
  std::string tolText = opts.string("tolerance", "1e-2");
  char *end = nullptr;
  double tolerance = std::strtod(tolText.c_str(), &end);
  if (tolText.empty() || *end || !(tolerance > 0))
    throw UsageError("option --tolerance: '" + tolText +
                "' is not a positive number");
  std::string name = kernelName(opts);
  std::string why;
  if (!cpu && !cuda::available(&why))
    throw Error("kiln run: no GPU here (" + why +
                "); pass --cpu to run the CPU reference executor");
  Problem p = makeProblem(name, opts, /*withData=*/true);
  opts.checkAllUsed();
  if (p.sequence.empty())
    p.sequence.push_back(*p.kernel);
  std::map<std::string, TensorRef> hostRefs;
  for (auto &[n, t] : p.tensors)
    hostRefs[n] = t.ref();
  fmt::print("kiln run {}{}\n", cpu ? "--cpu " : "", p.summary);
  for (const Kernel &k : p.sequence) {
    auto grid = k.gridFor(k.bind(k.tensorsIn(hostRefs)));
    fmt::print("  {}: grid {}x{}x{} ({})\n", k.name(), grid[0], grid[1],
               grid[2], describeGrid(k.grid(), k.params()));
  }

  if (cpu) {
    auto t0 = std::chrono::steady_clock::now();
    for (const Kernel &k : p.sequence)
      runOnCpu(k, k.bind(k.tensorsIn(hostRefs)));
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    fmt::print("  CPU executor time {:.1f} ms\n", ms);
  } else {
    const cuda::DeviceInfo &dev = cuda::device();
    std::map<std::string, cuda::Buffer> buffers;
    // Outputs arrive NaN-poisoned.
    std::map<std::string, TensorRef> refs = uploadTensors(p.tensors, buffers);
    for (const Kernel &k : p.sequence) {
      std::map<std::string, TensorRef> mine = k.tensorsIn(refs);
      GpuTarget target =
          variantTarget(k, mine, {}, GpuTarget{.arch = dev.arch()});
      const CompiledKernel &c = *compileCached(k, target);
      GpuKernel &gpu = *jitKernel(k, target);
      fmt::print("  {}: {}\n", k.name(), tensorSpecialisation(c));
      gpu.launch(k.bind(mine));
      cuda::synchronize();
      cuda::FunctionAttributes a = gpu.attributes();
      fmt::print("  {} on {}: {} threads, {} registers, {} bytes shared, {} "
                 "bytes local (spills)\n",
                 dev.arch(), dev.name, c.threads, a.registers, c.sharedBytes,
                 a.localBytes);
      if (c.persistent)
        fmt::print("  persistent: launched on {} CTAs\n", gpu.launchGrid()[0]);
    }
    for (auto &[n, ref] : p.expected)
      buffers[n].download(p.tensors.at(n).data(),
                          p.tensors.at(n).storageBytes());
  }

  bool ok = true;
  for (auto &[n, ref] : p.expected) {
    ErrorStats e = compareTensors(p.tensors.at(n), ref);
    bool pass = e.relative <= tolerance;
    ok &= pass;
    fmt::print("  {:<4} max abs error {:.3e}  relative error {:.3e}{}  {}\n", n,
               e.maxAbs, e.relative,
               e.nonFinite ? fmt::format("  ({} non-finite)", e.nonFinite) : "",
               pass ? "ok" : "FAIL");
  }
  fmt::print("{} (relative error against the fp64 reference {} {:.0e})\n",
             ok ? "PASS" : "FAIL", ok ? "<=" : "exceeds", tolerance);
  return ok ? 0 : 1;
}

} // namespace kiln::cli
