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
  struct Extra {
    bool tmaStore = false, persistent = false;
    int warps = 8, perSM = 0;
  };
  auto add = [&](int64_t m, int64_t n, int64_t k, int stages, Extra e = {}) {
    GemmConfig c{.blockM = m,
                 .blockN = n,
                 .blockK = k,
                 .warps = e.warps,
                 .stages = stages,
                 .wgmma = sm >= 90,
                 .warpSpecialize = sm >= 90,
                 .tmaStore = e.tmaStore,
                 .persistent = e.persistent,
                 .groupM = e.persistent ? 16 : 8,
                 .minBlocksPerSM = e.perSM};
    out.push_back({std::to_string(m) + "x" + std::to_string(n) + "x" +
                       std::to_string(k) + " s" + std::to_string(stages) +
                       (e.warps != 8 ? " w" + std::to_string(e.warps) : "") +
                       (e.tmaStore ? " tma-store" : "") +
                       (e.persistent ? " persistent" : "") +
                       (e.perSM ? " " + std::to_string(e.perSM) + "/SM" : ""),
                   c});
  };
  if (sm >= 90) {
    // `kiln bench gemm`'s default first: persistent CTAs (a tile's epilogue
    // beside the next one's loads) with C through TMA stores, groups of 16
    // row blocks; on the H200 1.01-1.14x the same blocks one tile a CTA at
    // 2048^3..8192^3, 8192x11008x4096, 16384x4096x1024 and an LM head's
    // 8192x50264x768 (docs/experiments/2026-11-29-session56.txt).
    add(128, 256, 64, 3, {.tmaStore = true, .persistent = true});
    add(128, 128, 64, 4, {.tmaStore = true, .persistent = true});
    add(128, 256, 64, 3, {.tmaStore = true});
    add(128, 128, 64, 4, {.tmaStore = true});
    // No candidate writes C from registers by choice: those lost every tune
    // of sessions 55-56 (7 shapes, 1.04-1.64x the winner), and where C's
    // rows rule TMA stores out the TMA-store ones store from registers.
    // One compute warpgroup, two CTAs an SM: one's epilogue beside the
    // other's MMAs; best where C's rows rule TMA stores out (8192x50257x768:
    // 1.19x the first).
    add(128, 128, 64, 2,
        {.tmaStore = true, .persistent = true, .warps = 4, .perSM = 2});
  } else {
    add(128, 128, 32, 3);
    add(128, 64, 32, 3, {.warps = 4});
    add(64, 64, 32, 4, {.warps = 4});
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
  if (c.groupM < 0)
    throw Error("gemm: groupM must be >= 0 (0 or 1: row blocks fastest), "
                "got " +
                std::to_string(c.groupM));
  if (c.splitK < 1 || c.splitK > 65535) // a grid dimension past x
    throw Error("gemm: splitK must be in [1, 65535] (the ranges are a grid "
                "dimension), got " +
                std::to_string(c.splitK));
  if ((c.splitK > 1 || s.splitPartials) &&
      (s.outDtype != DType::f32 || s.bias || s.residual || s.preActivation ||
       s.activation != GemmActivation::None))
    throw Error(std::string("gemm: ") +
                (s.splitPartials ? "splitPartials stores each K range's "
                                   "product apart"
                                 : "splitK > 1 adds each range's product "
                                   "into C by atomics") +
                ": C must be fp32 and the epilogue empty (no bias, "
                "activation, residual or Z)");
  if (c.minBlocksPerSM < 0)
    throw Error("gemm: minBlocksPerSM must be >= 0 (0: as ptxas fits), got " +
                std::to_string(c.minBlocksPerSM));
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
  std::vector<Index> grid = grouped ? std::vector<Index>{mBlocks * nBlocks}
                                    : std::vector<Index>{mBlocks, nBlocks};
  // Split-K's ranges on the grid's last dimension.
  const bool split = c.splitK > 1;
  if (split)
    grid.push_back(Index(c.splitK));
  k.setGrid(grid);
  k.setWarps(c.warps);
  k.setStages(c.stages);
  k.setWgmma(c.wgmma);
  k.setTma(c.wgmma && c.tma);
  k.setWarpSpecialize(c.wgmma && c.warpSpecialize);
  k.setTmaStores(c.wgmma && c.tma && c.tmaStore);
  k.setPersistent(c.persistent);
  if (c.minBlocksPerSM > 0)
    k.setMinBlocksPerSM(c.minBlocksPerSM);
  auto A = s.aTransposed ? k.tensorArg("AT", s.dtype, {K, M})
                         : k.tensorArg("A", s.dtype, {M, K});
  auto B = s.bTransposed ? k.tensorArg("BT", s.dtype, {N, K})
                         : k.tensorArg("B", s.dtype, {K, N});
  auto C = s.splitPartials
               ? k.tensorArg("C", s.outDtype, {Index(c.splitK), M, N})
               : k.tensorArg("C", s.outDtype, {M, N});
  std::optional<TensorView> Bias;
  if (s.bias)
    Bias = k.tensorArg("Bias", s.dtype, {N});
  std::optional<TensorView> R, Z;
  if (s.residual)
    R = k.tensorArg("R", s.dtype, {M, N});
  if (s.preActivation)
    Z = k.tensorArg("Z", s.outDtype, {M, N});

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
  // This program's K steps: all of them, or under split-K its range of
  // whole blocks (the last may be short or empty: it adds nothing).
  Index kBegin = 0, kEnd = K;
  if (split) {
    Index perRange = cdiv(cdiv(K, c.blockK), Index(c.splitK)) * c.blockK;
    kBegin = programId(int(grid.size()) - 1) * perRange;
    kEnd = min(kBegin + perRange, K);
  }
  // Out-of-range rows and columns of A and B read 0 and add nothing.
  forRange(kBegin, kEnd, c.blockK, carry(acc), [&](Index k0) {
    Tile a = s.aTransposed
                 ? transpose(load(A.block({k0, m0}, {c.blockK, c.blockM})))
                 : load(A.block({m0, k0}, {c.blockM, c.blockK}));
    Tile b = s.bTransposed
                 ? transpose(load(B.block({n0, k0}, {c.blockN, c.blockK})))
                 : load(B.block({k0, n0}, {c.blockK, c.blockN}));
    acc = dot(a, b, acc);
  });
  // The epilogue, on the accumulator in its own layout: nothing of it moves
  // (the bias row reaches its column slice through shared memory).
  if (Bias)
    acc = acc + row(load(Bias->block({n0}, {c.blockN})).to(f32));
  if (Z)
    store(Z->block({m0, n0}), acc.to(s.outDtype));
  if (s.activation == GemmActivation::Relu)
    acc = max(acc, 0.0);
  if (s.activation == GemmActivation::GeluTanh)
    acc = 0.5 * acc *
          (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
  if (R)
    acc = acc + load(R->block({m0, n0}, {c.blockM, c.blockN})).to(f32);
  if (s.splitPartials)
    store(C[split ? programId(int(grid.size()) - 1) : Index(0)].block({m0, n0}),
          acc);
  else if (split)
    atomicAdd(C.block({m0, n0}), acc);
  else
    store(C.block({m0, n0}), acc.to(s.outDtype));
  return k.finish();
}

} // namespace kiln::kernels
