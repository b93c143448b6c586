//===- HeadGroups.h - causal programs, longest first per group of heads ---===//
//
// Internal to kernels/attention. Causal blocks differ in cost (the forward's
// last row blocks and the backward's first key blocks see the most keys or
// queries). On a 1-D grid of pairs·blocks programs, each group of G
// (batch, head) pairs is dispatched together, the costliest block of every
// pair first, so that the cheap ones fill the tail; a group's pairs share
// what L2 holds of the tensors every block of a pair streams.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_HEADGROUPS_H
#define KILN_KERNELS_ATTENTION_HEADGROUPS_H

#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"

#include <cstdint>

namespace kiln::kernels {

struct GroupedProgram {
  dsl::Index rank; ///< 0 for the costliest block of its pair
  dsl::Index pair; ///< batch * heads + head
};
/// Program `t`'s block rank and pair, in groups of G of `pairs` pairs of
/// `blocks` blocks (the last group may hold fewer pairs).
GroupedProgram longestFirstProgram(dsl::Index t, dsl::Index G, dsl::Index pairs,
                                   dsl::Index blocks);

/// K and V's heads for query heads H: H itself without grouped heads; else
/// H / G for G = queryHeadsPerKv(s), compiled in with static shapes, else
/// the run-time argument "Hk" (bound from K's shape) that Kernel::bind
/// requires to be H / G.
dsl::Index kvHeadsArg(dsl::KernelBuilder &k, const AttentionShape &s,
                      dsl::Index H, bool runtimeShapes);

/// Pairs per group when none is given: those whose streamed tensors (two of
/// `rows` rows of `rowBytes` each per pair) take 16 MiB, 1 to 16, to 8 for
/// 256-byte rows (measured for the forward's K/V and the backward's Q/dO:
/// Config.cpp, HeadGroups.cpp).
int64_t headGroupFor(int64_t rows, int64_t rowBytes, int64_t pairs);
/// The same with run-time rows and pairs.
dsl::Index headGroupFor(dsl::Index rows, int64_t rowBytes, dsl::Index pairs);

/// headGroupFor's lowered to the largest divisor of the pairs down to half
/// of it, so that no group is short (forwardHeadGroup's rule; the backward's
/// with grouped query heads).
dsl::Index fullHeadGroups(dsl::Index rows, int64_t rowBytes, dsl::Index pairs);

/// The forward's pairs per group where its Config gives none: every pair
/// where persistent CTAs take their tiles in fixed rounds, else headGroupFor
/// over its `keys` (Config.cpp has the figures), lowered to the largest
/// divisor of the pairs down to half of it, so that no group is short.
/// resolveConfig's for the shape it is given; the kernel's, on the device, for
/// run-time Nk.
int64_t forwardHeadGroup(const AttentionConfig &c, int64_t keys,
                         int64_t rowBytes, int64_t pairs);
dsl::Index forwardHeadGroup(const AttentionConfig &c, dsl::Index keys,
                            int64_t rowBytes, dsl::Index pairs);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_HEADGROUPS_H
