// Loads of tensors not specialised as aligned take one element a load. A
// dot operand (staged in shared memory) gets 4 consecutive elements a
// thread along the row, so that a thread's elements span a quarter of the
// rows (ptxas keeps a 64-bit offset per row live through a loop: a 128-row
// K block at one element spilled); a load read in registers keeps one
// element a thread, consecutive lanes along the row (coalesced).
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4" | FileCheck %s

// CHECK-DAG: #[[FOUR:blocked[0-9]*]] = #kiln.layout<blocked, [64, 64], reg = {{\[}}[0, 1], [0, 2], [8, 0]
// CHECK-DAG: #[[ONE:blocked[0-9]*]] = #kiln.layout<blocked, [64, 64], reg = {{\[}}[{{[1-9][0-9]*}}, 0]{{.*}} lane = {{\[}}[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]]
// CHECK-LABEL: func.func @unaligned
// CHECK: kiln.load %arg0{{.*}} -> tensor<64x64xbf16, #[[FOUR]]>
// CHECK: kiln.load %arg1{{.*}} -> tensor<64x64xbf16, #[[FOUR]]>
// CHECK: kiln.load %arg2{{.*}} -> tensor<64x64xbf16, #[[ONE]]>

func.func @unaligned(%a: !kiln.ptr<bf16> {kiln.name = "A"},
                     %b: !kiln.ptr<bf16> {kiln.name = "B"},
                     %c: !kiln.ptr<bf16> {kiln.name = "C"},
                     %out: !kiln.ptr<f32> {kiln.name = "D"}, %s: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %z = kiln.load %c[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %yt = kiln.trans %y [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %d = kiln.dot %x, %yt, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %zf = kiln.convert %z : tensor<64x64xbf16> -> tensor<64x64xf32>
  %e = arith.addf %d, %zf : tensor<64x64xf32>
  kiln.store %e, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
