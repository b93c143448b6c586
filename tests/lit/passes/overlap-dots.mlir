// kiln-overlap-dots: the last dot of a loop body one iteration behind its
// first. The loop carries P and the rescaled accumulator (a zero tile and the
// accumulator's initial value to start), reads V at the previous offset
// (clamped to the loop's start), and one dot after the loop finishes, its V
// at the last iteration's offset computed from the bounds. A loop
// with a single dot is left alone and says why; without the schedule's
// kiln.overlap_dots nothing changes.
// RUN: kiln-opt %s --kiln-overlap-dots | FileCheck %s

// CHECK-LABEL: func.func @two_dots
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<64x32xbf16>
// CHECK: %[[R:.*]]:2 = scf.for %[[J:.*]] = %[[LB:.*]] to %[[UB:.*]] step %[[STEP:.*]] iter_args(%[[ACC:.*]] = %{{.*}}, %[[P:.*]] = %[[ZERO]])
// CHECK: %[[K:.*]] = kiln.load %{{.*}}[%{{.*}}, %[[J]]]
// CHECK: %[[S:.*]] = kiln.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
// CHECK: %[[PREV:.*]] = arith.subi %[[J]], %[[STEP]]
// CHECK: %[[AT:.*]] = arith.maxsi %[[PREV]], %[[LB]]
// CHECK: %[[V:.*]] = kiln.load %{{.*}}[%[[AT]], %{{.*}}]
// CHECK: %[[O:.*]] = kiln.dot %[[P]], %[[V]], %[[ACC]]
// CHECK: math.exp2 %[[S]]
// CHECK: %[[SCALED:.*]] = arith.mulf %[[O]],
// CHECK: %[[NEWP:.*]] = kiln.convert
// CHECK: scf.yield %[[SCALED]], %[[NEWP]]
// CHECK: } {kiln.overlapped}
// CHECK: %[[SPAN:.*]] = arith.subi %[[UB]], %[[LB]]
// CHECK: %[[SPAN1:.*]] = arith.subi %[[SPAN]], %{{.*}}
// CHECK: %[[STEPS:.*]] = arith.divsi %[[SPAN1]], %[[STEP]]
// CHECK: %[[BACK:.*]] = arith.muli %[[STEPS]], %[[STEP]]
// CHECK: %[[LASTJ:.*]] = arith.addi %[[LB]], %[[BACK]]
// CHECK: %[[LASTAT:.*]] = arith.maxsi %[[LASTJ]], %[[LB]]
// CHECK: %[[VL:.*]] = kiln.load %{{.*}}[%[[LASTAT]], %{{.*}}]
// CHECK: %[[FIN:.*]] = kiln.dot %[[R]]#1, %[[VL]], %[[R]]#0
// CHECK: kiln.store %[[FIN]]

// CHECK-LABEL: func.func @one_dot
// CHECK: } {kiln.not_overlapped = "the body has fewer than two dots"}

// CHECK-LABEL: func.func @not_asked
// CHECK-NOT: kiln.overlapped
// CHECK: return

func.func @two_dots(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c256 = arith.constant 256 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %r = scf.for %j = %c0 to %c256 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %scaled = arith.mulf %acc, %acc : tensor<64x64xf32>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %scaled : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

func.func @one_dot(%a: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %r = scf.for %j = %c0 to %c64 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %at = kiln.load %a[%c0, %j] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %bt = kiln.load %a[%j, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %next = kiln.dot %at, %bt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

func.func @not_asked(%a: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %at = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %r = scf.for %j = %c0 to %c64 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %a[%c0, %j] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %at, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %pb = kiln.convert %s : tensor<64x32xf32> -> tensor<64x32xbf16>
    %vt = kiln.load %a[%j, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

// The first dot reads the accumulator itself: the previous iteration's last
// dot is issued at the start of the body, before it.
// CHECK-LABEL: func.func @first_reads_acc
// CHECK: scf.for %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}, %[[P:.*]] = %{{.*}})
// CHECK-NEXT: arith.subi
// CHECK-NEXT: arith.maxsi
// CHECK-NEXT: %[[V:.*]] = kiln.load
// CHECK-NEXT: %[[O:.*]] = kiln.dot %[[P]], %[[V]], %[[ACC]]
// CHECK: kiln.reduce sum %[[O]]
// CHECK: } {kiln.overlapped}
func.func @first_reads_acc(%a: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %at = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %r = scf.for %j = %c0 to %c64 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %rs = kiln.reduce sum %acc axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
    %kt = kiln.load %a[%c0, %j] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %at, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %pb = kiln.convert %s : tensor<64x32xf32> -> tensor<64x32xbf16>
    %vt = kiln.load %a[%j, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}

// A loop from max(a, hi - step) to hi runs at most once (the attention
// forward's ragged-end loops): left alone, and the report says why.
// CHECK-LABEL: func.func @at_most_once
// CHECK-NOT: kiln.overlapped
// CHECK: } {kiln.not_overlapped = "the loop runs at most once (nothing to overlap with)"}
func.func @at_most_once(%a: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>, %lo: i32, %hi: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %at = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %back = arith.subi %hi, %c32 : i32
  %start = arith.maxsi %lo, %back : i32
  %r = scf.for %j = %start to %hi step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %a[%c0, %j] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %at, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %pb = kiln.convert %s : tensor<64x32xf32> -> tensor<64x32xbf16>
    %vt = kiln.load %a[%j, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
