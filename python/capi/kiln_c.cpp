//===- kiln_c.cpp - kiln's attention behind a C ABI -----------------------===//
//
// A call builds nothing it has built before: the DSL kernels of a problem
// (dtype, causal, scale, B, H, K/V heads, Nq, Nk, D, device) are kept, and so
// is the launch-ready variant of each for the tensors' alignment and the
// classes of their sizes. A repeat call costs the argument checks, the variant
// lookup and the launches. Compiles go through kiln's JIT cache (one per class
// with run-time shapes, on disk across processes).
//
//===----------------------------------------------------------------------===//
#include "kiln_c.h"
#include "AttentionArgs.h"
#include "CApi.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

using namespace kiln;
using namespace kiln::capi;

namespace {

/// The kernels of one problem and their loaded variants.
struct Entry {
  std::vector<Kernel> kernels;
  /// Per kernel: variant key (GpuTarget's specialisation) -> loaded kernel.
  std::vector<std::map<std::string, std::shared_ptr<GpuKernel>>> variants;
  /// Per kernel: the variant of the last call and what decided it (each
  /// tensor's base alignment, sizes and strides), so that a call like the
  /// last skips working the variant out again.
  std::vector<std::pair<std::vector<int64_t>, GpuKernel *>> last;
  /// Launches bound for the tensors of recent calls, keyed by each tensor's
  /// base, sizes and strides: a training step calls one problem once per
  /// layer, each layer with tensors of its own, the same ones step after
  /// step (the caching allocator's blocks). A call like one of these skips
  /// building, checking and binding the arguments.
  using Launches = std::vector<std::pair<GpuKernel *, std::vector<ArgValue>>>;
  std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const Launches>>>
      prepared;
  size_t nextPrepared = 0;
  int64_t lastUse = 0; ///< the call count when it was last used
  /// The forward's key ranges (1: one kernel) and, split, their workspace.
  int64_t splitKeys = 1;
  std::optional<kernels::SplitKeysWorkspace> splitWorkspace;
};

constexpr size_t kMaxPrepared = 32;

/// What keys a prepared launch: every tensor's base, sizes and strides (and
/// the workspace's base).
std::vector<int64_t> callKey(std::initializer_list<const kiln_c_tensor *> ts,
                             const void *workspace = nullptr) {
  std::vector<int64_t> key;
  key.reserve(ts.size() * 9 + 1);
  for (const kiln_c_tensor *t : ts) {
    if (!t) {
      key.push_back(-1);
      continue;
    }
    key.push_back(int64_t(reinterpret_cast<uintptr_t>(t->data)));
    key.insert(key.end(), t->sizes, t->sizes + 4);
    key.insert(key.end(), t->strides, t->strides + 4);
  }
  key.push_back(int64_t(reinterpret_cast<uintptr_t>(workspace)));
  return key;
}

/// What decides a kernel's variant for these tensors: each one's 16-byte
/// alignment, sizes and strides.
std::vector<int64_t>
variantSignature(const std::map<std::string, TensorRef> &tensors) {
  std::vector<int64_t> sig;
  for (const auto &[name, t] : tensors) {
    sig.push_back(int64_t(reinterpret_cast<uintptr_t>(t.data) % 16));
    sig.insert(sig.end(), t.shape.begin(), t.shape.end());
    sig.insert(sig.end(), t.strides.begin(), t.strides.end());
  }
  return sig;
}

using ProblemKey = std::tuple<bool, int, int, double, int64_t, int64_t, int64_t,
                              int64_t, int64_t, int, bool, int64_t, bool>;

ProblemKey keyOf(bool backward, const kernels::AttentionShape &s, int device,
                 bool deterministic) {
  return {backward,      int(s.dtype), s.causal,    s.scale,   s.batch,
          s.heads,       s.seqQ,       s.seqK,      s.headDim, device,
          deterministic, s.kvHeads,    s.keyLengths};
}

std::mutex cacheMutex;
/// Problems kept at most: a server sees a new (B, N) with most requests,
/// and each entry holds its kernels' IR. The least recently used goes.
constexpr size_t kMaxEntries = 256;
std::map<ProblemKey, std::shared_ptr<Entry>> entries;
int64_t calls = 0;
int64_t variantCount = 0;

/// kiln_c_attention_forward_workspace's answers: a caller may ask on every
/// call.
std::map<ProblemKey, int64_t> forwardWorkspaces;

/// The entry of a problem, its kernels built on the first call (compiles
/// are shared between entries of one shape class through the JIT cache).
std::shared_ptr<Entry> entryFor(bool backward, const kernels::AttentionShape &s,
                                int device, bool deterministic) {
  deterministic = backward && deterministic;
  const ProblemKey key = keyOf(backward, s, device, deterministic);
  std::lock_guard<std::mutex> lock(cacheMutex);
  std::shared_ptr<Entry> &e = entries[key];
  if (!e) {
    auto made = std::make_shared<Entry>();
    if (backward) {
      kernels::AttentionBackwardConfig c;
      c.deterministic = deterministic ? 1 : -1;
      made->kernels = kernels::attentionBackward(s, c);
    } else {
      const kernels::AttentionConfig launch = forwardLaunch(s, device);
      made->splitKeys = launch.splitKeys;
      made->kernels = kernels::attentionForwardKernels(s, launch);
      if (made->splitKeys > 1)
        made->splitWorkspace.emplace(s, made->splitKeys);
    }
    made->variants.resize(made->kernels.size());
    made->last.resize(made->kernels.size());
    e = std::move(made);
  }
  e->lastUse = ++calls;
  std::shared_ptr<Entry> out = e;
  if (entries.size() > kMaxEntries) {
    auto oldest = entries.begin();
    for (auto it = entries.begin(); it != entries.end(); ++it)
      if (it->second->lastUse < oldest->second->lastUse)
        oldest = it;
    entries.erase(oldest); // a call still using it holds its own reference
  }
  return out;
}

/// variantFor's work on a call unlike the last.
GpuKernel &loadVariant(Entry &e, size_t i,
                       const std::map<std::string, TensorRef> &tensors,
                       int device) {
  const Kernel &kernel = e.kernels[i];
  GpuTarget base;
  base.arch = cuda::device(device).arch();
  GpuTarget target = variantTarget(kernel, tensors, {}, base);
  const std::string key = specialisationKey(target);
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = e.variants[i].find(key);
    if (it != e.variants[i].end())
      return *it->second;
  }
  // Loaded on the tensors' device (the caller's current one may differ).
  cuda::ContextScope scope(device);
  std::shared_ptr<GpuKernel> g = jitKernel(kernel, target);
  std::lock_guard<std::mutex> lock(cacheMutex);
  auto [it, added] = e.variants[i].emplace(key, g);
  variantCount += added;
  return *it->second;
}

