// The #kiln.layout encoding and kiln.convert_layout print and parse, in the
// custom and the generic form.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

#rows = #kiln.layout<blocked, [64, 64], reg = [[0, 1], [0, 2], [0, 4], [16, 0], [32, 0]], lane = [[0, 8], [0, 16], [0, 32], [1, 0], [2, 0]], warp = [[4, 0], [8, 0]]>
#acc = #kiln.layout<mma, [64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>
// CHECK-DAG: #[[ROWS:blocked[0-9]*]] = #kiln.layout<blocked, [64, 64], reg = {{\[}}[0, 1], [0, 2], [0, 4], [16, 0], [32, 0]], lane = {{\[}}[0, 8], [0, 16], [0, 32], [1, 0], [2, 0]], warp = {{\[}}[4, 0], [8, 0]]>
// CHECK-DAG: #[[ACC:mma[0-9]*]] = #kiln.layout<mma, [64, 64], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>
// CHECK-LABEL: func.func @laid_out
// CHECK: kiln.convert_layout %{{.*}} : tensor<64x64xf32, #[[ROWS]]> -> tensor<64x64xf32, #[[ACC]]>
func.func @laid_out(%x: tensor<64x64xf32, #rows>) -> tensor<64x64xf32, #acc> {
  %0 = kiln.convert_layout %x : tensor<64x64xf32, #rows> -> tensor<64x64xf32, #acc>
  return %0 : tensor<64x64xf32, #acc>
}
