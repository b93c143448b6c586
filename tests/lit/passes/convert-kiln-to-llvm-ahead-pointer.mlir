// A load whose pointer moves with the loop variable (an outer index, T[r])
// and is read one iteration ahead: at the iteration past the last, and in
// the prologue of a loop that may not run, that pointer can lie outside
// its tensor, where the block's bounds checks do not help (their
// out-of-range elements read the block's first address). Those loads run
// under the uniform r < n (scf.if, padding otherwise); inside the loop's
// bounds the load is not guarded. (compute-sanitizer found the split-keys
// combine reading one range past its LSESplit.)
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s

// CHECK-LABEL: llvm.func @outer_index(
// CHECK-SAME: %[[N:[a-z0-9]+]]: i32
// The prologue: iteration 0, if the loop runs.
// CHECK: %[[FIRST:.*]] = arith.cmpi slt, %{{.*}}, %[[N]]
// CHECK-NEXT: scf.if %[[FIRST]] -> (f32
// CHECK: llvm.load
// CHECK: scf.for %[[R:[a-z0-9]+]] =
// The next iteration's, under r + 1 < n.
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[R]]
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[NEXT]], %[[N]]
// CHECK-NEXT: scf.if %[[IN]] -> (f32
// CHECK: llvm.load
// CHECK: } else {
// CHECK: scf.yield
// CHECK: llvm.return
// A pointer that does not move keeps the unguarded load ahead.
// CHECK-LABEL: llvm.func @block_offset(
// CHECK-NOT: scf.if {{.*}} -> (f32
// CHECK: llvm.return

func.func @outer_index(%n: i32, %len: i32, %x: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64xf32>
  %r = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %zero) -> (tensor<64xf32>) : i32 {
    %k64 = arith.extsi %k : i32 to i64
    %len64 = arith.extsi %len : i32 to i64
    %off = arith.muli %k64, %len64 : i64
    %row = kiln.addptr %x, %off : <f32>, i64
    %v = kiln.load %row[%c0] shape[%len] strides[%c1] : !kiln.ptr<f32> -> tensor<64xf32>
    %s = arith.addf %acc, %v : tensor<64xf32>
    scf.yield %s : tensor<64xf32>
  }
  kiln.store %r, %out[%c0] shape[%c64] strides[%c1] : tensor<64xf32>, !kiln.ptr<f32>
  return
}

func.func @block_offset(%n: i32, %len: i32, %x: !kiln.ptr<f32>, %out: !kiln.ptr<f32>)
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
