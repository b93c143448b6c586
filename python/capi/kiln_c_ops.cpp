//===- kiln_c_ops.cpp - kiln's library kernels other than attention -------===//
//
// Row norms, rotary embedding, cross-entropy and the GEMM with its epilogue
// behind the C ABI: one AutotunedKernel per kernel and build parameters
// (kernels/Tunables.h: the Configs, names and keys `kiln tune` uses too),
// tuned per class of problem on its first launch or read from the tuning
// database, then launched on the caller's stream.
//
//===----------------------------------------------------------------------===//
#include "CApi.h"
#include "kiln_c.h"

#include "kiln/kernels/Tunables.h"

#include <map>
#include <memory>
#include <mutex>

using namespace kiln;
using namespace kiln::capi;

namespace {

/// One AutotunedKernel per kernel and build parameters, made by `make` on
/// first use.
AutotunedKernel &
kernelFor(const std::string &name, const std::vector<double> &params,
          const std::function<std::unique_ptr<AutotunedKernel>()> &make) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<double>>,
                  std::unique_ptr<AutotunedKernel>>
      kernels;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<AutotunedKernel> &k = kernels[{name, params}];
  if (!k)
    k = make();
  return *k;
}

/// Launches `k` for `key`. The first launch for a key may tune, on the
/// legacy stream, with the caller's tensors: the work that writes them (on
/// any stream) is done first. Tuning returns synchronised.
void launch(AutotunedKernel &k, const std::string &key,
            const std::map<std::string, TensorRef> &t, void *stream,
            int device) {
  if (!k.chosen(key)) {
    cuda::ContextScope scope(device);
    cuda::synchronize();
  }
  k.launch(key, t, {}, {stream, device});
}

int64_t dim(const std::map<std::string, TensorRef> &t, const char *name,
            size_t d) {
  auto it = t.find(name);
  if (it == t.end() || it->second.shape.size() <= d)
    throw Error(std::string("tensor ") + name + " is missing");
  return it->second.shape[d];
}

} // namespace

namespace {
/// kiln_c_row_norm_dtypes as the kernels' RowNormTypes (NULL: all bf16).
kernels::RowNormTypes rowNormTypes(const kiln_c_row_norm_dtypes *d) {
  if (!d)
    return {};
  auto one = [](int code, const char *what) {
    if (code != KILN_C_BF16 && code != KILN_C_F32)
      throw Error(std::string(what) +
                  "'s dtype must be bf16 or float32 "
                  "(KILN_C_BF16, KILN_C_F32), got code " +
                  std::to_string(code));
    return dtypeOfCode(code);
  };
  return {one(d->x, "x"), one(d->w, "the weight"), one(d->y, "y")};
}

/// A row norm's launch, forward or backward: X, W and the `rest` of its
/// tensors, the kernel for (kind, cols, eps, types) made by `make` on
/// first use.
void launchRowNorm(const char *name, int kind, kernels::RowNormTypes ty,
                   const kiln_c_tensor *x, const kiln_c_tensor *w,
                   std::map<std::string, TensorRef> t, double eps,
                   std::unique_ptr<AutotunedKernel> (*make)(
                       bool, int64_t, double, kernels::RowNormTypes),
                   void *stream, int device) {
  if (kind != 0 && kind != 1)
    throw Error("kind must be 0 (RMSNorm) or 1 (LayerNorm), got " +
                std::to_string(kind));
  t["X"] = refOf(x, ty.x, 2, "x");
  t["W"] = refOf(w, ty.w, 1, "weight");
  const int64_t cols = t["X"].shape[1];
  AutotunedKernel &k = kernelFor(name,
                                 {double(kind), double(cols), eps, double(ty.x),
                                  double(ty.w), double(ty.y)},
                                 [=] { return make(kind, cols, eps, ty); });
  launch(k, kernels::rowNormKey(t["X"].shape[0], cols, ty), t, stream, device);
}
} // namespace

int kiln_c_row_norm(int kind, const kiln_c_row_norm_dtypes *dtypes,
                    const kiln_c_tensor *x, const kiln_c_tensor *w,
                    const kiln_c_tensor *b, const kiln_c_tensor *y, double eps,
                    void *stream, int device, char *error, size_t error_size) {
  return guarded(error, error_size, [&] {
    const kernels::RowNormTypes ty = rowNormTypes(dtypes);
    std::map<std::string, TensorRef> t{{"Y", refOf(y, ty.y, 2, "y")}};
    if (kind == 1)
      t["B"] = refOf(b, ty.w, 1, "bias");
    launchRowNorm("rownorm", kind, ty, x, w, std::move(t), eps,
                  kernels::rowNormTuned, stream, device);
  });
}

