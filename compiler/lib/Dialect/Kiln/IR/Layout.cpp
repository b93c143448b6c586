//===- Layout.cpp - how a tile is spread over a CTA's threads -------------===//
#include "kiln/Dialect/Kiln/IR/Layout.h"

#include <algorithm>
#include <cassert>

namespace kiln {

static Coord unit(int64_t rank, int64_t dim, int64_t value) {
  Coord c(rank, 0);
  c[dim] = value;
  return c;
}

int64_t Layout::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Coord Layout::regCoord(int64_t r) const {
  Coord c(rank(), 0);
  for (size_t b = 0; b < reg.size(); ++b)
    if (r >> b & 1)
      for (int64_t d = 0; d < rank(); ++d)
        c[d] |= reg[b][d];
  return c;
}

static int64_t zeroMask(const std::vector<Coord> &bases) {
  int64_t m = 0;
  for (size_t b = 0; b < bases.size(); ++b)
    if (std::all_of(bases[b].begin(), bases[b].end(),
                    [](int64_t v) { return v == 0; }))
      m |= int64_t(1) << b;
  return m;
}
int64_t Layout::duplicateRegMask() const { return zeroMask(reg); }
int64_t Layout::duplicateLaneMask() const { return zeroMask(lane); }
int64_t Layout::duplicateWarpMask() const { return zeroMask(warp); }

bool Layout::operator==(const Layout &o) const {
  return shape == o.shape && reg == o.reg && lane == o.lane && warp == o.warp;
}

std::string Layout::str() const {
  auto list = [](const std::vector<Coord> &bs) {
    std::string s = "[";
    for (size_t i = 0; i < bs.size(); ++i) {
      s += i ? ", (" : "(";
      for (size_t d = 0; d < bs[i].size(); ++d)
        s += (d ? "," : "") + std::to_string(bs[i][d]);
      s += ")";
    }
    return s + "]";
  };
  const char *k = kind == Kind::Mma          ? "mma"
                  : kind == Kind::DotOperand ? "dot_op"
                                             : "blocked";
  return std::string(k) + "<reg=" + list(reg) + ", lane=" + list(lane) +
         ", warp=" + list(warp) + ">";
}

Layout Layout::blocked(const std::vector<int64_t> &shape, int numWarps,
                       int64_t vec) {
  Layout l;
  l.shape = shape;
  int64_t rank = int64_t(shape.size());
  // The flat (row-major) index's bits, lowest first, as coordinate bases.
  std::vector<Coord> flat;
  for (int64_t d = rank - 1; d >= 0; --d)
    for (int64_t v = 1; v < shape[d]; v *= 2)
      flat.push_back(unit(rank, d, v));
  size_t next = 0;
  auto take = [&](std::vector<Coord> &into, int bits) {
    for (int i = 0; i < bits; ++i)
      into.push_back(next < flat.size() ? flat[next++] : Coord(rank, 0));
  };
  int vecBits =
      std::min<int>(log2i(vec), log2i(shape.empty() ? 1 : shape.back()));
  take(l.reg, vecBits);
  take(l.lane, 5);
  take(l.warp, log2i(numWarps));
  while (next < flat.size())
    l.reg.push_back(flat[next++]);
  return l;
}

void Layout::mmaWarps(int64_t M, int64_t N, int numWarps, int &warpsM,
                      int &warpsN) {
  warpsM = int(std::max<int64_t>(1, std::min<int64_t>(numWarps, M / 16)));
  warpsN = numWarps / warpsM;
  while (warpsN > 1 && N / 8 < warpsN) { // too narrow: replicate instead
    warpsN /= 2;
  }
}

/// The rows of m16n8k16's accumulator and A operand (dimension 0 of both):
/// a lane quad per row, 8 rows per lane group, 16 rows per warp along M, and
/// registers for the rows beyond the warps' 16 * wm.
static void addMmaRows(Layout &l, int64_t M, int wm) {
  for (int64_t s = 16 * wm; s < M; s *= 2)
    l.reg.push_back({s, 0});
  l.lane = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}};
  for (int i = 0; i < log2i(wm); ++i)
    l.warp.push_back({int64_t(16) << i, 0});
}

Layout Layout::mma(int64_t M, int64_t N, int numWarps) {
  int wm, wn;
  mmaWarps(M, N, numWarps, wm, wn);
  int64_t nPerWarp = N / wn;
  Layout l;
  l.kind = Kind::Mma;
  l.shape = {M, N};
  l.reg = {{0, 1}, {8, 0}};
  for (int64_t s = 8; s < nPerWarp; s *= 2)
    l.reg.push_back({0, s});
  addMmaRows(l, M, wm);
  for (int i = 0; i < log2i(wn); ++i)
    l.warp.push_back({0, nPerWarp << i});
  for (int i = log2i(wm) + log2i(wn); i < log2i(numWarps); ++i)
    l.warp.push_back({0, 0});
  return l;
}

