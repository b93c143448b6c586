//===- LayoutAnalysis.cpp - which layout each tile lives in ---------------===//
#include "Lowering.h"

using namespace mlir;

namespace kiln::gpu {
namespace {

class Analysis {
public:
  Analysis(int numWarps, bool aligned) : numWarps(numWarps), aligned(aligned) {}
  LayoutMap map;
  int numWarps;
  bool aligned;

  ValueLayout get(Value v) {
    auto it = map.find(v);
    return it == map.end() ? ValueLayout::uniform() : it->second;
  }
  Layout fixedOrBlocked(Value v) {
    ValueLayout l = get(v);
    if (l.state == ValueLayout::State::Fixed)
      return *l.layout;
    auto t = cast<RankedTensorType>(v.getType());
    return Layout::blocked({t.getShape().begin(), t.getShape().end()},
                           numWarps);
  }

  /// The strongest fixed layout among `operands`; flexible if none is fixed
  /// but one is flexible; uniform otherwise.
  ValueLayout join(ValueRange operands) {
    ValueLayout best = ValueLayout::uniform();
    for (Value o : operands) {
      if (!isa<RankedTensorType>(o.getType()))
        continue;
      ValueLayout l = get(o);
      if (l.state == ValueLayout::State::Fixed) {
        if (best.state != ValueLayout::State::Fixed ||
            int(l.layout->kind) > int(best.layout->kind))
          best = l;
      } else if (l.state == ValueLayout::State::Flexible &&
                 best.state == ValueLayout::State::Uniform) {
        best = l;
      }
    }
    return best;
  }

  /// A layout of the broadcast's result from whose projection the source can
  /// be read without moving data (a row statistic of one mma tile broadcast
  /// over a wider mma tile, say); blocked when none fits.
  Layout broadcastLayout(const Layout &src, const std::vector<int64_t> &s) {
    std::vector<int64_t> dims;
    for (size_t d = 0; d < s.size(); ++d)
      if (src.shape[d] == 1 && s[d] != 1)
        dims.push_back(int64_t(d));
    std::vector<Layout> candidates;
    if (s.size() == 2 && s[0] % 16 == 0 && s[1] % 8 == 0)
      candidates.push_back(Layout::mma(s[0], s[1], numWarps));
    candidates.push_back(Layout::blocked(s, numWarps));
    for (const Layout &c : candidates)
      if (c.project(dims) == src)
        return c;
    return candidates.back();
  }

  void visit(Operation *op) {
    if (auto forOp = dyn_cast<scf::ForOp>(op)) {
      auto yield = cast<scf::YieldOp>(forOp.getBody()->getTerminator());
      for (auto [i, arg] : llvm::enumerate(forOp.getRegionIterArgs())) {
        if (!isa<RankedTensorType>(arg.getType()))
          continue;
        ValueLayout y = get(yield.getOperand(i)),
                    init = get(forOp.getInitArgs()[i]);
        ValueLayout l = y.state == ValueLayout::State::Fixed      ? y
                        : init.state == ValueLayout::State::Fixed ? init
                                                                  : y;
        // A carried tile must have one layout in every iteration: a flexible
        // one is pinned to a blocked layout.
        if (l.state == ValueLayout::State::Flexible)
          l = ValueLayout::fixed(fixedOrBlocked(arg));
        map[arg] = l;
        map[forOp.getResult(i)] = l;
      }
      for (Operation &inner : forOp.getBody()->without_terminator())
        visit(&inner);
      return;
    }
    if (op->getNumResults() != 1 ||
        !isa<RankedTensorType>(op->getResult(0).getType()))
      return;
    Value r = op->getResult(0);
    auto shape = cast<RankedTensorType>(r.getType()).getShape();
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      map[r] = dense && dense.isSplat()
                   ? ValueLayout::uniform()
                   : ValueLayout::fixed(Layout::blocked(s, numWarps));
    } else if (isa<SplatOp>(op)) {
      map[r] = ValueLayout::uniform();
    } else if (isa<IotaOp>(op)) {
      map[r] = ValueLayout::flexible();
    } else if (auto ld = dyn_cast<LoadOp>(op)) {
      // 16 bytes per thread along contiguous rows: one vector load each.
      Type elem = ld.getType().getElementType();
      int64_t vec =
          aligned ? 16 / std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8)
                  : 1;
      map[r] = ValueLayout::fixed(Layout::blocked(s, numWarps, vec));
    } else if (auto dot = dyn_cast<DotOp>(op)) {
      map[r] = ValueLayout::fixed(Layout::mma(s[0], s[1], numWarps));
    } else if (auto red = dyn_cast<ReduceOp>(op)) {
      map[r] =
          ValueLayout::fixed(fixedOrBlocked(red.getSrc()).slice(red.getAxis()));
    } else if (auto e = dyn_cast<ExpandDimsOp>(op)) {
      ValueLayout l = get(e.getSrc());
      map[r] = l.state == ValueLayout::State::Fixed
                   ? ValueLayout::fixed(l.layout->expand(e.getAxis()))
                   : l;
    } else if (auto t = dyn_cast<TransOp>(op)) {
      ValueLayout l = get(t.getSrc());
      map[r] = l.state == ValueLayout::State::Fixed
                   ? ValueLayout::fixed(l.layout->permute(std::vector<int32_t>(
                         t.getOrder().begin(), t.getOrder().end())))
                   : l;
    } else if (auto bc = dyn_cast<BroadcastOp>(op)) {
      ValueLayout l = get(bc.getSrc());
      if (l.state != ValueLayout::State::Fixed)
        map[r] = l;
      else if (l.layout->parent && l.layout->parent->shape == s)
        map[r] = ValueLayout::fixed(*l.layout->parent);
      else
        map[r] = ValueLayout::fixed(broadcastLayout(*l.layout, s));
    } else {
      // Elementwise (arith, math, kiln.convert).
      map[r] = join(op->getOperands());
    }
  }
};

} // namespace

