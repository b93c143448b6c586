//===- NormBackwardTest.cpp - the row norms' gradients on the CPU executor ===//
//
// kernels::rmsNormBackward / layerNormBackward against central differences
// of the forward's formula in fp64 (independent of the analytic gradient the
// kernels compute): dX, and dW (dB) as the sums of the per-program partial
// rows; ragged rows and columns, more programs than row blocks and fewer;
// bf16 tensors and autocast's (fp32 X, DX, W, B; bf16 DY). The forwards
// against that formula with fp32 X and W and a bf16 or fp32 Y.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/RmsNorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace kiln;

namespace {

/// Σ dy·norm(x) over the tensors, in fp64: the loss whose gradients the
/// kernels compute.
double loss(bool layer, int64_t R, int64_t C, const std::vector<double> &x,
            const std::vector<double> &w, const std::vector<double> &b,
            const std::vector<double> &dy, double eps) {
  double total = 0;
  for (int64_t r = 0; r < R; ++r) {
    const double *xr = &x[r * C];
    double mean = 0, square = 0;
    for (int64_t c = 0; c < C; ++c)
      mean += xr[c] / C;
    for (int64_t c = 0; c < C; ++c) {
      const double v = layer ? xr[c] - mean : xr[c];
      square += v * v / C;
    }
    const double inv = 1 / std::sqrt(square + eps);
    for (int64_t c = 0; c < C; ++c) {
      const double y =
          ((layer ? xr[c] - mean : xr[c]) * inv) * w[c] + (layer ? b[c] : 0.0);
      total += dy[r * C + c] * y;
    }
  }
  return total;
}

std::vector<double> values(const HostTensor &t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.flatAt(i);
  return v;
}

/// d loss / d v[i] for every i, by central differences.
std::vector<double> numeric(const std::function<double()> &f,
                            std::vector<double> &v) {
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i], h = 1e-4 * std::max(1.0, std::fabs(keep));
    v[i] = keep + h;
    const double up = f();
    v[i] = keep - h;
    g[i] = (up - f()) / (2 * h);
    v[i] = keep;
  }
  return g;
}

/// max |got − want| / max |want|.
double relative(const std::vector<double> &got,
                const std::vector<double> &want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

} // namespace

TEST(NormBackwardOnCpu, GradientsMatchCentralDifferences) {
  struct Case {
    int64_t R, C, P;
    kernels::RmsNormConfig config;
  };
  const kernels::RowNormTypes autocast{DType::f32, DType::f32, DType::bf16};
  for (const kernels::RowNormTypes &ty : {kernels::RowNormTypes{}, autocast}) {
    for (bool layer : {false, true}) {
      for (const Case &c : {Case{37, 24, 5, {1, 4}}, Case{37, 64, 50, {4, 4}},
                            Case{9, 300, 2, {2, 8}}, Case{1, 16, 3, {8, 4}}}) {
        SCOPED_TRACE(std::string(layer ? "layer" : "rms") +
                     " R=" + std::to_string(c.R) + " C=" + std::to_string(c.C) +
                     " P=" + std::to_string(c.P) + " " + c.config.name() + " " +
                     ty.name());
        const double eps = layer ? 1e-5 : 1e-6;
        HostTensor x(ty.x, {c.R, c.C}), w(ty.w, {c.C}), b(ty.w, {c.C}),
            dy(ty.y, {c.R, c.C}), dx(ty.x, {c.R, c.C}),
            dwp(DType::f32, {c.P, c.C}), dbp(DType::f32, {c.P, c.C});
        x.fillRandom(1, -3, 3);
        w.fillRandom(2);
        b.fillRandom(3);
        dy.fillRandom(4);
        dx.poison();
        dwp.poison();
        dbp.poison();
        Kernel k = layer ? kernels::layerNormBackward(c.C, c.config, eps, ty)
                         : kernels::rmsNormBackward(c.C, c.config, eps, ty);
        std::map<std::string, TensorRef> t{{"X", x.ref()},
                                           {"W", w.ref()},
                                           {"DY", dy.ref()},
                                           {"DX", dx.ref()},
                                           {"DWP", dwp.ref()}};
        if (layer)
          t["DBP"] = dbp.ref();
        runOnCpu(k, k.bind(t));

        std::vector<double> xv = values(x), wv = values(w), bv = values(b),
                            dyv = values(dy);
        auto f = [&] { return loss(layer, c.R, c.C, xv, wv, bv, dyv, eps); };
        // dX rounds to bf16, or stays fp32 (then only the differences' error).
        EXPECT_LE(relative(values(dx), numeric(f, xv)),
                  ty.x == DType::f32 ? 1e-4 : 1e-2);
        auto sums = [&](const HostTensor &partial) {
          std::vector<double> s(c.C, 0.0);
          for (int64_t p = 0; p < c.P; ++p)
            for (int64_t i = 0; i < c.C; ++i)
              s[i] += partial.flatAt(p * c.C + i);
          return s;
        };
        EXPECT_LE(relative(sums(dwp), numeric(f, wv)), 1e-4);
        if (layer) {
          EXPECT_LE(relative(sums(dbp), numeric(f, bv)), 1e-4);
        }
      }
    }
  }
}

