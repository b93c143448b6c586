//===- CrossEntropy.cpp - softmax cross-entropy in kiln's DSL -------------===//
#include "kiln/kernels/CrossEntropy.h"
#include "kiln/dsl/Dsl.h"

#include <optional>

using namespace kiln::dsl;

namespace kiln::kernels {

std::string CrossEntropyConfig::name() const {
  return "rows=" + std::to_string(rows) + " blockV=" + std::to_string(blockV) +
         " warps=" + std::to_string(warps);
}

std::vector<CrossEntropyConfig> crossEntropyConfigs() {
  std::vector<CrossEntropyConfig> out;
  for (int64_t rows : {1, 2, 4})
    for (int64_t blockV : {2048, 4096, 8192})
      for (int warps : {4, 8})
        if (rows * blockV <= 16384)
          out.push_back({rows, blockV, warps});
  return out;
}

namespace {
/// The arguments both directions share and the program's block of rows.
struct Rows {
  Index R, V, r0;
  TensorView X, Labels, LSE;
  Tile labels; ///< (rows, 1) i32: ignoreIndex past R
  Tile valid;  ///< (rows, 1): the label is not ignoreIndex
};

Rows declare(KernelBuilder &k, const CrossEntropyConfig &c,
             int64_t ignoreIndex) {
  if (c.rows < 1 || c.blockV < 16 || (c.blockV & (c.blockV - 1)) ||
      (c.rows & (c.rows - 1)))
    throw Error("cross entropy: rows and blockV must be powers of two, "
                "blockV >= 16; got " +
                c.name());
  Index R = k.scalarArg("R"), V = k.scalarArg("V");
  k.setGrid({cdiv(R, c.rows)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", bf16, {R, V});
  auto Labels = k.tensorArg("Labels", DType::i64, {R});
  auto LSE = k.tensorArg("LSE", f32, {R});
  Index r0 = programId(0) * c.rows;
  Tile labels = load(Labels.block({r0}, {c.rows}), double(ignoreIndex)).to(i32);
  return Rows{R,
              V,
              r0,
              X,
              Labels,
              LSE,
              column(labels),
              column(labels != double(ignoreIndex))};
}

/// The (rows, blockV) columns' indices of the step at v0, as i32.
Tile columns(const CrossEntropyConfig &c, Index v0) {
  return row(arange(c.blockV)) + v0;
}
} // namespace

Kernel crossEntropyForward(const CrossEntropyConfig &c, int64_t ignoreIndex) {
  KernelBuilder k("cross_entropy_fwd");
  Rows s = declare(k, c, ignoreIndex);
  auto Loss = k.tensorArg("Loss", f32, {s.R});
  Tile m = full({c.rows}, -inf, f32), sum = zeros({c.rows}, f32),
       picked = zeros({c.rows}, f32);
  forRange(0, s.V, c.blockV, carry(m, sum, picked), [&](Index v0) {
    Tile x = load(s.X.block({s.r0, v0}, {c.rows, c.blockV}), -inf).to(f32);
    Tile mNew = max(m, reduceMax(x, 1));
    // A row past R stays at -inf: its sum is never read.
    sum = sum * exp(m - mNew) + reduceSum(exp(x - column(mNew)), 1);
    picked = picked + reduceSum(where(columns(c, v0) == s.labels, x, 0.0), 1);
    m = mNew;
  });
  Tile lse = m + log(sum);
  store(s.LSE.block({s.r0}), lse);
  store(Loss.block({s.r0}),
        reduceSum(where(s.valid, column(lse - picked), 0.0), 1));
  return k.finish();
}

Kernel crossEntropyBackward(const CrossEntropyConfig &c, int64_t ignoreIndex,
                            bool perRowGrad) {
  KernelBuilder k("cross_entropy_bwd");
  Rows s = declare(k, c, ignoreIndex);
  std::optional<TensorView> DLoss;
  if (perRowGrad)
    DLoss = k.tensorArg("DLoss", f32, {s.R});
  auto Scale = k.tensorArg("Scale", f32, {1});
  auto DX = k.tensorArg("DX", bf16, {s.R, s.V});
  Tile lse = column(load(s.LSE.block({s.r0}, {c.rows})));
  // The gradient of each row's loss; 0 for an ignored label.
  Tile scale = zeros({c.rows, 1}, f32) + row(load(Scale.block({0}, {1})));
  if (DLoss)
    scale = scale * column(load(DLoss->block({s.r0}, {c.rows})));
  scale = where(s.valid, scale, 0.0);
  forRange(0, s.V, c.blockV, [&](Index v0) {
    Tile x = load(s.X.block({s.r0, v0}, {c.rows, c.blockV})).to(f32);
    Tile p = exp(x - lse) - (columns(c, v0) == s.labels).to(f32);
    store(DX.block({s.r0, v0}), (p * scale).to(bf16));
  });
  return k.finish();
}

} // namespace kiln::kernels