/// The loaded variant of kernel `i` of `e` for these tensors on `device`.
GpuKernel &variantFor(Entry &e, size_t i,
                      const std::map<std::string, TensorRef> &tensors,
                      int device) {
  std::vector<int64_t> sig = variantSignature(tensors);
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (e.last[i].second && e.last[i].first == sig)
      return *e.last[i].second;
  }
  GpuKernel &g = loadVariant(e, i, tensors, device);
  std::lock_guard<std::mutex> lock(cacheMutex);
  e.last[i] = {std::move(sig), &g};
  return g;
}

/// Launches every kernel of `e` in order on the options' stream, each bound
/// to the tensors it takes. Binding all of them first refuses bad input
/// before anything runs.
template <typename F>
void launchAll(Entry &e, const std::vector<int64_t> &key, F &&tensorsOf,
               const kiln_c_attention_options &o) {
  std::shared_ptr<const Entry::Launches> launches;
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    for (const auto &[k, l] : e.prepared)
      if (k == key) {
        launches = l;
        break;
      }
  }
  if (!launches) {
    const std::map<std::string, TensorRef> tensors = tensorsOf();
    auto made = std::make_shared<Entry::Launches>();
    for (size_t i = 0; i < e.kernels.size(); ++i) {
      std::map<std::string, TensorRef> mine = e.kernels[i].tensorsIn(tensors);
      made->emplace_back(&variantFor(e, i, mine, o.device),
                         e.kernels[i].bind(mine));
    }
    launches = made;
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (e.prepared.size() < kMaxPrepared)
      e.prepared.emplace_back(key, launches);
    else
      e.prepared[e.nextPrepared++ % kMaxPrepared] = {key, launches};
  }
  for (const auto &[g, args] : *launches)
    g->launch(args, {o.stream, o.device, o.pointers_checked != 0});
}

/// The problem of options, q and k (with `keyLengths`, the forward's keys
/// per batch) and its entry.
std::pair<kernels::AttentionShape, std::shared_ptr<Entry>>
problemOf(bool backward, const kiln_c_attention_options *options,
          const kiln_c_tensor *q, const kiln_c_tensor *k, bool keyLengths) {
  if (!options || !q || !k)
    throw Error("options, q and k must be given");
  kernels::AttentionShape s = shapeOf(*options, *q, *k);
  s.keyLengths = keyLengths;
  return {s,
          entryFor(backward, s, options->device, options->deterministic != 0)};
}