TEST(NormBackwardOnCpu, ForwardsReadFloat32AsItIs) {
  // fp32 X and W (and B) read without rounding: Y in fp32 matches the fp64
  // formula to fp32's error, in bf16 to bf16's; a ragged row (300 columns).
  for (bool layer : {false, true})
    for (DType yType : {DType::f32, DType::bf16}) {
      const kernels::RowNormTypes ty{DType::f32, DType::f32, yType};
      SCOPED_TRACE(std::string(layer ? "layer " : "rms ") + ty.name());
      const int64_t R = 7, C = 300;
      const double eps = layer ? 1e-5 : 1e-6;
      HostTensor x(DType::f32, {R, C}), w(DType::f32, {C}), b(DType::f32, {C}),
          y(yType, {R, C});
      x.fillRandom(11, -3, 3);
      w.fillRandom(12);
      b.fillRandom(13);
      y.poison();
      Kernel k = layer ? kernels::layerNorm(C, {2, 4}, eps, ty)
                       : kernels::rmsNorm(C, {2, 4}, eps, ty);
      std::map<std::string, TensorRef> t{
          {"X", x.ref()}, {"W", w.ref()}, {"Y", y.ref()}};
      if (layer)
        t["B"] = b.ref();
      runOnCpu(k, k.bind(t));
      // y[r][c] as the loss's formula: its derivative in dy[r][c].
      const std::vector<double> xv = values(x), wv = values(w), bv = values(b);
      std::vector<double> want(R * C);
      for (int64_t i = 0; i < R * C; ++i) {
        std::vector<double> dy(R * C, 0.0);
        dy[i] = 1;
        want[i] = loss(layer, R, C, xv, wv, bv, dy, eps);
      }
      EXPECT_LE(relative(values(y), want), yType == DType::f32 ? 1e-5 : 1e-2);
    }
}

// Every Config of the tuning space compiles for Hopper, GPT-2's 768 and
// Llama's 4096 columns.
TEST(NormBackwardOnCpu, EveryConfigCompilesForHopper) {
  GpuTarget target{.arch = "sm_90a"};
  for (const kernels::RmsNormConfig &c : kernels::rmsNormConfigs())
    for (int64_t cols : {768, 4096}) {
      EXPECT_NO_THROW(compileForGpu(kernels::rmsNormBackward(cols, c), target))
          << c.name() << " cols " << cols;
      EXPECT_NO_THROW(
          compileForGpu(kernels::layerNormBackward(cols, c), target))
          << c.name() << " cols " << cols;
    }
}
