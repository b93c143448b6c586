// convert-kiln-to-llvm on sm_90a: an fp32 atomic add of a 2-D block of a
// tensor argument under the TMA schedule is a bulk tensor reduction: the
// compute warps stage the tile in 128-byte swizzled panels of 32 fp32
// columns, and one thread adds each panel with cp.reduce.async.bulk.tensor
// through an fp32 tensor map (elem=4, box of 32 columns). Without a tensor
// map (a raw pointer) the add is one red.global.add.v2.f32 per register
// pair of the wgmma accumulator; without sm_90a one atomic per element.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s --check-prefix=NOTARGET

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-atomic.mlir:{{[0-9]+}}: atomic sum 128x128: TMA reduction (cp.reduce.async.bulk.tensor add from a 128-byte swizzled staging tile of 64 KB; each warpgroup adds 4 box(es) of 64x32)"
// CHECK-SAME: "convert-kiln-to-llvm-atomic.mlir:{{[0-9]+}}: atomic sum 128x128: red.global.add.v2.f32, 2 elements per instruction, from registers; not TMA: its pointer is not a tensor argument's"
// CHECK-SAME: kiln.tensor_maps = ["ptr=1 elem=4 dims=512,128 strides=2,3 box=64,32"]
// CHECK: llvm.func @reduce_tile(
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: llvm.store {{.*}} : vector<2xf32>, !llvm.ptr<3>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-COUNT-4: nvvm.cp.async.bulk.tensor.reduce %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}] {redKind = #nvvm.tma_redux_kind<add>
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK-NEXT: llvm.return
// CHECK: llvm.func @red_tile(
// CHECK-NOT: cp.reduce
// CHECK-COUNT-32: red.global.add.v2.f32 [$0], {$1, $2};
// CHECK: llvm.return

// NOTARGET: "convert-kiln-to-llvm-atomic.mlir:{{[0-9]+}}: atomic sum 128x128: one red/atom.global per element from registers"
// NOTARGET-NOT: red.global.add.v2
// NOTARGET: llvm.atomicrmw fadd

func.func @reduce_tile(%x: !kiln.ptr<bf16>,
                       %o: !kiln.ptr<f32> {kiln.tensor_shape = array<i64: 512, 128>},
                       %os0: i32, %os1: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>, kiln.mma = "wgmma", kiln.tma} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %m = kiln.program_id 0
  %m0 = arith.muli %m, %c128 : i32
  kiln.atomic_rmw sum %d, %o[%m0, %c0] shape[%c512, %c128] strides[%os0, %os1] : tensor<128x128xf32>, !kiln.ptr<f32>
  return
}

// A raw pointer: no tensor map to name the block by.
func.func @red_tile(%x: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.tma} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  kiln.atomic_rmw sum %d, %o[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : tensor<128x128xf32>, !kiln.ptr<f32>
  return
}
