//===- Tunables.cpp - the library kernels' tuning spaces and keys ---------===//
#include "kiln/kernels/Tunables.h"
#include "kiln/Compiler/Tunable.h"
#include "kiln/kernels/CrossEntropy.h"
#include "kiln/kernels/Reference.h"
#include "kiln/kernels/RmsNorm.h"
#include "kiln/kernels/Rotary.h"
#include "kiln/runtime/Cuda.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace kiln::kernels {

namespace {

/// An AutotunedKernel over `configs` (each with a name()), outputs compared
/// at bf16's tolerance.
template <typename C, typename F>
std::unique_ptr<AutotunedKernel>
tuned(const std::string &name, const std::vector<C> &configs,
      std::vector<std::string> outputs, F build) {
  std::vector<std::string> names;
  for (const C &c : configs)
    names.push_back(c.name());
  return std::make_unique<AutotunedKernel>(
      name, names, [configs, build](size_t i) { return build(configs[i]); },
      AutotunedKernel::Options{.outputs = std::move(outputs),
                               .tolerance = 1e-2});
}

/// "2^k": the power of two at or above n, the class a key keeps of a size
/// that varies from call to call.
std::string bucket(int64_t n) {
  return "2^" +
         std::to_string(std::bit_width(uint64_t(std::max<int64_t>(n - 1, 0))));
}

/// A GemmConfig with a name, for tuned().
struct NamedGemm {
  std::string label;
  GemmConfig config;
  std::string name() const { return label; }
};

HostTensor randomTensor(DType t, std::vector<int64_t> shape, uint64_t seed,
                        double lo = -1, double hi = 1) {
  HostTensor h(t, std::move(shape));
  h.fillRandom(seed, lo, hi);
  return h;
}

} // namespace

std::unique_ptr<AutotunedKernel> rowNormTuned(bool layer, int64_t cols,
                                              double eps, RowNormTypes types) {
  return tuned(layer ? "layernorm" : "rmsnorm", rmsNormConfigs(), {"Y"},
               [=](const RmsNormConfig &c) {
                 return layer ? layerNorm(cols, c, eps, types)
                              : rmsNorm(cols, c, eps, types);
               });
}

std::unique_ptr<AutotunedKernel>
rowNormBackwardTuned(bool layer, int64_t cols, double eps, RowNormTypes types) {
  return tuned(layer ? "layernorm_backward" : "rmsnorm_backward",
               rmsNormConfigs(), {"DX"}, [=](const RmsNormConfig &c) {
                 return layer ? layerNormBackward(cols, c, eps, types)
                              : rmsNormBackward(cols, c, eps, types);
               });
}

int64_t rowNormBackwardPrograms(int64_t rows, int64_t sms) {
  return std::max<int64_t>(1, std::min(rows, 2 * std::max<int64_t>(1, sms)));
}

std::string rowNormKey(int64_t rows, int64_t cols, RowNormTypes types) {
  return "cols=" + std::to_string(cols) + " rows=" + bucket(rows) + " " +
         (types.allBf16() ? std::string("bf16") : types.name());
}

std::unique_ptr<AutotunedKernel> rotaryTuned(int64_t headDim, bool inverse) {
  return tuned(
      inverse ? "kiln.rotary_inverse" : "kiln.rotary", rotaryConfigs(), {"Y"},
      [=](const RotaryConfig &c) { return rotary(headDim, c, inverse); });
}

std::string rotaryKey(int64_t heads, int64_t tokens, int64_t headDim) {
  return "D=" + std::to_string(headDim) + " H=" + std::to_string(heads) +
         " T=" + bucket(tokens);
}

std::unique_ptr<AutotunedKernel>
crossEntropyTuned(bool backward, int64_t ignoreIndex, bool perRowGrad) {
  return tuned(backward ? "kiln.cross_entropy_bwd" : "kiln.cross_entropy_fwd",
               crossEntropyConfigs(),
               backward ? std::vector<std::string>{"DX"}
                        : std::vector<std::string>{"LSE", "Loss"},
               [=](const CrossEntropyConfig &c) {
                 return backward
                            ? crossEntropyBackward(c, ignoreIndex, perRowGrad)
                            : crossEntropyForward(c, ignoreIndex);
               });
}

std::string crossEntropyKey(int64_t rows, int64_t vocab) {
  return "V=" + std::to_string(vocab) + " R=" + bucket(rows);
}

