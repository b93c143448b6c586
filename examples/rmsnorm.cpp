//===- rmsnorm.cpp - row norms in the DSL, tuned on first use, at copy speed
//==//
//
// RMSNorm, y = x / sqrt(mean(x^2) + eps) * w, or LayerNorm,
// y = (x - mean) / sqrt(var + eps) * w + b, over the rows of a bf16
// (rows, cols) tensor, each row whole in registers (kernels/norm/RmsNorm.cpp,
// in the DSL). The schedule (rows per program, warps) is a list of Configs
// that AutotunedKernel tunes on the first launch for the column count and
// records for this GPU. On a GPU it checks the output against fp64 and
// prints its bandwidth beside a device-to-device copy of the same bytes,
// timed in the same process; without one it runs a small problem on the CPU
// executor.
//
// usage: rmsnorm [rows] [cols] [rmsnorm|layernorm]   (16384 4096 rmsnorm)
//
//===----------------------------------------------------------------------===//
#include "kiln/kernels/RmsNorm.h"
#include "kiln/Compiler/Autotuned.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/Reference.h"
#include "kiln/kernels/Tunables.h"
#include "kiln/runtime/Cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace kiln;

/// The largest error of y against the fp64 norm of x (w, b), relative to
/// each element (plus 1e-2, for elements near zero).
static double worstError(bool layer, const HostTensor &x, const HostTensor &w,
                         const HostTensor &b, const HostTensor &y) {
  HostTensor ref(DType::f32, x.shape());
  if (layer)
    kernels::layerNormReference(x, w, b, ref);
  else
    kernels::rmsNormReference(x, w, ref);
  double worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    worst = std::max(worst, std::abs(y.flatAt(i) - ref.flatAt(i)) /
                                (std::abs(ref.flatAt(i)) + 1e-2));
  return worst;
}

int main(int argc, char **argv) try {
  const int64_t R = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t C = argc > 2 ? std::atoll(argv[2]) : 4096;
  const std::string which = argc > 3 ? argv[3] : "rmsnorm";
  if (which != "rmsnorm" && which != "layernorm")
    throw Error("the third argument is rmsnorm or layernorm, got " + which);
  const bool layer = which == "layernorm";
  auto build = [&](int64_t cols, const kernels::RmsNormConfig &c) {
    return layer ? kernels::layerNorm(cols, c) : kernels::rmsNorm(cols, c);
  };
  const std::vector<kernels::RmsNormConfig> configs = kernels::rmsNormConfigs();
  std::vector<std::string> names;
  for (const kernels::RmsNormConfig &c : configs)
    names.push_back(c.name());
  std::string why;
  if (!cuda::available(&why)) {
    const int64_t r = std::min<int64_t>(R, 64), c = std::min<int64_t>(C, 512);
    std::printf("no GPU here (%s): %s %lldx%lld on the CPU executor\n",
                why.c_str(), which.c_str(), (long long)r, (long long)c);
    HostTensor x(DType::bf16, {r, c}), w(DType::bf16, {c}), b(DType::bf16, {c}),
        y(DType::bf16, {r, c});
    x.fillRandom(1, -3, 3);
    w.fillRandom(2);
    b.fillRandom(3);
    y.poison();
    Kernel k = build(c, configs[2]);
    runOnCpu(
        k,
        k.bind(k.tensorsIn(
            {{"X", x.ref()}, {"W", w.ref()}, {"B", b.ref()}, {"Y", y.ref()}})));
    const double worst = worstError(layer, x, w, b, y);
    std::printf("worst relative error %.2e against fp64: %s\n", worst,
                worst < 2e-2 ? "PASS" : "FAIL");
    return worst < 2e-2 ? 0 : 1;
  }

  HostTensor x(DType::bf16, {R, C}), w(DType::bf16, {C}), b(DType::bf16, {C}),
      y(DType::bf16, {R, C});
  x.fillRandom(1, -3, 3);
  w.fillRandom(2);
  b.fillRandom(3);
  cuda::Buffer bx(x.storageBytes()), bw(w.storageBytes()), bb(b.storageBytes()),
      by(y.storageBytes()), copy(x.storageBytes());
  bx.upload(x.data(), x.storageBytes());
  bw.upload(w.data(), w.storageBytes());
  bb.upload(b.data(), b.storageBytes());
  by.fill(0xFF);
  std::map<std::string, TensorRef> t{
      {"X", x.ref()}, {"W", w.ref()}, {"Y", y.ref()}};
  t["X"].data = bx.data();
  t["W"].data = bw.data();
  t["Y"].data = by.data();
  if (layer) {
    t["B"] = b.ref();
    t["B"].data = bb.data();
  }

  AutotunedKernel norm("example_" + which, names,
                       [&](size_t i) { return build(C, configs[i]); },
                       {.outputs = {"Y"}, .tolerance = 1e-2});
  // The library's key: the column count and the rows' power of two.
  const std::string key = kernels::rowNormKey(R, C);
  norm.launch(key, t);
  cuda::synchronize();
  std::printf("%s %lldx%lld bf16 on %s: %s (%s)\n", which.c_str(), (long long)R,
              (long long)C, cuda::device().name.c_str(),
              norm.chosen(key)->c_str(), norm.lastSource().c_str());
  if (norm.lastTuning())
    for (const TunedTiming &tt : norm.lastTuning()->timings)
      std::printf("  %-18s %8.4f ms  %s\n", tt.config.c_str(), tt.ms,
                  tt.status.c_str());
  by.download(y.data(), y.storageBytes());
  const double worst = worstError(layer, x, w, b, y);

  // Bandwidth: each launch reads x and w (and b) and writes y; the copy
  // moves the same bytes of x (read and write) in the same process.
  auto medianMs = [](auto &&run) {
    std::vector<float> ms;
    for (int i = 0; i < 3; ++i)
      run();
    cuda::Timer timer;
    for (int i = 0; i < 30; ++i) {
      timer.start();
      run();
      ms.push_back(timer.stop());
    }
    std::sort(ms.begin(), ms.end());
    return double(ms[ms.size() / 2]);
  };
  const double normMs = medianMs([&] { norm.launch(key, t); });
  const double copyMs = medianMs([&] {
    cuda::copyDeviceToDevice(copy.data(), bx.data(), x.storageBytes());
  });
  const double bytes = 2.0 * double(x.storageBytes()) +
                       double(w.storageBytes()) * (layer ? 2 : 1);
  const double normTBs = bytes / normMs / 1e9,
               copyTBs = 2.0 * double(x.storageBytes()) / copyMs / 1e9;
  std::printf("%s %.4f ms, %.2f TB/s; copy of x %.4f ms, %.2f TB/s: %.2f of "
              "the copy's bandwidth\n",
              which.c_str(), normMs, normTBs, copyMs, copyTBs,
              normTBs / copyTBs);
  std::printf("worst relative error %.2e against fp64: %s\n", worst,
              worst < 2e-2 ? "PASS" : "FAIL");
  return worst < 2e-2 ? 0 : 1;
} catch (const kiln::Error &e) {
  std::fprintf(stderr, "rmsnorm: %s\n", e.what());
  return 1;
}
