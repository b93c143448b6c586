//===- Layout.h - how a tile is spread over a CTA's threads -----*- C++ -*-===//
//
// A layout is linear over the bits of (register, lane, warp): each bit of a
// thread's register index, of its lane id and of its warp id contributes one
// basis vector of tile coordinates, and an element's coordinates are the sum
// (equivalently the XOR: the bases use disjoint bits) of the bases of the bits
// that are set. A zero basis means replication. The mma.sync accumulator and
// operand layouts, row-major "blocked" layouts for coalesced memory access,
// and the slices and broadcasts between them are all of this form, and so is
// Hopper's wgmma accumulator: one more constructor, not a new mechanism
// (Triton's LinearLayout, include/triton/Tools/LinearLayout.h, is the model).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CONVERSION_LAYOUT_H
#define KILN_CONVERSION_LAYOUT_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

using Coord = std::vector<int64_t>;

/// ceil(log2(v)) for v >= 1: how many bits index v things.
inline int log2i(int64_t v) {
  int l = 0;
  while ((int64_t(1) << l) < v)
    ++l;
  return l;
}

/// The dimensions a broadcast from shape `src` to shape `dst` repeats along:
/// size 1 in `src`, larger in `dst` (what Layout::project collapses).
inline std::vector<int64_t> broadcastDims(const std::vector<int64_t> &src,
                                          const std::vector<int64_t> &dst) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < dst.size(); ++d)
    if (src[d] == 1 && dst[d] != 1)
      dims.push_back(int64_t(d));
  return dims;
}

struct Layout {
  /// Where a layout comes from: it decides which layout wins when operands
  /// of an elementwise op disagree (the one that saves a conversion of the
  /// larger, hotter value: tensor-core results win over loads).
  enum class Kind { Blocked = 1, DotOperand = 2, Mma = 3 };

  Kind kind = Kind::Blocked;
  std::vector<int64_t> shape;
  std::vector<Coord> reg, lane, warp; ///< one basis per bit
  /// For a slice (a reduction's result, possibly expanded back to the
  /// parent's rank): the layout it was sliced from, which a broadcast back to
  /// the parent's shape returns to without moving data.
  std::shared_ptr<const Layout> parent;

  int64_t rank() const { return int64_t(shape.size()); }
  int64_t numRegs() const { return int64_t(1) << reg.size(); }
  int64_t numElements() const;
  /// Coordinates held by register r (the register bits' part only).
  Coord regCoord(int64_t r) const;
  /// Register bits whose basis is zero: those registers repeat others.
  int64_t duplicateRegMask() const;
  /// Lane and warp bits whose basis is zero (replicated threads).
  int64_t duplicateLaneMask() const;
  int64_t duplicateWarpMask() const;
  bool operator==(const Layout &o) const;
  std::string str() const;

  /// Row-major over the shape: consecutive lanes take consecutive elements of
  /// the last dimension (coalesced), `vec` elements per thread at a time.
  static Layout blocked(const std::vector<int64_t> &shape, int numWarps,
                        int64_t vec = 1);
  /// mma.sync m16n8k16 accumulator of an MxN tile, warps along M first.
  static Layout mma(int64_t M, int64_t N, int numWarps);
  /// The A (MxK, opIdx 0) or B (KxN, opIdx 1) operand layout of `mma`.
  static Layout dotOperand(int opIdx, int64_t M, int64_t N, int64_t K,
                           int numWarps);
  /// Warps along M and N used by mma() and dotOperand().
  static void mmaWarps(int64_t M, int64_t N, int numWarps, int &warpsM,
                       int &warpsN);

  /// The layout of a reduction along `axis`: register bits along the axis
  /// disappear, lane and warp bits along it become replication.
  Layout slice(int64_t axis) const;
  /// A size-1 dimension inserted at `axis`.
  Layout expand(int64_t axis) const;
  /// Dimension i of the result is dimension order[i] of this layout.
  Layout permute(const std::vector<int32_t> &order) const;
  /// This layout with the dimensions in `dims` collapsed to size 1: what a
  /// broadcast along `dims` to this layout reads from.
  Layout project(const std::vector<int64_t> &dims) const;
};

} // namespace kiln

#endif // KILN_CONVERSION_LAYOUT_H