Layout Layout::dotOperand(int opIdx, int64_t M, int64_t N, int64_t K,
                          int numWarps) {
  int wm, wn;
  mmaWarps(M, N, numWarps, wm, wn);
  int64_t nPerWarp = N / wn;
  Layout l;
  l.kind = Kind::DotOperand;
  if (opIdx == 0) { // A: MxK; registers a0..a7 of m16n8k16 per 16x16 piece
    l.shape = {M, K};
    l.reg = {{0, 1}, {8, 0}, {0, 8}};
    for (int64_t s = 16; s < K; s *= 2)
      l.reg.push_back({0, s});
    addMmaRows(l, M, wm);
    for (int i = 0; i < log2i(numWarps) - log2i(wm); ++i)
      l.warp.push_back({0, 0}); // warps along N share A
  } else {                      // B: KxN; registers b0..b3 per 16x8 piece
    l.shape = {K, N};
    l.reg = {{1, 0}, {8, 0}};
    for (int64_t s = 16; s < K; s *= 2)
      l.reg.push_back({s, 0});
    for (int64_t s = 8; s < nPerWarp; s *= 2)
      l.reg.push_back({0, s});
    l.lane = {{2, 0}, {4, 0}, {0, 1}, {0, 2}, {0, 4}};
    for (int i = 0; i < log2i(wm); ++i)
      l.warp.push_back({0, 0}); // warps along M share B
    for (int i = 0; i < log2i(wn); ++i)
      l.warp.push_back({0, nPerWarp << i});
    for (int i = log2i(wm) + log2i(wn); i < log2i(numWarps); ++i)
      l.warp.push_back({0, 0});
  }
  return l;
}

static Coord dropDim(const Coord &c, int64_t axis) {
  Coord r = c;
  r.erase(r.begin() + axis);
  return r;
}

Layout Layout::slice(int64_t axis) const {
  Layout l;
  l.kind = kind;
  l.shape = shape;
  l.shape.erase(l.shape.begin() + axis);
  for (const Coord &b : reg)
    if (b[axis] == 0)
      l.reg.push_back(dropDim(b, axis));
  for (const Coord &b : lane)
    l.lane.push_back(b[axis] ? Coord(rank() - 1, 0) : dropDim(b, axis));
  for (const Coord &b : warp)
    l.warp.push_back(b[axis] ? Coord(rank() - 1, 0) : dropDim(b, axis));
  l.parent = std::make_shared<const Layout>(*this);
  return l;
}

Layout Layout::expand(int64_t axis) const {
  Layout l;
  l.kind = kind;
  l.shape = shape;
  l.shape.insert(l.shape.begin() + axis, 1);
  auto ins = [&](const std::vector<Coord> &from, std::vector<Coord> &to) {
    for (Coord b : from) {
      b.insert(b.begin() + axis, 0);
      to.push_back(b);
    }
  };
  ins(reg, l.reg);
  ins(lane, l.lane);
  ins(warp, l.warp);
  if (parent && parent->rank() == l.rank())
    l.parent = parent;
  return l;
}

Layout Layout::permute(const std::vector<int32_t> &order) const {
  Layout l;
  l.kind = kind;
  for (int32_t o : order)
    l.shape.push_back(shape[o]);
  auto perm = [&](const std::vector<Coord> &from, std::vector<Coord> &to) {
    for (const Coord &b : from) {
      Coord c;
      for (int32_t o : order)
        c.push_back(b[o]);
      to.push_back(c);
    }
  };
  perm(reg, l.reg);
  perm(lane, l.lane);
  perm(warp, l.warp);
  return l;
}

Layout Layout::project(const std::vector<int64_t> &dims) const {
  Layout l;
  l.kind = kind;
  l.shape = shape;
  auto along = [&](const Coord &b) {
    for (int64_t d : dims)
      if (b[d])
        return true;
    return false;
  };
  for (int64_t d : dims)
    l.shape[d] = 1;
  for (const Coord &b : reg)
    if (!along(b))
      l.reg.push_back(b);
  auto zeroed = [&](const Coord &b) {
    Coord c = b;
    for (int64_t d : dims)
      c[d] = 0;
    return c;
  };
  for (const Coord &b : lane)
    l.lane.push_back(zeroed(b));
  for (const Coord &b : warp)
    l.warp.push_back(zeroed(b));
  l.parent = std::make_shared<const Layout>(*this);
  return l;
}

} // namespace kiln