std::unique_ptr<AutotunedKernel> linearTuned(bool bias, GemmActivation act,
                                             int sm, LinearLayout layout) {
  std::vector<NamedGemm> configs;
  for (auto &[label, c] : gemmConfigs(sm)) {
    // Split ranges are a grid dimension, one tile each: not persistent.
    if (layout.splitK > 1 && c.persistent)
      continue;
    GemmConfig split = c;
    split.splitK = layout.splitK;
    configs.push_back({label, split});
  }
  const bool partials = layout.splitK > 1;
  if (partials && (bias || act != GemmActivation::None || layout.preActivation))
    throw Error("kiln.linear: split-K partials take no epilogue");
  return tuned("kiln.linear", configs, {"C"}, [=](const NamedGemm &c) {
    GemmShape s{1,    1,  1, DType::bf16, partials ? DType::f32 : DType::bf16,
                bias, act};
    s.bTransposed = layout.bTransposed;
    s.aTransposed = layout.aTransposed;
    s.preActivation = layout.preActivation;
    s.splitPartials = partials;
    return gemm(s, c.config);
  });
}

int64_t linearSplitK(int64_t M, int64_t N, int64_t K, int64_t sms) {
  if (M < 1 || N < 1 || K < 2048 || sms < 1)
    return 1;
  const int64_t tiles = ((M + 127) / 128) * ((N + 127) / 128);
  auto filled = [&](int64_t s) { // the share of its waves' slots the CTAs use
    const int64_t ctas = tiles * s, waves = (ctas + sms - 1) / sms;
    return double(ctas) / double(waves * sms);
  };
  if (filled(1) >= 0.8)
    return 1;
  int64_t best = 1;
  for (int64_t s = 2; s <= 8 && K / s >= 1024; ++s) {
    if (filled(s) >= 0.8)
      return s;
    if (filled(s) > filled(best))
      best = s;
  }
  return filled(best) >= filled(1) + 0.15 ? best : 1;
}

std::string linearKey(int64_t M, int64_t N, int64_t K, bool bias,
                      GemmActivation act, LinearLayout layout) {
  // The epilogue is part of the key: a GELU's tanh per element moves the
  // best schedule (8192x50264x768 on the H200: two one-warpgroup CTAs an SM
  // won with bias + GELU, 128x256 persistent by 1.22x without). "epilogue="
  // also keeps records of the key before it (no epilogue named, whatever
  // was tuned) from being read.
  std::string epilogue = bias ? "bias" : "";
  if (act != GemmActivation::None)
    epilogue += (bias ? "+" : "") + std::string(gemmActivationName(act));
  return "M=" + bucket(M) + " N=" + std::to_string(N) +
         " K=" + std::to_string(K) +
         " bf16 epilogue=" + (epilogue.empty() ? "none" : epilogue) +
         (layout.aTransposed ? " A=KxM" : "") +
         (layout.bTransposed ? " B=NxK" : "") +
         (layout.preActivation ? " +Z" : "") +
         (layout.splitK > 1 ? " split=" + std::to_string(layout.splitK) : "");
}

