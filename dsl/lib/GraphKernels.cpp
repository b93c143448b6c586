//===- GraphKernels.cpp - DSL kernels for the groups of a lowering --------===//
//
// Every tensor is seen as [batch, rows, cols], its leading dimensions
// flattened (buffers are contiguous). The unary elementwise ops a group
// carries are applied to fp32 tiles whose row and column indices are known,
// which is all a causal mask needs.
//
//===----------------------------------------------------------------------===//
#include "GraphGroups.h"

#include "kiln/dsl/Dsl.h"

#include <fmt/core.h>

namespace kiln::graph {

using namespace kiln::dsl;

namespace {
/// [batch, rows, cols] of a shape of rank >= 2.
Shape view3(const Shape &s) {
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < s.size(); ++i)
    batch *= s[i];
  return {batch, s[s.size() - 2], s.back()};
}

/// Applies the group's unary ops to `x` (fp32) whose element (i, j) is row
/// rows[i] and column cols[j] of the op's operand.
Tile applyOps(const Graph &g, const std::vector<int> &ops, Tile x,
              const Tile &rows, const Tile &cols) {
  for (int id : ops) {
    const Node &n = g.node(id);
    switch (n.op) {
    case Op::Scale:
      x = x * n.scalar;
      break;
    case Op::CausalMask:
      x = where(column(rows) >= row(cols), x, -inf);
      break;
    case Op::Exp:
      x = exp(x);
      break;
    default:
      throw InternalError(std::string("graph: ") + opName(n.op) +
                          " is not a unary elementwise op");
    }
  }
  return x;
}

std::string opsSummary(const Graph &g, const std::vector<int> &ops) {
  std::string s;
  for (int id : ops) {
    const Node &n = g.node(id);
    s += std::string(" -> ") + opName(n.op);
    if (n.op == Op::Scale)
      s += fmt::format(" {:.4g}", n.scalar);
  }
  return s;
}

std::string opsName(const Graph &g, const std::vector<int> &ops) {
  std::string s;
  for (int id : ops) {
    std::string n = opName(g.node(id).op);
    std::replace(n.begin(), n.end(), '-', '_');
    s += "_" + n;
  }
  return s;
}

struct Builder {
  const Graph &g;
  const Group &grp;
  const std::map<int, int> &bufferOf;
  const std::vector<Buffer> &buffers;
  Step step;

  TensorView arg(KernelBuilder &k, const std::string &name, int node,
                 bool write) {
    int b = bufferOf.at(node);
    Shape v = view3(g.node(node).shape);
    step.args[name] = {b, v};
    (write ? step.writes : step.reads).push_back(b);
    return k.tensorArg(name, g.node(node).dtype, v);
  }
  std::string in(int i) const {
    return buffers[size_t(bufferOf.at(grp.ins[size_t(i)]))].name;
  }

  Kernel matmul() {
    const int64_t BM = 128, BN = 64, BK = 32;
    Shape a = view3(g.node(grp.ins[0]).shape), c = view3(g.node(grp.out).shape);
    const int64_t M = a[1], K = a[2], N = c[2];
    KernelBuilder k("matmul" + opsName(g, grp.ops),
                    {cdiv(M, BM), cdiv(N, BN), a[0]});
    k.setWarps(4);
    k.setStages(3);
    auto A = arg(k, "A", grp.ins[0], false);
    auto B = arg(k, "B", grp.ins[1], false);
    auto C = arg(k, "C", grp.out, true);
    Index m0 = programId(0) * BM, n0 = programId(1) * BN, b = programId(2);
    Tile acc = zeros({BM, BN}, f32);
    forRange(0, K, BK, carry(acc), [&](Index k0) {
      Tile x = load(A[b].block({m0, k0}, {BM, BK}));
      Tile y = grp.transB ? transpose(load(B[b].block({n0, k0}, {BN, BK})))
                          : load(B[b].block({k0, n0}, {BK, BN}));
      acc = dot(x, y, acc);
    });
    acc = applyOps(g, grp.ops, acc, arange(BM) + m0, arange(BN) + n0);
    store(C[b].block({m0, n0}), acc.to(g.node(grp.out).dtype));
    step.summary = fmt::format("matmul({}, {}{}){}", in(0), in(1),
                               grp.transB ? "ᵀ" : "", opsSummary(g, grp.ops));
    return k.finish();
  }

