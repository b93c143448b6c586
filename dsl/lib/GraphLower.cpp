//===- GraphLower.cpp - the passes that turn a graph into kernels ---------===//
//
// The lowering list, in order:
//   1. form-kernels      one kernel per operation; a transpose read only as a
//                        matmul's right operand folds into it (a view)
//   2. fuse-elementwise  (elementwise, fused) a unary elementwise op joins
//                        the kernel that produces its input when it is that
//                        value's only reader, else the softmax that reads it
//   3. fuse-attention    (fused) matmul(A, Bᵀ) -> softmax -> matmul(., V),
//                        each intermediate read once and not an output,
//                        becomes one online-softmax kernel
//   4. plan-memory       buffers for the kernels' outputs; intermediates
//                        placed in one arena by lifetime
// Kernels are built from the groups by GraphKernels.cpp.
//
//===----------------------------------------------------------------------===//
#include "GraphGroups.h"

#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>

namespace kiln::graph {

static bool isUnaryElementwise(Op op) {
  return op == Op::Scale || op == Op::CausalMask || op == Op::Exp;
}

namespace {
struct Lowerer {
  const Graph &g;
  std::vector<Group> groups;
  std::vector<std::string> log;
  std::set<int> outputs;

  std::string at(int id) const {
    const Node &n = g.node(id);
    return fmt::format("{} %{} ({}:{})", opName(n.op), id, n.loc.file_name(),
                       n.loc.line());
  }
  /// Groups that read node `id` (each once).
  std::vector<int> readers(int id) const {
    std::vector<int> r;
    for (size_t i = 0; i < groups.size(); ++i)
      if (!groups[i].dead &&
          std::count(groups[i].ins.begin(), groups[i].ins.end(), id))
        r.push_back(int(i));
    return r;
  }
  int producer(int id) const {
    for (size_t i = 0; i < groups.size(); ++i)
      if (!groups[i].dead && groups[i].out == id)
        return int(i);
    return -1;
  }
  /// Read by exactly one group and not a graph output: may stay on chip.
  bool private_(int id) const {
    return !outputs.count(id) && readers(id).size() == 1;
  }

  void formKernels() {
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const Node &n = g.node(int(i));
      int id = int(i);
      if (n.op == Op::Input)
        continue;
      if (n.op == Op::Transpose) {
        bool folds = !outputs.count(id);
        bool used = false;
        for (const Node &m : g.nodes())
          for (size_t k = 0; k < m.inputs.size(); ++k)
            if (m.inputs[k] == id) {
              used = true;
              folds &= m.op == Op::MatMul && k == 1;
            }
        if (folds && used) {
          log.push_back("form-kernels: " + at(id) +
                        " folds into the matmuls reading it (they read %" +
                        std::to_string(n.inputs[0]) + " transposed)");
          continue;
        }
        groups.push_back({GroupKind::Transpose, id, {n.inputs[0]}, {id}});
        continue;
      }
      Group grp;
      grp.out = id;
      grp.nodes = {id};
      grp.ins = n.inputs;
      if (n.op == Op::MatMul) {
        grp.kind = GroupKind::MatMul;
        const Node &b = g.node(n.inputs[1]);
        if (b.op == Op::Transpose &&
            std::none_of(groups.begin(), groups.end(), [&](const Group &x) {
              return x.out == n.inputs[1];
            })) {
          grp.transB = true;
          grp.ins[1] = b.inputs[0];
        }
      } else if (n.op == Op::Softmax) {
        grp.kind = GroupKind::Softmax;
      } else {
        grp.kind = GroupKind::Elementwise;
        grp.ops = {id};
      }
      groups.push_back(grp);
    }
  }

  void fuseElementwise() {
    for (bool changed = true; changed;) {
      changed = false;
      for (Group &e : groups) {
        if (e.dead || e.kind != GroupKind::Elementwise || e.ops.size() != 1 ||
            !isUnaryElementwise(g.node(e.ops[0]).op))
          continue;
        int x = e.ins[0];
        int p = producer(x);
        if (p >= 0 && private_(x) &&
            (groups[size_t(p)].kind == GroupKind::MatMul ||
             groups[size_t(p)].kind == GroupKind::Elementwise)) {
          Group &into = groups[size_t(p)];
          log.push_back("fuse-elementwise: " + at(e.ops[0]) +
                        " joins the epilogue of " + at(into.nodes[0]));
          into.ops.push_back(e.ops[0]);
          into.nodes.push_back(e.ops[0]);
          into.out = e.out;
          e.dead = changed = true;
          continue;
        }
        std::vector<int> r = readers(e.out);
        if (r.size() == 1 && !outputs.count(e.out) &&
            groups[size_t(r[0])].kind == GroupKind::Softmax) {
          Group &into = groups[size_t(r[0])];
          log.push_back("fuse-elementwise: " + at(e.ops[0]) +
                        " joins the prologue of " + at(into.nodes[0]));
          into.ops.insert(into.ops.begin(), e.ops[0]);
          into.nodes.insert(into.nodes.begin(), e.ops[0]);
          into.ins = e.ins;
          e.dead = changed = true;
        }
      }
    }
  }

