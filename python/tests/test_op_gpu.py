"""kiln.attention (and kiln.attention_qkvpacked) on the GPU against torch's
math attention in float64: outputs and gradients, both layouts, ragged and
unequal lengths, views that are not aligned, split keys, one compile for
every length, a second device (test_op_paths_gpu.py: the ways it is
reached). Outputs are written into memory the caching allocator has just
had filled with NaN. Skipped, loudly, without a GPU."""
import math

import pytest
import torch

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln.attention need one",
                allow_module_level=True)

from gpu_util import (DEV, attention_inputs,  # noqa: E402
                      attention_reference, check_graph_replay, deterministic,
                      poison_allocator, profiled_kernels, rel, to_bhsd)


CASES = [  # B, H, Nq, Nk, D, causal, dtype, layout
    (2, 3, 1000, 1000, 64, False, torch.bfloat16, "bhsd"),
    (2, 3, 1000, 1000, 64, True, torch.bfloat16, "bshd"),
    (1, 4, 3001, 3001, 128, True, torch.bfloat16, "bhsd"),
    (1, 2, 4097, 4097, 128, False, torch.float16, "bshd"),
    (2, 2, 700, 1100, 128, False, torch.bfloat16, "bhsd"),
    (1, 2, 513, 257, 64, True, torch.float16, "bhsd"),
    (1, 1, 1, 1, 128, False, torch.bfloat16, "bhsd"),
]


def check_against_float64(q, k, v, causal, layout):
    """kiln's O and gradients of q, k and v (poisoned allocator before each)
    against torch's math attention in float64."""
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn_like(q)
    poison_allocator()
    o = kiln.attention(q, k, v, causal=causal, layout=layout)
    poison_allocator()
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = attention_reference(q, k, v, causal, layout, grad_o)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert dk.shape == k.shape and dv.shape == v.shape
    tol = 1e-2 if q.dtype == torch.bfloat16 else 4e-3
    for name, got, want in (("o", o, o_ref), ("dq", dq, grads_ref[0]),
                            ("dk", dk, grads_ref[1]), ("dv", dv, grads_ref[2])):
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        assert rel(got, want) < (tol if name == "o" else 2 * tol), name


@pytest.mark.parametrize("B,H,Nq,Nk,D,causal,dtype,layout", CASES)
def test_matches_float64_math(B, H, Nq, Nk, D, causal, dtype, layout):
    q, k, v = attention_inputs(B, H, Nq, Nk, D, dtype, layout, seed=Nq * 7 + D + causal)
    check_against_float64(q, k, v, causal, layout)


@pytest.mark.parametrize("B,H,Hk,Nq,Nk,D,causal,layout", [
    (2, 8, 2, 1000, 1000, 64, True, "bhsd"), (1, 8, 1, 2049, 2049, 128, False, "bshd"),
    (2, 6, 2, 777, 1100, 128, True, "bhsd"), (1, 4, 2, 300, 300, 64, False, "bshd"),
    (2, 8, 2, 1, 4000, 128, False, "bhsd")])  # decoding: the keys split
def test_grouped_heads_match_float64_math(B, H, Hk, Nq, Nk, D, causal, layout):
    q = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, layout, seed=H * Nq + D)[0]
    k, v = attention_inputs(B, Hk, Nq, Nk, D, torch.bfloat16, layout, seed=Hk + Nk)[1:]
    check_against_float64(q, k, v, causal, layout)


@pytest.mark.parametrize("B,H,Hk,Nq,Nk,D,layout,causal", [
    (4, 32, 8, 1, 4097, 128, "bhsd", False),  # decoding: grouped rows
    (5, 8, 2, 1, 3000, 64, "bshd", False),    # decoding: the keys split
    (3, 8, 2, 4, 1000, 64, "bshd", False),
    (3, 4, 4, 300, 2049, 128, "bhsd", False),  # prefill: TMA for whole blocks
    (4, 4, 2, 200, 777, 64, "bhsd", False),
    (4, 8, 2, 300, 2049, 128, "bhsd", True),   # chunked prefill
    (3, 4, 4, 100, 1000, 64, "bshd", True)])
