// kiln-overlap-dots under kiln.peel_first_iteration: a loop with no loop
// before it that can be its first iteration gets one, its first iteration
// peeled: a loop from max(lb, e - step) to e = min(lb + step, ub), which
// runs once (or not, where the loop did not run) and yields the last dot's
// operands instead of the dot; the overlapped loop starts at e, carries
// them in, and in its first iteration reads V at the peeled loop's offset:
// no iteration issues the dot of a zero tile. Without the attribute, the
// loop starts with that zero tile (overlap-dots.mlir); a loop that already
// has a first iteration before it is not peeled again.
// RUN: kiln-opt %s --kiln-overlap-dots | FileCheck %s

// CHECK-LABEL: func.func @peeled
// CHECK: %[[ADD:.*]] = arith.addi %[[LB:[^ ]+]], %[[STEP:[^ ]+]] : i32
// CHECK: %[[END:.*]] = arith.minsi %[[ADD]], %[[UB:[^ ]+]] : i32
// CHECK: %[[BACK:.*]] = arith.subi %[[END]], %[[STEP]] : i32
// CHECK: %[[START:.*]] = arith.maxsi %[[LB]], %[[BACK]] : i32
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<64x32xbf16>
// CHECK: %[[F:.*]]:2 = scf.for %[[J0:[^ ]+]] = %[[START]] to %[[END]] step %[[STEP]] iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[ZERO]])
// CHECK: kiln.load %{{.*}}[%{{.*}}, %[[J0]]]
// CHECK: kiln.dot
// CHECK-NOT: kiln.dot
// CHECK-NOT: kiln.load
// CHECK: } {kiln.first_iteration_of_next}
// CHECK: %[[R:.*]]:2 = scf.for %[[J:[^ ]+]] = %[[END]] to %[[UB]] step %[[STEP]] iter_args(%[[ACC:.*]] = %[[F]]#0, %[[P:.*]] = %[[F]]#1)
// CHECK: kiln.dot
// CHECK: %[[PREV:.*]] = arith.subi %[[J]], %[[STEP]]
// CHECK: %[[ISFIRST:.*]] = arith.cmpi eq, %[[J]], %[[END]]
// CHECK: %[[AT:.*]] = arith.select %[[ISFIRST]], %[[START]], %[[PREV]]
// CHECK: %[[V:.*]] = kiln.load %{{.*}}[%[[AT]], %{{.*}}]
// CHECK: kiln.dot %[[P]], %[[V]], %[[ACC]]
// CHECK: } {kiln.overlapped}
// CHECK: %[[HAS:.*]] = arith.cmpi sgt, %[[UB]], %[[END]]
// CHECK: %[[LASTAT:.*]] = arith.select %[[HAS]], %{{.*}}, %[[START]]
// CHECK: %[[VL:.*]] = kiln.load %{{.*}}[%[[LASTAT]], %{{.*}}]
// CHECK: kiln.dot %[[R]]#1, %[[VL]], %[[R]]#0

// CHECK-LABEL: func.func @first_iteration_already
// CHECK-COUNT-1: kiln.first_iteration_of_next
// CHECK-NOT: kiln.first_iteration_of_next
// CHECK: } {kiln.overlapped}
// CHECK-NOT: arith.minsi

func.func @peeled(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>, %n: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots, kiln.peel_first_iteration} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %r = scf.for %j = %c0 to %n step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %n] strides[%n, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%n, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

// A masked first block's loop before it is its first iteration already.
func.func @first_iteration_already(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>, %a: i32, %n: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots, kiln.peel_first_iteration} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %end = arith.addi %a, %c32 : i32
  %first = scf.for %j = %a to %end step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %n] strides[%n, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%n, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %r = scf.for %j = %end to %n step %c32 iter_args(%acc = %first) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %n] strides[%n, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%n, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
