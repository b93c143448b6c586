//===- AssignLayouts.cpp - a #kiln.layout on every tile -------------------===//
//
// Two steps. An analysis decides each tile's layout from its anchors (loads,
// dots, reductions) and the strongest layout among an elementwise op's
// operands; tiles computed from iota, splats and scalars alone are
// "flexible" and take a provisional blocked layout, to be rematerialised
// where they are used by kiln-remove-layout-conversions. Then the types are
// rewritten and a kiln.convert_layout goes wherever an operand's layout is
// not the one its user reads.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/TensorArgs.h"
#include "kiln/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace kiln {
#define GEN_PASS_DEF_KILNASSIGNLAYOUTS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// What the analysis says of a tile value.
struct ValueLayout {
  enum class State { Uniform, Flexible, Fixed } state = State::Uniform;
  std::optional<Layout> layout; ///< set when Fixed
  /// Fixed only by a broadcast (of a row, a column, a statistic): cheaper
  /// to make in another layout than the tiles it is combined with.
  bool weak = false;
  static ValueLayout uniform() { return {}; }
  static ValueLayout flexible() { return {State::Flexible, std::nullopt}; }
  static ValueLayout fixed(Layout l) { return {State::Fixed, std::move(l)}; }
};
using LayoutMap = llvm::DenseMap<Value, ValueLayout>;

class Analysis {
public:
  explicit Analysis(int numWarps) : numWarps(numWarps) {}
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
        // A tile loaded or computed in its layout over a broadcast one;
        // then the stronger kind (mma over blocked).
        if (best.state != ValueLayout::State::Fixed ||
            std::pair(!l.weak, int(l.layout->kind)) >
                std::pair(!best.weak, int(best.layout->kind)))
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
    std::vector<int64_t> dims = broadcastDims(src.shape, s);
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
    } else if (isa<LoadOp, GatherOp>(op)) {
      // 16 bytes per thread along contiguous rows (its own tensor's
      // specialisation): one vector load each. Otherwise one element a load:
      // consecutive lanes along a row for coalescing; a dot operand (staged
      // in shared memory) with 4 consecutive elements a thread, so that a
      // thread's elements span fewer rows: ptxas keeps each row's 64-bit
      // offset live through a loop, and at one element a 128-row K block
      // took 64 of them and spilled (at D=128 causal, 83 against 276
      // TFLOP/s with 4 on the H200; 2 and 8 no better).
      Value ptr = op->getOperand(0);
      Type elem = cast<RankedTensorType>(r.getType()).getElementType();
      int64_t vec =
          isAlignedAccess(ptr)
              ? 16 / std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8)
          : s.size() == 2 && onlyDotOperand(r) ? 4
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
      map[r].weak = true;
    } else {
      // Elementwise (arith, math, kiln.convert).
      map[r] = join(op->getOperands());
    }
  }
};

/// The layout each operand of `op` is read in; nullopt for operands read in
/// whatever layout they have (and for scalars).
std::optional<Layout> operandLayout(Operation *op, unsigned i, int numWarps) {
  Value v = op->getOperand(i);
  if (!isa<RankedTensorType>(v.getType()))
    return std::nullopt;
  if (auto dot = dyn_cast<DotOp>(op)) {
    int64_t M = dot.getA().getType().getDimSize(0),
            K = dot.getA().getType().getDimSize(1),
            N = dot.getB().getType().getDimSize(1);
    if (i == 2)
      return Layout::mma(M, N, numWarps);
    return Layout::dotOperand(int(i), M, N, K, numWarps);
  }
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    Layout dst = *layoutOf(bc.getType());
    auto srcShape = bc.getSrc().getType().getShape();
    return dst.project(
        broadcastDims({srcShape.begin(), srcShape.end()}, dst.shape));
  }
  if (auto f = dyn_cast<scf::ForOp>(op)) {
    unsigned first = f.getNumControlOperands();
    if (i < first)
      return std::nullopt;
    return layoutOf(f.getRegionIterArgs()[i - first].getType());
  }
  if (auto y = dyn_cast<scf::YieldOp>(op)) {
    if (auto f = dyn_cast<scf::ForOp>(op->getParentOp()))
      return layoutOf(f.getRegionIterArgs()[i].getType());
    return std::nullopt;
  }
  if (isa<ReduceOp, ExpandDimsOp, TransOp, StoreOp, AtomicRMWOp,
          ConvertLayoutOp>(op) ||
      op->getNumResults() != 1 ||
      !isa<RankedTensorType>(op->getResult(0).getType()))
    return std::nullopt;
  return layoutOf(op->getResult(0).getType()); // elementwise
}

