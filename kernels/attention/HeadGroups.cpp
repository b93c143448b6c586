//===- HeadGroups.cpp - causal programs, longest first per group of heads -===//
#include "HeadGroups.h"

#include <algorithm>

using namespace kiln::dsl;

namespace kiln::kernels {

static constexpr int64_t kGroupBytes = int64_t(16) << 20, kMaxGroup = 16;

GroupedProgram longestFirstProgram(Index t, Index G, Index pairs,
                                   Index blocks) {
  Index perGroup = G * blocks, first = t / perGroup * G;
  Index rest = pairs % G;
  Index inGroup =
      rest.isConstant() && rest.constant() == 0 ? G : min(G, pairs - first);
  Index at = t % perGroup;
  return {at / inGroup, first + at % inGroup};
}

int64_t headGroupFor(int64_t rows, int64_t rowBytes, int64_t pairs) {
  return std::clamp<int64_t>(kGroupBytes / (2 * rows * rowBytes), 1,
                             std::min(kMaxGroup, pairs));
}

Index headGroupFor(Index rows, int64_t rowBytes, Index pairs) {
  return min(max(Index(kGroupBytes / (2 * rowBytes)) / rows, 1),
             min(kMaxGroup, pairs));
}

} // namespace kiln::kernels
