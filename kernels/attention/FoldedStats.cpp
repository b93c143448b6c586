//===- FoldedStats.cpp - the backward's statistics as a dot's k16 step ----===//
#include "FoldedStats.h"
#include "kiln/kernels/AttentionBackward.h"

using namespace kiln::dsl;

namespace kiln::kernels {

TensorView foldedStatsArg(KernelBuilder &k, Index B, Index H, Index rowLength) {
  auto t =
      k.tensorArg("FoldedStats", bf16, {B, H, kFoldedStatsRows, rowLength});
  k.requireContiguous(t);
  return t;
}

Tile foldedStats(double toExp2, const Tile &lse2, const Tile &delta,
                 int64_t rows) {
  Tile negLse = where(lse2 < 1e30, lse2 * (-1.0 / toExp2), -1e30);
  Tile r = column(arange(kFoldedStatsRows));
  Tile t = zeros({kFoldedStatsRows, rows}, bf16);
  for (auto [x, first] :
       {std::pair{negLse, kFoldedLse}, std::pair{delta * -1.0, kFoldedDelta}})
    for (int64_t part = 0; part < kFoldedParts; ++part) {
      Tile p = x.to(bf16);
      x = x - p.to(f32);
      t = where(r == first + part,
                broadcastTo(row(p), {kFoldedStatsRows, rows}), t);
    }
  return t;
}

Tile foldedStatsSelector(int64_t rows, int64_t first) {
  Tile c = row(arange(kFoldedStepK));
  return broadcastTo(where((c >= first) && (c < first + kFoldedParts),
                           full({1, kFoldedStepK}, 1.0, f32), 0.0),
                     {rows, kFoldedStepK})
      .to(bf16);
}

} // namespace kiln::kernels
