//===- GraphGroups.h - the kernels a graph lowering forms -------*- C++ -*-===//
#ifndef KILN_DSL_GRAPHGROUPS_H
#define KILN_DSL_GRAPHGROUPS_H

#include "kiln/dsl/Graph.h"

namespace kiln::graph {

enum class GroupKind { MatMul, Elementwise, Softmax, Transpose, Flash };

/// The graph nodes one kernel computes.
struct Group {
  GroupKind kind;
  int out = -1;           ///< the node whose value the kernel writes
  std::vector<int> ins;   ///< nodes it reads (flash: Q, K, V)
  std::vector<int> nodes; ///< every node it computes
  /// Unary elementwise nodes applied in order: a matmul's epilogue, a
  /// softmax's prologue, an elementwise kernel's ops, flash's score ops.
  std::vector<int> ops;
  bool transB = false; ///< matmul/flash: the right operand is read transposed
  bool dead = false;   ///< merged into another group
};

/// The DSL kernel of a group and its buffers.
Step buildStep(const Graph &g, const Group &group,
               const std::map<int, int> &bufferOf,
               const std::vector<Buffer> &buffers);

} // namespace kiln::graph

#endif // KILN_DSL_GRAPHGROUPS_H
