//===- Passes.td - kiln's passes, in pipeline order ---------*- tablegen -*-===//
//
// Pipeline.cpp runs them in this order; kiln-opt runs any of them for the lit
// tests under tests/lit/passes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_PASSES_TD
#define KILN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnOverlapDots : Pass<"kiln-overlap-dots", "::mlir::func::FuncOp"> {
  let summary = "run a loop's last dot one iteration behind its first";
  let description = [{
    Only in kernels whose schedule asks (kiln.overlap_dots). A loop whose body
    has two or more dots, the last one accumulating into a carried tile with
    its B operand loaded in the loop, carries that dot's A and accumulator
    operands instead of its result: iteration j issues its first dot, then
    iteration j-1's last dot (B loaded at the previous offset), so the
    elementwise work between them overlaps the second dot on the tensor
    cores. The first iteration's extra dot multiplies a zero tile; one dot
    after the loop finishes the last iteration. Marks the loop
    kiln.overlapped, or kiln.not_overlapped with the reason.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def KilnAssignLayouts : Pass<"kiln-assign-layouts", "::mlir::func::FuncOp"> {
  let summary = "put a #kiln.layout encoding on every tile";
  let description = [{
    Anchors: loads take a blocked, coalesced layout (16-byte vectors when
    their pointer argument carries kiln.aligned), dots produce the mma
    accumulator, reductions slice their operand's layout; elementwise ops
    take the strongest layout among their operands; tiles computed from iota, splats and scalars alone
    ("flexible") and carried tiles take what their users or the loop pin.
    Wherever an operand's layout differs from the one its user reads (dot
    operands, the operand of a broadcast, a loop's init and yield, operands of
    one elementwise op) the pass inserts a kiln.convert_layout: after it every
    change of layout is an op. Records the warp count as kiln.num_warps.
  }];
  let options = [
    Option<"numWarps", "num-warps", "int", "4", "warps per program">,
    Option<"aligned", "aligned", "bool", "false",
           "mark every pointer argument kiln.aligned (contiguous, 16-byte "
           "aligned rows: loads read 16-byte vectors)">
  ];
}

def KilnRemoveLayoutConversions
    : Pass<"kiln-remove-layout-conversions", "::mlir::func::FuncOp"> {
  let summary = "remove the layout conversions that need not move data";
  let description = [{
    Folds conversions to the same layout and chains of conversions; a
    conversion of a tile that is cheap to recompute (iota, splats, constants
    and elementwise ops, expand_dims, broadcast and trans of them) is replaced
    by a copy of that computation in the target layout, placed where the
    conversion was. What remains is a conversion that has to move data (or
    that only renames registers, such as an mma accumulator read as a dot
    operand).
  }];
}

def ConvertKilnToLLVM : Pass<"convert-kiln-to-llvm", "::mlir::ModuleOp"> {
  let summary = "lower laid-out kiln kernels to LLVM + NVVM, one thread's view";
  let description = [{
    Every kernel func.func whose tiles carry layouts becomes an llvm.func in
    which a tile is the registers of one thread: mma.sync for dots (ldmatrix
    from XOR-swizzled shared memory for operands loaded only for dots),
    cp.async software pipelining of those loads in loops, shuffles for
    reductions, shared memory for conversions that move data; wgmma with
    descriptors into 128-byte-swizzled shared memory for kernels whose
    schedule asks for it (kiln.mma = "wgmma") when the target has it. Sets
    kiln.shared_bytes (dynamic shared memory), kiln.smem_conversions and
    kiln.lowering_report (what each load and dot became) on the module.
  }];
  let options = [
    Option<"numStages", "num-stages", "int", "2",
           "buffers of the software pipeline of loads in loops (2..8)">,
    Option<"reloadThreadIds", "reload-thread-ids", "bool", "false",
           "re-read the thread id in loop bodies (less register pressure)">,
    Option<"hasWgmma", "wgmma", "bool", "false",
           "the target has warpgroup MMA (sm_90a): kernels whose schedule "
           "says kiln.mma = \"wgmma\" get it">,
    Option<"sharedLimit", "shared-limit", "int64_t", "227 * 1024",
           "bytes of shared memory a CTA may take (sm_90a): TMA stores are "
           "staged only within it">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect"];
}

#endif // KILN_TRANSFORMS_PASSES_TD