def test_key_lengths_match_float64(B, H, Hk, Nq, Nk, D, layout, causal):
    # Batch b attends to its first key_lengths[b] keys (the last batch to
    # none: O 0, LSE -inf; one past Nk and one below 0, clamped); every
    # slot past a length holds NaN, which a read would leak into O. Causal:
    # the queries are the last Nq of each length (rows before key 0 where a
    # length is under Nq: O 0, LSE -inf).
    q = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, layout, seed=B * Nk)[0]
    k, v = attention_inputs(B, Hk, Nq, Nk, D, torch.bfloat16, layout, seed=Nk + D)[1:]
    g = torch.Generator().manual_seed(Nk + Nq)
    given = torch.randint(1, Nk + 1, (B,), generator=g)
    given[0], given[1], given[-1] = Nk + 5, -3 if B > 3 else Nk, 0
    lengths = given.clamp(0, Nk)
    kb, vb = to_bhsd(k, layout), to_bhsd(v, layout)
    for b, n in enumerate(lengths.tolist()):
        kb[b, :, n:] = float("nan")
        vb[b, :, n:] = float("nan")
    poison_allocator()
    with torch.no_grad():
        o, lse = kiln.attention(q, k, v, layout=layout, return_lse=True,
                                causal=causal,
                                key_lengths=given.to(DEV, torch.int32))
    assert torch.isfinite(o).all(), "unwritten or non-finite elements of O"
    ob, qb = to_bhsd(o, layout), to_bhsd(q, layout)
    for b, n in enumerate(lengths.tolist()):
        # Query i sees keys j < n (causal: j <= n - Nq + i).
        seen = torch.arange(n, device=DEV)[None, :] <= (
            torch.arange(Nq, device=DEV)[:, None] + (n - Nq if causal else n))
        none = ~seen.any(-1)
        assert (ob[b][:, none] == 0).all()
        assert (lse[b][:, none] == float("-inf")).all()
        if none.all():
            continue
        kk = kb[b, :, :n].double().repeat_interleave(H // Hk, 0)
        vv = vb[b, :, :n].double().repeat_interleave(H // Hk, 0)
        s = qb[b].double() @ kk.transpose(-1, -2) / math.sqrt(D)
        s = s.masked_fill(~seen, float("-inf"))[:, ~none]
        assert rel(ob[b][:, ~none], torch.softmax(s, -1) @ vv) < 1e-2, f"batch {b}"
        assert rel(lse[b][:, ~none], torch.logsumexp(s, -1)) < 1e-5, f"batch {b}"


@pytest.mark.parametrize("B,H,Hk,Nq,Nk,D,layout", [
    (3, 8, 2, 1, 3000, 128, "bhsd"), (2, 12, 4, 5, 700, 64, "bhsd"),
    (2, 8, 2, 1, 4097, 128, "bshd"), (1, 4, 1, 100, 1000, 64, "bhsd"),
    (2, 8, 2, 3, 900, 128, "bshd")])  # a head's rows not evenly spaced: not packed
def test_grouped_short_queries_run_as_rows_of_one_head(B, H, Hk, Nq, Nk, D, layout,
                                                       monkeypatch, capfd):
    # Non-causal grouped heads with under 128 queries: the G query heads of a
    # K/V head run as G·Nq rows of one head (python/capi/AttentionArgs.h),
    # forward and backward, as KILN_LOG=launch says. O, LSE and the
    # gradients against float64; the Hk-head problem of those rows is then
    # the one already loaded (no new variant).
    q = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, layout, seed=H + Nq)[0]
    k, v = attention_inputs(B, Hk, Nq, Nk, D, torch.bfloat16, layout, seed=Nk)[1:]
    monkeypatch.setenv("KILN_LOG", "launch")
    check_against_float64(q, k, v, False, layout)
    err = capfd.readouterr().err
    packs = layout == "bhsd" or Nq == 1
    for call in ("attention", "attention backward"):
        said = (f"kiln[launch]: {call} B={B} H={H} Hk={Hk} Nq={Nq} Nk={Nk} D={D} "
                f"non-causal: grouped heads packed, {Hk} heads of {H // Hk * Nq} rows")
        assert (said in err) == packs, err
    poison_allocator()
    o, lse = kiln.attention(q.detach(), k.detach(), v.detach(), layout=layout,
                            return_lse=True)
    bh = (lambda t: t.transpose(1, 2)) if layout == "bshd" else (lambda t: t)
    group = H // Hk
    s = (bh(q).double() @ bh(k).double().repeat_interleave(group, 1).transpose(-1, -2))
    assert rel(lse, torch.logsumexp(s / math.sqrt(D), -1)) < 1e-5
    if layout == "bhsd":
        variants = kiln.cache_stats()[0]
        rows = kiln.attention(q.detach().reshape(B, Hk, group * Nq, D), k.detach(), v.detach())
        assert kiln.cache_stats()[0] == variants, "grouped heads did not run as rows"
        assert torch.equal(rows.view(B, H, Nq, D), o)


def view_of(t, kind):
    """t's values in a view users hand over: at an odd element offset (a
    pointer that is not 16-byte aligned) or with rows padded by 3 elements
    (strides that are not multiples of 16 bytes)."""
    pad, offset = (3, 0) if kind == "padded" else (0, 1)
    buf = torch.empty(offset + t.numel() // t.shape[-1] * (t.shape[-1] + pad),
                      device=t.device, dtype=t.dtype)
    view = buf[offset:].view(*t.shape[:-1], t.shape[-1] + pad)[..., :t.shape[-1]]
    view.copy_(t)
    return view


@pytest.mark.parametrize("D,causal,layout,which,kind", [
    (128, True, "bhsd", "v", "offset"), (128, True, "bshd", "k", "padded"),
    (128, False, "bshd", "v", "padded"), (64, True, "bhsd", "q", "offset"),
    (64, False, "bshd", "kv", "padded"), (128, False, "bhsd", "qkv", "offset")])
def test_views_that_are_not_aligned(D, causal, layout, which, kind, monkeypatch,
                                    capfd):
    # Q that misses the 16-byte specialisation takes loads of its own (K
    # and V keep TMA and the producer warpgroup); K and V are copied to
    # aligned memory first (their own loads spill), which KILN_LOG=launch
    # says. (scripts/fuzz-attention.py, which calls the kernels directly,
    # found D=128 with K or V not aligned failing to compile.)
    q, k, v = attention_inputs(2, 3, 1001, 1001, D, torch.bfloat16, layout, seed=D + causal)
    q, k, v = (view_of(t, kind) if name in which else t
               for name, t in zip("qkv", (q, k, v)))
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn(q.shape, device=DEV, dtype=q.dtype)
    poison_allocator()
    monkeypatch.setenv("KILN_LOG", "launch")
    kiln.ops._logged_copies.clear()
    o = kiln.attention(q, k, v, causal=causal, layout=layout)
    err = capfd.readouterr().err
    for name in "kv":
        said = f"kiln.attention: {name} is not 16-byte aligned" in err
        assert said == (name in which), err
    poison_allocator()
    grads = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = attention_reference(q, k, v, causal, layout, grad_o)
    for name, got, want in zip(("o", "dq", "dk", "dv"), (o, *grads),
                               (o_ref, *grads_ref)):
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        assert rel(got, want) < (1e-2 if name == "o" else 2e-2), name


@pytest.mark.parametrize("B,H,N,D,causal,dtype", [
    (2, 3, 1000, 64, True, torch.bfloat16), (1, 2, 513, 128, False, torch.float16)])
def test_qkvpacked_matches_float64_math_and_the_unpacked_op(B, H, N, D, causal, dtype):
    g = torch.Generator(device=DEV).manual_seed(N + D)
    qkv = torch.randn(B, N, 3, H, D, device=DEV, dtype=dtype, generator=g).requires_grad_()
    grad_o = torch.randn(B, N, H, D, device=DEV, dtype=dtype, generator=g)
    poison_allocator()
    o = kiln.attention_qkvpacked(qkv, causal=causal)
    poison_allocator()
    (dqkv,) = torch.autograd.grad(o, qkv, grad_o)
    q, k, v = qkv.unbind(2)
    o_ref, grads_ref = attention_reference(q, k, v, causal, "bshd", grad_o)
    tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
    assert o.shape == (B, N, H, D) and dqkv.shape == qkv.shape
    assert torch.isfinite(o).all() and torch.isfinite(dqkv).all()
    assert rel(o, o_ref) < tol
    for i, name in enumerate("qkv"):
        assert rel(dqkv[:, :, i], grads_ref[i]) < 2 * tol, "d" + name
    # The unpacked op on the same views runs the same kernels.
    o2 = kiln.attention(q, k, v, causal=causal, layout="bshd")
    assert torch.equal(o, o2)
    grads = torch.autograd.grad(o2, (q, k, v), grad_o)
    for i in range(3):
        assert rel(dqkv[:, :, i], grads[i]) < 1e-3


def test_lse_matches():
    q, k, v = attention_inputs(2, 3, 1000, 1000, 128, torch.bfloat16, "bhsd", seed=3)
    o, lse = kiln.attention(q, k, v, causal=True, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(128)
    s.masked_fill_(torch.ones(1000, 1000, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    assert rel(lse, torch.logsumexp(s, -1)) < 1e-5


SPLIT_CASES = [  # B, H, Nq, Nk, D: row blocks too few to fill the SMs
    (1, 16, 1, 32768, 128),  # decoding one long sequence
    (1, 32, 1, 4097, 64),
    (1, 16, 128, 16384, 128),  # short queries on long keys
    (2, 4, 100, 3001, 64),
]


@pytest.mark.parametrize("B,H,Nq,Nk,D", SPLIT_CASES)
def test_few_row_blocks_split_the_keys(B, H, Nq, Nk, D):
    # The forward splits the keys in ranges (two kernels, a workspace) where
    # its row blocks leave SMs idle; O and LSE as one kernel's.
    q, k, v = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=Nk + Nq)
    scale = 1 / math.sqrt(D)
    assert kiln._lib.forward_workspace(q, k, False, scale, False) > 0
    poison_allocator()
    o, lse = kiln.attention(q, k, v, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    lse_ref = torch.logsumexp(s, -1)
    o_ref = torch.softmax(s, -1) @ v.double()
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    assert rel(o, o_ref) < 1e-2
    assert rel(lse, lse_ref) < 1e-5
    names = profiled_kernels(lambda: kiln.attention(q, k, v))
    assert names == ["attention_fwd_combine", "attention_fwd_split"], names


def test_split_keys_gradients_and_cuda_graph():
    # The backward reads the combined O and LSE; a captured decoding step
    # replays both kernels on new inputs.
    B, H, Nq, Nk, D = 1, 8, 64, 5000, 128
    q, k, v = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=29)
    assert kiln._lib.forward_workspace(q, k, False, 1 / math.sqrt(D), False) > 0
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn_like(q)
    poison_allocator()
    o = kiln.attention(q, k, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = attention_reference(q, k, v, False, "bhsd", grad_o)
    assert rel(o, o_ref) < 1e-2
    for got, want in zip((dq, dk, dv), grads_ref):
        assert rel(got, want) < 2e-2
    check_graph_replay(B, H, Nq, Nk, D, False, seed=31)


def test_one_compile_serves_every_length():
    # Lengths of one class: D=64 non-causal past 1024 keys (up to 1024 the
    # default loads Q by one-shot TMA, another kernel).
    # B=4, 32 heads: row blocks enough to fill the SMs' waves (fewer split
    # the keys, a kernel per number of ranges).
    kiln.attention(*attention_inputs(4, 32, 1100, 1100, 64, torch.bfloat16, "bhsd", 1))
    _, before = kiln.cache_stats()
    for n in (1500, 2100, 3001, 5000):
        kiln.attention(*attention_inputs(4, 32, n, n, 64, torch.bfloat16, "bhsd", n))
    _, after = kiln.cache_stats()
    assert after == before, "a new length compiled a new kernel"


def test_many_lengths_stay_correct():
    # More problems than the library keeps (256): the least recently used
    # are forgotten and rebuilt when they come back, with no new compile.
    # Causal and not: the check below must not depend on which variants the
    # tests before this one compiled.
    for n in range(1, 300):
        for causal in (False, True):
            kiln.attention(*attention_inputs(1, 1, n, n, 64, torch.bfloat16, "bhsd", n),
                           causal=causal)
    _, before = kiln.cache_stats()
    q, k, v = attention_inputs(1, 1, 5, 5, 64, torch.bfloat16, "bhsd", 5)  # forgotten
    o = kiln.attention(q, k, v, causal=True)
    o_ref, _ = attention_reference(q, k, v, True, "bhsd", torch.zeros_like(q))
    assert rel(o, o_ref) < 1e-2
    assert kiln.cache_stats()[1] == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="SKIPPED: one GPU")
@pytest.mark.parametrize("B,H,Nq,Nk,D,causal", [
    (1, 2, 1000, 1000, 64, True),
    (2, 3, 2049, 2049, 128, False),
    (4, 16, 1, 8192, 128, False),  # decoding: split keys, their workspace
])
def test_second_device(B, H, Nq, Nk, D, causal):
    # Device 1 runs what device 0 runs, bit for bit (the backward in torch's
    # deterministic mode), with the current device left at 0, and matches
    # float64 math there.
    q, k, v = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=19 + Nq)
    grad_o = torch.randn_like(q)
    on1 = [t.to("cuda:1").requires_grad_() for t in (q, k, v, grad_o)]
    on0 = [t.requires_grad_() for t in (q, k, v)]
    results = []
    for (q_, k_, v_), g in ((on0, grad_o), (on1[:3], on1[3])):
        with torch.cuda.device(0):  # for device 1: not the tensors' device
            poison_allocator(device=q_.device)
            o = kiln.attention(q_, k_, v_, causal=causal)
            with deterministic():
                grads = torch.autograd.grad(o, (q_, k_, v_), g)
        results.append([o, *grads])
    torch.cuda.synchronize(1)
    for name, a, b in zip(("o", "dq", "dk", "dv"), *results):
        assert b.device == torch.device("cuda:1"), name
        assert torch.equal(a, b.to("cuda:0")), name
    o_ref, grads_ref = attention_reference(*on1[:3], causal, "bhsd", on1[3])
    for name, got, want in zip(("o", "dq", "dk", "dv"), results[1],
                               [o_ref, *grads_ref]):
        assert rel(got, want) < (1e-2 if name == "o" else 2e-2), name
    with pytest.raises(ValueError, match="one device"):
        kiln.attention(q, on1[1], on1[2])
