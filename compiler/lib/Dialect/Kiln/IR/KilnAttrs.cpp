//===- KilnAttrs.cpp - the #kiln.layout attribute -------------------------===//
//
// Printed as `#kiln.layout<kind, [shape], reg = [[..], ..], lane = [..],
// warp = [..]>`, and aliased at the top of a module (#mma, #blocked,
// #dot_operand) so that laid-out IR stays readable. The in-memory Layout's
// `parent` (which layout a slice came from) guides layout assignment only; in
// the IR every op's operand and result layouts are spelled out.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln;

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnAttrs.cpp.inc"

namespace {
struct KilnAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    auto l = dyn_cast<LayoutAttr>(attr);
    if (!l)
      return AliasResult::NoAlias;
    os << l.getKind();
    return AliasResult::OverridableAlias;
  }
};

const char *kindName(Layout::Kind k) {
  switch (k) {
  case Layout::Kind::Mma:
    return "mma";
  case Layout::Kind::DotOperand:
    return "dot_operand";
  case Layout::Kind::Blocked:
    break;
  }
  return "blocked";
}

SmallVector<int64_t> flatten(const std::vector<Coord> &bases) {
  SmallVector<int64_t> out;
  for (const Coord &c : bases)
    out.append(c.begin(), c.end());
  return out;
}

std::vector<Coord> unflatten(ArrayRef<int64_t> flat, size_t rank) {
  std::vector<Coord> out;
  for (size_t i = 0; rank && i + rank <= flat.size(); i += rank)
    out.emplace_back(flat.begin() + i, flat.begin() + i + rank);
  return out;
}
} // namespace

void KilnDialect::registerLayoutAttr() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Kiln/IR/KilnAttrs.cpp.inc"
      >();
  addInterfaces<KilnAsmInterface>();
}

LayoutAttr LayoutAttr::get(MLIRContext *ctx, const Layout &l) {
  return Base::get(ctx, kindName(l.kind), l.shape, flatten(l.reg),
                   flatten(l.lane), flatten(l.warp));
}

Layout LayoutAttr::getLayout() const {
  Layout l;
  StringRef k = getKind();
  l.kind = k == "mma"           ? Layout::Kind::Mma
           : k == "dot_operand" ? Layout::Kind::DotOperand
                                : Layout::Kind::Blocked;
  l.shape.assign(getShape().begin(), getShape().end());
  l.reg = unflatten(getReg(), l.shape.size());
  l.lane = unflatten(getLane(), l.shape.size());
  l.warp = unflatten(getWarp(), l.shape.size());
  return l;
}

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef kind, ArrayRef<int64_t> shape,
                                 ArrayRef<int64_t> reg, ArrayRef<int64_t> lane,
                                 ArrayRef<int64_t> warp) {
  if (kind != "blocked" && kind != "mma" && kind != "dot_operand")
    return emitError() << "layout kind must be blocked, mma or dot_operand, "
                          "got "
                       << kind;
  size_t rank = shape.size();
  for (int64_t d : shape)
    if (d < 1 || (d & (d - 1)))
      return emitError() << "layout dimensions must be powers of two, got "
                         << d;
  for (auto [name, bases] : {std::pair{"reg", reg}, std::pair{"lane", lane},
                             std::pair{"warp", warp}}) {
    if (rank ? bases.size() % rank : !bases.empty())
      return emitError() << name << " bases must have " << rank
                         << " coordinates each";
    for (size_t i = 0; i < bases.size(); ++i)
      if (bases[i] < 0 || bases[i] >= shape[i % rank])
        return emitError() << name << " basis coordinate " << bases[i]
                           << " is outside dimension " << i % rank
                           << " of size " << shape[i % rank];
  }
  if (rank && lane.size() != 5 * rank)
    return emitError() << "a layout has 5 lane bases (32 lanes), got "
                       << lane.size() / rank;
  return success();
}

static void printBases(AsmPrinter &p, ArrayRef<int64_t> flat, size_t rank) {
  p << "[";
  for (size_t i = 0; rank && i < flat.size(); i += rank) {
    p << (i ? ", [" : "[");
    llvm::interleaveComma(flat.slice(i, rank), p);
    p << "]";
  }
  p << "]";
}

void LayoutAttr::print(AsmPrinter &p) const {
  size_t rank = getShape().size();
  p << "<" << getKind() << ", [";
  llvm::interleaveComma(getShape(), p);
  p << "], reg = ";
  printBases(p, getReg(), rank);
  p << ", lane = ";
  printBases(p, getLane(), rank);
  p << ", warp = ";
  printBases(p, getWarp(), rank);
  p << ">";
}

static ParseResult parseBases(AsmParser &p, StringRef name, size_t rank,
                              SmallVectorImpl<int64_t> &flat) {
  if (p.parseComma() || p.parseKeyword(name) || p.parseEqual())
    return failure();
  return p.parseCommaSeparatedList(
      AsmParser::Delimiter::Square, [&]() -> ParseResult {
        size_t before = flat.size();
        if (p.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
              return p.parseInteger(flat.emplace_back());
            }))
          return failure();
        if (flat.size() - before != rank)
          return p.emitError(p.getCurrentLocation())
                 << name << " basis must have " << rank << " coordinates";
        return success();
      });
}

Attribute LayoutAttr::parse(AsmParser &p, Type) {
  std::string kind;
  SmallVector<int64_t> shape, reg, lane, warp;
  if (p.parseLess() || p.parseKeywordOrString(&kind) || p.parseComma() ||
      p.parseCommaSeparatedList(
          AsmParser::Delimiter::Square,
          [&] { return p.parseInteger(shape.emplace_back()); }) ||
      parseBases(p, "reg", shape.size(), reg) ||
      parseBases(p, "lane", shape.size(), lane) ||
      parseBases(p, "warp", shape.size(), warp) || p.parseGreater())
    return {};
  return getChecked([&] { return p.emitError(p.getNameLoc()); }, p.getContext(),
                    kind, shape, reg, lane, warp);
}

std::optional<Layout> kiln::layoutOf(Type type) {
  if (auto t = dyn_cast<RankedTensorType>(type))
    if (auto l = dyn_cast_or_null<LayoutAttr>(t.getEncoding()))
      return l.getLayout();
  return std::nullopt;
}

RankedTensorType kiln::withLayout(Type type, const Layout &layout) {
  auto t = cast<RankedTensorType>(type);
  return RankedTensorType::get(t.getShape(), t.getElementType(),
                               LayoutAttr::get(t.getContext(), layout));
}

void kiln::setTileType(Value v, RankedTensorType t) {
  v.setType(t);
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue()))
      c.setValueAttr(dense.isSplat() ? DenseElementsAttr::get(
                                           t, dense.getSplatValue<Attribute>())
                                     : dense.reshape(t));
}