  Kernel elementwise() {
    const int64_t BR = 16, BC = 128;
    const Node &n = g.node(grp.ops[0]);
    Shape v = view3(g.node(grp.out).shape);
    bool binary = n.op == Op::Add || n.op == Op::Mul;
    std::string name = binary ? opName(n.op) : "ew" + opsName(g, grp.ops);
    if (!binary && grp.ops.size() == 1)
      name = opsName(g, grp.ops).substr(1);
    KernelBuilder k(name, {cdiv(v[1], BR), cdiv(v[2], BC), v[0]});
    auto X = arg(k, "X", grp.ins[0], false);
    std::optional<TensorView> Y2;
    if (binary)
      Y2 = arg(k, "X2", grp.ins[1], false);
    auto Y = arg(k, "Y", grp.out, true);
    Index r0 = programId(0) * BR, c0 = programId(1) * BC, b = programId(2);
    Tile x = load(X[b].block({r0, c0}, {BR, BC})).to(f32);
    if (binary) {
      Tile x2 = load((*Y2)[b].block({r0, c0}, {BR, BC})).to(f32);
      x = n.op == Op::Add ? x + x2 : x * x2;
      step.summary = fmt::format("{}({}, {})", opName(n.op), in(0), in(1));
    } else {
      x = applyOps(g, grp.ops, x, arange(BR) + r0, arange(BC) + c0);
      step.summary = in(0) + opsSummary(g, grp.ops);
    }
    store(Y[b].block({r0, c0}), x.to(g.node(grp.out).dtype));
    return k.finish();
  }

  Kernel transposeCopy() {
    const int64_t BT = 64;
    Shape v = view3(g.node(grp.ins[0]).shape);
    KernelBuilder k("transpose", {cdiv(v[1], BT), cdiv(v[2], BT), v[0]});
    auto X = arg(k, "X", grp.ins[0], false);
    auto Y = arg(k, "Y", grp.out, true);
    Index r0 = programId(0) * BT, c0 = programId(1) * BT, b = programId(2);
    store(Y[b].block({c0, r0}),
          transpose(load(X[b].block({r0, c0}, {BT, BT}))));
    step.summary = "transpose(" + in(0) + ")";
    return k.finish();
  }

  /// Two sweeps over each row: a running max and a rescaled running sum,
  /// then exp(x - max) / sum. Columns past the end are -inf after the ops.
  Kernel softmax() {
    const int64_t BR = 16, BC = 128;
    Shape v = view3(g.node(grp.out).shape);
    const int64_t N = v[2];
    KernelBuilder k("softmax" + opsName(g, grp.ops), {cdiv(v[1], BR), v[0]});
    auto X = arg(k, "X", grp.ins[0], false);
    auto Y = arg(k, "Y", grp.out, true);
    Index r0 = programId(0) * BR, b = programId(1);
    Tile rows = arange(BR) + r0;
    auto scores = [&](Index c0) {
      Tile cols = arange(BC) + c0;
      Tile x = load(X[b].block({r0, c0}, {BR, BC})).to(f32);
      x = applyOps(g, grp.ops, x, rows, cols);
      return N % BC ? where(row(cols) < N, x, -inf) : x;
    };
    Tile rowMax = full({BR}, -inf, f32), rowSum = zeros({BR}, f32);
    forRange(0, N, BC, carry(rowMax, rowSum), [&](Index c0) {
      Tile x = scores(c0);
      Tile newMax = max(rowMax, reduceMax(x, 1));
      rowSum =
          rowSum * exp(rowMax - newMax) + reduceSum(exp(x - column(newMax)), 1);
      rowMax = newMax;
    });
    Tile inverseSum = 1.0 / rowSum; // a division per row, not per element
    forRange(0, N, BC, [&](Index c0) {
      Tile y = exp(scores(c0) - column(rowMax)) * column(inverseSum);
      store(Y[b].block({r0, c0}), y.to(g.node(grp.out).dtype));
    });
    step.summary = "softmax(" + in(0) + opsSummary(g, grp.ops) + ")";
    return k.finish();
  }

