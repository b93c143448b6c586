//===- SplitCombine.cpp - the forward's split-keys combine kernel ---------===//
//
// A row's keys split into ranges give, per range r, O_r (normalised over its
// keys) and L_r = log sum_j exp(s_j) over them. Over all keys,
// O = sum_r w_r O_r / sum_r w_r and L = m + log sum_r w_r, with
// w_r = exp(L_r - m), m = max_r L_r; an empty range has L_r = -inf: w_r = 0.
//
//===----------------------------------------------------------------------===//
#include "SplitCombine.h"

#include "kiln/dsl/Dsl.h"

#include <vector>

using namespace kiln::dsl;

namespace kiln::kernels {

/// Rows per program: each reads S * 64 * D fp32 of partial O once.
static constexpr int64_t kCombineRows = 64;
/// Ranges unrolled while S * D stays within this: their S 64 x D fp32 tiles,
/// S * D / 2 floats a thread, fit in registers (ptxas, sm_90a: D=64 S=4 198
/// registers; D=128 S=4 and D=64 S=8 spill 2-2.5 KB). Beyond, a loop.
static constexpr int64_t kUnrolledFloats = 256;

Kernel splitCombineKernel(const AttentionShape &s, int64_t ranges,
                          bool runtimeShapes) {
  const int64_t D = s.headDim, BM = kCombineRows, S = ranges;
  KernelBuilder k("attention_fwd_combine");
  Index B = s.batch, H = s.heads, Nq = s.seqQ;
  if (runtimeShapes) {
    B = k.scalarArg("B");
    H = k.scalarArg("H");
    Nq = k.scalarArg("Nq");
  }
  k.setGrid({cdiv(Nq, BM), B * H});
  k.setWarps(4);
  auto OSplit = k.tensorArg("OSplit", f32, {S, B, H, Nq, D});
  auto LSESplit = k.tensorArg("LSESplit", f32, {S, B, H, Nq});
  auto O = k.tensorArg("O", s.dtype, {B, H, Nq, D});
  auto LSE = k.tensorArg("LSE", f32, {B, H, Nq});
  if (runtimeShapes) { // rows of Nq fp32: 16-byte aligned only at Nq % 4 == 0
    k.keepUnspecialised(LSESplit);
    k.keepUnspecialised(LSE);
  }
  Index bh = programId(1), m0 = programId(0) * BM;
  Index b = bh / H, h = bh % H;
  auto lseOf = [&](IndexArg r) {
    return load(LSESplit[r][b][h].block({m0}, {BM}));
  };
  auto oOf = [&](IndexArg r) {
    return load(OSplit[r][b][h].block({m0, 0}, {BM, D}));
  };
  Tile m = full({BM}, -inf, f32);
  // With key lengths a batch may have no keys, every range empty (m = -inf):
  // its weights then come out 0 (not NaN), O 0 and LSE -inf.
  auto guardedMax = [&](Tile mx) {
    return s.keyLengths ? where(mx > -inf, mx, 0.0) : mx;
  };
  Tile sum = zeros({BM}, f32), acc = zeros({BM, D}, f32);
  auto add = [&](Tile lse, Tile o) {
    Tile w = exp2((lse - m) * log2e);
    sum = sum + w;
    acc = acc + o * column(w);
  };
  if (S * D <= kUnrolledFloats) {
    // Every range's loads issued at once, their tiles live together.
    std::vector<Tile> lse;
    for (int64_t r = 0; r < S; ++r) {
      lse.push_back(lseOf(r));
      m = max(m, lse.back());
    }
    m = guardedMax(m);
    for (int64_t r = 0; r < S; ++r)
      add(lse[size_t(r)], oOf(r));
  } else {
    // One range's tile live at a time: registers independent of S.
    forRange(0, S, 1, carry(m), [&](Index r) { m = max(m, lseOf(r)); });
    m = guardedMax(m);
    forRange(0, S, 1, carry(sum, acc), [&](Index r) { add(lseOf(r), oOf(r)); });
  }
  Tile inverse = s.keyLengths ? where(sum > 0.0, 1.0 / sum, 0.0) : 1.0 / sum;
  store(O[b][h].block({m0, 0}), (acc * column(inverse)).to(s.dtype));
  store(LSE[b][h].block({m0}), m + log2(sum) * ln2);
  return k.finish();
}

} // namespace kiln::kernels
