//===- Graph.cpp - attention written as a graph of tensor operations ------===//
#include "kiln/kernels/AttentionGraph.h"

#include <cmath>

namespace kiln::kernels {

graph::Graph attentionGraph(const AttentionShape &s) {
  graph::Graph g;
  auto Q = g.input("Q", s.dtype, {s.batch, s.heads, s.seqQ, s.headDim});
  auto K = g.input("K", s.dtype, {s.batch, s.heads, s.seqK, s.headDim});
  auto V = g.input("V", s.dtype, {s.batch, s.heads, s.seqK, s.headDim});
  double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.headDim));
  auto S = graph::scale(graph::matmul(Q, graph::transpose(K)), scale);
  if (s.causal)
    S = graph::causalMask(S);
  g.output("O", graph::matmul(graph::softmax(S), V));
  return g;
}

double attentionFlops(const AttentionShape &s) {
  return 4.0 * double(s.batch * s.heads) * double(s.seqQ) * double(s.seqK) *
         double(s.headDim) * (s.causal ? 0.5 : 1.0);
}

} // namespace kiln::kernels
