//===- LayoutAnalysis.cpp - which layout each tile lives in ---------------===//
#include "Lowering.h"

using namespace mlir;

namespace kiln::gpu {
namespace {

class Analysis {
public:
  Analysis(int numWarps) : numWarps(numWarps) {}
  LayoutMap map;
  int numWarps;

  ValueLayout get(Value v) {
    auto it = map.find(v);
    return it == map.end() ? ValueLayout::uniform() : it->second;
  }
  Layout fixedOrBlocked(Value v) {
    ValueLayout l = get(v);
    if (l.state == ValueLayout::State::Fixed)
      return *l.layout;
    auto t = cast<RankedTensorType>(v.getType());
    return Layout::blocked({t.getShape().begin(), t.getShape().end()}, numWarps);
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

  void visit(Operation *op) {
    if (auto forOp = dyn_cast<scf::ForOp>(op)) {
      auto yield = cast<scf::YieldOp>(forOp.getBody()->getTerminator());
      for (auto [i, arg] : llvm::enumerate(forOp.getRegionIterArgs())) {
        if (!isa<RankedTensorType>(arg.getType()))
          continue;
        ValueLayout y = get(yield.getOperand(i)), init = get(forOp.getInitArgs()[i]);
        ValueLayout l = y.state == ValueLayout::State::Fixed ? y
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
    if (op->getNumResults() != 1 || !isa<RankedTensorType>(op->getResult(0).getType()))
      return;
    Value r = op->getResult(0);
    auto shape = cast<RankedTensorType>(r.getType()).getShape();
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      map[r] = dense && dense.isSplat() ? ValueLayout::uniform()
                                        : ValueLayout::fixed(Layout::blocked(s, numWarps));
    } else if (isa<SplatOp>(op)) {
      map[r] = ValueLayout::uniform();
    } else if (isa<IotaOp>(op)) {
      map[r] = ValueLayout::flexible();
    } else if (isa<LoadOp>(op)) {
      map[r] = ValueLayout::fixed(Layout::blocked(s, numWarps));
    } else if (auto dot = dyn_cast<DotOp>(op)) {
      map[r] = ValueLayout::fixed(Layout::mma(s[0], s[1], numWarps));
    } else if (auto red = dyn_cast<ReduceOp>(op)) {
      map[r] = ValueLayout::fixed(fixedOrBlocked(red.getSrc()).slice(red.getAxis()));
    } else if (auto e = dyn_cast<ExpandDimsOp>(op)) {
      ValueLayout l = get(e.getSrc());
      map[r] = l.state == ValueLayout::State::Fixed
                   ? ValueLayout::fixed(l.layout->expand(e.getAxis()))
                   : l;
    } else if (auto t = dyn_cast<TransOp>(op)) {
      ValueLayout l = get(t.getSrc());
      map[r] = l.state == ValueLayout::State::Fixed
                   ? ValueLayout::fixed(l.layout->permute(
                         std::vector<int32_t>(t.getOrder().begin(), t.getOrder().end())))
                   : l;
    } else if (auto bc = dyn_cast<BroadcastOp>(op)) {
      ValueLayout l = get(bc.getSrc());
      if (l.state != ValueLayout::State::Fixed)
        map[r] = l;
      else if (l.layout->parent && l.layout->parent->shape == s)
        map[r] = ValueLayout::fixed(*l.layout->parent);
      else
        map[r] = ValueLayout::fixed(Layout::blocked(s, numWarps));
    } else {
      // Elementwise (arith, math, kiln.convert).
      map[r] = join(op->getOperands());
    }
  }
};

} // namespace

LayoutMap assignLayouts(func::FuncOp func, int numWarps) {
  Analysis a(numWarps);
  // Loop-carried layouts depend on the loop body and the body on them: a few
  // sweeps reach the fixpoint for the loops kiln kernels have.
  for (int sweep = 0; sweep < 3; ++sweep)
    for (Operation &op : func.getBody().front())
      a.visit(&op);
  return std::move(a.map);
}

} // namespace kiln::gpu
