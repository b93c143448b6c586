// convert-kiln-to-llvm with the TMA schedule: a block store whose offsets
// may be negative (here a row offset shifted back by a run-time amount, as
// causal attention's row blocks aligned to the end of the sequence are) goes
// through TMA only where its offsets are >= 0, in a uniform branch: the bulk
// tensor store faults (illegal instruction) on a box at a negative
// coordinate, where the DSL skips out-of-range rows. Elsewhere the same
// tile goes out by st.global from registers, with the usual bounds checks.
// Offsets that are >= 0 by construction (program ids, constants, and sums,
// products and quotients of such; loop variables counting up from such)
// take no branch.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s

// The report names both paths where the offsets may be negative.
// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-tma-store-negative.mlir:{{[0-9]+}}: store 128x128: TMA (cp.async.bulk.tensor from a 128-byte swizzled staging tile of 32 KB; each warpgroup copies 2 box(es) of 64x64); where its offsets are negative (the bulk copy faults there), st.global from registers"
// CHECK-SAME: "convert-kiln-to-llvm-tma-store-negative.mlir:{{[0-9]+}}: store 128x128: TMA (cp.async.bulk.tensor from a 128-byte swizzled staging tile of 32 KB; each warpgroup copies 2 box(es) of 64x64)"
// CHECK-LABEL: llvm.func @shifted_store(
// CHECK: %[[OK:[a-z0-9_]+]] = arith.cmpi sge, %{{.*}}, %{{.*}} : i32
// CHECK: scf.if %[[OK]] {
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: } else {
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: llvm.store {{.*}} : vector<2xbf16>, !llvm.ptr<1>
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @counted_store(
// CHECK-NOT: arith.cmpi sge
// CHECK: scf.for
// CHECK-NOT: arith.cmpi sge
// CHECK-NOT: llvm.store {{.*}} !llvm.ptr<1>
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK: llvm.return

func.func @shifted_store(%x: !kiln.ptr<bf16>,
                         %o: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 512, 128>},
                         %os0: i32, %os1: i32, %shift: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.tma_stores} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %h = kiln.convert %d : tensor<128x128xf32> -> tensor<128x128xbf16>
  %m = kiln.program_id 0
  %m128 = arith.muli %m, %c128 : i32
  %m0 = arith.subi %m128, %shift : i32
  kiln.store %h, %o[%m0, %c0] shape[%c512, %c128] strides[%os0, %os1] : tensor<128x128xbf16>, !kiln.ptr<bf16>
  return
}

// Rows from a loop that counts up from a program's first row.
func.func @counted_store(%x: !kiln.ptr<bf16>,
                         %o: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 512, 128>},
                         %os0: i32, %os1: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 2, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.tma_stores} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c256 = arith.constant 256 : i32
  %c512 = arith.constant 512 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %h = kiln.convert %d : tensor<128x128xf32> -> tensor<128x128xbf16>
  %m = kiln.program_id 0
  %lo = arith.muli %m, %c256 : i32
  %hi = arith.addi %lo, %c256 : i32
  scf.for %r = %lo to %hi step %c128 : i32 {
    kiln.store %h, %o[%r, %c0] shape[%c512, %c128] strides[%os0, %os1] : tensor<128x128xbf16>, !kiln.ptr<bf16>
  }
  return
}