  /// The online-softmax loop derived from matmul -> ops -> softmax -> matmul:
  /// per block of keys, the scores (with the ops applied), the running row
  /// max and sum, and the accumulator rescaled when the max grows. A causal
  /// mask among the ops makes every key past the block's last row -inf, so
  /// the loop stops there.
  Kernel flash() {
    Shape q = view3(g.node(grp.ins[0]).shape), o = view3(g.node(grp.out).shape);
    const int64_t M = q[1], D = q[2], Dv = o[2];
    const int64_t N = view3(g.node(grp.ins[2]).shape)[1];
    bool causal = false;
    for (int id : grp.ops)
      causal |= g.node(id).op == Op::CausalMask;
    const int64_t BM = 128, BN = D >= 128 && causal ? 32 : 64;
    const DType dt = g.node(grp.ins[0]).dtype;
    KernelBuilder k("flash_attention" + opsName(g, grp.ops),
                    {cdiv(M, BM), q[0]});
    k.setWarps(4);
    k.setStages(2);
    auto Q = arg(k, "Q", grp.ins[0], false);
    auto K = arg(k, "K", grp.ins[1], false);
    auto V = arg(k, "V", grp.ins[2], false);
    auto O = arg(k, "O", grp.out, true);
    Index m0 = programId(0) * BM, b = programId(1);
    Tile qTile = load(Q[b].block({m0, 0}, {BM, D}));
    Tile acc = zeros({BM, Dv}, f32);
    Tile rowMax = full({BM}, -inf, f32), rowSum = zeros({BM}, f32);
    Tile rows = arange(BM) + m0;
    Index hi = causal ? min(m0 + BM, Index(N)) : Index(N);
    forRange(0, hi, BN, carry(acc, rowMax, rowSum), [&](Index n0) {
      Tile kT = grp.transB ? transpose(load(K[b].block({n0, 0}, {BN, D})))
                           : load(K[b].block({0, n0}, {D, BN}));
      Tile cols = arange(BN) + n0;
      Tile s = applyOps(g, grp.ops, dot(qTile, kT), rows, cols);
      if (N % BN)
        s = where(row(cols) < N, s, -inf);
      Tile newMax = max(rowMax, reduceMax(s, 1));
      Tile p = exp2((s - column(newMax)) * log2e);
      Tile alpha = exp2((rowMax - newMax) * log2e);
      rowSum = rowSum * alpha + reduceSum(p, 1);
      Tile v = load(V[b].block({n0, 0}, {BN, Dv}));
      acc = dot(p.to(dt), v, acc * column(alpha));
      rowMax = newMax;
    });
    // A division per row, a multiply per element.
    store(O[b].block({m0, 0}), (acc * column(1.0 / rowSum)).to(dt));
    step.summary =
        fmt::format("online softmax(matmul({}, {}{}){}) · {}", in(0), in(1),
                    grp.transB ? "ᵀ" : "", opsSummary(g, grp.ops), in(2));
    return k.finish();
  }
};
} // namespace

Step buildStep(const Graph &g, const Group &group,
               const std::map<int, int> &bufferOf,
               const std::vector<Buffer> &buffers) {
  Builder b{g, group, bufferOf, buffers, {Kernel(nullptr), {}, {}, {}, {}}};
  const Node &n = g.node(group.nodes[0]);
  if ((group.kind == GroupKind::MatMul || group.kind == GroupKind::Flash) &&
      n.dtype != DType::bf16 && n.dtype != DType::f16)
    throw Error(std::string(n.loc.file_name()) + ":" +
                std::to_string(n.loc.line()) + ": matmul of " +
                dtypeName(n.dtype) +
                ": the GPU kernels take bf16 or f16 operands");
  switch (group.kind) {
  case GroupKind::MatMul:
    b.step.kernel = b.matmul();
    break;
  case GroupKind::Elementwise:
    b.step.kernel = b.elementwise();
    break;
  case GroupKind::Softmax:
    b.step.kernel = b.softmax();
    break;
  case GroupKind::Transpose:
    b.step.kernel = b.transposeCopy();
    break;
  case GroupKind::Flash:
    b.step.kernel = b.flash();
    break;
  }
  return std::move(b.step);
}

} // namespace kiln::graph
