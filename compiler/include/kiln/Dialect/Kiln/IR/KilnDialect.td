//===- KilnDialect.td - the kiln tile dialect --------------*- tablegen -*-===//
//
// Ops on ranked tensors ("tiles") that a tile program is written in. The
// tensor types carry no encoding yet; the GPU path attaches layout encodings to
// the same types, so nothing here assumes the encoding slot is empty.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNDIALECT_TD
#define KILN_DIALECT_KILN_IR_KILNDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Tile programs: blocked loads and stores, dots, reductions";
  let description = [{
    A kiln kernel is a `func.func` marked `kiln.kernel` whose body computes
    on tiles (ranked tensors) with kiln ops, arith/math elementwise ops and
    `scf.for` loops that carry tiles. One instance of the body runs per
    program id of the launch grid.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect", "::mlir::func::FuncDialect"
  ];
  let useDefaultTypePrinterParser = 1;
}

class Kiln_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Kiln_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Kiln_PointerType : Kiln_Type<"Pointer", "ptr"> {
  let summary = "pointer to global memory holding elements of one type";
  let parameters = (ins "::mlir::Type":$pointeeType);
  let assemblyFormat = "`<` $pointeeType `>`";
}

// Printed as a bare keyword inside ops (`kiln.reduce max ...`), like
// arith.cmpf's predicate.
def Kiln_ReduceKindAttr : I32EnumAttr<"ReduceKind", "reduction combiner", [
  I32EnumAttrCase<"Sum", 0, "sum">,
  I32EnumAttrCase<"Max", 1, "max">,
  I32EnumAttrCase<"Min", 2, "min">
]> {
  let cppNamespace = "::kiln";
}

#endif // KILN_DIALECT_KILN_IR_KILNDIALECT_TD
