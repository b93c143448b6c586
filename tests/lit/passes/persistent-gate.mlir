// convert-kiln-to-llvm, persistent CTAs whose epilogue needs shared memory of
// its own: the column sums of the accumulator meet across warps in the
// scratch area (2 KB). With every buffer live across tiles (the producer
// fetches the next tile's stages during this tile's epilogue) the kernel
// takes the ring's 98 KB plus the scratch.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=LIVE
// Where that does not fit, the kernel is lowered again with a tile gate: a
// tile's buffers are placed by liveness within the tile (the scratch takes
// the ring's bytes), every compute thread arrives on an mbarrier (count 128)
// after its tile, fenced for the async proxy, and the producer waits for the
// previous tile's arrival (phase: the tile's round mod 2, the first passing
// on a fresh barrier) before the tile's first copy.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true shared-limit=99328" | FileCheck %s --check-prefix=GATE

// LIVE-NOT: placed by liveness within
// LIVE: "shared memory: 101376 bytes, placed by liveness: mbarriers [0, 32); stage ring [1024, 99328); scratch of conversions and reductions [99328, 101376)"
// LIVE-NOT: placed by liveness within

// GATE: "persistent: each tile's buffers are placed by liveness within the tile, and the producer fetches a tile's first blocks only once the compute warps are done with the previous tile (an mbarrier): with every buffer live across tiles the kernel needed 101376 bytes of shared memory (limit 99328)"
// GATE-SAME: "shared memory: 99328 bytes, placed by liveness: mbarriers [0, 40); stage ring [1024, 99328) until persistent-gate.mlir:{{[0-9]+}}; scratch of conversions and reductions [1024, 3072) in the bytes of: stage ring (no longer read there)"
// GATE-SAME: kiln.shared_bytes = 99328
// GATE: %[[GATE:.*]] = llvm.getelementptr %{{.*}}[%c32_i32]
// GATE-NEXT: nvvm.mbarrier.init %[[GATE]], %c128_i32
// GATE: nvvm.setmaxregister decrease 24
// GATE: scf.for
// GATE: %[[ROUND:.*]] = arith.divui
// GATE: %[[PHASE:.*]] = arith.andi %[[ROUND]], %c1_i32
// GATE: %[[WANT:.*]] = arith.xori %[[PHASE]], %c1_i32
// GATE: %[[PGATE:.*]] = llvm.getelementptr %{{.*}}[%c32_i32{{.*}}]
// GATE-NEXT: arith.constant
// GATE-NEXT: nvvm.mbarrier.try_wait.parity %[[PGATE]], %[[WANT]]
// GATE: scf.for
// GATE: nvvm.cp.async.bulk.tensor.shared.cluster.global
// GATE: } else {
// GATE: nvvm.barrier id
// GATE: llvm.store {{.*}} : vector<2xf32>, !llvm.ptr<1>
// GATE: nvvm.fence.proxy
// GATE-NEXT: arith.constant 32
// GATE-NEXT: %[[CGATE:.*]] = llvm.getelementptr
// GATE-NEXT: nvvm.mbarrier.arrive %[[CGATE]]
// GATE-NEXT: scf.yield
// GATE: llvm.return

func.func @gated(%out: !kiln.ptr<f32>,
                 %a: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, 512, 128>},
                 %as0: i32, %as1: i32, %as2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.warp_specialize, kiln.persistent} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %batch = kiln.program_id 0
  %bi = arith.extsi %batch : i32 to i64
  %s0 = arith.extsi %as0 : i32 to i64
  %off = arith.muli %bi, %s0 : i64
  %a1 = kiln.addptr %a, %off : <bf16>, i64
  %zero = arith.constant dense<0.0> : tensor<64x128xf32>
  %r = scf.for %k = %c0 to %c512 step %c128 iter_args(%acc = %zero) -> (tensor<64x128xf32>) : i32 {
    %x = kiln.load %a1[%c0, %k] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
    %y = kiln.load %a1[%k, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %y, %acc : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d : tensor<64x128xf32>
  }
  %s = kiln.reduce sum %r axis = 0 : tensor<64x128xf32> -> tensor<128xf32>
  %o = arith.muli %batch, %c128 : i32
  kiln.store %s, %out[%o] shape[%c512] strides[%c1] : tensor<128xf32>, !kiln.ptr<f32>
  return
}