struct AssignLayouts : public kiln::impl::KilnAssignLayoutsBase<AssignLayouts> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (numWarps < 1 || numWarps > 32 || (numWarps & (numWarps - 1))) {
      func.emitError("kiln-assign-layouts: num-warps must be a power of two "
                     "in [1, 32], got ")
          << int(numWarps);
      return signalPassFailure();
    }
    bool laidOut = false;
    func.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        laidOut |= layoutOf(t).has_value();
    });
    if (laidOut) {
      func.emitError("kiln-assign-layouts: the kernel already has layouts");
      return signalPassFailure();
    }
    if (aligned)
      markAllPointersAligned(func);
    Analysis a(numWarps);
    // Loop-carried layouts depend on the loop body and the body on them: a
    // few sweeps reach the fixpoint for the loops kiln kernels have.
    for (int sweep = 0; sweep < 3; ++sweep)
      for (Operation &op : func.getBody().front())
        a.visit(&op);

    // 1. Types, in program order: what derives from an operand's layout
    //    (expand_dims, trans, reduce) derives from the encoding it now has.
    auto blocked = [&](Type t) {
      auto s = cast<RankedTensorType>(t).getShape();
      return Layout::blocked({s.begin(), s.end()}, numWarps);
    };
    auto fixedOr = [&](Value v, const Layout &otherwise) {
      ValueLayout l = a.get(v);
      return l.state == ValueLayout::State::Fixed ? *l.layout : otherwise;
    };
    func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (auto f = dyn_cast<scf::ForOp>(op)) {
        for (auto [arg, res] :
             llvm::zip(f.getRegionIterArgs(), f.getResults())) {
          if (!isa<RankedTensorType>(arg.getType()))
            continue;
          Layout l = fixedOr(arg, blocked(arg.getType()));
          arg.setType(withLayout(arg.getType(), l));
          res.setType(withLayout(res.getType(), l));
        }
        return;
      }
      if (op->getNumResults() != 1 ||
          !isa<RankedTensorType>(op->getResult(0).getType()))
        return;
      Value r = op->getResult(0);
      Layout l = blocked(r.getType());
      if (auto e = dyn_cast<ExpandDimsOp>(op))
        l = layoutOf(e.getSrc().getType())->expand(e.getAxis());
      else if (auto t = dyn_cast<TransOp>(op))
        l = layoutOf(t.getSrc().getType())
                ->permute({t.getOrder().begin(), t.getOrder().end()});
      else if (auto red = dyn_cast<ReduceOp>(op))
        l = layoutOf(red.getSrc().getType())->slice(red.getAxis());
      else
        l = fixedOr(r, l);
      setTileType(r, withLayout(r.getType(), l));
    });

    // 2. A conversion wherever an operand is read in another layout.
    OpBuilder b(func.getContext());
    func.walk([&](Operation *op) {
      for (unsigned i = 0; i < op->getNumOperands(); ++i) {
        std::optional<Layout> want = operandLayout(op, i, numWarps);
        Value v = op->getOperand(i);
        if (!want)
          continue;
        RankedTensorType t = withLayout(v.getType(), *want);
        if (t == v.getType())
          continue;
        b.setInsertionPoint(op);
        op->setOperand(i, ConvertLayoutOp::create(b, op->getLoc(), t, v));
      }
    });
    func->setAttr("kiln.num_warps", b.getI32IntegerAttr(numWarps));
  }
};

} // namespace
