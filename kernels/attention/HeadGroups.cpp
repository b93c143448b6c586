//===- HeadGroups.cpp - causal programs, longest first per group of heads -===//
#include "HeadGroups.h"

#include <algorithm>

using namespace kiln::dsl;

namespace kiln::kernels {

static constexpr int64_t kGroupBytes = int64_t(16) << 20;

Index kvHeadsArg(KernelBuilder &k, const AttentionShape &s, Index H,
                 bool runtimeShapes) {
  const int64_t G = queryHeadsPerKv(s);
  if (G == 1)
    return H;
  if (!runtimeShapes)
    return Index(s.heads / G);
  Index Hk = k.scalarArg("Hk");
  k.requireProduct(H, G, Hk);
  return Hk;
}

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

// The forward's groups are all full: G is the largest divisor of the pairs
// that is at most headGroupFor's, where that is at least half of it (else
// headGroupFor's). A last group of a few pairs ran its longest blocks after
// every other group's, the GPU's other SMs idle: same-process H100 A/B
// (kiln bench --against), causal bf16, G of 15 against 12/14/16 pairs of
// 96 at D=64 N=4097 B=3: +5.1/+5.9/+5.8%; 7 against 6/8/12 of 48 at D=128:
// +2.1/+1.6/+3.0%; at N=6000 B=2, D=64 10 against 8 of 64 +6.1%, D=128 5
// against 4 of 32 +8.7%. This rule against the old G on the H200: D=64
// 4097 +4.2%, 6000 +5.0%, 12000 (B=1) +5.3%; D=128 4097 +1.0%, 6000 +7.6%
// (docs/experiments/2026-11-26-session39.txt).
static int64_t fullGroups(int64_t g, int64_t pairs) {
  int64_t d = g;
  while (pairs % d)
    --d;
  return 2 * d >= g ? d : g;
}

/// The same on the device: max over d <= most of d where d divides the
/// pairs and d <= g (branch-free Index arithmetic, once per program).
static Index fullGroups(Index g, Index pairs, int64_t most) {
  if (g.isConstant() && pairs.isConstant())
    return Index(fullGroups(g.constant(), pairs.constant()));
  auto oneIf = [](Index positive) { return min(max(positive, 0), 1); };
  Index d = Index(1);
  for (int64_t cand = 2; cand <= most; ++cand) {
    Index divides = Index(1) - oneIf(pairs % cand);
    d = max(d, cand * divides * oneIf(g - cand + 1));
  }
  Index useD = oneIf(2 * d - g + 1);
  return useD * d + (Index(1) - useD) * g;
}

Index fullHeadGroups(Index rows, int64_t rowBytes, Index pairs) {
  return fullGroups(headGroupFor(rows, rowBytes, pairs), pairs,
                    maxGroupFor(rowBytes));
}

int64_t forwardHeadGroup(const AttentionConfig &c, int64_t keys,
                         int64_t rowBytes, int64_t pairs) {
  return fixedRounds(c)
             ? pairs
             : fullGroups(headGroupFor(keys, rowBytes, pairs), pairs);
}

Index forwardHeadGroup(const AttentionConfig &c, Index keys, int64_t rowBytes,
                       Index pairs) {
  return fixedRounds(c) ? pairs
                        : fullGroups(headGroupFor(keys, rowBytes, pairs), pairs,
                                     maxGroupFor(rowBytes));
}

} // namespace kiln::kernels