int kiln_c_row_norm_backward(int kind, const kiln_c_row_norm_dtypes *dtypes,
                             const kiln_c_tensor *x, const kiln_c_tensor *w,
                             const kiln_c_tensor *dy, const kiln_c_tensor *dx,
                             const kiln_c_tensor *dwPartial,
                             const kiln_c_tensor *dbPartial, double eps,
                             void *stream, int device, char *error,
                             size_t errorSize) {
  return guarded(error, errorSize, [&] {
    const kernels::RowNormTypes ty = rowNormTypes(dtypes);
    std::map<std::string, TensorRef> t{
        {"DY", refOf(dy, ty.y, 2, "the gradient of y")},
        {"DX", refOf(dx, ty.x, 2, "the gradient of x")},
        {"DWP", refOf(dwPartial, DType::f32, 2, "dw_partial")}};
    if (kind == 1)
      t["DBP"] = refOf(dbPartial, DType::f32, 2, "db_partial");
    launchRowNorm("rownorm_backward", kind, ty, x, w, std::move(t), eps,
                  kernels::rowNormBackwardTuned, stream, device);
  });
}

int64_t kiln_c_row_norm_backward_programs(int64_t rows, int64_t smCount) {
  return kernels::rowNormBackwardPrograms(rows, smCount);
}

int64_t kiln_c_linear_split_k(int64_t m, int64_t n, int64_t k,
                              int64_t smCount) {
  return kernels::linearSplitK(m, n, k, smCount);
}

int kiln_c_op(const char *op, int64_t option,
              const kiln_c_named_tensor *tensors, int count, void *stream,
              int device, char *error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!op || (count && !tensors) || count < 0)
      throw Error("op and tensors must be given");
    std::map<std::string, TensorRef> t;
    for (int i = 0; i < count; ++i) {
      const kiln_c_named_tensor &n = tensors[i];
      if (!n.name || n.rank < 1 || n.rank > 4)
        throw Error("tensor " + std::to_string(i) +
                    ": a name and a rank in 1..4 are needed");
      t[n.name] = refOf(&n.tensor, dtypeOfCode(n.dtype), n.rank, n.name);
    }
    const std::string name = op;
    if (name == "rotary") {
      const int64_t D = dim(t, "X", 2);
      const bool inverse = option != 0;
      AutotunedKernel &k = kernelFor(name, {double(D), double(inverse)}, [=] {
        return kernels::rotaryTuned(D, inverse);
      });
      launch(k, kernels::rotaryKey(dim(t, "X", 0), dim(t, "X", 1), D), t,
             stream, device);
    } else if (name == "cross_entropy_fwd" || name == "cross_entropy_bwd") {
      const bool backward = name == "cross_entropy_bwd",
                 perRow = t.count("DLoss");
      AutotunedKernel &k =
          kernelFor(name, {double(option), double(perRow)}, [=] {
            return kernels::crossEntropyTuned(backward, option, perRow);
          });
      launch(k, kernels::crossEntropyKey(dim(t, "X", 0), dim(t, "X", 1)), t,
             stream, device);
    } else if (name == "linear") {
      if (option < 0 || option > 2)
        throw Error("linear: the activation is 0 (none), 1 (relu) or 2 "
                    "(gelu), got " +
                    std::to_string(option));
      const bool bias = t.count("Bias");
      // The weight as B (K x N) or, as nn.Linear stores it, BT (N x K); A
      // as AT (K x M) for a weight gradient; Z the pre-activation too.
      // C (S, M, N): S split-K partial products.
      const auto c = t.find("C");
      const bool partials = c != t.end() && c->second.shape.size() == 3;
      const int64_t split = partials ? c->second.shape[0] : 1;
      if (partials && (split < 2 || bias || option || t.count("Z")))
        throw Error("linear: a C of three dimensions holds S >= 2 split-K "
                    "partial products and takes no Bias, Z or activation");
      const kernels::LinearLayout layout{.bTransposed = t.count("BT") > 0,
                                         .aTransposed = t.count("AT") > 0,
                                         .preActivation = t.count("Z") > 0,
                                         .splitK = split};
      const auto act = kernels::GemmActivation(option);
      const int sm = cuda::device(device).major * 10;
      AutotunedKernel &k = kernelFor(
          name,
          {double(bias), double(option), double(sm), double(layout.bTransposed),
           double(layout.aTransposed), double(layout.preActivation),
           double(split)},
          [=] { return kernels::linearTuned(bias, act, sm, layout); });
      const bool aT = layout.aTransposed, bT = layout.bTransposed;
      launch(k,
             kernels::linearKey(aT ? dim(t, "AT", 1) : dim(t, "A", 0),
                                bT ? dim(t, "BT", 0) : dim(t, "B", 1),
                                aT ? dim(t, "AT", 0) : dim(t, "A", 1), bias,
                                act, layout),
             t, stream, device);
    } else {
      throw Error("unknown op '" + name +
                  "' (rotary, cross_entropy_fwd, cross_entropy_bwd, linear)");
    }
  });
}