  /// Why matmul group `pv` does not end an attention pattern; empty if it
  /// does (then `sm` and `qk` are the softmax and first matmul groups).
  std::string attentionMismatch(const Group &pv, int &sm, int &qk) const {
    if (!pv.ops.empty())
      return "its epilogue is not empty";
    int p = pv.ins[0];
    sm = producer(p);
    if (sm < 0 || groups[size_t(sm)].kind != GroupKind::Softmax)
      return "its left operand is not a softmax";
    if (!private_(p))
      return "the softmax's result is read elsewhere or is an output";
    int s = groups[size_t(sm)].ins[0];
    qk = producer(s);
    if (qk < 0 || groups[size_t(qk)].kind != GroupKind::MatMul)
      return "the softmax's input is not a matmul";
    if (!private_(s))
      return "the scores are read elsewhere or are an output";
    int64_t d = g.node(groups[size_t(qk)].ins[0]).shape.back();
    int64_t dv = g.node(pv.out).shape.back();
    if (d % 16 || dv % 16 || d > 256 || dv > 256)
      return fmt::format("head dims {} and {} are not multiples of 16 <= 256",
                         d, dv);
    return "";
  }

  void fuseAttention() {
    bool any = false;
    for (Group &pv : groups) {
      if (pv.dead || pv.kind != GroupKind::MatMul || pv.transB)
        continue;
      int sm = -1, qk = -1;
      std::string why = attentionMismatch(pv, sm, qk);
      if (!why.empty()) {
        if (sm >= 0)
          log.push_back("fuse-attention: not " + at(pv.nodes[0]) + ": " + why);
        continue;
      }
      Group &s = groups[size_t(sm)], &q = groups[size_t(qk)];
      Group f;
      f.kind = GroupKind::Flash;
      f.out = pv.out;
      f.ins = {q.ins[0], q.ins[1], pv.ins[1]};
      f.transB = q.transB;
      f.ops = q.ops;
      f.ops.insert(f.ops.end(), s.ops.begin(), s.ops.end());
      for (const Group *x : {&q, &s, &pv})
        f.nodes.insert(f.nodes.end(), x->nodes.begin(), x->nodes.end());
      const Node &sn = g.node(s.ins[0]);
      log.push_back(fmt::format(
          "fuse-attention: {} -> {} -> {} become one online-softmax kernel; "
          "the scores {}{} and probabilities ({:.1f} MiB each) stay on chip",
          at(q.nodes[0]), at(s.nodes.back()), at(pv.nodes[0]),
          dtypeName(sn.dtype), shapeToString(sn.shape),
          double(Buffer{"", sn.dtype, sn.shape}.bytes()) / (1 << 20)));
      q.dead = s.dead = pv.dead = true;
      groups.push_back(f);
      any = true;
    }
    if (!any)
      log.push_back("fuse-attention: no matmul -> softmax -> matmul chain");
  }
};
} // namespace

int64_t Buffer::bytes() const {
  int64_t n = int64_t(dtypeSize(dtype));
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Intermediates placed in one arena: largest first, each at the lowest
/// 256-byte-aligned offset clear of every placed buffer alive with it.
static void planMemory(Lowered &plan) {
  size_t nb = plan.buffers.size();
  std::vector<int> first(nb, -1), last(nb, -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    for (int w : plan.steps[s].writes)
      if (first[size_t(w)] < 0)
        first[size_t(w)] = int(s);
    for (int r : plan.steps[s].reads)
      last[size_t(r)] = int(s);
  }
  std::vector<int> order;
  for (size_t b = 0; b < nb; ++b)
    if (!plan.buffers[b].input && !plan.buffers[b].output)
      order.push_back(int(b));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.buffers[size_t(a)].bytes() > plan.buffers[size_t(b)].bytes();
  });
  plan.arenaOffset.assign(nb, -1);
  auto align = [](int64_t x) { return (x + 255) / 256 * 256; };
  std::vector<int> placed;
  for (int b : order) {
    int64_t size = align(plan.buffers[size_t(b)].bytes()), at = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int o : placed) {
        bool liveTogether =
            first[size_t(b)] <= std::max(last[size_t(o)], first[size_t(o)]) &&
            first[size_t(o)] <= std::max(last[size_t(b)], first[size_t(b)]);
        int64_t lo = plan.arenaOffset[size_t(o)],
                hi = lo + align(plan.buffers[size_t(o)].bytes());
        if (liveTogether && at < hi && lo < at + size) {
          at = hi;
          moved = true;
        }
      }
    }
    plan.arenaOffset[size_t(b)] = at;
    plan.arenaBytes = std::max(plan.arenaBytes, at + size);
    placed.push_back(b);
  }
}

