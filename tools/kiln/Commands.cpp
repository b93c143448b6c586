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
#include <random>

namespace kiln::cli {

int64_t Options::integer(const std::string &name, int64_t fallback, int64_t lo,
                         int64_t hi) {
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
  // K/V heads (grouped-query attention): a divisor of --heads, checked by
  // checkAttentionShape where the kernel is built.
  s.kvHeads = positive(opts, "kv-heads", s.heads);
  s.seqQ = positive(opts, "seq", 256);
  s.seqK = positive(opts, "seq-k", s.seqQ);
  s.headDim = positive(opts, "head-dim", 64);
  s.causal = causalOption(opts);
  s.dtype = dtypeOption(opts, "bf16");
  return s;
}

/// --key-lengths L,L,... (one per batch, each 0 to Nk) or `random` (seeded,
/// 1 to Nk): the keys each batch attends to, a KV cache's filled slots.
/// Sets s.keyLengths where given; the lengths (empty where not).
std::vector<int64_t> randomKeyLengths(int64_t batch, int64_t keys,
                                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < batch; ++b)
    lengths.push_back(1 + int64_t(rng() % uint64_t(keys)));
  return lengths;
}

std::vector<int64_t> keyLengthsOption(Options &opts, kernels::AttentionShape &s,
                                      uint64_t seed) {
  const std::string text = opts.string("key-lengths", "");
  if (text.empty())
    return {};
  std::vector<int64_t> lengths;
  if (text == "random") {
    lengths = randomKeyLengths(s.batch, s.seqK, seed + 7);
  } else {
    try {
      lengths = splitInts(text);
    } catch (const std::logic_error &) {
      lengths.clear();
    }
    if (int64_t(lengths.size()) != s.batch ||
        std::any_of(lengths.begin(), lengths.end(),
                    [&](int64_t n) { return n < 0 || n > s.seqK; }))
      throw UsageError(fmt::format(
          "option --key-lengths: '{}' is not {} lengths (one per batch) of "
          "0 to {} keys, nor `random`",
          text, s.batch, s.seqK));
  }
  s.keyLengths = true;
  return lengths;
}

void poisonPastKeyLengths(const kernels::AttentionShape &s,
                          const std::vector<int64_t> &lengths, HostTensor &k,
                          HostTensor &v) {
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t h = 0; h < s.kvHeads; ++h)
      for (int64_t j = lengths[b]; j < s.seqK; ++j)
        for (int64_t d = 0; d < s.headDim; ++d) {
          const int64_t i =
              ((int64_t(b) * s.kvHeads + h) * s.seqK + j) * s.headDim + d;
          k.flatSet(i, std::nan(""));
          v.flatSet(i, std::nan(""));
        }
}

std::string layoutOption(Options &opts) {
  std::string layout = opts.string("layout", "bhsd");
  if (layout != "bhsd" && layout != "bshd")
    throw UsageError("option --layout: '" + layout + "' is not bhsd or bshd");
  return layout;
}

std::string groupedRowsOption(Options &opts, kernels::AttentionShape &s,
                              std::string &layout, bool lseRowsApart) {
  const std::optional<kernels::AttentionShape> rows =
      kernels::groupedRowsShape(s);
  if (!opts.onOff("grouped-rows", true) || !rows ||
      (layout != "bhsd" && s.seqQ != 1) || !lseRowsApart)
    return "";
  const std::string note = fmt::format(" grouped-rows (H={} kv-heads={} Nq={})",
                                       s.heads, s.kvHeads, s.seqQ);
  s = *rows;
  s.kvHeads = s.heads; // the commands' K/V heads: as many where not grouped
  layout = "bhsd";
  return note;
}

int64_t benchGroupOption(Options &opts, const std::string &onlyD) {
  const int64_t group = positive(opts, "group", 1);
  for (int64_t D : {64, 128})
    if ((onlyD.empty() || onlyD == std::to_string(D)) && (2048 / D) % group)
      throw UsageError("option --group " + std::to_string(group) +
                       " does not divide the " + std::to_string(2048 / D) +
                       " heads of D=" + std::to_string(D) + " (H = 2048 / D)");
  return group;
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
