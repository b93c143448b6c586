//===- KilnOps.td - kiln tile ops ------------------------*- tablegen -*-===//
//
// Index operands (program ids, block offsets, global shapes, strides) are i32:
// kiln's index width. Pointer offsets (kiln.addptr) may be i64 so that a view
// into a large tensor can start past 2^31 elements.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNOPS_TD
#define KILN_DIALECT_KILN_IR_KILNOPS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

def Kiln_FloatTile : RankedTensorOf<[F32, F16, BF16]>;
def Kiln_ElementType : AnyTypeOf<[F32, F16, BF16, I1, I32, I64]>;

//===----------------------------------------------------------------------===//
// Launch grid
//===----------------------------------------------------------------------===//

def Kiln_ProgramIdOp : Kiln_Op<"program_id", [Pure]> {
  let summary = "index of this program along one axis of the launch grid";
  let arguments = (ins ConfinedAttr<I32Attr, [IntNonNegative, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict";
}

def Kiln_NumProgramsOp : Kiln_Op<"num_programs", [Pure]> {
  let summary = "number of programs along one axis of the launch grid";
  let arguments = (ins ConfinedAttr<I32Attr, [IntNonNegative, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict";
}

//===----------------------------------------------------------------------===//
// Tile creation
//===----------------------------------------------------------------------===//

def Kiln_IotaOp : Kiln_Op<"iota", [Pure]> {
  let summary = "the 1-D tile 0, 1, ..., N-1 (arange)";
  let results = (outs RankedTensorOf<[I32]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_SplatOp : Kiln_Op<"splat", [Pure]> {
  let summary = "a tile with every element equal to a scalar (full)";
  let arguments = (ins Kiln_ElementType:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($value) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def Kiln_AddPtrOp : Kiln_Op<"addptr", [Pure, AllTypesMatch<["ptr", "result"]>]> {
  let summary = "advance a pointer by a number of elements";
  let arguments = (ins Kiln_PointerType:$ptr, AnyTypeOf<[I32, I64]>:$offset);
  let results = (outs Kiln_PointerType:$result);
  let assemblyFormat = "$ptr `,` $offset attr-dict `:` type($ptr) `,` type($offset)";
}

def Kiln_LoadOp : Kiln_Op<"load", [AttrSizedOperandSegments]> {
  let summary = "load a block of a strided global tensor";
  let description = [{
    Reads the block whose first element sits at `offsets` of the global tensor
    at `ptr` with the given `shape` and `strides` (in elements). The block
    shape is the result's shape. Elements outside the global shape are not
    read; they take the value `padding`.
  }];
  let arguments = (ins Arg<Kiln_PointerType, "global tensor", [MemRead]>:$ptr,
                   Variadic<I32>:$offsets, Variadic<I32>:$shape,
                   Variadic<I32>:$strides,
                   DefaultValuedAttr<F64Attr, "0.0">:$padding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $ptr `[` $offsets `]` `shape` `[` $shape `]` `strides` `[` $strides `]`
    attr-dict `:` qualified(type($ptr)) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_GatherOp : Kiln_Op<"gather", [AttrSizedOperandSegments]> {
  let summary = "load a tile whose rows an index tile chooses";
  let description = [{
    Element (i, j) of the result reads row `rows[i, j]` and column `col + j`
    of the 2-D global tensor at `ptr` (extents `shape`, `strides` in
    elements): an embedding lookup, a paged block table. Rows outside
    [0, shape[0]) and columns outside [0, shape[1]) are not read; they take
    the value `padding`. `rows` has the result's shape (an index per row,
    broadcast along it).
  }];
  let arguments = (ins Arg<Kiln_PointerType, "global tensor", [MemRead]>:$ptr,
                   AnyRankedTensor:$rows, I32:$col, Variadic<I32>:$shape,
                   Variadic<I32>:$strides,
                   DefaultValuedAttr<F64Attr, "0.0">:$padding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $ptr `[` $rows `,` $col `]` `shape` `[` $shape `]` `strides` `[` $strides `]`
    attr-dict `:` qualified(type($ptr)) `,` type($rows) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_LoadIndexOp : Kiln_Op<"load_index", []> {
  let summary = "load one i32 from global memory as a scalar";
  let description = [{
    Reads element `index` of the 1-D i32 global tensor at `ptr` (extent
    `size`, `stride` in elements) as a scalar every thread of the program
    holds: an offset, a loop bound, a length read from memory. An index
    outside [0, size) reads `padding`.
  }];
  let arguments = (ins Arg<Kiln_PointerType, "global tensor", [MemRead]>:$ptr,
                   I32:$index, I32:$size, I32:$stride,
                   DefaultValuedAttr<I64Attr, "0">:$padding);
  let results = (outs I32:$result);
  let assemblyFormat = [{
    $ptr `[` $index `]` `shape` `[` $size `]` `strides` `[` $stride `]`
    attr-dict `:` qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

def Kiln_StoreOp : Kiln_Op<"store", [AttrSizedOperandSegments]> {
  let summary = "store a tile into a block of a strided global tensor";
  let description = [{
    Writes `value` to the block at `offsets` of the global tensor at `ptr`.
    Elements that fall outside the global shape are skipped.
  }];
  let arguments = (ins AnyRankedTensor:$value,
                   Arg<Kiln_PointerType, "global tensor", [MemWrite]>:$ptr,
                   Variadic<I32>:$offsets, Variadic<I32>:$shape,
                   Variadic<I32>:$strides);
  let assemblyFormat = [{
    $value `,` $ptr `[` $offsets `]` `shape` `[` $shape `]` `strides` `[` $strides `]`
    attr-dict `:` type($value) `,` qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

def Kiln_AtomicRMWOp : Kiln_Op<"atomic_rmw", [AttrSizedOperandSegments]> {
  let summary = "combine a tile into a block of a global tensor, atomically";
  let description = [{
    Combines each element of `value` into the element of the global tensor
    at its place (the block at `offsets`, as kiln.store writes it) with one
    atomic read-modify-write per element: `sum` adds (f32 or i32), `max` and
    `min` keep the larger or smaller (i32). Elements that fall outside the
    global shape are skipped. Programs that combine into one element do so
    in no particular order (float sums may differ in their last bits).
  }];
  let arguments = (ins Kiln_ReduceKindAttr:$kind, AnyRankedTensor:$value,
                   Arg<Kiln_PointerType, "global tensor",
                       [MemRead, MemWrite]>:$ptr,
                   Variadic<I32>:$offsets, Variadic<I32>:$shape,
                   Variadic<I32>:$strides);
  let assemblyFormat = [{
    $kind $value `,` $ptr `[` $offsets `]` `shape` `[` $shape `]`
    `strides` `[` $strides `]` attr-dict `:` type($value) `,`
    qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

def Kiln_ArriveOp : Kiln_Op<"arrive", []> {
  let summary = "count this program's arrival at an i32 counter in memory";
  let description = [{
    Once per program, after every write to global memory the program made
    before it (stores, atomics, bulk copies) has completed: adds 1 to
    element `index` of the 1-D i32 global tensor at `ptr` (extent `size`,
    `stride` in elements) and returns the count before the add, the same in
    every thread. Of n programs that arrive at one counter, the one that
    reads n - 1 arrives last, and every write the others made before their
    arrival is visible to it (release and acquire at device scope): it can
    finish what they accumulated (convert a workspace, reset the counter).
    An index outside [0, size) adds nothing and reads -1. Where the count
    is not used the add may come later, after the writes have completed
    without anyone waiting for them: a persistent CTA makes it at the end
    of its next program (or at its exit).
  }];
  let arguments = (ins Arg<Kiln_PointerType, "global tensor",
                           [MemRead, MemWrite]>:$ptr,
                   I32:$index, I32:$size, I32:$stride);
  let results = (outs I32:$result);
  let assemblyFormat = [{
    $ptr `[` $index `]` `shape` `[` $size `]` `strides` `[` $stride `]`
    attr-dict `:` qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

// Reads and "writes" all memory: nothing that reads what the counted
// programs wrote may move above it, and it is never dead.
def Kiln_WaitCountOp
    : Kiln_Op<"wait_count", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until an i32 counter in memory reaches a count";
  let description = [{
    Every thread of the program waits until element `index` of the 1-D i32
    global tensor at `ptr` (extent `size`, `stride` in elements) is at least
    `target`; then every write that the programs counted there made before
    their arrival (kiln.arrive) is visible to it (acquire at device scope).
    An index outside [0, size) waits for nothing. With a kernel that starts
    before the previous launch ends (kiln.overlap_previous), the way to read
    what that launch wrote as soon as its part is done.
  }];
  let arguments = (ins Kiln_PointerType:$ptr, I32:$index, I32:$size,
                   I32:$stride, I32:$target);
  let assemblyFormat = [{
    $ptr `[` $index `]` `shape` `[` $size `]` `strides` `[` $stride `]`
    `reaches` $target attr-dict `:` qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

def Kiln_DotOp : Kiln_Op<"dot", [Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "matrix product a·b + acc with fp32 accumulation";
  let description = [{
    `a` is MxK and `b` is KxN, both bf16, both f16 or both f32; `acc` and the
    result are MxN f32. Products are summed in fp32 (f32 inputs are not
    rounded to tf32).
  }];
  let arguments = (ins Kiln_FloatTile:$a, Kiln_FloatTile:$b,
                   RankedTensorOf<[F32]>:$acc);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $a `,` $b `,` $acc attr-dict `:` type($a) `,` type($b) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ReduceOp : Kiln_Op<"reduce", [Pure]> {
  let summary = "reduce a tile along one axis with sum, max or min";
  let arguments = (ins Kiln_ReduceKindAttr:$kind, AnyRankedTensor:$src,
                   I32Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $kind $src `axis` `=` $axis attr-dict `:` type($src) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ExpandDimsOp : Kiln_Op<"expand_dims", [Pure]> {
  let summary = "insert a dimension of size 1 at `axis`";
  let arguments = (ins AnyRankedTensor:$src, I32Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $src `axis` `=` $axis attr-dict `:` type($src) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_BroadcastOp : Kiln_Op<"broadcast", [Pure]> {
  let summary = "repeat a tile along its size-1 dimensions";
  let arguments = (ins AnyRankedTensor:$src);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_TransOp : Kiln_Op<"trans", [Pure]> {
  let summary = "permute the dimensions of a tile";
  let description = [{
    Result dimension i is source dimension `order[i]`.
  }];
  let arguments = (ins AnyRankedTensor:$src, DenseI32ArrayAttr:$order);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$src $order attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ConvertOp : Kiln_Op<"convert", [Pure]> {
  let summary = "convert the element type of a tile";
  let description = [{
    Float to float rounds to nearest even; float to integer truncates toward
    zero; integer to float rounds to nearest even. i1 converts as 0 and 1.
  }];
  let arguments = (ins RankedTensorOf<[F32, F16, BF16, I1, I32, I64]>:$src);
  let results = (outs RankedTensorOf<[F32, F16, BF16, I1, I32, I64]>:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ConvertLayoutOp : Kiln_Op<"convert_layout", [Pure,
    SameOperandsAndResultShape, SameOperandsAndResultElementType]> {
  let summary = "move a tile to another layout";
  let description = [{
    The same tile, spread over the threads as the result's #kiln.layout
    encoding says. On the GPU this is free when only register names change
    (an mma accumulator read as an mma operand), takes ldmatrix when the
    source is staged in shared memory, and otherwise goes through shared
    memory. kiln-remove-layout-conversions removes the needless ones.
  }];
  let arguments = (ins AnyRankedTensor:$src);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasFolder = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNOPS_TD
