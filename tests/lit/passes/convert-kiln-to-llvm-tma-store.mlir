// convert-kiln-to-llvm with the TMA schedule: a 16-bit 2-D block store to a
// tensor argument goes out through TMA. The compute warps write the tile to
// a staging region in 128-byte swizzled panels and fence it for the async
// proxy; where each warpgroup holds a slab of rows (the wgmma accumulator of
// 8 warps: rows 0-63 and 64-127), each syncs on a named barrier of its own
// (4 + warpgroup, 128 threads) and its first thread copies its slab, one box
// per 64-column panel, then commits the bulk group. Before it writes the
// staging tile again, and before the kernel returns, it waits until the
// previous copy has read it. The store's tensor map has a box of the slab's
// rows. A store TMA cannot write stays on st.global, and the report says
// why; without TMA there is no staging at all.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=IDS
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --convert-kiln-to-llvm | FileCheck %s --check-prefix=NOTARGET
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true shared-limit=36000" | FileCheck %s --check-prefix=RETRY
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true shared-limit=65536" | FileCheck %s --check-prefix=REUSE

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}: store 128x128: TMA (cp.async.bulk.tensor from a 128-byte swizzled staging tile of 32 KB; each warpgroup copies 2 box(es) of 64x64)"
// CHECK-SAME: "convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}: store 128x128: st.global from registers, 4-byte vector stores; within its tensor (no bounds checks); not TMA: its pointer is not a tensor argument's"
// CHECK-SAME: kiln.tensor_maps = ["ptr=1 elem=2 dims=4,512,128 strides=2,3,4 box=1,64,64", "ptr=1 elem=2 dims=512,128 strides=2,3 box=64,64"]
// CHECK: llvm.func @store_tile(
// CHECK: nvvm.wgmma.mma_async
// The previous copy has read the staging tile (a fresh thread has none).
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// Named barriers 4 and 5 (constant ids: a register id would make ptxas
// reserve all 16), one per warpgroup, before and after the staging stores.
// CHECK: nvvm.barrier id = %[[B4:[a-z0-9_]+]] number_of_threads = %[[N:[a-z0-9_]+]]
// CHECK: nvvm.barrier id = %[[B5:[a-z0-9_]+]] number_of_threads = %[[N]]
// CHECK: llvm.store {{.*}} : vector<2xbf16>, !llvm.ptr<3>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: scf.if
// CHECK-NEXT: nvvm.barrier id = %[[B4]] number_of_threads = %[[N]]
// CHECK: nvvm.barrier id = %[[B5]] number_of_threads = %[[N]]
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.global.shared.cta %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK-NEXT: llvm.return
// CHECK: llvm.func @plain_store(
// CHECK-NOT: cp.async.bulk
// CHECK: llvm.return

// IDS-DAG: %[[B4:[a-z0-9_]+]] = arith.constant 4 : i32
// IDS-DAG: %[[B5:[a-z0-9_]+]] = arith.constant 5 : i32
// IDS: nvvm.barrier id = %[[B4]]
// IDS: nvvm.barrier id = %[[B5]]

// Shared memory is placed by liveness: a staging tile takes the bytes of the
// dot operand whose last reader is done, and the column sums' scratch area
// (used after the store, while the bulk copy may still read the staging
// tile) goes beside it. A warpgroup writes its slab of a staging tile that
// shares bytes only after every compute warp has passed a barrier.
// REUSE: "shared memory: 32768 bytes, placed by liveness: load convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}} [0, 32768) until convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}; TMA staging tile convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}} [0, 32768);"
// REUSE: "convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}: store 128x128: TMA
// REUSE: "shared memory: 36864 bytes, placed by liveness: load {{.*}} [0, 32768) until {{.*}}; TMA staging tile {{.*}} [0, 32768); scratch of conversions and reductions [32768, 36864)"
// REUSE-SAME: kiln.shared_bytes = 36864 : i64
// REUSE: llvm.func @store_tile(
// REUSE: nvvm.cp.async.bulk.wait_group 0 {read}
// REUSE-NEXT: }
// REUSE-NEXT: nvvm.fence.proxy
// REUSE-NEXT: nvvm.barrier0
// REUSE-NEXT: scf.if
// REUSE-NEXT: nvvm.barrier id