llvm::DenseSet<Value> findSharedOperands(func::FuncOp func) {
  llvm::DenseSet<Value> out;
  auto onlyDotOperand = [](Value v) {
    for (OpOperand &use : v.getUses()) {
      auto dot = dyn_cast<DotOp>(use.getOwner());
      if (!dot || use.getOperandNumber() == 2)
        return false;
    }
    return !v.use_empty();
  };
  func.walk([&](LoadOp ld) {
    Type elem = ld.getType().getElementType();
    if (ld.getType().getRank() != 2 || elem.getIntOrFloatBitWidth() != 16)
      return;
    bool ok = !ld.getResult().use_empty();
    for (Operation *user : ld.getResult().getUsers()) {
      if (auto t = dyn_cast<TransOp>(user))
        ok &= onlyDotOperand(t.getResult());
      else
        ok &= isa<DotOp>(user) && onlyDotOperand(ld.getResult());
    }
    if (ok)
      out.insert(ld.getResult());
  });
  return out;
}

int64_t knownDivisor(Value v) {
  constexpr int64_t kMax = int64_t(1) << 30;
  auto pow2 = [](int64_t x) {
    return x == 0 ? kMax : (x < 0 ? -x : x) & -(x < 0 ? -x : x);
  };
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      return pow2(i.getInt());
  if (auto m = v.getDefiningOp<arith::MulIOp>())
    return std::min(kMax, knownDivisor(m.getLhs()) * knownDivisor(m.getRhs()));
  if (auto a = v.getDefiningOp<arith::AddIOp>())
    return std::min(knownDivisor(a.getLhs()), knownDivisor(a.getRhs()));
  if (auto a = v.getDefiningOp<arith::MinSIOp>())
    return std::min(knownDivisor(a.getLhs()), knownDivisor(a.getRhs()));
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto f = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()))
      if (arg == f.getInductionVar())
        return std::min(knownDivisor(f.getLowerBound()),
                        knownDivisor(f.getStep()));
  return 1;
}

LayoutMap assignLayouts(func::FuncOp func, int numWarps, bool aligned) {
  Analysis a(numWarps, aligned);
  // Loop-carried layouts depend on the loop body and the body on them: a few
  // sweeps reach the fixpoint for the loops kiln kernels have.
  for (int sweep = 0; sweep < 3; ++sweep)
    for (Operation &op : func.getBody().front())
      a.visit(&op);
  return std::move(a.map);
}

} // namespace kiln::gpu