/// What the forward and the backward share: the arguments checked, the
/// problem's entry, and its kernels launched on `tensors(shape, entry)`.
template <typename F>
int runAttention(bool backward, const kiln_c_attention_options *options,
                 const kiln_c_tensor *q, const kiln_c_tensor *k,
                 const std::vector<int64_t> &key, char *error, size_t size,
                 F &&tensors, bool keyLengths = false) {
  return guarded(error, size, [&] {
    auto [s, e] = problemOf(backward, options, q, k, keyLengths);
    launchAll(
        *e, key, [&] { return tensors(s, *e); }, *options);
  });
}

/// Where the call packs its grouped heads' rows (packedGroup): KILN_LOG's
/// line, then q, each of `rows` and LSE pointed at its view of the packed
/// problem, kept in `views`. KILN_C_OK, or the code of KILN_LOG's error.
template <size_t N>
int packGroupedRows(bool backward, const kiln_c_attention_options *options,
                    const kiln_c_tensor *k, const kiln_c_tensor *&q,
                    std::array<const kiln_c_tensor **, N> rows,
                    const kiln_c_tensor *&lse,
                    std::array<kiln_c_tensor, N + 2> &views, char *error,
                    size_t size) {
  std::array<const kiln_c_tensor *, N> given;
  for (size_t i = 0; i < N; ++i)
    given[i] = *rows[i];
  const int64_t g = packedGroup(options, q, k, given, lse);
  if (g == 1)
    return KILN_C_OK;
  if (int code = guarded(error, size,
                         [&] { logPacked(backward, *options, *q, *k, g); }))
    return code;
  views[0] = packedRows(*q, g);
  views[1] = packedRows(*lse, g);
  q = &views[0];
  lse = &views[1];
  for (size_t i = 0; i < N; ++i) {
    views[i + 2] = packedRows(*given[i], g);
    *rows[i] = &views[i + 2];
  }
  return KILN_C_OK;
}

/// The forward's tensors, which the backward takes too.
std::map<std::string, TensorRef>
forwardTensors(const kernels::AttentionShape &s, const kiln_c_tensor *q,
               const kiln_c_tensor *k, const kiln_c_tensor *v,
               const kiln_c_tensor *o, const kiln_c_tensor *lse) {
  return {{"Q", refOf(q, s.dtype, 4, "q")},
          {"K", refOf(k, s.dtype, 4, "k")},
          {"V", refOf(v, s.dtype, 4, "v")},
          {"O", refOf(o, s.dtype, 4, "o")},
          {"LSE", refOf(lse, DType::f32, 3, "lse")}};
}

/// kiln_c_attention_forward, with each batch's keys from `kLengths` where
/// given.
int forwardCall(const kiln_c_attention_options *options, const kiln_c_tensor *q,
                const kiln_c_tensor *k, const kiln_c_tensor *v,
                const kiln_c_tensor *kLengths, const kiln_c_tensor *o,
                const kiln_c_tensor *lse, void *workspace, char *error,
                size_t error_size) {
  std::array<kiln_c_tensor, 3> views;
  if (int code = packGroupedRows<1>(false, options, k, q, {&o}, lse, views,
                                    error, error_size))
    return code;
  return runAttention(
      false, options, q, k, callKey({q, k, v, o, lse, kLengths}, workspace),
      error, error_size,
      [&](const kernels::AttentionShape &s, const Entry &e) {
        std::map<std::string, TensorRef> t = forwardTensors(s, q, k, v, o, lse);
        if (kLengths)
          t["KLengths"] = refOf(kLengths, DType::i32, 1, "k_lengths");
        if (e.splitWorkspace) {
          if (!workspace)
            throw Error(
                "the workspace is missing: this problem's keys are split in " +
                std::to_string(e.splitKeys) + " ranges, which take " +
                std::to_string(e.splitWorkspace->elements) +
                " floats (kiln_c_attention_forward_workspace)");
          t.merge(e.splitWorkspace->refs(workspace));
        }
        return t;
      },
      kLengths != nullptr);
}

