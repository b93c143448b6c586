//===- KeyLengthsCase.h - forward problems with keys per batch --*- C++ -*-===//
//
// One non-causal forward problem whose batches attend to their own number of
// keys (AttentionShape::keyLengths), for the CPU and GPU tests: random Q, K
// and V with NaN in every slot past a batch's length (a cache's unused slots
// may hold anything; one read leaks into O), O, LSE and any split workspace
// poisoned; the check of O and LSE against the fp64 reference.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_UNIT_KEYLENGTHSCASE_H
#define KILN_TESTS_UNIT_KEYLENGTHSCASE_H

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace kiln::test {

struct KeyLengthsCase {
  int64_t H, Hk, Nq, Nk, D;
  std::vector<int64_t> lengths; ///< one per batch, clamped by the kernel
  int64_t ranges = 1;           ///< split keys (attentionForwardKernels)
  bool causal = false;          ///< queries the last Nq of each length

  std::string name() const {
    std::string s = "q" + std::to_string(Nq) + "_k" + std::to_string(Nk) +
                    "_d" + std::to_string(D) + "_h" + std::to_string(H) + "x" +
                    std::to_string(Hk) + "_split" + std::to_string(ranges) +
                    (causal ? "_causal" : "") + "_len";
    for (int64_t n : lengths)
      s += (n < 0 ? "m" : "_") + std::to_string(std::abs(n));
    return s;
  }
  kernels::AttentionShape shape() const {
    kernels::AttentionShape s{
        int64_t(lengths.size()), H, Nq, Nk, D, causal, DType::bf16, 0,
        Hk == H ? 0 : Hk};
    s.keyLengths = true;
    return s;
  }
};

inline void PrintTo(const KeyLengthsCase &c, std::ostream *os) {
  *os << c.name();
}

/// The problem's host tensors: inputs filled (NaN past each length), outputs
/// and the split workspace poisoned.
struct KeyLengthsTensors {
  HostTensor q, k, v, o, lse, lengths;
  std::map<std::string, HostTensor> workspace;
  explicit KeyLengthsTensors(const KeyLengthsCase &c)
      : q(DType::bf16, {B(c), c.H, c.Nq, c.D}),
        k(DType::bf16, {B(c), c.Hk, c.Nk, c.D}),
        v(DType::bf16, {B(c), c.Hk, c.Nk, c.D}),
        o(DType::bf16, {B(c), c.H, c.Nq, c.D}),
        lse(DType::f32, {B(c), c.H, c.Nq}), lengths(DType::i32, {B(c)}) {
    const uint64_t seed = uint64_t(c.Nq * 7919 + c.Nk * 31 + c.D + c.ranges);
    q.fillRandom(seed, -2, 2);
    k.fillRandom(seed + 1, -2, 2);
    v.fillRandom(seed + 2);
    for (int64_t b = 0; b < B(c); ++b) {
      lengths.flatSet(b, double(c.lengths[size_t(b)]));
      const int64_t from = std::clamp<int64_t>(c.lengths[size_t(b)], 0, c.Nk);
      for (int64_t h = 0; h < c.Hk; ++h)
        for (int64_t j = from; j < c.Nk; ++j)
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t i = ((b * c.Hk + h) * c.Nk + j) * c.D + d;
            k.flatSet(i, std::nan(""));
            v.flatSet(i, std::nan(""));
          }
    }
    o.poison();
    lse.poison();
    if (c.ranges > 1)
      for (const kernels::WorkspaceTensor &w :
           kernels::SplitKeysWorkspace(c.shape(), c.ranges).tensors)
        workspace.emplace(w.name, HostTensor(w.dtype, w.shape))
            .first->second.poison();
  }
  static int64_t B(const KeyLengthsCase &c) {
    return int64_t(c.lengths.size());
  }
  /// The tensors by argument name.
  std::map<std::string, HostTensor *> named() {
    std::map<std::string, HostTensor *> out{
        {"Q", &q}, {"K", &k},     {"V", &v},
        {"O", &o}, {"LSE", &lse}, {"KLengths", &lengths}};
    for (auto &[name, w] : workspace)
      out.emplace(name, &w);
    return out;
  }
  /// O and LSE (as the kernels left them) against the fp64 reference: no NaN
  /// (a batch of no keys: O 0, LSE -inf, as the reference's).
  void check(const KeyLengthsCase &c) {
    HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
    kernels::attentionReference(c.shape(), q, k, v, oRef, lseRef, c.lengths);
    ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
    EXPECT_EQ(eo.nonFinite, 0);
    EXPECT_EQ(el.nonFinite, 0);
    EXPECT_LE(eo.relative, 1e-2) << "max abs " << eo.maxAbs;
    EXPECT_LE(el.relative, 1e-5) << "max abs " << el.maxAbs;
  }
};

/// Shapes both tests run: decoding (one query, grouped heads, split keys),
/// a few queries, and row blocks of 128 on keys whose lengths end inside a
/// key block, on one, at 0 (no keys), past Nk and below 0 (clamped); causal
/// chunks (queries the last of each length; rows before key 0 where a
/// length is under Nq).
inline std::vector<KeyLengthsCase> keyLengthsCases() {
  return {
      {4, 2, 1, 700, 64, {700, 1, 0, 333}, 3},
      {8, 2, 1, 1000, 128, {129, 1000, 5}, 4},
      {2, 2, 5, 300, 64, {300, 17, 128, 2000}},
      {2, 1, 130, 520, 64, {520, 200, -3}},
      {2, 2, 150, 390, 128, {256, 390, 131}},
      {4, 2, 200, 700, 128, {700, 333, 64, 129}, 1, true},
      // Overlapped D=128 loops that do not run: lengths 0 and 128 (whole
      // blocks, the first at key 0) under 300 queries.
      {4, 2, 300, 2049, 128, {2049, 0, 1500, 128}, 1, true},
      {4, 4, 300, 2049, 128, {2049, 0, 100, 128}},
      {2, 2, 130, 520, 64, {520, 200, 0, 1000}, 1, true},
      {2, 2, 3, 300, 64, {300, 2, 77}, 1, true},
  };
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_KEYLENGTHSCASE_H
