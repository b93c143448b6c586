//===- RmsNorm.cpp - RMSNorm and LayerNorm in kiln's DSL ------------------===//
#include "kiln/kernels/RmsNorm.h"
#include "kiln/dsl/Dsl.h"

#include <bit>
#include <functional>

using namespace kiln::dsl;

namespace kiln::kernels {

std::string RmsNormConfig::name() const {
  return "rows=" + std::to_string(rows) + " warps=" + std::to_string(warps);
}

std::vector<RmsNormConfig> rmsNormConfigs() {
  std::vector<RmsNormConfig> out;
  for (int64_t rows : {1, 2, 4, 8})
    for (int warps : {4, 8})
      out.push_back({rows, warps});
  return out;
}

namespace {
/// The tile width of a row of `cols`: the power of two at or above it (the
/// columns past `cols` load as 0 and are not stored).
int64_t tileCols(int64_t cols) {
  return int64_t(std::bit_ceil(uint64_t(cols)));
}

/// A row norm's kernel: `name` over bf16 X, Y (R, cols) and W (cols), plus
/// the tensors `body` declares, rows whole in registers (tiles of
/// tileCols(cols)); `body` maps a block of X (f32) and W (f32, a row) to Y
/// (f32).
Kernel rowNorm(const char *name, int64_t cols, const RmsNormConfig &c,
               const std::function<Tile(KernelBuilder &, Tile, Tile)> &body) {
  if (cols < 1 || cols > (int64_t(1) << 20))
    throw Error(std::string(name) + ": cols must be in [1, 2^20], got " +
                std::to_string(cols));
  KernelBuilder k(name);
  Index rows = k.scalarArg("R");
  k.setGrid({cdiv(rows, c.rows)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", bf16, {rows, cols});
  auto W = k.tensorArg("W", bf16, {cols});
  auto Y = k.tensorArg("Y", bf16, {rows, cols});
  Index r0 = programId(0) * c.rows;
  Tile x = load(X.block({r0, 0}, {c.rows, tileCols(cols)})).to(f32);
  Tile w = row(load(W.block({0}, {tileCols(cols)})).to(f32));
  store(Y.block({r0, 0}), body(k, x, w).to(bf16));
  return k.finish();
}
} // namespace

Kernel rmsNorm(int64_t cols, const RmsNormConfig &c, double eps) {
  // Columns past `cols` are 0: they add nothing to the sum of squares.
  return rowNorm("rmsnorm", cols, c, [&](KernelBuilder &, Tile x, Tile w) {
    Tile meanSquare = reduceSum(x * x, 1) / double(cols);
    return x * column(rsqrt(meanSquare + eps)) * w;
  });
}

Kernel layerNorm(int64_t cols, const RmsNormConfig &c, double eps) {
  return rowNorm("layernorm", cols, c, [&](KernelBuilder &k, Tile x, Tile w) {
    auto B = k.tensorArg("B", bf16, {cols});
    // Two passes over the registers: the mean, then the centred variance
    // (no cancellation of E[x²] − E[x]²). Columns past `cols` are 0 but
    // centred they would not be: masked where the tile is wider.
    Tile centred = x - column(reduceSum(x, 1) / double(cols));
    if (tileCols(cols) != cols)
      centred = where(row(arange(tileCols(cols))) < Index(cols), centred, 0.0);
    Tile variance = reduceSum(centred * centred, 1) / double(cols);
    return centred * column(rsqrt(variance + eps)) * w +
           row(load(B.block({0}, {tileCols(cols)})).to(f32));
  });
}

} // namespace kiln::kernels
