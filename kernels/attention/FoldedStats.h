//===- FoldedStats.h - the backward's statistics as a dot's k16 step ------===//
//
// Internal to kernels/attention. In the dK/dV kernel's transposed scores a
// thread of a 64xN accumulator needs LSE and Delta for each of its N/4
// columns (32 + 32 registers per 128 queries), which spill beside 128x128
// steps. Instead the Sᵀ and dPᵀ dots add them: K·Qᵀ - LSE/scale is
// [K | S]·[Q | F]ᵀ with F the 16-row tile below and S a selector of
// constants, one more wgmma k16 step whose B the producer fetches with Q.
// The statistic is split into three bf16 parts (hi, mid, lo) whose fp32 sum
// is the value, so folding loses nothing to bf16's 8-bit mantissa.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_FOLDEDSTATS_H
#define KILN_KERNELS_ATTENTION_FOLDEDSTATS_H

#include "kiln/dsl/Dsl.h"

#include <cstdint>

namespace kiln::kernels {

/// The workspace FoldedStats, bf16 (B, H, kFoldedStatsRows, rowLength),
/// contiguous.
dsl::TensorView foldedStatsArg(dsl::KernelBuilder &k, dsl::Index B,
                               dsl::Index H, dsl::Index rowLength);

/// Its tile for `rows` queries: rows 0-2 the parts of -LSE/scale (from
/// lse2 = LSE·log2(e) and toExp2 = scale·log2(e); a large finite value for
/// the rows past Nq, whose LSE is +inf, so that the other dot's zero weights
/// meet no infinity), rows 3-5 those of -Delta, the rest zero.
dsl::Tile foldedStats(double toExp2, const dsl::Tile &lse2,
                      const dsl::Tile &delta, int64_t rows);

/// The left operand of the extra k16 step for `rows` rows: 1 in the
/// kFoldedParts columns from `first` (kFoldedLse or kFoldedDelta), else 0.
dsl::Tile foldedStatsSelector(int64_t rows, int64_t first);

/// The K of the extra step (the dots read kFoldedStepK rows of the tile),
/// the bf16 parts of each statistic and the first row of each.
inline constexpr int64_t kFoldedStepK = 16, kFoldedParts = 3, kFoldedLse = 0,
                         kFoldedDelta = kFoldedParts;

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_FOLDEDSTATS_H
