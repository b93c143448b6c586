// kiln-overlap-dots: a loop from a run-time start `a` to `a + step` runs
// once, so it fuses into the overlapped loop after it as its first
// iteration (as a loop from max(a, hi - step) to hi does). To `a + 2 * step`
// it may run twice: it stays a loop of its own, overlapped on its own.
// RUN: kiln-opt %s --kiln-overlap-dots | FileCheck %s

// CHECK-LABEL: func.func @one_step
// CHECK: } {kiln.first_iteration_of_next}
// CHECK: } {kiln.overlapped}
// CHECK-LABEL: func.func @two_steps
// CHECK-NOT: kiln.first_iteration_of_next
// CHECK: } {kiln.overlapped}
// CHECK: } {kiln.overlapped}

func.func @one_step(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>, %a: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c256 = arith.constant 256 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %end = arith.addi %a, %c32 : i32
  %first = scf.for %j = %a to %end step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %r = scf.for %j = %c0 to %a step %c32 iter_args(%acc = %first) -> (tensor<64x64xf32>) : i32 {
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

func.func @two_steps(%q: !kiln.ptr<bf16>, %k: !kiln.ptr<bf16>, %v: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>, %a: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.overlap_dots} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c256 = arith.constant 256 : i32
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %qt = kiln.load %q[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %end = arith.addi %a, %c64 : i32
  %first = scf.for %j = %a to %end step %c32 iter_args(%acc = %zero) -> (tensor<64x64xf32>) : i32 {
    %kt = kiln.load %k[%c0, %j] shape[%c64, %c256] strides[%c256, %c1] : !kiln.ptr<bf16> -> tensor<64x32xbf16>
    %s = kiln.dot %qt, %kt, %zs : tensor<64x64xbf16>, tensor<64x32xbf16> -> tensor<64x32xf32>
    %p = math.exp2 %s : tensor<64x32xf32>
    %vt = kiln.load %v[%j, %c0] shape[%c256, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %pb = kiln.convert %p : tensor<64x32xf32> -> tensor<64x32xbf16>
    %next = kiln.dot %pb, %vt, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %r = scf.for %j = %c0 to %a step %c32 iter_args(%acc = %first) -> (tensor<64x64xf32>) : i32 {
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
