// kiln-overlap-dots: a loop that runs at most once right before the
// overlapped one, whose results are all its initial values and whose body
// ends in the same dot of a V loaded alike (a masked first key block), is
// the overlapped loop's first iteration. It keeps its first dot and yields
// its last dot's operands (the rescaled accumulator and P) instead of the
// dot, and no longer loads V; the overlapped loop carries those in and, in
// its first iteration, reads V at that loop's offset. After the loop, the
// last dot's V is at the last iteration's offset, or the first loop's when
// the overlapped one does not run. A loop before whose V is loaded
// otherwise stays apart.
// RUN: kiln-opt %s --kiln-overlap-dots | FileCheck %s

// CHECK-LABEL: func.func @masked_first
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<64x32xbf16>
// CHECK: %[[F:.*]]:2 = scf.for %[[J0:[^ ]+]] = %[[LO0:[^ ]+]] to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[ZERO]])
// CHECK: kiln.load %{{.*}}[%{{.*}}, %[[J0]]]
// CHECK: kiln.dot
// CHECK-NOT: kiln.dot
// CHECK-NOT: kiln.load
// CHECK: %[[S0:.*]] = arith.mulf
// CHECK: %[[P0:.*]] = kiln.convert
// CHECK: scf.yield %[[S0]], %[[P0]]
// CHECK: } {kiln.first_iteration_of_next}
// CHECK: %[[R:.*]]:2 = scf.for %[[J:[^ ]+]] = %[[LB:[^ ]+]] to %[[UB:[^ ]+]] step %[[STEP:[^ ]+]] iter_args(%[[ACC:.*]] = %[[F]]#0, %[[P:.*]] = %[[F]]#1)
// CHECK: kiln.dot
// CHECK: %[[PREV:.*]] = arith.subi %[[J]], %[[STEP]]
// CHECK: %[[ISFIRST:.*]] = arith.cmpi eq, %[[J]], %[[LB]]
// CHECK: %[[AT:.*]] = arith.select %[[ISFIRST]], %[[LO0]], %[[PREV]]
// CHECK: %[[V:.*]] = kiln.load %{{.*}}[%[[AT]], %{{.*}}]
// CHECK: kiln.dot %[[P]], %[[V]], %[[ACC]]
// CHECK: } {kiln.overlapped}
// CHECK: %[[LASTAT:.*]] = arith.maxsi %{{.*}}, %[[LB]]
// CHECK: %[[RAN:.*]] = arith.cmpi sgt, %[[UB]], %[[LB]]
// CHECK: %[[DRAINAT:.*]] = arith.select %[[RAN]], %[[LASTAT]], %[[LO0]]
// CHECK: %[[VL:.*]] = kiln.load %{{.*}}[%[[DRAINAT]], %{{.*}}]
// CHECK: kiln.dot %[[R]]#1, %[[VL]], %[[R]]#0

// CHECK-LABEL: func.func @other_v
// CHECK: } {kiln.not_overlapped = "the loop runs at most once (nothing to overlap with)"}
// CHECK: } {kiln.overlapped}

func.func @masked_first(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c256 = arith.constant 256 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %ninf = arith.constant dense<0xFF800000> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %first = scf.for %j = %c0 to %c32 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %m = arith.maximumf %s, %ninf : tensor<64x32xf32>
    %p = math.exp2 %m : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %scaled = arith.mulf %acc, %acc : tensor<64x64xf32>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %scaled : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %r = scf.for %j = %c32 to %c256 step %c32 iter_args(%acc = %first) -> (tensor<64x64xf32>) : i32 {
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

// The first loop's V from another tensor: not the same load, not fused.
func.func @other_v(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %w: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c256 = arith.constant 256 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %first = scf.for %j = %c0 to %c32 step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %w[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %r = scf.for %j = %c32 to %c256 step %c32 iter_args(%acc = %first) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %r, %o[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
