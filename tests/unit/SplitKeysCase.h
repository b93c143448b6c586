//===- SplitKeysCase.h - split-keys forward test problems -------*- C++ -*-===//
//
// One non-causal forward problem for the split-keys CPU and GPU tests:
// random Q, K and V; O, LSE and the workspace (OSplit, LSESplit) poisoned;
// the check of O and LSE against the fp64 reference.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_UNIT_SPLITKEYSCASE_H
#define KILN_TESTS_UNIT_SPLITKEYSCASE_H

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Reference.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::test {

struct SplitCase {
  int64_t B, H, Nq, Nk, D, ranges;
  int staticShapes = -1; ///< 1: B, H, Nq and Nk compiled in

  std::string name() const {
    return "q" + std::to_string(Nq) + "_k" + std::to_string(Nk) + "_d" +
           std::to_string(D) + "_split" + std::to_string(ranges) +
           (staticShapes > 0 ? "_static" : "");
  }
  kernels::AttentionShape shape() const {
    return {B, H, Nq, Nk, D, false, DType::bf16, 0};
  }
};

inline void PrintTo(const SplitCase &c, std::ostream *os) {
  *os << c.B << "x" << c.H << "_" << c.name();
}

/// The problem's host tensors: inputs filled, outputs and the
/// SplitKeysWorkspace's tensors poisoned.
struct SplitTensors {
  HostTensor q, k, v, o, lse;
  std::map<std::string, HostTensor> workspace;
  explicit SplitTensors(const SplitCase &c)
      : q(DType::bf16, {c.B, c.H, c.Nq, c.D}),
        k(DType::bf16, {c.B, c.H, c.Nk, c.D}),
        v(DType::bf16, {c.B, c.H, c.Nk, c.D}),
        o(DType::bf16, {c.B, c.H, c.Nq, c.D}),
        lse(DType::f32, {c.B, c.H, c.Nq}) {
    const uint64_t seed = uint64_t(c.Nq * 7919 + c.Nk * 31 + c.D + c.ranges);
    q.fillRandom(seed, -2, 2);
    k.fillRandom(seed + 1, -2, 2);
    v.fillRandom(seed + 2);
    o.poison();
    lse.poison();
    for (const kernels::WorkspaceTensor &w :
         kernels::SplitKeysWorkspace(c.shape(), c.ranges).tensors)
      workspace.emplace(w.name, HostTensor(w.dtype, w.shape))
          .first->second.poison();
  }
  /// The tensors by argument name, and whether each is an output (poisoned):
  /// Q, K, V, O, LSE, then the workspace's unless `withWorkspace` is false.
  std::vector<std::tuple<std::string, HostTensor *, bool>>
  named(bool withWorkspace = true) {
    std::vector<std::tuple<std::string, HostTensor *, bool>> out{
        {"Q", &q, false},
        {"K", &k, false},
        {"V", &v, false},
        {"O", &o, true},
        {"LSE", &lse, true}};
    if (withWorkspace)
      for (auto &[name, w] : workspace)
        out.emplace_back(name, &w, true);
    return out;
  }
  /// O and LSE (as the kernels left them) against the fp64 reference.
  void check(const SplitCase &c) {
    HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
    kernels::attentionReference(c.shape(), q, k, v, oRef, lseRef);
    ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
    EXPECT_EQ(eo.nonFinite, 0);
    EXPECT_EQ(el.nonFinite, 0);
    EXPECT_LE(eo.relative, 1e-2) << "max abs " << eo.maxAbs;
    EXPECT_LE(el.relative, 1e-5) << "max abs " << el.maxAbs;
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_SPLITKEYSCASE_H