// The staging tiles are placed before the scratch area of conversions and
// reductions is known: where the two together exceed the limit, the kernel
// is lowered again with plain stores (here the column sums go through the
// scratch area; @store_tile has none and keeps its TMA store). Lowered
// again, the scratch area takes the bytes of the dot operand.
// RETRY: "convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}: store 128x128: TMA
// RETRY: "convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}}: store 128x128: st.global from registers, 4-byte vector stores; no bounds checks along dimension(s) 1; not TMA: its 32 KB staging tile and the scratch area for layout conversions and reductions took 36864 bytes of shared memory (limit 36000)"
// RETRY: "shared memory: 32768 bytes, placed by liveness: load {{.*}} [0, 32768) until {{.*}}; scratch of conversions and reductions [0, 4096) in the bytes of: load convert-kiln-to-llvm-tma-store.mlir:{{[0-9]+}} (no longer read there)"
// RETRY-SAME: kiln.shared_bytes = 32768 : i64
// RETRY-SAME: kiln.tensor_maps = ["ptr=1 elem=2 dims=4,512,128 strides=2,3,4 box=1,64,64"]
// RETRY: llvm.func @store_tile(
// RETRY: nvvm.cp.async.bulk.tensor.global.shared.cta
// RETRY: llvm.func @scratch_store(
// RETRY-NOT: nvvm.cp.async.bulk.tensor.global.shared.cta
// RETRY: llvm.return

// NOTARGET-NOT: cp.async.bulk.tensor.global
// NOTARGET: llvm.func @plain_store(

func.func @store_tile(%x: !kiln.ptr<bf16>,
                      %o: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, 512, 128>},
                      %os0: i32, %os1: i32, %os2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 4, 1>, kiln.mma = "wgmma", kiln.tma, kiln.tma_stores} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %h = kiln.convert %d : tensor<128x128xf32> -> tensor<128x128xbf16>
  %batch = kiln.program_id 1
  %bi = arith.extsi %batch : i32 to i64
  %s0 = arith.extsi %os0 : i32 to i64
  %off = arith.muli %bi, %s0 : i64
  %o1 = kiln.addptr %o, %off : <bf16>, i64
  %m = kiln.program_id 0
  %m0 = arith.muli %m, %c128 : i32
  kiln.store %h, %o1[%m0, %c0] shape[%c512, %c128] strides[%os1, %os2] : tensor<128x128xbf16>, !kiln.ptr<bf16>
  return
}

// A raw pointer: no tensor map to name the block by.
func.func @plain_store(%x: !kiln.ptr<bf16>, %o: !kiln.ptr<bf16>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.tma_stores} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %h = kiln.convert %d : tensor<128x128xf32> -> tensor<128x128xbf16>
  kiln.store %h, %o[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : tensor<128x128xbf16>, !kiln.ptr<bf16>
  return
}

// The same tile and its column sums (a reduction across warps).
func.func @scratch_store(%x: !kiln.ptr<bf16>,
                         %o: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 512, 128>},
                         %os0: i32, %os1: i32, %sums: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.tma_stores} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %d = kiln.dot %a, %a, %zero : tensor<128x128xbf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  %h = kiln.convert %d : tensor<128x128xf32> -> tensor<128x128xbf16>
  %m = kiln.program_id 0
  %m0 = arith.muli %m, %c128 : i32
  kiln.store %h, %o[%m0, %c0] shape[%c512, %c128] strides[%os0, %os1] : tensor<128x128xbf16>, !kiln.ptr<bf16>
  %s = kiln.reduce sum %d axis = 0 : tensor<128x128xf32> -> tensor<128xf32>
  kiln.store %s, %sums[%m0] shape[%c512] strides[%c1] : tensor<128xf32>, !kiln.ptr<f32>
  return
}
