//===- Graph.cpp - building and printing whole-tensor graphs --------------===//
#include "kiln/dsl/Graph.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

namespace kiln::graph {

const char *opName(Op op) {
  switch (op) {
  case Op::Input:
    return "input";
  case Op::MatMul:
    return "matmul";
  case Op::Transpose:
    return "transpose";
  case Op::Scale:
    return "scale";
  case Op::CausalMask:
    return "causal-mask";
  case Op::Softmax:
    return "softmax";
  case Op::Exp:
    return "exp";
  case Op::Add:
    return "add";
  case Op::Mul:
    return "mul";
  }
  return "?";
}

[[noreturn]] static void fail(const Loc &loc, const std::string &message) {
  throw Error(std::string(loc.file_name()) + ":" + std::to_string(loc.line()) +
              ": " + message);
}

const Shape &Tensor::shape() const { return graph_->node(id_).shape; }
DType Tensor::dtype() const { return graph_->node(id_).dtype; }

int Graph::add(Node n) {
  nodes_.push_back(std::move(n));
  return int(nodes_.size()) - 1;
}

Tensor Graph::input(const std::string &name, DType dtype, Shape shape,
                    Loc loc) {
  if (shape.size() < 2)
    fail(loc, "graph input " + name + ": rank " + std::to_string(shape.size()) +
                  " (needs >= 2)");
  for (int64_t d : shape)
    if (d < 1)
      fail(loc, "graph input " + name + ": shape " + shapeToString(shape) +
                    " has a dimension < 1");
  for (const Node &n : nodes_)
    if (n.op == Op::Input && n.name == name)
      fail(loc, "graph input " + name + " is declared twice");
  return {this, add({Op::Input, {}, std::move(shape), dtype, 0, name, loc})};
}

void Graph::output(const std::string &name, Tensor t, Loc loc) {
  if (&t.graph() != this)
    fail(loc, "output " + name + " is a tensor of another graph");
  if (nodes_[size_t(t.id())].op == Op::Input)
    fail(loc, "output " + name + " is a graph input (nothing to compute)");
  for (auto &[n, id] : outputs_)
    if (n == name)
      fail(loc, "output " + name + " is declared twice");
  outputs_.push_back({name, t.id()});
}

static Tensor unary(Op op, Tensor a, double scalar, Loc loc) {
  Graph &g = a.graph();
  return {&g, g.add({op, {a.id()}, a.shape(), a.dtype(), scalar, "", loc})};
}

static void sameGraph(Tensor a, Tensor b, const char *op, Loc loc) {
  if (&a.graph() != &b.graph())
    fail(loc, std::string(op) + " of tensors from two graphs");
}

Tensor matmul(Tensor a, Tensor b, Loc loc) {
  sameGraph(a, b, "matmul", loc);
  const Shape &x = a.shape(), &y = b.shape();
  bool batchOk =
      x.size() == y.size() && std::equal(x.begin(), x.end() - 2, y.begin());
  if (!batchOk || x.back() != y[y.size() - 2])
    fail(loc, "matmul of " + shapeToString(x) + " and " + shapeToString(y) +
                  ": needs [..., M, K] x [..., K, N] with equal leading "
                  "dimensions");
  if (a.dtype() != b.dtype())
    fail(loc, std::string("matmul of ") + dtypeName(a.dtype()) + " and " +
                  dtypeName(b.dtype()));
  Shape out = x;
  out.back() = y.back();
  Graph &g = a.graph();
  return {&g,
          g.add({Op::MatMul, {a.id(), b.id()}, out, a.dtype(), 0, "", loc})};
}

Tensor transpose(Tensor a, Loc loc) {
  Shape s = a.shape();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Graph &g = a.graph();
  return {&g, g.add({Op::Transpose, {a.id()}, s, a.dtype(), 0, "", loc})};
}

Tensor scale(Tensor a, double factor, Loc loc) {
  return unary(Op::Scale, a, factor, loc);
}
Tensor causalMask(Tensor a, Loc loc) {
  return unary(Op::CausalMask, a, 0, loc);
}
Tensor softmax(Tensor a, Loc loc) { return unary(Op::Softmax, a, 0, loc); }
Tensor exp(Tensor a, Loc loc) { return unary(Op::Exp, a, 0, loc); }

static Tensor binary(Op op, Tensor a, Tensor b, Loc loc) {
  sameGraph(a, b, opName(op), loc);
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    fail(loc, std::string(opName(op)) + " of " + dtypeName(a.dtype()) +
                  shapeToString(a.shape()) + " and " + dtypeName(b.dtype()) +
                  shapeToString(b.shape()) + ": shapes and dtypes must match");
  Graph &g = a.graph();
  return {&g, g.add({op, {a.id(), b.id()}, a.shape(), a.dtype(), 0, "", loc})};
}
Tensor add(Tensor a, Tensor b, Loc loc) { return binary(Op::Add, a, b, loc); }
Tensor mul(Tensor a, Tensor b, Loc loc) { return binary(Op::Mul, a, b, loc); }

std::string Graph::str() const {
  std::string out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &n = nodes_[i];
    std::string args;
    for (int in : n.inputs)
      args += (args.empty() ? "%" : ", %") + std::to_string(in);
    if (n.op == Op::Scale)
      args += fmt::format(", {:.6g}", n.scalar);
    if (n.op == Op::Input)
      args = "\"" + n.name + "\"";
    out += fmt::format("%{} = {}({}) : {}{}  ({}:{})\n", i, opName(n.op), args,
                       dtypeName(n.dtype), shapeToString(n.shape),
                       n.loc.file_name(), n.loc.line());
  }
  for (auto &[name, id] : outputs_)
    out += fmt::format("output \"{}\" = %{}\n", name, id);
  return out;
}

const char *fusionName(Fusion f) {
  switch (f) {
  case Fusion::None:
    return "unfused";
  case Fusion::Elementwise:
    return "elementwise";
  case Fusion::Flash:
    return "fused";
  }
  return "?";
}

Fusion parseFusion(const std::string &name) {
  for (Fusion f : {Fusion::None, Fusion::Elementwise, Fusion::Flash})
    if (name == fusionName(f))
      return f;
  throw Error("lowering mode '" + name +
              "' is not one of unfused, elementwise, fused");
}

} // namespace kiln::graph