namespace {

/// The norms' element types for `--autocast 1`: what kiln's norms launch
/// under bf16 autocast (fp32 x and parameters, bf16 y); else all bf16.
RowNormTypes rowNormTypes(const TuneSizes &s) {
  const int64_t autocast = s.at("autocast");
  if (autocast != 0 && autocast != 1)
    throw Error("--autocast must be 0 or 1");
  return autocast ? RowNormTypes{DType::f32, DType::f32, DType::bf16}
                  : RowNormTypes{};
}

/// --rows and --cols, checked before any tensor of R x C is allocated.
std::pair<int64_t, int64_t> rowNormShape(const TuneSizes &s) {
  const int64_t R = s.at("rows"), C = s.at("cols");
  if (R < 1 || C < 1)
    throw Error("--rows and --cols must be positive");
  if (C > kRowNormMaxCols)
    throw Error("--cols must be at most 2^20 (a row is one tile), got " +
                std::to_string(C));
  return {R, C};
}

TuneProblem rowNormProblem(bool layer, const TuneSizes &s) {
  const auto [R, C] = rowNormShape(s);
  const RowNormTypes ty = rowNormTypes(s);
  TuneProblem p{rowNormTuned(layer, C, layer ? 1e-5 : 1e-6, ty),
                rowNormKey(R, C, ty)};
  p.tensors.emplace("X", randomTensor(ty.x, {R, C}, 1, -3, 3));
  p.tensors.emplace("W", randomTensor(ty.w, {C}, 2));
  if (layer)
    p.tensors.emplace("B", randomTensor(ty.w, {C}, 3));
  p.tensors.emplace("Y", HostTensor(ty.y, {R, C}));
  p.bytes = double(R * C) * (dtypeSize(ty.x) + dtypeSize(ty.y)) +
            (layer ? 2 : 1) * C * dtypeSize(ty.w);
  return p;
}

/// The gradients' problem as kiln.rms_norm's backward launches it.
TuneProblem rowNormBackwardProblem(bool layer, const TuneSizes &s) {
  const auto [R, C] = rowNormShape(s);
  const int64_t sms = cuda::available() ? cuda::device().smCount : 132;
  const int64_t P = rowNormBackwardPrograms(R, sms);
  const RowNormTypes ty = rowNormTypes(s);
  TuneProblem p{rowNormBackwardTuned(layer, C, layer ? 1e-5 : 1e-6, ty),
                rowNormKey(R, C, ty)};
  p.tensors.emplace("X", randomTensor(ty.x, {R, C}, 1, -3, 3));
  p.tensors.emplace("W", randomTensor(ty.w, {C}, 2));
  p.tensors.emplace("DY", randomTensor(ty.y, {R, C}, 3));
  p.tensors.emplace("DX", HostTensor(ty.x, {R, C}));
  p.tensors.emplace("DWP", HostTensor(DType::f32, {P, C}));
  if (layer)
    p.tensors.emplace("DBP", HostTensor(DType::f32, {P, C}));
  p.bytes = double(R * C) * (2 * dtypeSize(ty.x) + dtypeSize(ty.y)) +
            C * dtypeSize(ty.w) + (layer ? 2 : 1) * P * C * 4.0;
  return p;
}

const RegisterTunable
    kRmsNorm({"rmsnorm",
              "RMSNorm of rows (kiln.rms_norm; --autocast 1: fp32 x and "
              "weight, bf16 y, as under bf16 autocast)",
              {{"rows", 16384}, {"cols", 4096}, {"autocast", 0}},
              [](const TuneSizes &s) { return rowNormProblem(false, s); }});
const RegisterTunable
    kLayerNorm({"layernorm",
                "LayerNorm of rows (kiln.layer_norm; --autocast 1: fp32 x, "
                "weight and bias, bf16 y)",
                {{"rows", 16384}, {"cols", 4096}, {"autocast", 0}},
                [](const TuneSizes &s) { return rowNormProblem(true, s); }});
const RegisterTunable kRmsNormBackward(
    {"rmsnorm-backward",
     "RMSNorm's gradients: dX, and dW as partial sums per program "
     "(kiln.rms_norm's backward)",
     {{"rows", 16384}, {"cols", 4096}, {"autocast", 0}},
     [](const TuneSizes &s) { return rowNormBackwardProblem(false, s); }});
const RegisterTunable kLayerNormBackward(
    {"layernorm-backward",
     "LayerNorm's gradients: dX, and dW, dB as partial sums per program "
     "(kiln.layer_norm's backward)",
     {{"rows", 16384}, {"cols", 4096}, {"autocast", 0}},
     [](const TuneSizes &s) { return rowNormBackwardProblem(true, s); }});

const RegisterTunable
    kRotary({"rotary",
             "rotary embedding of (heads, tokens, head-dim) bf16 (kiln.rotary)",
             {{"heads", 32}, {"tokens", 32768}, {"head-dim", 128}},
             [](const TuneSizes &s) {
               const int64_t H = s.at("heads"), T = s.at("tokens"),
                             D = s.at("head-dim");
               if (H < 1 || T < 1)
                 throw Error("--heads and --tokens must be positive");
               TuneProblem p{rotaryTuned(D, false), rotaryKey(H, T, D)};
               p.tensors.emplace("X", randomTensor(DType::bf16, {H, T, D}, 1));
               p.tensors.emplace("Y", HostTensor(DType::bf16, {H, T, D}));
               HostTensor pos(DType::i32, {T}), cs(DType::f32, {T, D / 2}),
                   sn(DType::f32, {T, D / 2});
               for (int64_t t = 0; t < T; ++t)
                 pos.flatSet(t, double(t));
               ropeTables(T, D, cs, sn);
               p.tensors.emplace("Pos", std::move(pos));
               p.tensors.emplace("Cos", std::move(cs));
               p.tensors.emplace("Sin", std::move(sn));
               p.bytes = 2.0 * H * T * D * 2;
               return p;
             }});

TuneProblem crossEntropyProblem(bool backward, const TuneSizes &s) {
  const int64_t R = s.at("rows"), V = s.at("vocab");
  if (R < 1 || V < 1)
    throw Error("--rows and --vocab must be positive");
  TuneProblem p{crossEntropyTuned(backward, -100, false),
                crossEntropyKey(R, V)};
  p.tensors.emplace("X", randomTensor(DType::bf16, {R, V}, 1, -8, 8));
  HostTensor labels(DType::i64, {R});
  for (int64_t r = 0; r < R; ++r)
    labels.flatSet(r, double((uint64_t(r) * 40503u) % V));
  p.tensors.emplace("Labels", std::move(labels));
  p.tensors.emplace("LSE", randomTensor(DType::f32, {R}, 2, 8, 9));
  if (backward) {
    HostTensor scale(DType::f32, {1});
    scale.flatSet(0, 1.0 / double(R));
    p.tensors.emplace("Scale", std::move(scale));
    p.tensors.emplace("DX", HostTensor(DType::bf16, {R, V}));
  } else {
    p.tensors.emplace("Loss", HostTensor(DType::f32, {R}));
  }
  p.bytes = double(R) * V * 2 * (backward ? 2 : 1);
  return p;
}

const RegisterTunable kCrossEntropy(
    {"cross-entropy",
     "softmax cross-entropy forward, bf16 logits (kiln.cross_entropy)",
     {{"rows", 16384}, {"vocab", 32000}},
     [](const TuneSizes &s) { return crossEntropyProblem(false, s); }});
const RegisterTunable kCrossEntropyBackward(
    {"cross-entropy-backward",
     "softmax cross-entropy's gradient (kiln.cross_entropy's backward)",
     {{"rows", 16384}, {"vocab", 32000}},
     [](const TuneSizes &s) { return crossEntropyProblem(true, s); }});

const RegisterTunable kLinear(
    {"linear",
     "GEMM (+ bias when --bias 1) + activation (0 none, 1 relu, 2 gelu), "
     "bf16 (kiln.linear); --b-transposed 1: the weight as BT (N x K); "
     "--a-transposed 1 with no bias or activation: a weight gradient, A "
     "as AT (K x M), split in K ranges as its launches split it",
     {{"m", 8192},
      {"n", 8192},
      {"k", 8192},
      {"activation", 2},
      {"bias", 1},
      {"b-transposed", 0},
      {"a-transposed", 0}},
     [](const TuneSizes &s) {
       const int64_t M = s.at("m"), N = s.at("n"), K = s.at("k"),
                     act = s.at("activation"), bias = s.at("bias"),
                     bT = s.at("b-transposed"), aT = s.at("a-transposed");
       if (M < 1 || N < 1 || K < 1 || act < 0 || act > 2 || bias < 0 ||
           bias > 1 || bT < 0 || bT > 1 || aT < 0 || aT > 1)
         throw Error("--m, --n and --k must be positive, --activation 0, 1 "
                     "or 2, --bias, --b-transposed and --a-transposed 0 or "
                     "1");
       if (aT && (bias || act))
         throw Error("--a-transposed 1 (a weight gradient) takes --bias 0 "
                     "and --activation 0");
       const cuda::DeviceInfo &dev = cuda::device();
       const int sm = dev.major * 10;
       const LinearLayout layout{
           .bTransposed = bT != 0,
           .aTransposed = aT != 0,
           .splitK = aT ? linearSplitK(M, N, K, dev.smCount) : 1};
       TuneProblem p{linearTuned(bias, GemmActivation(act), sm, layout),
                     linearKey(M, N, K, bias, GemmActivation(act), layout)};
       p.tensors.emplace(aT ? "AT" : "A",
                         randomTensor(DType::bf16,
                                      aT ? std::vector<int64_t>{K, M}
                                         : std::vector<int64_t>{M, K},
                                      1));
       p.tensors.emplace(bT ? "BT" : "B",
                         randomTensor(DType::bf16,
                                      bT ? std::vector<int64_t>{N, K}
                                         : std::vector<int64_t>{K, N},
                                      2, -0.05, 0.05));
       if (bias)
         p.tensors.emplace("Bias", randomTensor(DType::bf16, {N}, 3));
       p.tensors.emplace("C",
                         layout.splitK > 1
                             ? HostTensor(DType::f32, {layout.splitK, M, N})
                             : HostTensor(DType::bf16, {M, N}));
       p.flops = 2.0 * M * N * K;
       return p;
     }});

} // namespace

} // namespace kiln::kernels
