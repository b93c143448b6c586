//===- RmsNorm.cpp - RMSNorm and LayerNorm in kiln's DSL ------------------===//
#include "kiln/kernels/RmsNorm.h"
#include "kiln/dsl/Dsl.h"

#include <array>
#include <bit>
#include <functional>
#include <optional>

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

std::string RowNormTypes::name() const {
  return std::string("x=") + dtypeName(x) + " w=" + dtypeName(w) +
         " y=" + dtypeName(y);
}

namespace {
/// Refuses rows outside [1, kRowNormMaxCols] and element types other than
/// bf16 and f32.
void checkRowNorm(const char *name, int64_t cols, const RowNormTypes &t) {
  if (cols < 1 || cols > kRowNormMaxCols)
    throw Error(std::string(name) + ": cols must be in [1, 2^20], got " +
                std::to_string(cols));
  for (DType d : {t.x, t.w, t.y})
    if (d != bf16 && d != f32)
      throw Error(std::string(name) + ": tensors are bf16 or f32, got " +
                  t.name());
}

/// The tile width of a row of `cols`: the power of two at or above it (the
/// columns past `cols` load as 0 and are not stored).
int64_t tileCols(int64_t cols) {
  return int64_t(std::bit_ceil(uint64_t(cols)));
}

/// A row norm's kernel: `name` over X, Y (R, cols) and W (cols) of `types`,
/// plus the tensors `body` declares, rows whole in registers (tiles of
/// tileCols(cols)); `body` maps a block of X (f32) and W (f32, a row) to Y
/// (f32).
Kernel rowNorm(const char *name, int64_t cols, const RmsNormConfig &c,
               const RowNormTypes &types,
               const std::function<Tile(KernelBuilder &, Tile, Tile)> &body) {
  checkRowNorm(name, cols, types);
  KernelBuilder k(name);
  Index rows = k.scalarArg("R");
  k.setGrid({cdiv(rows, c.rows)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", types.x, {rows, cols});
  auto W = k.tensorArg("W", types.w, {cols});
  auto Y = k.tensorArg("Y", types.y, {rows, cols});
  Index r0 = programId(0) * c.rows;
  Tile x = load(X.block({r0, 0}, {c.rows, tileCols(cols)})).to(f32);
  Tile w = row(load(W.block({0}, {tileCols(cols)})).to(f32));
  store(Y.block({r0, 0}), body(k, x, w).to(types.y));
  return k.finish();
}
} // namespace

Kernel rmsNorm(int64_t cols, const RmsNormConfig &c, double eps,
               RowNormTypes types) {
  // Columns past `cols` are 0: they add nothing to the sum of squares.
  return rowNorm("rmsnorm", cols, c, types,
                 [&](KernelBuilder &, Tile x, Tile w) {
                   Tile meanSquare = reduceSum(x * x, 1) / double(cols);
                   return x * column(rsqrt(meanSquare + eps)) * w;
                 });
}

Kernel layerNorm(int64_t cols, const RmsNormConfig &c, double eps,
                 RowNormTypes types) {
  return rowNorm(
      "layernorm", cols, c, types, [&](KernelBuilder &k, Tile x, Tile w) {
        auto B = k.tensorArg("B", types.w, {cols});
        // Two passes over the registers: the mean, then the centred variance
        // (no cancellation of E[x²] − E[x]²). Columns past `cols` are 0 but
        // centred they would not be: masked where the tile is wider.
        Tile centred = x - column(reduceSum(x, 1) / double(cols));
        if (tileCols(cols) != cols)
          centred =
              where(row(arange(tileCols(cols))) < Index(cols), centred, 0.0);
        Tile variance = reduceSum(centred * centred, 1) / double(cols);
        return centred * column(rsqrt(variance + eps)) * w +
               row(load(B.block({0}, {tileCols(cols)})).to(f32));
      });
}

namespace {
/// A row norm's gradient: `name` over X, DY, DX (R, cols) and W of `types`
/// (cols), fp32 partial sums DWP (and DBP where `bias`) (P, cols), one row
/// per program. Program p takes the row blocks p, p + P, ... (P programs,
/// P a run-time argument bound from DWP), writes each block's DX, and sums
/// its blocks' contributions to dW (dB) in registers: its own row of DWP,
/// which the caller adds up over P (no atomics; a row written whole, zeros
/// where a program had no rows). `body` maps a block of X, DY (f32) and W
/// (a row) to {DX, x̂}, f32: dW sums DY·x̂ over the rows, dB sums DY.
Kernel rowNormBackward(
    const char *name, int64_t cols, const RmsNormConfig &c, bool bias,
    const RowNormTypes &types,
    const std::function<std::array<Tile, 2>(Tile, Tile, Tile)> &body) {
  checkRowNorm(name, cols, types);
  const int64_t t = tileCols(cols);
  KernelBuilder k(name);
  Index rows = k.scalarArg("R"), programs = k.scalarArg("P");
  k.setGrid({programs});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", types.x, {rows, cols});
  auto W = k.tensorArg("W", types.w, {cols});
  auto DY = k.tensorArg("DY", types.y, {rows, cols});
  auto DX = k.tensorArg("DX", types.x, {rows, cols});
  auto DWP = k.tensorArg("DWP", f32, {programs, cols});
  std::optional<TensorView> DBP;
  if (bias)
    DBP = k.tensorArg("DBP", f32, {programs, cols});
  Tile w = row(load(W.block({0}, {t})).to(f32));
  Tile dw = zeros({1, t}, f32), db = zeros({1, t}, f32);
  auto step = [&](Index r0) {
    Tile x = load(X.block({r0, 0}, {c.rows, t})).to(f32);
    Tile dy = load(DY.block({r0, 0}, {c.rows, t})).to(f32);
    auto [dx, xhat] = body(x, dy, w);
    store(DX.block({r0, 0}), dx.to(types.x));
    // Rows and columns past the tensor load as 0: dy is 0 there.
    dw = dw + row(reduceSum(dy * xhat, 0));
    if (bias)
      db = db + row(reduceSum(dy, 0));
  };
  Index first = programId(0) * c.rows, stride = programs * c.rows;
  if (bias)
    forRange(first, rows, stride, carry(dw, db), step);
  else
    forRange(first, rows, stride, carry(dw), step);
  store(DWP.block({programId(0), 0}), dw);
  if (bias)
    store(DBP->block({programId(0), 0}), db);
  return k.finish();
}
} // namespace

Kernel rmsNormBackward(int64_t cols, const RmsNormConfig &c, double eps,
                       RowNormTypes types) {
  // y = x·r·w, r = (mean(x²) + eps)^-1/2; with g = dy·w:
  // dx = r·g − x·r³·mean(g·x), and dW sums dy·x·r.
  return rowNormBackward(
      "rmsnorm_backward", cols, c, false, types, [&](Tile x, Tile dy, Tile w) {
        Tile r = rsqrt(reduceSum(x * x, 1) / double(cols) + eps);
        Tile g = dy * w;
        Tile gx = reduceSum(g * x, 1) / double(cols);
        Tile dx = column(r) * g - x * column(r * r * r * gx);
        return std::array<Tile, 2>{dx, x * column(r)};
      });
}

Kernel layerNormBackward(int64_t cols, const RmsNormConfig &c, double eps,
                         RowNormTypes types) {
  // x̂ = (x − mean)·r, y = x̂·w + b; with g = dy·w:
  // dx = r·(g − mean(g) − x̂·mean(g·x̂)); dW sums dy·x̂, dB sums dy.
  return rowNormBackward(
      "layernorm_backward", cols, c, true, types, [&](Tile x, Tile dy, Tile w) {
        Tile centred = x - column(reduceSum(x, 1) / double(cols));
        if (tileCols(cols) != cols) // past cols: 0, not −mean
          centred =
              where(row(arange(tileCols(cols))) < Index(cols), centred, 0.0);
        Tile r = rsqrt(reduceSum(centred * centred, 1) / double(cols) + eps);
        Tile xhat = centred * column(r);
        Tile g = dy * w;
        Tile mg = reduceSum(g, 1) / double(cols);
        Tile mgx = reduceSum(g * xhat, 1) / double(cols);
        Tile dx = column(r) * (g - column(mg) - xhat * column(mgx));
        return std::array<Tile, 2>{dx, xhat};
      });
}

} // namespace kiln::kernels
