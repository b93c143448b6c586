//===- Gemm.cpp - tiled matrix multiply in kiln's DSL ---------------------===//
#include "kiln/kernels/Gemm.h"
#include "kiln/dsl/Dsl.h"

#include <limits>

using namespace kiln::dsl;

namespace kiln::kernels {

const char *gemmActivationName(GemmActivation a) {
  switch (a) {
  case GemmActivation::None:
    return "none";
  case GemmActivation::Relu:
    return "relu";
  case GemmActivation::GeluTanh:
    return "gelu";
  }
  return "?";
}

std::optional<GemmActivation> parseGemmActivation(const std::string &name) {
  for (GemmActivation a :
       {GemmActivation::None, GemmActivation::Relu, GemmActivation::GeluTanh})
    if (name == gemmActivationName(a))
      return a;
  return std::nullopt;
}

std::vector<std::pair<std::string, GemmConfig>> gemmConfigs(int sm) {
  std::vector<std::pair<std::string, GemmConfig>> out;
  auto add = [&](int64_t m, int64_t n, int64_t k, int warps, int stages,
                 bool tmaStore = false, bool persistent = false) {
    GemmConfig c{.blockM = m,
                 .blockN = n,
                 .blockK = k,
                 .warps = warps,
                 .stages = stages,
                 .wgmma = sm >= 90,
                 .warpSpecialize = sm >= 90,
                 .tmaStore = tmaStore,
                 .persistent = persistent,
                 .groupM = 8};
    out.push_back({std::to_string(m) + "x" + std::to_string(n) + "x" +
                       std::to_string(k) + " s" + std::to_string(stages) +
                       (tmaStore ? " tma-store" : "") +
                       (persistent ? " persistent" : ""),
                   c});
  };
  if (sm >= 90) {
    // `kiln bench gemm`'s default first; C through TMA stores measured
    // 1.27x st.global's at an LM head's 8192x50264x768 (`kiln tune linear`,
    // H200, docs/experiments/2026-11-28-session55.txt), 1.03-1.07x square.
    add(128, 256, 64, 8, 3, true);
    add(128, 256, 64, 8, 3);
    add(128, 256, 64, 8, 4);
    add(128, 128, 64, 8, 4);
    add(128, 128, 64, 8, 5);
    add(128, 128, 64, 8, 4, true);
    // Persistent CTAs overlap a tile's epilogue with the next one's loads:
    // for a short K (an LM head's 768) the epilogue is a large share.
    add(128, 256, 64, 8, 3, true, true);
    add(128, 128, 64, 8, 4, true, true);
  } else {
    add(128, 128, 32, 8, 3);
    add(128, 64, 32, 4, 3);
    add(64, 64, 32, 4, 4);
  }
  return out;
}

Kernel gemm(const GemmShape &s, const GemmConfig &c) {
  if (s.M < 1 || s.N < 1 || s.K < 1)
    throw Error("gemm: M, N and K must be >= 1");
  if (!isFloat(s.dtype) || !isFloat(s.outDtype))
    throw Error("gemm: dtypes must be float types");
  for (int64_t b : {c.blockM, c.blockN, c.blockK})
    if (b < 1 || b > 1024 || (b & (b - 1)))
      throw Error("gemm: blockM, blockN and blockK must be powers of two in "
                  "[1, 1024], got " +
                  std::to_string(b));
  if (s.M > std::numeric_limits<int32_t>::max() ||
      s.N > std::numeric_limits<int32_t>::max() ||
      s.K > std::numeric_limits<int32_t>::max())
    throw Error("gemm: M, N and K must be < 2^31 (kiln's index width)");

  KernelBuilder k("gemm");
  Index M = s.M, N = s.N, K = s.K;
  if (!c.staticShapes) {
    M = k.scalarArg("M");
    N = k.scalarArg("N");
    K = k.scalarArg("K");
  }
  const Index mBlocks = cdiv(M, c.blockM), nBlocks = cdiv(N, c.blockN);
  // Rows of blocks per group: at most the row blocks there are.
  const Index group = c.groupM > 1 ? min(Index(c.groupM), mBlocks) : Index(1);
  const bool grouped = !group.isConstant() || group.constant() > 1;
  if (grouped)
    k.setGrid({mBlocks * nBlocks});
  else
    k.setGrid({mBlocks, nBlocks});
  k.setWarps(c.warps);
  k.setStages(c.stages);
  k.setWgmma(c.wgmma);
  k.setTma(c.wgmma && c.tma);
  k.setWarpSpecialize(c.wgmma && c.warpSpecialize);
  k.setTmaStores(c.wgmma && c.tma && c.tmaStore);
  k.setPersistent(c.persistent);
  auto A = k.tensorArg("A", s.dtype, {M, K});
  auto B = k.tensorArg("B", s.dtype, {K, N});
  auto C = k.tensorArg("C", s.outDtype, {M, N});
  std::optional<TensorView> Bias;
  if (s.bias)
    Bias = k.tensorArg("Bias", s.dtype, {N});
  std::optional<TensorView> R;
  if (s.residual)
    R = k.tensorArg("R", s.dtype, {M, N});

  Index mBlock = programId(0), nBlock = programId(1);
  if (grouped) {
    // Program p: group p / (group · nBlocks) of row blocks (the last one
    // may be shorter), walked row block fastest.
    Index p = programId(0), inGroup = p % (group * nBlocks);
    Index firstRow = p / (group * nBlocks) * group;
    Index rows = min(mBlocks - firstRow, group);
    mBlock = firstRow + inGroup % rows;
    nBlock = inGroup / rows;
  }
  Index m0 = mBlock * c.blockM, n0 = nBlock * c.blockN;
  Tile acc = zeros({c.blockM, c.blockN}, f32);
  // Out-of-range rows and columns of A and B read 0 and add nothing.
  forRange(0, K, c.blockK, carry(acc), [&](Index k0) {
    Tile a = load(A.block({m0, k0}, {c.blockM, c.blockK}));
    Tile b = load(B.block({k0, n0}, {c.blockK, c.blockN}));
    acc = dot(a, b, acc);
  });
  // The epilogue, on the accumulator in its own layout: the bias row is
  // loaded in that layout's slice, so nothing of the accumulator moves.
  if (Bias)
    acc = acc + row(load(Bias->block({n0}, {c.blockN})).to(f32));
  if (s.activation == GemmActivation::Relu)
    acc = max(acc, 0.0);
  if (s.activation == GemmActivation::GeluTanh)
    acc = 0.5 * acc *
          (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
  if (R)
    acc = acc + load(R->block({m0, n0}, {c.blockM, c.blockN})).to(f32);
  store(C.block({m0, n0}), acc.to(s.outDtype));
  return k.finish();
}

} // namespace kiln::kernels
