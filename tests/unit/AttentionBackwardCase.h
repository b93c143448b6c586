//===- AttentionBackwardCase.h - backward test problems ---------*- C++ -*-===//
//
// One attention backward problem for the CPU and GPU tests: random Q, K, V
// and dO, O and LSE from the fp64 forward reference (so that nothing but the
// backward kernels is under test), gradients poisoned, and the check of
// dQ, dK and dV against the fp64 backward reference.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_UNIT_ATTENTIONBACKWARDCASE_H
#define KILN_TESTS_UNIT_ATTENTIONBACKWARDCASE_H

#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Reference.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

namespace kiln::test {

struct BackwardCase {
  int64_t B, H, Nq, Nk, D;
  bool causal;
  DType dtype;
  bool bshd = false;      ///< (B, N, H, D) storage seen as (B, H, N, D)
  int staticShapes = -1;  ///< 1: B, H and N compiled in
  int deterministic = -1; ///< AttentionBackwardConfig::deterministic
  /// 1: dK/dV on persistent CTAs in fixed rounds, 2: tiles from a counter,
  /// 0: not persistent, -1: the default.
  int persistent = -1;
  /// Causal dK/dV key blocks longest first (AttentionBackwardConfig::
  /// longestFirst) and its groups of heads (0: the default's).
  int longestFirst = -1;
  int64_t headGroup = 0;
  /// AttentionBackwardConfig::scoresByQueries (-1: the default's).
  int scoresByQueries = -1;
  /// K and V's heads (grouped-query attention); 0: H.
  int64_t kvHeads = 0;

  kernels::AttentionBackwardConfig config() const {
    kernels::AttentionBackwardConfig c;
    c.staticShapes = staticShapes;
    c.deterministic = deterministic;
    c.longestFirst = longestFirst;
    c.headGroup = headGroup;
    c.scoresByQueries = scoresByQueries;
    if (persistent >= 0) { // else the default's
      c.persistent = persistent > 0;
      c.dynamicTiles = persistent > 1;
    }
    return c;
  }

  kernels::AttentionShape shape() const {
    return {B, H, Nq, Nk, D, causal, dtype, 0, kvHeads};
  }
  std::string name() const {
    return std::to_string(B) + "x" + std::to_string(H) + "_q" +
           std::to_string(Nq) + "_k" + std::to_string(Nk) + "_d" +
           std::to_string(D) +
           (kvHeads > 0 ? "_kv" + std::to_string(kvHeads) : "") +
           (causal ? "_causal_" : "_full_") + dtypeName(dtype) +
           (bshd ? "_bshd" : "") + (staticShapes > 0 ? "_static" : "") +
           (deterministic > 0    ? "_deterministic"
            : deterministic == 0 ? "_atomic"
                                 : "") +
           (persistent > 1    ? "_dynamic_tiles"
            : persistent == 1 ? "_persistent"
            : persistent == 0 ? "_not_persistent"
                              : "") +
           (longestFirst == 0 ? "_grid_order" : "") +
           (headGroup > 0 ? "_groups_of_" + std::to_string(headGroup) : "") +
           (scoresByQueries > 0    ? "_scores_by_queries"
            : scoresByQueries == 0 ? "_scores_by_keys"
                                   : "");
  }
};

inline void PrintTo(const BackwardCase &c, std::ostream *os) {
  *os << c.name();
}

struct BackwardTensors {
  HostTensor q, k, v, o, lse, dO, dq, dk, dv;
  /// Stats, dQaccum, dQarrivals, FoldedStats (kernels::BackwardWorkspace).
  std::map<std::string, HostTensor> workspace;

  explicit BackwardTensors(const BackwardCase &c)
      : q(make(c, c.H, c.Nq)), k(make(c, kvHeadsOf(c), c.Nk)),
        v(make(c, kvHeadsOf(c), c.Nk)), o(make(c, c.H, c.Nq)),
        lse(DType::f32, {c.B, c.H, c.Nq}), dO(make(c, c.H, c.Nq)),
        dq(make(c, c.H, c.Nq)), dk(make(c, kvHeadsOf(c), c.Nk)),
        dv(make(c, kvHeadsOf(c), c.Nk)) {
    for (const kernels::WorkspaceTensor &w :
         kernels::BackwardWorkspace(c.B, c.H, c.Nq, c.D).tensors)
      workspace.emplace(w.name, HostTensor(w.dtype, w.shape))
          .first->second.poison();
    const uint64_t seed = std::hash<std::string>()(c.name());
    q.fillRandom(seed, -2, 2);
    k.fillRandom(seed + 1, -2, 2);
    v.fillRandom(seed + 2);
    dO.fillRandom(seed + 3);
    HostTensor oRef(DType::f32, o.shape());
    kernels::attentionReference(c.shape(), q, k, v, oRef, lse);
    for (int64_t i = 0; i < o.numel(); ++i)
      o.flatSet(i, oRef.flatAt(i)); // rounded to the dtype, as a forward's
    for (HostTensor *t : {&dq, &dk, &dv})
      t->poison();
  }

  /// Every tensor by the name the kernels bind.
  std::map<std::string, HostTensor *> byName() {
    std::map<std::string, HostTensor *> out{
        {"Q", &q},   {"K", &k},   {"V", &v},   {"O", &o},  {"LSE", &lse},
        {"dO", &dO}, {"dQ", &dq}, {"dK", &dk}, {"dV", &dv}};
    for (auto &[name, t] : workspace)
      out[name] = &t;
    return out;
  }
  std::map<std::string, TensorRef> refs() {
    std::map<std::string, TensorRef> out;
    for (auto &[name, t] : byName())
      out[name] = t->ref();
    return out;
  }

  /// dQ, dK and dV against the fp64 reference: no unwritten element, L2
  /// relative error within the dtype's tolerance.
  void expectGradientsMatch(const BackwardCase &c) const {
    HostTensor rq(DType::f32, q.shape()), rk(DType::f32, k.shape()),
        rv(DType::f32, v.shape());
    kernels::attentionBackwardReference(c.shape(), q, k, v, dO, rq, rk, rv);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 5e-3;
    for (auto [name, out, ref] :
         {std::tuple{"dQ", &dq, &rq}, {"dK", &dk, &rk}, {"dV", &dv, &rv}}) {
      ErrorStats e = compareTensors(*out, *ref);
      EXPECT_EQ(e.nonFinite, 0) << name << ": unwritten or NaN elements";
      EXPECT_LE(e.relative, tol) << name << ": max abs " << e.maxAbs;
    }
  }

private:
  static int64_t kvHeadsOf(const BackwardCase &c) {
    return c.kvHeads > 0 ? c.kvHeads : c.H;
  }
  static HostTensor make(const BackwardCase &c, int64_t heads, int64_t n) {
    if (!c.bshd)
      return HostTensor(c.dtype, {c.B, heads, n, c.D});
    return HostTensor(c.dtype, {c.B, heads, n, c.D},
                      {n * heads * c.D, c.D, heads * c.D, 1});
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_ATTENTIONBACKWARDCASE_H
