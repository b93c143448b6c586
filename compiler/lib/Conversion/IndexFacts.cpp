//===- IndexFacts.cpp - what the lowering proves of i32 index values ------===//
//
// Constants, power-of-two divisors (vector widths, cp.async and TMA need
// them), signs, and blocks within their tensor.
//
// Block accesses compare every element's coordinates against the tensor's
// dimensions. Where the IR proves a whole block inside a dimension (an offset
// that is a loop's induction variable, below a bound the dimension is at least,
// both multiples of the block), that dimension's compares go: no predicate,
// no safe-address select, and addresses that differ by constants.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace kiln::gpu {

namespace {
/// The induction variable `v` is, if it is one.
scf::ForOp loopOf(Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return {};
  auto f = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
  return f && arg == f.getInductionVar() ? f : scf::ForOp();
}

bool positiveConstant(Value v) {
  std::optional<int64_t> c = constantInt(v);
  return c && *c > 0;
}
} // namespace

std::optional<int64_t> constantInt(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      return i.getInt();
  return std::nullopt;
}

int64_t knownDivisor(Value v) {
  constexpr int64_t kMax = int64_t(1) << 30;
  if (std::optional<int64_t> c = constantInt(v)) {
    const int64_t x = *c < 0 ? -*c : *c;
    return x == 0 ? kMax : x & -x;
  }
  if (auto m = v.getDefiningOp<arith::MulIOp>())
    return std::min(kMax, knownDivisor(m.getLhs()) * knownDivisor(m.getRhs()));
  if (auto a = v.getDefiningOp<arith::AddIOp>())
    return std::min(knownDivisor(a.getLhs()), knownDivisor(a.getRhs()));
  if (auto a = v.getDefiningOp<arith::MinSIOp>())
    return std::min(knownDivisor(a.getLhs()), knownDivisor(a.getRhs()));
  if (scf::ForOp f = loopOf(v))
    return std::min(knownDivisor(f.getLowerBound()), knownDivisor(f.getStep()));
  // A run-time integer compiled for values of a class (kiln.divisibility).
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto d = fn.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                    kDivisibilityArgAttr))
        return d.getInt();
  return 1;
}

bool knownNonNegative(Value v) {
  if (std::optional<int64_t> c = constantInt(v))
    return *c >= 0;
  if (v.getDefiningOp<ProgramIdOp>())
    return true;
  if (scf::ForOp f = loopOf(v)) // from a lower bound >= 0 upwards
    return knownNonNegative(f.getLowerBound()) && positiveConstant(f.getStep());
  Operation *op = v.getDefiningOp();
  if (!op)
    return false;
  if (isa<arith::AddIOp, arith::MulIOp, arith::MinSIOp>(op))
    return knownNonNegative(op->getOperand(0)) &&
           knownNonNegative(op->getOperand(1));
  if (isa<arith::MaxSIOp>(op))
    return knownNonNegative(op->getOperand(0)) ||
           knownNonNegative(op->getOperand(1));
  if (isa<arith::DivSIOp, arith::CeilDivSIOp, arith::RemSIOp>(op))
    return knownNonNegative(op->getOperand(0)) &&
           positiveConstant(op->getOperand(1));
  return false;
}

/// u <= n: the same value, a min with a term that is, constants, or a
/// run-time integer the kernel requires to be at least another
/// (kiln.at_least, KernelBuilder::requireAtLeast).
static bool knownAtMost(Value u, Value n) {
  if (u == n)
    return true;
  if (auto m = u.getDefiningOp<arith::MinSIOp>())
    return knownAtMost(m.getLhs(), n) || knownAtMost(m.getRhs(), n);
  std::optional<int64_t> cu = constantInt(u), cn = constantInt(n);
  if (cu && cn)
    return *cu <= *cn;
  auto argN = dyn_cast<BlockArgument>(n), argU = dyn_cast<BlockArgument>(u);
  if (!argN || !argU || argN.getOwner() != argU.getOwner())
    return false;
  auto fn = dyn_cast<func::FuncOp>(argN.getOwner()->getParentOp());
  if (!fn)
    return false;
  auto least =
      fn.getArgAttrOfType<IntegerAttr>(argN.getArgNumber(), kAtLeastArgAttr);
  return least && least.getInt() == int64_t(argU.getArgNumber());
}

bool blockWithin(Value offset, int64_t length, Value dim,
                 const llvm::DenseSet<Value> &ivsOutOfRange) {
  std::optional<int64_t> co = constantInt(offset), cd = constantInt(dim);
  if (co && cd)
    return *co >= 0 && *co + length <= *cd;
  // offset < dim, both multiples of the length: offset + length <= dim.
  scf::ForOp f = loopOf(offset);
  return f && !ivsOutOfRange.count(offset) && knownNonNegative(offset) &&
         knownAtMost(f.getUpperBound(), dim) &&
         knownDivisor(offset) % length == 0 && knownDivisor(dim) % length == 0;
}

std::string boundsChecksText(ValueRange offsets, ValueRange shape,
                             ArrayRef<int64_t> block) {
  std::string dims;
  size_t within = 0;
  for (auto [d, off, dim, len] : llvm::enumerate(offsets, shape, block))
    if (blockWithin(off, len, dim, {})) {
      dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      ++within;
    }
  if (within && within == block.size())
    return "; within its tensor (no bounds checks)";
  return within ? "; no bounds checks along dimension(s) " + dims : "";
}

} // namespace kiln::gpu