Lowered lower(const Graph &g, Fusion fusion) {
  if (g.outputs().empty())
    throw Error("graph lowering: the graph has no outputs");
  Lowerer l{g, {}, {}, {}};
  for (auto &[name, id] : g.outputs())
    l.outputs.insert(id);
  l.formKernels();
  if (fusion != Fusion::None)
    l.fuseElementwise();
  if (fusion == Fusion::Flash)
    l.fuseAttention();

  Lowered plan;
  plan.fusion = fusion;
  plan.log = std::move(l.log);
  // Buffers: inputs first, then each group's result in graph order.
  std::map<int, int> bufferOf;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (g.node(int(i)).op == Op::Input) {
      const Node &n = g.node(int(i));
      bufferOf[int(i)] = int(plan.buffers.size());
      plan.buffers.push_back({n.name, n.dtype, n.shape, true, false});
    }
  std::vector<const Group *> live;
  for (const Group &grp : l.groups)
    if (!grp.dead)
      live.push_back(&grp);
  std::stable_sort(
      live.begin(), live.end(),
      [](const Group *a, const Group *b) { return a->out < b->out; });
  for (const Group *grp : live) {
    const Node &n = g.node(grp->out);
    std::string name = "%" + std::to_string(grp->out);
    bool isOut = false;
    for (auto &[oname, id] : g.outputs())
      if (id == grp->out) {
        name = oname;
        isOut = true;
      }
    bufferOf[grp->out] = int(plan.buffers.size());
    plan.buffers.push_back({name, n.dtype, n.shape, false, isOut});
  }
  for (const Group *grp : live)
    plan.steps.push_back(buildStep(g, *grp, bufferOf, plan.buffers));
  for (Step &s : plan.steps) {
    for (int r : s.reads)
      s.bytesRead += plan.buffers[size_t(r)].bytes();
    for (int w : s.writes)
      s.bytesWritten += plan.buffers[size_t(w)].bytes();
  }
  planMemory(plan);
  return plan;
}

int64_t Lowered::peakBytes() const {
  int64_t io = 0;
  for (const Buffer &b : buffers)
    if (b.input || b.output)
      io += b.bytes();
  return io + arenaBytes;
}

int64_t Lowered::bytesMoved() const {
  int64_t n = 0;
  for (const Step &s : steps)
    n += s.bytesRead + s.bytesWritten;
  return n;
}

std::string Lowered::str() const {
  std::string out = fmt::format(
      "lowering: {}, {} kernel(s), {:.2f} MiB moved, peak device memory "
      "{:.2f} MiB (inputs, outputs and a {:.2f} MiB arena)\n",
      fusionName(fusion), steps.size(), double(bytesMoved()) / (1 << 20),
      double(peakBytes()) / (1 << 20), double(arenaBytes) / (1 << 20));
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step &s = steps[i];
    std::string ins, outs;
    for (int r : s.reads)
      ins += (ins.empty() ? "" : ", ") + buffers[size_t(r)].name;
    for (int w : s.writes)
      outs += (outs.empty() ? "" : ", ") + buffers[size_t(w)].name;
    out += fmt::format("  {}. {:<34} reads {:>12} B ({})  writes {:>12} B "
                       "({})\n     {}\n",
                       i + 1, s.kernel.name(), s.bytesRead, ins, s.bytesWritten,
                       outs, s.summary);
  }
  out += "passes:\n";
  for (const std::string &l : log)
    out += "  " + l + "\n";
  return out;
}

std::string Lowered::json() const {
  llvm::json::Array kernels;
  for (const Step &s : steps)
    kernels.push_back(llvm::json::Object{{"name", s.kernel.name()},
                                         {"bytes_read", s.bytesRead},
                                         {"bytes_written", s.bytesWritten}});
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::json::Value(llvm::json::Object{{"mode", fusionName(fusion)},
                                             {"kernels", std::move(kernels)},
                                             {"bytes_moved", bytesMoved()},
                                             {"peak_bytes", peakBytes()}});
  return out;
}

} // namespace kiln::graph
