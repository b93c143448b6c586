//===- kiln_c_ops.cpp - kiln's library kernels other than attention -------===//
//
// Row norms, rotary embedding, cross-entropy and the GEMM with its epilogue
// behind the C ABI: one AutotunedKernel per kernel and build parameters,
// tuned per class of problem on its first launch (or read from the tuning
// database), then launched on the caller's stream.
//
//===----------------------------------------------------------------------===//
#include "CApi.h"
#include "kiln_c.h"

#include "kiln/Compiler/Autotuned.h"
#include "kiln/kernels/CrossEntropy.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/RmsNorm.h"
#include "kiln/kernels/Rotary.h"

#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

using namespace kiln;
using namespace kiln::capi;

namespace {

/// Named Configs and the kernel of each.
struct Space {
  std::vector<std::string> names;
  std::function<Kernel(size_t)> build;
};

template <typename C, typename F>
Space spaceOf(const std::vector<C> &configs, F build) {
  Space s;
  for (const C &c : configs)
    s.names.push_back(c.name());
  s.build = [configs, build](size_t i) { return build(configs[i]); };
  return s;
}

/// One AutotunedKernel per kernel name and build parameters, made by `make`
/// on first use.
AutotunedKernel &kernelFor(const std::string &name,
                           const std::vector<double> &params,
                           const std::vector<std::string> &outputs,
                           const std::function<Space()> &make) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<double>>,
                  std::unique_ptr<AutotunedKernel>>
      kernels;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<AutotunedKernel> &k = kernels[{name, params}];
  if (!k) {
    Space s = make();
    k = std::make_unique<AutotunedKernel>(
        name, s.names, s.build,
        AutotunedKernel::Options{.outputs = outputs, .tolerance = 1e-2});
  }
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

DType dtypeOfCode(int code) {
  switch (code) {
  case KILN_C_BF16:
    return DType::bf16;
  case KILN_C_F16:
    return DType::f16;
  case KILN_C_F32:
    return DType::f32;
  case KILN_C_I32:
    return DType::i32;
  case KILN_C_I64:
    return DType::i64;
  }
  throw Error("dtype code " + std::to_string(code) + " is not a kiln_c dtype");
}

/// "2^k": the power of two at or above n, the class a tuning key keeps.
std::string bucket(int64_t n) {
  return "2^" +
         std::to_string(std::bit_width(uint64_t(std::max<int64_t>(n - 1, 0))));
}

int64_t dim(const std::map<std::string, TensorRef> &t, const char *name,
            size_t d) {
  auto it = t.find(name);
  if (it == t.end() || it->second.shape.size() <= d)
    throw Error(std::string("tensor ") + name + " is missing");
  return it->second.shape[d];
}

} // namespace

int kiln_c_row_norm(int kind, const kiln_c_tensor *x, const kiln_c_tensor *w,
                    const kiln_c_tensor *b, const kiln_c_tensor *y, double eps,
                    void *stream, int device, char *error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (kind != 0 && kind != 1)
      throw Error("kind must be 0 (RMSNorm) or 1 (LayerNorm), got " +
                  std::to_string(kind));
    std::map<std::string, TensorRef> t{
        {"X", refOf(x, DType::bf16, 2, "x")},
        {"W", refOf(w, DType::bf16, 1, "weight")},
        {"Y", refOf(y, DType::bf16, 2, "y")}};
    if (kind)
      t["B"] = refOf(b, DType::bf16, 1, "bias");
    const int64_t cols = t["X"].shape[1];
    AutotunedKernel &k = kernelFor(
        kind ? "layernorm" : "rmsnorm", {double(cols), eps}, {"Y"}, [=] {
          return spaceOf(kernels::rmsNormConfigs(),
                         [=](const kernels::RmsNormConfig &c) {
                           return kind ? kernels::layerNorm(cols, c, eps)
                                       : kernels::rmsNorm(cols, c, eps);
                         });
        });
    launch(k, "cols=" + std::to_string(cols) + " bf16", t, stream, device);
  });
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
      AutotunedKernel &k =
          kernelFor(inverse ? "kiln.rotary_inverse" : "kiln.rotary",
                    {double(D)}, {"Y"}, [=] {
                      return spaceOf(kernels::rotaryConfigs(),
                                     [=](const kernels::RotaryConfig &c) {
                                       return kernels::rotary(D, c, inverse);
                                     });
                    });
      launch(k,
             "D=" + std::to_string(D) + " H=" + std::to_string(dim(t, "X", 0)) +
                 " T=" + bucket(dim(t, "X", 1)),
             t, stream, device);
    } else if (name == "cross_entropy_fwd" || name == "cross_entropy_bwd") {
      const bool fwd = name == "cross_entropy_fwd", perRow = t.count("DLoss");
      AutotunedKernel &k = kernelFor(
          "kiln." + name, {double(option), double(perRow)},
          fwd ? std::vector<std::string>{"LSE", "Loss"}
              : std::vector<std::string>{"DX"},
          [=] {
            return spaceOf(
                kernels::crossEntropyConfigs(),
                [=](const kernels::CrossEntropyConfig &c) {
                  return fwd ? kernels::crossEntropyForward(c, option)
                             : kernels::crossEntropyBackward(c, option, perRow);
                });
          });
      launch(k,
             "V=" + std::to_string(dim(t, "X", 1)) +
                 " R=" + bucket(dim(t, "X", 0)),
             t, stream, device);
    } else if (name == "linear") {
      if (option < 0 || option > 2)
        throw Error("linear: the activation is 0 (none), 1 (relu) or 2 "
                    "(gelu), got " +
                    std::to_string(option));
      const bool bias = t.count("Bias");
      const auto act = kernels::GemmActivation(option);
      const int sm = cuda::device(device).major * 10;
      AutotunedKernel &k =
          kernelFor("kiln.linear", {double(bias), double(option), double(sm)},
                    {"C"}, [=] {
                      Space s;
                      auto configs = kernels::gemmConfigs(sm);
                      for (const auto &[n, c] : configs)
                        s.names.push_back(n);
                      s.build = [=](size_t i) {
                        return kernels::gemm(
                            {1, 1, 1, DType::bf16, DType::bf16, bias, act},
                            configs[i].second);
                      };
                      return s;
                    });
      launch(k,
             "M=" + bucket(dim(t, "A", 0)) +
                 " N=" + std::to_string(dim(t, "B", 1)) +
                 " K=" + std::to_string(dim(t, "A", 1)) + " bf16",
             t, stream, device);
    } else {
      throw Error("unknown op '" + name +
                  "' (rotary, cross_entropy_fwd, cross_entropy_bwd, linear)");
    }
  });
}
