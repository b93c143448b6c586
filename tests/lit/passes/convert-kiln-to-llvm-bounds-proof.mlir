// convert-kiln-to-llvm drops a block access's bounds checks along a
// dimension the block provably lies in (IndexFacts.cpp). Here a 64-element
// block of a row of %len elements at a loop variable from 0 below %n: %len
// is a multiple of 64 (kiln.divisibility) and at least %n (kiln.at_least,
// from KernelBuilder::requireAtLeast), so no block leaves the row and the
// loads compare nothing against %len. The load one iteration ahead reads
// min(next, last iteration). Without kiln.at_least the checks stay.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s

// CHECK: "convert-kiln-to-llvm-bounds-proof.mlir:{{[0-9]+}}: load 64: 16-byte vector loads to registers, 1 iteration ahead; within its tensor (no bounds checks)"
// CHECK: "convert-kiln-to-llvm-bounds-proof.mlir:{{[0-9]+}}: load 64: 16-byte vector loads to registers, 1 iteration ahead"
// The prologue's load (of an iteration the loop may not run) keeps its
// check for its address; the loop's, of the next iteration clamped to the
// last, has none. The prologue's value is read only if the loop runs, where
// the block lies in the row: no padding select waits for it before the loop
// (without kiln.at_least it keeps one).
// CHECK-LABEL: llvm.func @row_within(
// CHECK-SAME: %{{[a-z0-9]+}}: i32, %[[LEN:[a-z0-9]+]]: i32
// CHECK: arith.cmpi ult, %{{.*}}, %[[LEN]]
// CHECK: llvm.load {{.*}} -> vector<4xf32>
// CHECK-NOT: arith.select {{.*}} : vector<4xf32>
// CHECK: scf.for
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.minsi
// CHECK-NOT: arith.cmpi ult, %{{.*}}, %[[LEN]]
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @row_unbounded(
// CHECK-SAME: %{{[a-z0-9]+}}: i32, %[[LEN2:[a-z0-9]+]]: i32
// CHECK: llvm.load {{.*}} -> vector<4xf32>
// CHECK-NEXT: arith.select {{.*}} : vector<4xf32>
// CHECK: scf.for
// CHECK-NOT: arith.minsi
// CHECK: arith.cmpi ult, %{{.*}}, %[[LEN2]]
// CHECK: scf.yield

func.func @row_within(%n: i32, %len: i32 {kiln.divisibility = 64 : i64, kiln.at_least = 0 : i64},
                      %x: !kiln.ptr<f32> {kiln.aligned}, %out: !kiln.ptr<f32> {kiln.aligned})
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64xf32>
  %r = scf.for %k = %c0 to %n step %c64 iter_args(%acc = %zero) -> (tensor<64xf32>) : i32 {
    %v = kiln.load %x[%k] shape[%len] strides[%c1] : !kiln.ptr<f32> -> tensor<64xf32>
    %s = arith.addf %acc, %v : tensor<64xf32>
    scf.yield %s : tensor<64xf32>
  }
  kiln.store %r, %out[%c0] shape[%c64] strides[%c1] : tensor<64xf32>, !kiln.ptr<f32>
  return
}

func.func @row_unbounded(%n: i32, %len: i32 {kiln.divisibility = 64 : i64},
                         %x: !kiln.ptr<f32> {kiln.aligned}, %out: !kiln.ptr<f32> {kiln.aligned})
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64xf32>
  %r = scf.for %k = %c0 to %n step %c64 iter_args(%acc = %zero) -> (tensor<64xf32>) : i32 {
    %v = kiln.load %x[%k] shape[%len] strides[%c1] : !kiln.ptr<f32> -> tensor<64xf32>
    %s = arith.addf %acc, %v : tensor<64xf32>
    scf.yield %s : tensor<64xf32>
  }
  kiln.store %r, %out[%c0] shape[%c64] strides[%c1] : tensor<64xf32>, !kiln.ptr<f32>
  return
}
