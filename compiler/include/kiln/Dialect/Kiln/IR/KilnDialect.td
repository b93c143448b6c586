//===- KilnDialect.td - the kiln tile dialect --------------*- tablegen -*-===//
//
// Ops on ranked tensors ("tiles") that a tile program is written in. The DSL
// builds tiles without an encoding; kiln-assign-layouts puts a #kiln.layout
// encoding on every tile of a kernel bound for the GPU, and from there on a
// change of layout is an explicit kiln.convert_layout.
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
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// The #kiln.layout attribute and its printing aliases (KilnAttrs.cpp).
    void registerLayoutAttr();
  }];
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

def Kiln_LayoutAttr : AttrDef<Kiln_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "how a tile's elements are spread over registers, lanes and warps";
  let description = [{
    A linear layout (kiln/Dialect/Kiln/IR/Layout.h): one basis vector of tile
    coordinates per bit of the register index, of the lane id and of the warp
    id; a zero basis is replication. `kind` records where the layout comes
    from (blocked, mma, dot_operand); slices of a layout keep its kind.

    ```mlir
    #kiln.layout<mma, [64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16],
                 [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                 warp = [[16, 0], [32, 0]]>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"blocked, mma or dot_operand">:$kind,
    ArrayRefParameter<"int64_t", "tile shape">:$shape,
    ArrayRefParameter<"int64_t", "register bases, flattened">:$reg,
    ArrayRefParameter<"int64_t", "lane bases, flattened">:$lane,
    ArrayRefParameter<"int64_t", "warp bases, flattened">:$warp);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [AttrBuilder<(ins "const ::kiln::Layout &":$layout)>];
  let extraClassDeclaration = [{
    /// The layout this attribute spells.
    ::kiln::Layout getLayout() const;
  }];
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
