//===- tunable_kernel.cpp - a user's kernel that `kiln tune` can tune -----===//
//
// Built as a shared library (libkiln_example_tunable.so). Loading it
// registers `row_normalize`, a kernel of the user's with a space of Configs,
// so that the command line tunes it like kiln's own:
//
//   kiln tune --load build/examples/libkiln_example_tunable.so --list
//   kiln tune --load build/examples/libkiln_example_tunable.so \
//       row_normalize --sizes rows=8192,cols=4096
//
// The winner is recorded in the tuning database under the name and key that
// rowNormalizeTuned()'s launches look up (AutotunedKernel), so a program
// that launches the kernel afterwards tunes nothing.
//
// The kernel: each row scaled by `scale`, the entries above the diagonal
// zeroed, then divided by the row's L1 norm (custom_kernel.cpp's kernel,
// with run-time sizes and bf16 in and out).
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Autotuned.h"
#include "kiln/Compiler/Tunable.h"
#include "kiln/dsl/Dsl.h"

using namespace kiln;
using namespace kiln::dsl;

namespace {

struct RowNormalizeConfig {
  int64_t rows, cols; ///< the block a program takes per step
  int warps;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + " w" +
           std::to_string(warps);
  }
};

Kernel rowNormalize(const RowNormalizeConfig &c, double scale) {
  KernelBuilder k("row_normalize");
  Index R = k.scalarArg("R"), C = k.scalarArg("C");
  k.setGrid({cdiv(R, c.rows)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", bf16, {R, C});
  auto Y = k.tensorArg("Y", bf16, {R, C});
  Index r0 = programId(0) * c.rows;
  Tile r = column(arange(c.rows) + r0);
  Tile norm = zeros({c.rows}, f32);
  forRange(0, C, c.cols, carry(norm), [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {c.rows, c.cols})).to(f32) * scale;
    norm =
        norm + reduceSum(where(r >= row(arange(c.cols) + c0), abs(x), 0.0), 1);
  });
  forRange(0, C, c.cols, [&](Index c0) {
    Tile x = load(X.block({r0, c0}, {c.rows, c.cols})).to(f32) * scale;
    Tile y = where(r >= row(arange(c.cols) + c0), x, 0.0) / column(norm);
    store(Y.block({r0, c0}), y.to(bf16));
  });
  return k.finish();
}

/// The kernel a program launches (and `kiln tune` tunes): its Configs, the
/// database name "example.row_normalize", outputs compared at bf16's
/// tolerance; the key: the column count.
std::unique_ptr<AutotunedKernel> rowNormalizeTuned(double scale) {
  std::vector<RowNormalizeConfig> configs;
  for (int64_t rows : {4, 16, 32})
    for (int64_t cols : {256, 1024})
      for (int warps : {4, 8})
        configs.push_back({rows, cols, warps});
  std::vector<std::string> names;
  for (const RowNormalizeConfig &c : configs)
    names.push_back(c.name());
  return std::make_unique<AutotunedKernel>(
      "example.row_normalize", names,
      [=](size_t i) { return rowNormalize(configs[i], scale); },
      AutotunedKernel::Options{.outputs = {"Y"}, .tolerance = 1e-2});
}

const RegisterTunable kRowNormalize(
    {"row_normalize",
     "a user's kernel: scale, causal mask, L1 row norm (examples/"
     "tunable_kernel.cpp)",
     {{"rows", 8192}, {"cols", 4096}},
     [](const TuneSizes &s) {
       const int64_t R = s.at("rows"), C = s.at("cols");
       if (R < 1 || C < 1)
         throw Error("--rows and --cols must be positive");
       TuneProblem p{rowNormalizeTuned(0.5), "cols=" + std::to_string(C)};
       HostTensor x(DType::bf16, {R, C});
       x.fillRandom(1, 0.5, 2); // positive: no row's norm is 0
       p.tensors.emplace("X", std::move(x));
       p.tensors.emplace("Y", HostTensor(DType::bf16, {R, C}));
       p.bytes = 3.0 * R * C * 2; // X read twice, Y written
       return p;
     }});

} // namespace