/// The forward's workspace query, with key lengths or without.
int workspaceQuery(const kiln_c_attention_options *options,
                   const kiln_c_tensor *q, const kiln_c_tensor *k,
                   int64_t *elements, bool keyLengths, char *error,
                   size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!elements)
      throw Error("elements must be given");
    if (!options || !q || !k)
      throw Error("options, q and k must be given");
    kernels::AttentionShape s = shapeOf(*options, *q, *k);
    s.keyLengths = keyLengths;
    kernels::checkAttentionShape(s); // without a GPU no config checks it
    const ProblemKey key = keyOf(false, s, options->device, false);
    {
      std::lock_guard<std::mutex> lock(cacheMutex);
      if (auto it = forwardWorkspaces.find(key);
          it != forwardWorkspaces.end()) {
        *elements = it->second;
        return;
      }
    }
    // Whether the forward packs grouped heads depends on the strides of q,
    // O and LSE, which this call does not see: enough for either.
    *elements = forwardWorkspaceElements(s, options->device);
    if (std::optional<kernels::AttentionShape> p = kernels::groupedRowsShape(s))
      *elements =
          std::max(*elements, forwardWorkspaceElements(*p, options->device));
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (forwardWorkspaces.size() >= 4 * kMaxEntries)
      forwardWorkspaces.clear();
    forwardWorkspaces[key] = *elements;
  });
}

} // namespace

extern "C" {

int kiln_c_attention_forward_workspace(const kiln_c_attention_options *options,
                                       const kiln_c_tensor *q,
                                       const kiln_c_tensor *k,
                                       int64_t *elements, char *error,
                                       size_t error_size) {
  return workspaceQuery(options, q, k, elements, false, error, error_size);
}

int kiln_c_attention_forward_key_lengths_workspace(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, int64_t *elements, char *error, size_t error_size) {
  return workspaceQuery(options, q, k, elements, true, error, error_size);
}

int kiln_c_attention_forward(const kiln_c_attention_options *options,
                             const kiln_c_tensor *q, const kiln_c_tensor *k,
                             const kiln_c_tensor *v, const kiln_c_tensor *o,
                             const kiln_c_tensor *lse, void *workspace,
                             char *error, size_t error_size) {
  return forwardCall(options, q, k, v, nullptr, o, lse, workspace, error,
                     error_size);
}

int kiln_c_attention_forward_key_lengths(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, const kiln_c_tensor *v,
    const kiln_c_tensor *k_lengths, const kiln_c_tensor *o,
    const kiln_c_tensor *lse, void *workspace, char *error, size_t error_size) {
  if (!k_lengths)
    return guarded(error, error_size,
                   [] { throw Error("k_lengths must be given"); });
  return forwardCall(options, q, k, v, k_lengths, o, lse, workspace, error,
                     error_size);
}

int64_t kiln_c_attention_backward_workspace(int64_t batch, int64_t heads,
                                            int64_t seq_q, int64_t head_dim) {
  return kernels::BackwardWorkspace(batch, heads, seq_q, head_dim).elements;
}

int kiln_c_attention_backward(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, const kiln_c_tensor *v, const kiln_c_tensor *o,
    const kiln_c_tensor *d_o, const kiln_c_tensor *lse, void *workspace,
    const kiln_c_tensor *d_q, const kiln_c_tensor *d_k,
    const kiln_c_tensor *d_v, char *error, size_t error_size) {
  // BackwardWorkspace of a packed problem fits in the caller's: its parts
  // per (batch, head) grow at most G-fold with G·Nq rows.
  std::array<kiln_c_tensor, 5> views;
  if (int code = packGroupedRows<3>(true, options, k, q, {&o, &d_o, &d_q}, lse,
                                    views, error, error_size))
    return code;
  return runAttention(
      true, options, q, k,
      callKey({q, k, v, o, d_o, lse, d_q, d_k, d_v}, workspace), error,
      error_size, [&](const kernels::AttentionShape &s, const Entry &) {
        if (!workspace)
          throw Error("the workspace is missing");
        // The workspaces (statistics, dQ's fp32 accumulator, its arrival
        // counters, the statistics as the dots add them) where
        // BackwardWorkspace puts them.
        std::map<std::string, TensorRef> t = forwardTensors(s, q, k, v, o, lse);
        t.merge(kernels::BackwardWorkspace(s.batch, s.heads, s.seqQ, s.headDim)
                    .refs(workspace));
        t["dO"] = refOf(d_o, s.dtype, 4, "grad_out");
        t["dQ"] = refOf(d_q, s.dtype, 4, "dq");
        t["dK"] = refOf(d_k, s.dtype, 4, "dk");
        t["dV"] = refOf(d_v, s.dtype, 4, "dv");
        return t;
      });
}

void kiln_c_cache_stats(int64_t *variants, int64_t *compiles) {
  std::lock_guard<std::mutex> lock(cacheMutex);
  if (variants)
    *variants = variantCount;
  if (compiles)
    *compiles = compileCacheStats().misses;
}

const char *kiln_c_version(void) { return KILN_VERSION; }

} // extern "C"
