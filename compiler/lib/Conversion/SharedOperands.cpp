//===- SharedOperands.cpp - what the lowering stages in shared memory -----===//
#include "Lowering.h"

using namespace mlir;

namespace kiln::gpu {

llvm::DenseSet<Value> findSharedOperands(func::FuncOp func) {
  // Every use is a dot's a or b, through the conversion to the operand layout
  // (and a transpose before it, for b = kᵀ).
  std::function<bool(Value)> onlyDotOperand = [&](Value v) {
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isa<ConvertLayoutOp, TransOp>(user)) {
        if (!onlyDotOperand(user->getResult(0)))
          return false;
        continue;
      }
      auto dot = dyn_cast<DotOp>(user);
      if (!dot || use.getOperandNumber() == 2)
        return false;
    }
    return !v.use_empty();
  };
  llvm::DenseSet<Value> out;
  func.walk([&](LoadOp ld) {
    Type elem = ld.getType().getElementType();
    if (ld.getType().getRank() == 2 && elem.getIntOrFloatBitWidth() == 16 &&
        onlyDotOperand(ld.getResult()))
      out.insert(ld.getResult());
  });
  return out;
}

std::optional<int64_t> constantInt(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      return i.getInt();
  return std::nullopt;
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
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto f = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()))
      if (arg == f.getInductionVar())
        return std::min(knownDivisor(f.getLowerBound()),
                        knownDivisor(f.getStep()));
    // A run-time integer compiled for values of a class (kiln.divisibility).
    if (auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto d = fn.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                    kDivisibilityArgAttr))
        return d.getInt();
  }
  return 1;
}

} // namespace kiln::gpu
