//===- Graph.h - whole-tensor operations and their lowerings ----*- C++ -*-===//
//
// A graph of whole-tensor operations (matmul, transpose, scale, causal mask,
// softmax, elementwise) and the passes that lower it to DSL kernels:
//
//   graph::Graph g;
//   auto Q = g.input("Q", bf16, {B, H, N, D}), K = ..., V = ...;
//   g.output("O", matmul(softmax(causalMask(matmul(Q, transpose(K)) * s)), V));
//   graph::Lowered plan = graph::lower(g, graph::Fusion::Flash);
//
// Fusion::None makes one kernel per operation with every intermediate in
// device memory; Fusion::Elementwise folds scale/mask/exp into the matmul or
// softmax next to them; Fusion::Flash also recognises matmul -> softmax ->
// matmul and derives one online-softmax kernel. The passes decide; each
// decision is logged in Lowered::log.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DSL_GRAPH_H
#define KILN_DSL_GRAPH_H

#include "kiln/Compiler/Kernel.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/HostTensor.h"
#include "kiln/runtime/Launch.h"

#include <cstdint>
#include <map>
#include <source_location>
#include <string>
#include <vector>

namespace kiln::graph {

using Loc = std::source_location;
using Shape = std::vector<int64_t>;

enum class Op {
  Input,
  MatMul,
  Transpose,
  Scale,
  CausalMask,
  Softmax,
  Exp,
  Add,
  Mul
};
const char *opName(Op op);

/// One whole-tensor operation. Elementwise ops keep their input's shape and
/// dtype; matmul and softmax produce the dtype of their inputs.
struct Node {
  Op op;
  std::vector<int> inputs;
  Shape shape;
  DType dtype;
  double scalar = 0; ///< Scale's factor
  std::string name;  ///< inputs and outputs
  Loc loc;
};

class Graph;

/// A handle to a node's result.
class Tensor {
public:
  Tensor(Graph *g, int id) : graph_(g), id_(id) {}
  Graph &graph() const { return *graph_; }
  int id() const { return id_; }
  const Shape &shape() const;
  DType dtype() const;

private:
  Graph *graph_;
  int id_;
};

class Graph {
public:
  Tensor input(const std::string &name, DType dtype, Shape shape,
               Loc loc = Loc::current());
  void output(const std::string &name, Tensor t, Loc loc = Loc::current());
  int add(Node n);
  const std::vector<Node> &nodes() const { return nodes_; }
  const Node &node(int id) const { return nodes_.at(size_t(id)); }
  /// (name, node) of each output, in the order given.
  const std::vector<std::pair<std::string, int>> &outputs() const {
    return outputs_;
  }
  /// One line per node: `%3 = softmax(%2) : bf16[1,2,64,64]  (file:line)`.
  std::string str() const;

private:
  std::vector<Node> nodes_;
  std::vector<std::pair<std::string, int>> outputs_;
};

/// a[..., M, K] · b[..., K, N] over equal leading (batch) dimensions.
Tensor matmul(Tensor a, Tensor b, Loc loc = Loc::current());
/// Swaps the last two dimensions.
Tensor transpose(Tensor a, Loc loc = Loc::current());
Tensor scale(Tensor a, double factor, Loc loc = Loc::current());
/// -inf where the column (last index) exceeds the row (second last).
Tensor causalMask(Tensor a, Loc loc = Loc::current());
/// Along the last dimension, computed in fp32.
Tensor softmax(Tensor a, Loc loc = Loc::current());
Tensor exp(Tensor a, Loc loc = Loc::current());
Tensor add(Tensor a, Tensor b, Loc loc = Loc::current());
Tensor mul(Tensor a, Tensor b, Loc loc = Loc::current());

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

enum class Fusion { None, Elementwise, Flash };
const char *fusionName(Fusion f); ///< unfused, elementwise, fused
/// Parses unfused|elementwise|fused; throws kiln::Error otherwise.
Fusion parseFusion(const std::string &name);

/// A tensor in device memory: a graph input or output, or an intermediate.
struct Buffer {
  std::string name;
  DType dtype;
  Shape shape;
  bool input = false, output = false;
  int64_t bytes() const;
};

/// One kernel of a lowering: the graph nodes it computes, the buffers it
/// reads and writes (bound to its tensor parameters by name) and what it
/// costs: every byte of each buffer it reads or writes counted once.
struct Step {
  Kernel kernel;
  std::string summary; ///< "matmul(%0, %1ᵀ) -> scale -> causal-mask"
  /// Tensor parameter -> (buffer, the shape the kernel sees it as: the
  /// buffer's leading dimensions flattened into one batch dimension).
  std::map<std::string, std::pair<int, Shape>> args;
  std::vector<int> reads, writes;
  int64_t bytesRead = 0, bytesWritten = 0;
};

struct Lowered {
  Fusion fusion;
  std::vector<Buffer> buffers;
  std::vector<Step> steps;
  std::vector<std::string> log; ///< the passes' decisions, in order
  /// Intermediates share one arena: each gets an offset such that buffers
  /// alive at the same time do not overlap (alive from the step that writes
  /// it to the last that reads it).
  std::vector<int64_t> arenaOffset; ///< per buffer; -1 for inputs/outputs
  int64_t arenaBytes = 0;
  /// Inputs + outputs + arena: the device memory a run holds at its peak.
  int64_t peakBytes() const;
  int64_t bytesMoved() const;
  std::string str() const; ///< steps with their bytes, and the log
  std::string json() const;
};

/// Lowers a graph. Throws kiln::Error (naming the user's line) for a graph
/// the GPU kernels cannot run: a matmul of non-16-bit floats, a rank below 2.
Lowered lower(const Graph &g, Fusion fusion);

/// Runs a lowering on the CPU reference executor: `tensors` holds every
/// input by name and receives every output (allocated here).
void runOnCpu(const Lowered &plan, std::map<std::string, HostTensor> &tensors);

/// A lowering compiled and loaded on the GPU with its arena allocated.
/// Throws cuda::OutOfMemory when the arena does not fit.
class GpuGraph {
public:
  explicit GpuGraph(const Lowered &plan);
  /// Launches every step on the default stream (no synchronisation);
  /// `io` holds a device tensor for every graph input and output by name.
  void launch(const std::map<std::string, TensorRef> &io);
  size_t launches() const { return kernels_.size(); }

private:
  const Lowered &plan_;
  std::vector<std::shared_ptr<GpuKernel>> kernels_;
  cuda::Buffer arena_;
};

} // namespace kiln::graph

#endif // KILN_DSL_GRAPH_H
