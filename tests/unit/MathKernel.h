//===- MathKernel.h - one elementwise function over a tensor ---*- C++ -*-===//
//
// Shared by the CPU and GPU tests of the DSL's math functions.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_MATHKERNEL_H
#define KILN_TESTS_MATHKERNEL_H

#include "kiln/dsl/Dsl.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace kiln::test {

/// A function of the DSL, its host reference and the inputs it is checked on.
struct MathCase {
  std::string name;
  std::function<dsl::Tile(const dsl::Tile &, dsl::MathMode)> f;
  std::function<double(double)> reference;
  double lo, hi;                          ///< inputs uniform in [lo, hi)
  double fastTolerance, preciseTolerance; ///< absolute error
};

inline std::vector<MathCase> mathCases() {
  using namespace kiln::dsl;
  using M = MathMode;
  return {
      {"tanh", [](const Tile &x, M m) { return tanh(x, m); },
       [](double x) { return std::tanh(x); }, -6, 6, 2e-3, 1e-5},
      {"sigmoid", [](const Tile &x, M m) { return sigmoid(x, m); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -10, 10, 2e-3, 1e-5},
      {"sin", [](const Tile &x, M m) { return sin(x, m); },
       [](double x) { return std::sin(x); }, -10, 10, 1e-5, 1e-5},
      {"cos", [](const Tile &x, M m) { return cos(x, m); },
       [](double x) { return std::cos(x); }, -10, 10, 1e-5, 1e-5},
      {"rsqrt", [](const Tile &x, M m) { return rsqrt(x, m); },
       [](double x) { return 1 / std::sqrt(x); }, 0.5, 100, 1e-5, 1e-6},
      {"erf", [](const Tile &x, M) { return erf(x); },
       [](double x) { return std::erf(x); }, -4, 4, 1e-5, 1e-5},
      {"abs", [](const Tile &x, M) { return abs(x); },
       [](double x) { return std::fabs(x); }, -5, 5, 0, 0},
      {"floor", [](const Tile &x, M) { return floor(x); },
       [](double x) { return std::floor(x); }, -5, 5, 0, 0},
      {"pow", [](const Tile &x, M m) { return pow(x, 1.5, m); },
       [](double x) { return std::pow(x, 1.5); }, 0.1, 4, 1e-4, 1e-5},
      {"exp", [](const Tile &x, M m) { return exp(x, m); },
       [](double x) { return std::exp(x); }, -10, 3, 2e-5, 4e-6},
      {"exp2", [](const Tile &x, M m) { return exp2(x, m); },
       [](double x) { return std::exp2(x); }, -10, 4, 2e-5, 4e-6},
      {"log", [](const Tile &x, M m) { return log(x, m); },
       [](double x) { return std::log(x); }, 0.01, 100, 1e-5, 1e-6},
      {"log2", [](const Tile &x, M m) { return log2(x, m); },
       [](double x) { return std::log2(x); }, 0.01, 100, 1e-5, 1e-6},
  };
}

/// Y = f(X) over a 64 x 128 fp32 tensor, one 16 x 128 block per program.
inline Kernel mathKernel(const MathCase &c, dsl::MathMode mode) {
  using namespace kiln::dsl;
  KernelBuilder k("math_" + c.name, {4});
  auto X = k.tensorArg("X", f32, {64, 128});
  auto Y = k.tensorArg("Y", f32, {64, 128});
  Index r0 = programId(0) * 16;
  store(Y.block({r0, 0}), c.f(load(X.block({r0, 0}, {16, 128})), mode));
  return k.finish();
}

} // namespace kiln::test

#endif // KILN_TESTS_MATHKERNEL_H
