//===- Rotary.cpp - rotary position embedding in kiln's DSL ---------------===//
#include "kiln/kernels/Rotary.h"
#include "kiln/dsl/Dsl.h"

using namespace kiln::dsl;

namespace kiln::kernels {

std::string RotaryConfig::name() const {
  return "tokens=" + std::to_string(tokens) + " warps=" + std::to_string(warps);
}

std::vector<RotaryConfig> rotaryConfigs() {
  std::vector<RotaryConfig> out;
  for (int64_t tokens : {16, 32, 64, 128})
    for (int warps : {4, 8})
      out.push_back({tokens, warps});
  return out;
}

Kernel rotary(int64_t headDim, const RotaryConfig &c, bool inverse) {
  if (headDim < 16 || (headDim & (headDim - 1)))
    throw Error("rotary: the head dimension must be a power of two >= 16, "
                "got " +
                std::to_string(headDim));
  if (c.tokens < 1 || (c.tokens & (c.tokens - 1)))
    throw Error("rotary: tokens per program must be a power of two, got " +
                std::to_string(c.tokens));
  const int64_t half = headDim / 2;
  KernelBuilder k(inverse ? "rotary_inverse" : "rotary");
  Index H = k.scalarArg("H"), T = k.scalarArg("T"), P = k.scalarArg("P");
  k.setGrid({cdiv(T, c.tokens)});
  k.setWarps(c.warps);
  auto X = k.tensorArg("X", bf16, {H, T, headDim});
  auto Y = k.tensorArg("Y", bf16, {H, T, headDim});
  auto Pos = k.tensorArg("Pos", i32, {T});
  auto Cos = k.tensorArg("Cos", f32, {P, half});
  auto Sin = k.tensorArg("Sin", f32, {P, half});
  Index t0 = programId(0) * c.tokens;
  // The tokens' angles once, for every head.
  Tile pos = load(Pos.block({t0}, {c.tokens}));
  Tile cs = gather(Cos, pos, 0, half), sn = gather(Sin, pos, 0, half);
  if (inverse)
    sn = neg(sn);
  forRange(0, H, 1, [&](Index h) {
    Tile x1 = load(X[h].block({t0, 0}, {c.tokens, half})).to(f32);
    Tile x2 = load(X[h].block({t0, half}, {c.tokens, half})).to(f32);
    store(Y[h].block({t0, 0}), (x1 * cs - x2 * sn).to(bf16));
    store(Y[h].block({t0, half}), (x2 * cs + x1 * sn).to(bf16));
  });
  return k.finish();
}

} // namespace kiln::kernels
