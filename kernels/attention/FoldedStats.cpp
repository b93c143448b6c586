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
  int64_t at = 0;
  for (Tile x : {negLse, delta * -1.0})
    for (int part = 0; part < 3; ++part, ++at) {
      Tile p = x.to(bf16);
      x = x - p.to(f32);
      t = where(r == at, broadcastTo(row(p), {kFoldedStatsRows, rows}), t);
    }
  return t;
}

Tile foldedStatsSelector(int64_t rows, int64_t first) {
  Tile c = row(arange(16));
  return broadcastTo(where((c >= first) && (c < first + 3),
                           full({1, 16}, 1.0, f32), 0.0),
                     {rows, 16})
      .to(bf16);
}

} // namespace kiln::kernels
