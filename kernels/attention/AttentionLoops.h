//===- AttentionLoops.h - how the forward kernel loops over keys -*- C++
//-*-===//
//
// Internal to kernels/attention: shared by the kernel and its schedule
// defaults (shared memory depends on the number of key loops).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_ATTENTIONLOOPS_H
#define KILN_KERNELS_ATTENTION_ATTENTIONLOOPS_H

#include "kiln/kernels/Attention.h"

#include <vector>

namespace kiln::kernels {

/// Throws kiln::Error unless the resolved config's blocks are powers of two
/// >= 16.
void checkConfig(const AttentionConfig &c);

/// Loops over key blocks: causal attention splits them at the diagonal;
/// non-causal with a ragged end of 16 blocks or more keeps it apart from the
/// unmasked blocks before it. H200 bench (bf16, TFLOP/s) at N=1000/1023/
/// 2049/3001/4097/8191, every block masked in one loop: D=128 534/482/462/
/// 513/528/563 (654/690/687/709 at 2048/2944/4096/8192, same run), D=64
/// 443/464/393/454/427/523; split: D=128 486/491/525/605/629/672, D=64
/// 405/429/447/489/496/515 (another run; a second loop costs O's TMA store
/// at D=128, where overlap then needs two V buffers, and 64-key blocks at
/// the end at D=64, where registers are tight).
/// Static non-causal: the keys before the split take unmasked blocks, those
/// from it a masked loop. seqK when no block is ragged; 0 (one masked loop)
/// below 16 blocks; else the last whole block goes with the ragged one (a loop
/// of one iteration would be unrolled, its loads not pipelined).
int64_t unmaskedKeys(const AttentionShape &s, int64_t blockN);

/// Every key loop steps by a divisor of this (the key block and the
/// diagonal's): an Nk that is a multiple of it leaves no key block ragged.
int64_t keyBlockMultiple(const AttentionConfig &c);
/// Whether s.seqK is such a multiple: a run-time-shape kernel built for that
/// class has no mask for keys past the end (and refuses other Nk). Never
/// with key lengths per batch, whose keys end anywhere.
bool wholeKeyBlocks(const AttentionShape &s, const AttentionConfig &c);

/// Run-time non-causal Nk that is not whole key blocks: the widths of the
/// masked end step, widest first (blockN, then blockNRaggedEnd if
/// narrower); the kernel takes the narrowest that holds the ragged keys.
std::vector<int64_t> raggedEndBlocks(const AttentionConfig &c);
/// Key loops of the kernel: 2 when causal (3 under rowsAlignedToEnd); with
/// run-time shapes, 1 + the ragged end's widths when Nk is not whole key blocks
/// (the whole ones unmasked, the ragged one in masked loops of their own, one
/// of which runs); static, 2 where unmaskedKeys splits.
int keyLoops(const AttentionShape &s, const AttentionConfig &c);
/// Those of them with P·V one iteration behind under `overlap` (each keeps
/// a V buffer in shared memory): not a run-time ragged end's, which runs
/// once.
int overlappedLoops(const AttentionShape &s, const AttentionConfig &c);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_ATTENTIONLOOPS_H
