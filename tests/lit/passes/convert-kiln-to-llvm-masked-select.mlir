// convert-kiln-to-llvm: a select whose condition compares index ranges
// (iota plus uniform values, expanded or broadcast) against a uniform bound
// runs under a check per thread: where the greatest index a thread holds is
// below the bound (and no sum wraps in i32), an scf.if yields the true
// operand as it is; only the else branch selects per element. Other
// conditions (unsigned, or not of indices), and kernels without
// kiln.skip_passing_masks, select per element, no branch.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s
// CHECK: convert-kiln-to-llvm-masked-select.mlir:{{[0-9]+}}: select: skipped in threads whose index ranges pass
// CHECK-NOT: convert-kiln-to-llvm-masked-select.mlir:{{[0-9]+}}: select: skipped
// CHECK-LABEL: llvm.func @bounds_mask(
// CHECK-SAME: %[[N:[a-z0-9]+]]: i32
// CHECK: %[[BOUND:.*]] = arith.extsi %[[N]] : i32 to i64
// CHECK: %[[ALL:.*]] = arith.cmpi slt, %{{.*}}, %[[BOUND]] : i64
// CHECK: %[[OK:.*]] = arith.andi %[[ALL]], %{{.*}} : i1
// CHECK: scf.if %[[OK]] -> (f32, f32
// CHECK-NEXT: scf.yield
// CHECK-NEXT: } else {
// CHECK-NEXT: arith.select
// CHECK-LABEL: llvm.func @unsigned_mask(
// CHECK-NOT: scf.if %{{.*}} -> (f32
// CHECK: arith.cmpi ult
// CHECK-LABEL: llvm.func @float_mask(
// CHECK-NOT: scf.if %{{.*}} -> (f32
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @no_skip(
// CHECK-NOT: scf.if %{{.*}} -> (f32
// CHECK: llvm.return
func.func @bounds_mask(%n: i32, %k0: i32, %in: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.skip_passing_masks} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %v = kiln.load %in[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<f32> -> tensor<64x64xf32>
  %i = kiln.iota : tensor<64xi32>
  %s = kiln.splat %k0 : i32 -> tensor<64xi32>
  %c = arith.addi %i, %s : tensor<64xi32>
  %e = kiln.expand_dims %c axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
  %nn = kiln.splat %n : i32 -> tensor<1x64xi32>
  %m = arith.cmpi slt, %e, %nn : tensor<1x64xi32>
  %mb = kiln.broadcast %m : tensor<1x64xi1> -> tensor<64x64xi1>
  %r = arith.select %mb, %v, %ninf : tensor<64x64xi1>, tensor<64x64xf32>
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

func.func @unsigned_mask(%n: i32, %k0: i32, %in: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.skip_passing_masks} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %v = kiln.load %in[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<f32> -> tensor<64x64xf32>
  %i = kiln.iota : tensor<64xi32>
  %s = kiln.splat %k0 : i32 -> tensor<64xi32>
  %c = arith.addi %i, %s : tensor<64xi32>
  %e = kiln.expand_dims %c axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
  %nn = kiln.splat %n : i32 -> tensor<1x64xi32>
  %m = arith.cmpi ult, %e, %nn : tensor<1x64xi32>
  %mb = kiln.broadcast %m : tensor<1x64xi1> -> tensor<64x64xi1>
  %r = arith.select %mb, %v, %ninf : tensor<64x64xi1>, tensor<64x64xf32>
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

func.func @float_mask(%n: i32, %k0: i32, %in: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.skip_passing_masks} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %v = kiln.load %in[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<f32> -> tensor<64x64xf32>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %mb = arith.cmpf olt, %v, %zero : tensor<64x64xf32>
  %r = arith.select %mb, %v, %ninf : tensor<64x64xi1>, tensor<64x64xf32>
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

func.func @no_skip(%n: i32, %k0: i32, %in: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %v = kiln.load %in[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<f32> -> tensor<64x64xf32>
  %i = kiln.iota : tensor<64xi32>
  %s = kiln.splat %k0 : i32 -> tensor<64xi32>
  %c = arith.addi %i, %s : tensor<64xi32>
  %e = kiln.expand_dims %c axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
  %nn = kiln.splat %n : i32 -> tensor<1x64xi32>
  %m = arith.cmpi slt, %e, %nn : tensor<1x64xi32>
  %mb = kiln.broadcast %m : tensor<1x64xi1> -> tensor<64x64xi1>
  %r = arith.select %mb, %v, %ninf : tensor<64x64xi1>, tensor<64x64xf32>
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

