//===- HeadGroups.cpp - causal programs, longest first per group of heads -===//
#include "HeadGroups.h"

#include <algorithm>

using namespace kiln::dsl;

namespace kiln::kernels {

static constexpr int64_t kGroupBytes = int64_t(16) << 20;

GroupedProgram longestFirstProgram(Index t, Index G, Index pairs,
                                   Index blocks) {
  Index perGroup = G * blocks, first = t / perGroup * G;
  Index rest = pairs % G;
  Index inGroup =
      rest.isConstant() && rest.constant() == 0 ? G : min(G, pairs - first);
  Index at = t % perGroup;
  return {at / inGroup, first + at % inGroup};
}

/// The most pairs a group holds for rows of `rowBytes`.
static int64_t maxGroupFor(int64_t rowBytes) {
  // Causal D=128 (256-byte rows) in groups of 8 rather than 16 where 16 MiB
  // holds more. Forward, H100, kiln bench attention --causal, A B B A A B B
  // A, mean TFLOP/s 16 -> 8 at N=1000 405 -> 411, 1023 422 -> 428, 2049
  // 472 -> 491, 3001 545 -> 552, even at 512 and 2048 (another call); at
  // D=64 groups of 8 were even to 1.6% slower. Backward (--head-group 8
  // against the default, four readings each): 1000 281 -> 286, 2048 389 ->
  // 393, 3001 429 -> 433 (docs/experiments/2026-11-26-session34.txt,
  // sections 8 and 10).
  return rowBytes >= 256 ? 8 : 16;
}

int64_t headGroupFor(int64_t rows, int64_t rowBytes, int64_t pairs) {
  return std::clamp<int64_t>(kGroupBytes / (2 * rows * rowBytes), 1,
                             std::min(maxGroupFor(rowBytes), pairs));
}

Index headGroupFor(Index rows, int64_t rowBytes, Index pairs) {
  return min(max(Index(kGroupBytes / (2 * rowBytes)) / rows, 1),
             min(maxGroupFor(rowBytes), pairs));
}

static bool fixedRounds(const AttentionConfig &c) {
  return c.persistent > 0 && c.dynamicTiles <= 0;
}

int64_t forwardHeadGroup(const AttentionConfig &c, int64_t keys,
                         int64_t rowBytes, int64_t pairs) {
  return fixedRounds(c) ? pairs : headGroupFor(keys, rowBytes, pairs);
}

Index forwardHeadGroup(const AttentionConfig &c, Index keys, int64_t rowBytes,
                       Index pairs) {
  return fixedRounds(c) ? pairs : headGroupFor(keys, rowBytes, pairs);
}

} // namespace kiln::kernels
