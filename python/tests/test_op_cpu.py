"""kiln.attention without a GPU: argument checks, the custom ops'
registration and fake implementations, torch.compile tracing them; the
library's loading, the C++ extension's build, kiln.bench's plumbing
(test_library_cpu.py: the other ops')."""
import os
import subprocess
import sys

import pytest
import torch

import kiln

META = "meta"


def qkv(B=2, H=3, Nq=100, Nk=None, D=64, dtype=torch.bfloat16, device=META,
        layout="bhsd", grad=False):
    Nk = Nq if Nk is None else Nk
    shape = (lambda n: (B, H, n, D)) if layout == "bhsd" else (lambda n: (B, n, H, D))
    return tuple(torch.empty(shape(n), dtype=dtype, device=device,
                             requires_grad=grad) for n in (Nq, Nk, Nk))


def test_ops_are_registered():
    fwd = torch.ops.kiln.attention_forward.default
    bwd = torch.ops.kiln.attention_backward.default
    assert "attention_forward(Tensor q, Tensor k, Tensor v, bool causal, float scale, bool bshd) -> (Tensor, Tensor)" in str(fwd._schema)
    assert str(bwd._schema).endswith("-> (Tensor, Tensor, Tensor)")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fake_forward_shapes(layout, dtype):
    q, k, v = qkv(Nq=77, Nk=130, D=128, dtype=dtype, layout=layout)
    o, lse = kiln.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    assert o.shape == q.shape and o.dtype == dtype and o.device.type == META
    assert lse.shape == (2, 3, 77) and lse.dtype == torch.float32


def test_fake_backward_shapes():
    q, k, v = qkv(Nq=50, Nk=90, grad=True)
    kiln.attention(q, k, v).sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape
    assert v.grad.shape == v.shape and v.grad.dtype == v.dtype


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_grouped_heads_keep_k_and_v_shapes(layout):
    # 8 query heads over 2 k/v heads: O and LSE per query head, dk and dv
    # per k/v head.
    q = qkv(H=8, Nq=50, layout=layout, grad=True)[0]
    k, v = qkv(H=2, Nq=90, layout=layout, grad=True)[:2]
    o, lse = kiln.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    assert o.shape == q.shape and lse.shape == (2, 8, 50)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape
    assert v.grad.shape == v.shape


def test_lse_is_not_differentiable():
    q, k, v = qkv(grad=True)
    o, lse = kiln.attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad


def test_torch_compile_traces_one_graph(recorded_graphs):
    graphs, backend = recorded_graphs

    f = torch.compile(lambda q, k, v: kiln.attention(q, k, v, causal=True,
                                                     layout="bshd") * 2,
                      backend=backend, fullgraph=True)
    out = f(*qkv(layout="bshd"))
    assert out.shape == (2, 100, 3, 64)
    assert len(graphs) == 1
    assert "torch.ops.kiln.attention_forward" in graphs[0].code


def test_torch_compile_with_autograd():
    f = torch.compile(lambda q, k, v: kiln.attention(q, k, v, causal=True),
                      backend="aot_eager", fullgraph=True)
    q, k, v = qkv(grad=True)
    f(q, k, v).sum().backward()
    assert q.grad.shape == q.shape


@pytest.mark.parametrize("make,exc,match", [
    (lambda: ("not a tensor",) + qkv()[1:], TypeError, "q must be a torch.Tensor, got str"),
    (lambda: qkv(dtype=torch.float32), TypeError, "q has dtype torch.float32"),
    (lambda: (qkv()[0],) + qkv(dtype=torch.float16)[1:], TypeError, "share one dtype"),
    (lambda: (torch.empty(2, 100, 64, dtype=torch.bfloat16, device=META),) + qkv()[1:],
     ValueError, r"q must be 4-D \(batch, heads, seq, head_dim\), got shape \(2, 100, 64\)"),
    (lambda: qkv(device="cpu"), ValueError, "q is on cpu; kiln runs on CUDA tensors"),
    (lambda: qkv(D=96), ValueError, "head_dim 96 is not supported"),
    (lambda: (qkv(H=4)[0], qkv(H=3)[1], qkv(H=3)[2]), ValueError,
     r"k's 3 heads must divide q's 4 \(grouped-query attention"),
    (lambda: (qkv()[0], qkv(B=1)[1], qkv(B=1)[2]), ValueError, "must match q .* in batch and head_dim"),
    (lambda: (qkv()[0], qkv()[1], qkv(Nq=7)[2]), ValueError, "v .* must have k's shape"),
    (lambda: qkv(Nq=0), ValueError, "empty tensors"),
    (lambda: (torch.empty(2, 3, 64, 100, dtype=torch.bfloat16, device=META).transpose(2, 3),) + qkv()[1:],
     ValueError, "q's last dimension must be contiguous"),
])


def test_bad_input_is_refused(make, exc, match):
    with pytest.raises(exc, match=match):
        kiln.attention(*make())


def test_bad_options_are_refused():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="layout must be 'bhsd' or 'bshd', got 'sbhd'"):
        kiln.attention(q, k, v, layout="sbhd")
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        kiln.attention(q, k, v, causal=1)
    for scale in (0.0, -1.0, float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="scale must be a positive finite number"):
            kiln.attention(q, k, v, scale=scale)
    with pytest.raises(TypeError, match="return_lse must be a bool, got str"):
        kiln.attention(q, k, v, return_lse="yes")


def packed(B=2, N=100, H=3, D=64, dtype=torch.bfloat16, device=META, grad=False):
    return torch.empty(B, N, 3, H, D, dtype=dtype, device=device, requires_grad=grad)


def test_packed_ops_are_registered_and_trace(recorded_graphs):
    fwd = torch.ops.kiln.attention_qkvpacked_forward.default
    bwd = torch.ops.kiln.attention_qkvpacked_backward.default
    assert "attention_qkvpacked_forward(Tensor qkv, bool causal, float scale) -> (Tensor, Tensor)" in str(fwd._schema)
    assert str(bwd._schema).endswith("-> Tensor")
    x = packed(N=77, D=128, grad=True)
    o, lse = kiln.attention_qkvpacked(x, causal=True, return_lse=True)
    assert o.shape == (2, 77, 3, 128) and lse.shape == (2, 3, 77) and not lse.requires_grad
    o.sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    graphs, backend = recorded_graphs

    f = torch.compile(lambda x: kiln.attention_qkvpacked(x, causal=True) * 2,
                      backend=backend, fullgraph=True)
    assert f(packed()).shape == (2, 100, 3, 64)
    assert len(graphs) == 1 and "torch.ops.kiln.attention_qkvpacked_forward" in graphs[0].code
    g = torch.compile(lambda x: kiln.attention_qkvpacked(x), backend="aot_eager", fullgraph=True)
    y = packed(grad=True)
    g(y).sum().backward()
    assert y.grad.shape == y.shape


@pytest.mark.parametrize("make,exc,match", [
    (lambda: "qkv", TypeError, "qkv must be a torch.Tensor, got str"),
    (lambda: packed()[:, :, :2], ValueError, r"qkv must be \(batch, seq, 3, heads, head_dim\), got shape \(2, 100, 2, 3, 64\)"),
    (lambda: packed()[..., 0, :], ValueError, r"qkv must be \(batch, seq, 3, heads, head_dim\)"),
    (lambda: packed(dtype=torch.float32), TypeError, "q has dtype torch.float32"),
    (lambda: packed(D=80), ValueError,
     "kiln.attention_qkvpacked: head_dim 80 is not supported"),
    (lambda: packed(device="cpu"), ValueError, "q is on cpu"),
])


def test_packed_bad_input_is_refused(make, exc, match):
    with pytest.raises(exc, match=match):
        kiln.attention_qkvpacked(make())


def test_packed_return_lse_must_be_a_bool():
    with pytest.raises(TypeError, match="return_lse must be a bool, got int"):
        kiln.attention_qkvpacked(packed(), return_lse=1)


def test_missing_library_is_named():
    # A fresh interpreter, so that no library is loaded yet.
    code = ("import kiln, kiln._lib as l\n"
            "try:\n    l.library()\nexcept RuntimeError as e:\n    print(e)\n")
    env = dict(os.environ, KILN_LIBRARY="/nonexistent/libkiln_c.so")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True).stdout
    assert "cannot load libkiln_c.so" in out and "/nonexistent/libkiln_c.so (missing)" in out


def test_library_loads_without_a_gpu():
    # libkiln_c opens the CUDA driver only when it launches.
    if not os.path.exists(os.environ.get("KILN_LIBRARY", "")) and not any(
            os.path.exists(p) for p in kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    # A fresh interpreter: in this one, GPU tests run before may have
    # compiled (test_library_gpu.py sorts before this file).
    code = ("import kiln\nprint(kiln.version(), *kiln.cache_stats())\n")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=here,
                         capture_output=True, text=True)
    assert out.stdout.split() == ["0.1.0", "0", "0"], out.stderr[-2000:]


def test_cpp_autograd_builds_and_binds():
    # The eager path's C++ autograd Function, built against this torch (no
    # GPU needed to build it; it calls libkiln_c only when it launches).
    if os.environ.get("KILN_CPP_AUTOGRAD") == "0":
        pytest.skip("SKIPPED: KILN_CPP_AUTOGRAD=0 keeps the Python Function")
    if not any(os.path.exists(p) for p in
               [os.environ.get("KILN_LIBRARY", "")] + kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    from kiln import _cpp
    m = _cpp.module()
    assert m is not None, "the C++ autograd path did not build (see stderr)"
    assert callable(m.attention) and callable(m.bind)
    # kiln_c_op's launches (kiln.linear, rotary, cross-entropy) from C++ too.
    assert callable(m.op) and callable(m.linear) and callable(m.bind_op)


def test_cpp_autograd_can_be_switched_off():
    code = "from kiln import _cpp\nprint(_cpp.module())\n"
    env = dict(os.environ, KILN_CPP_AUTOGRAD="0")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "None", out.stdout + out.stderr
    assert "building" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "kiln.build_cpp"], env=env,
                         cwd=here, capture_output=True, text=True)
    assert out.returncode == 0 and "nothing built" in out.stdout, out.stderr
    # Anything but 0 or 1 is refused, not taken as "on".
    env["KILN_CPP_AUTOGRAD"] = "false"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True)
    assert out.returncode != 0, out.stdout
    assert "KILN_CPP_AUTOGRAD: 'false' is not 0 or 1" in out.stderr, out.stderr


def test_packed_tensors_match_the_struct():
    # The packed buffer holds, per tensor, exactly what kiln_c_tensor does.
    import ctypes
    from kiln import _lib
    a = torch.empty(2, 100, 3, 64)  # (B, N, H, D)
    b = torch.empty(2, 3, 100)
    keep, ptrs = _lib._packed([(a, True), (b, False)])
    I4 = ctypes.c_int64 * 4
    structs = (_lib._Tensor(a.data_ptr(), I4(2, 3, 100, 64), I4(19200, 64, 192, 1)),
               _lib._Tensor(b.data_ptr(), I4(2, 3, 100, 0), I4(300, 100, 1, 0)))
    for want, p in zip(structs, ptrs):
        assert ctypes.string_at(p, ctypes.sizeof(_lib._Tensor)) == bytes(want)


def test_forward_workspace_query_checks_the_shape():
    # kiln_c_attention_forward_workspace refuses a bad problem itself (it
    # builds no kernels, and without a GPU no launch config checks the
    # shape) and answers for grouped heads either way they may run.
    import ctypes
    from kiln import _lib
    lib = _lib.library()
    I4 = ctypes.c_int64 * 4
    opts = _lib._Options(_lib._BF16, 0, 0.0, None, 0, 0, 1)
    buf = ctypes.create_string_buffer(512)
    out = ctypes.c_int64(-1)

    def query(h, hk, nq, fn=lib.kiln_c_attention_forward_workspace):
        q = _lib._Tensor(16, I4(2, h, nq, 64), I4(h * nq * 64, nq * 64, 64, 1))
        k = _lib._Tensor(16, I4(2, hk, 300, 64), I4(hk * 300 * 64, 300 * 64, 64, 1))
        return fn(ctypes.byref(opts), ctypes.byref(q), ctypes.byref(k),
                  ctypes.byref(out), buf, len(buf))

    for fn in (lib.kiln_c_attention_forward_workspace,
               lib.kiln_c_attention_forward_key_lengths_workspace):
        assert query(4, 3, 1, fn) == _lib._BAD_INPUT
        assert "3" in buf.value.decode() and "4" in buf.value.decode(), buf.value
        assert query(8, 2, 1, fn) == 0 and out.value >= 0
        assert query(8, 8, 5, fn) == 0 and out.value >= 0


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="launches at fake addresses: for machines without a GPU")
def test_grouped_short_queries_bind_as_rows_of_one_head(monkeypatch, capfd):
    # The C API's forward and backward run non-causal grouped heads with few
    # queries as the K/V heads' problem of G·Nq rows (AttentionArgs.h):
    # KILN_LOG=launch says so, and every tensor binds to it (q, O, LSE, dO,
    # dQ as views of their rows), so that without a GPU the call fails only
    # at the launch. An O of other rows is refused by its shape.
    import ctypes
    from kiln import _lib
    lib = _lib.library()
    I4 = ctypes.c_int64 * 4

    def t4(b, h, n, d):
        return _lib._Tensor(1 << 20, I4(b, h, n, d), I4(h * n * d, n * d, d, 1))

    B, H, Hk, N, Nk, D = 2, 8, 2, 3, 300, 64
    q, o, do, dq = (t4(B, H, N, D) for _ in range(4))
    k, v, dk, dv = (t4(B, Hk, Nk, D) for _ in range(4))
    lse = _lib._Tensor(1 << 20, I4(B, H, N, 0), I4(H * N, N, 1, 0))
    opts = _lib._Options(_lib._BF16, 0, 0.0, None, 0, 0, 1)
    buf = ctypes.create_string_buffer(1024)
    p = ctypes.byref
    monkeypatch.setenv("KILN_LOG", "launch")
    said = (f"attention{{}} B={B} H={H} Hk={Hk} Nq={N} Nk={Nk} D={D} non-causal: "
            f"grouped heads packed, {Hk} heads of {H // Hk * N} rows")
    assert lib.kiln_c_attention_forward(p(opts), p(q), p(k), p(v), p(o), p(lse),
                                        None, buf, len(buf)) == _lib._FAILED
    assert b"no usable GPU" in buf.value, buf.value
    assert said.format("") in capfd.readouterr().err
    assert lib.kiln_c_attention_backward(
        p(opts), p(q), p(k), p(v), p(o), p(do), p(lse), ctypes.c_void_p(1 << 20),
        p(dq), p(dk), p(dv), buf, len(buf)) == _lib._FAILED
    assert b"no usable GPU" in buf.value, buf.value
    assert said.format(" backward") in capfd.readouterr().err
    longer = t4(B, H, N + 1, D)
    assert lib.kiln_c_attention_forward(p(opts), p(q), p(k), p(v), p(longer), p(lse),
                                        None, buf, len(buf)) == _lib._BAD_INPUT
    assert b"tensor O" in buf.value, buf.value


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="launches at fake addresses: for machines without a GPU")
@pytest.mark.parametrize("causal", [0, 1])
def test_key_lengths_bind_through_the_c_api(causal):
    # kiln_c_attention_forward_key_lengths binds k_lengths beside the other
    # tensors (without a GPU the call fails only at the launch), refuses
    # lengths of another count naming them, and one not given.
    import ctypes
    from kiln import _lib
    lib = _lib.library()
    I4 = ctypes.c_int64 * 4

    def t4(b, h, n, d):
        return _lib._Tensor(1 << 20, I4(b, h, n, d), I4(h * n * d, n * d, d, 1))

    B, H, Hk, N, Nk, D = 3, 8, 2, 5, 300, 128
    q, o = t4(B, H, N, D), t4(B, H, N, D)
    k, v = t4(B, Hk, Nk, D), t4(B, Hk, Nk, D)
    lse = _lib._Tensor(1 << 20, I4(B, H, N, 0), I4(H * N, N, 1, 0))
    opts = _lib._Options(_lib._BF16, causal, 0.0, None, 0, 0, 1)
    buf = ctypes.create_string_buffer(1024)
    p = ctypes.byref

    def call(lengths):
        return lib.kiln_c_attention_forward_key_lengths(
            p(opts), p(q), p(k), p(v), lengths, p(o), p(lse), None, buf, len(buf))

    ok = _lib._Tensor(1 << 20, I4(B, 0, 0, 0), I4(1, 0, 0, 0))
    assert call(p(ok)) == _lib._FAILED
    assert b"no usable GPU" in buf.value, buf.value
    other = _lib._Tensor(1 << 20, I4(B + 1, 0, 0, 0), I4(1, 0, 0, 0))
    assert call(p(other)) == _lib._BAD_INPUT
    assert b"tensor KLengths: dimension 0 is 4 but B = 3" in buf.value, buf.value
    assert call(None) == _lib._BAD_INPUT
    assert b"k_lengths must be given" in buf.value, buf.value


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="launches at host addresses: for machines without a GPU")
def test_python_forward_binds_key_lengths(monkeypatch):
    # _lib.forward hands k_lengths to the key-lengths entry in its place:
    # with host tensors for device 0, every tensor binds and the call fails
    # only at the launch; lengths of another count are refused by name.
    from kiln import _lib
    monkeypatch.setattr(_lib, "_options", lambda q, causal, scale, stream, checked:
                        _lib._Options(_lib._BF16, int(causal), scale, stream,
                                      0, 0, 1))
    B, H, N, D = 2, 3, 5, 64
    q, o = (torch.empty(B, H, N, D, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.empty(B, H, 40, D, dtype=torch.bfloat16) for _ in range(2))
    lse = torch.empty(B, H, N)
    for causal in (False, True):
        with pytest.raises(RuntimeError, match="no usable GPU"):
            _lib.forward(q, k, v, o, lse, None, causal, 0.125, False, None,
                         k_lengths=torch.empty(B, dtype=torch.int32))
    with pytest.raises(ValueError, match="tensor KLengths: dimension 0 is 3"):
        _lib.forward(q, k, v, o, lse, None, False, 0.125, False, None,
                     k_lengths=torch.empty(B + 1, dtype=torch.int32))


def test_bench_interleaves_the_peers_samples(monkeypatch):
    """kiln.bench's default: a sample of each peer in turn, the order
    reversed every round, each peer's figure the median of its own samples."""
    import kiln.bench as kb
    taken = []
    times = {"a": iter([5.0, 1.0, 3.0, 2.0]), "b": iter([9.0, 7.0, 8.0, 6.0])}
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: next(times[fn()]))
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    fns = {n: (lambda n=n: taken.append(n) or n) for n in "ab"}
    ms = kb.bench_interleaved_ms(fns, warm=0, reps=4)
    assert "".join(taken) == "abbaabba"
    assert ms == {"a": 3.0, "b": 8.0}


def test_bench_order_names_each_peer_once():
    import kiln.bench as kb
    with pytest.raises(SystemExit) as e:
        kb.main(["--order", "kiln,sdpa_cudnn"])
    assert e.value.code == 2


def test_bench_names_a_failing_peer_and_times_the_rest(monkeypatch, capsys):
    """A peer that raises while its call is prepared gets NaN and a line
    naming it; the others are still timed in turn, each with its FLOPs."""
    import math
    import kiln.bench as kb
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: fn())
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(kb.torch.cuda, "empty_cache", lambda: None)

    def prepare(fn, q, k, v):
        if fn is None:
            raise RuntimeError("no kernel for this shape")
        return fn
    work = {"a": (lambda: 2.0, 0, 0, 0, 4e9), "b": (None, 0, 0, 0, 4e9),
            "c": (lambda: 0.5, 0, 0, 0, 1e9)}
    tf = kb.tflops_of(work, prepare, sequential=False, where="N=7")
    assert tf["a"] == 2.0 and tf["c"] == 2.0 and math.isnan(tf["b"])
    assert "# b N=7: RuntimeError: no kernel for this shape" in capsys.readouterr().out
    tf = kb.tflops_of(work, prepare, sequential=True)
    assert tf["a"] == 2.0 and math.isnan(tf["b"])


def test_bench_sustained_runs_each_peer_alone_before_its_samples(monkeypatch):
    """--sustained: a peer's calls for the given seconds, then its own
    samples, before the next peer's first call; not with --sequential."""
    import itertools
    import kiln.bench as kb
    calls = []
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: fn())
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(kb.torch.cuda, "empty_cache", lambda: None)
    clock = itertools.count(0.0, 0.2)
    monkeypatch.setattr(kb.time, "perf_counter", lambda: next(clock))
    work = {n: (lambda n=n: calls.append(n) or 1.0, 0, 0, 0, 1e9) for n in "ab"}
    tf = kb.tflops_of(work, lambda fn, q, k, v: fn, sequential=False, sustained=0.5)
    assert tf == {"a": 1.0, "b": 1.0}
    # 20 calls alone (two rounds of 10 before the clock passes 0.5 s), then
    # 30 samples, one peer after the other.
    assert "".join(calls) == "a" * 50 + "b" * 50
    with pytest.raises(SystemExit) as e:
        kb.main(["--sequential", "--sustained", "2"])
    assert e.value.code == 2


def test_bench_nearest_multiple_of_128():
    import kiln.bench as kb
    assert [kb.nearest_multiple(n) for n in (1, 1000, 1023, 2049, 3001, 4097, 8191)] == \
        [128, 1024, 1024, 2048, 2944, 4096, 8192]


def test_bench_pairs_rows_and_their_flops():
    """--pairs: NqxNk[xB] rows; causal FLOPs count the pairs a query attends
    to, top-left aligned (SDPA's is_causal); a bad item is a usage error."""
    import kiln.bench as kb
    assert kb.parse_pairs("4096x512,1x4096x64") == [(4096, 512, None), (1, 4096, 64)]
    assert kb.parse_pairs("") == []
    for bad in ("4096", "4096x0", "ax5", "1x2x3x4"):
        with pytest.raises(ValueError, match="--pairs"):
            kb.parse_pairs(bad)
    assert kb.attended_pairs(300, 16384, False) == 300 * 16384
    # Fewer queries than keys: query i sees keys 0..i.
    assert kb.attended_pairs(3, 10, True) == 1 + 2 + 3
    # More queries than keys: the rows past Nk see every key.
    assert kb.attended_pairs(5, 3, True) == 1 + 2 + 3 + 3 + 3
    assert kb.attended_pairs(4, 4, True) == sum(min(i + 1, 4) for i in range(4))
    with pytest.raises(SystemExit) as e:
        kb.main(["--pairs", "4096x"])
    assert e.value.code == 2


def test_keys_not_16_byte_aligned_are_copied(monkeypatch, capfd):
    # K or V whose base or a stride is not a multiple of 16 bytes would take
    # the compute warps' own copies (several times slower on an H200): the
    # op copies them to aligned memory first, differentiably, and
    # KILN_LOG=launch says so once per argument and reason.
    from kiln import ops
    aligned = torch.randn(2, 3, 10, 64).bfloat16()
    buf = torch.randn(1 + aligned.numel()).bfloat16()
    odd = buf[1:].view(aligned.shape)
    padded = torch.randn(2, 3, 10, 67).bfloat16()[..., :64]
    assert ops._misaligned(aligned) == ""
    assert ops._misaligned(odd) == "a base address 2 bytes past 16"
    assert "strides (2010, 670, 67, 1)" in ops._misaligned(padded)
    assert ops._aligned_copy("k", aligned) is aligned
    monkeypatch.setenv("KILN_LOG", "launch")
    ops._logged_copies.clear()
    leaf = padded.detach().requires_grad_()
    for _ in range(2):
        copy = ops._aligned_copy("v", leaf)
    assert copy.is_contiguous() and torch.equal(copy, padded)
    assert ops._misaligned(copy) == ""
    (grad,) = torch.autograd.grad(copy.float().sum(), leaf)
    assert torch.equal(grad, torch.ones_like(padded))
    err = capfd.readouterr().err
    assert err.count("kiln.attention: v is not 16-byte aligned") == 1, err


def test_key_lengths_fake_shapes_and_trace(recorded_graphs):
    # Keys per batch: the op's fake gives O and LSE their shapes; compiled,
    # it stays one op in the graph.
    q, k, v = qkv(B=2, H=8, Nq=1, Nk=300)
    lengths = torch.empty(2, dtype=torch.int32, device=META)
    o, lse = kiln.attention(q, k, v, key_lengths=lengths, return_lse=True)
    assert o.shape == q.shape and lse.shape == (2, 8, 1)
    o = kiln.attention(*qkv(B=2, Nq=7, Nk=30), key_lengths=lengths, causal=True)
    assert o.shape == (2, 3, 7, 64)
    graphs, backend = recorded_graphs
    f = torch.compile(lambda q, k, v, n: kiln.attention(q, k, v, key_lengths=n,
                                                        layout="bshd"),
                      backend=backend, fullgraph=True)
    assert f(*qkv(layout="bshd"), lengths).shape == (2, 100, 3, 64)
    assert "torch.ops.kiln.attention_forward_key_lengths" in graphs[0].code


def test_key_lengths_bad_input_is_refused():
    q, k, v = qkv(B=2)
    ok = torch.empty(2, dtype=torch.int32, device=META)
    for kwargs, exc, match in [
        (dict(key_lengths=[3, 4]), TypeError,
         "key_lengths must be a torch.Tensor, got list"),
        (dict(key_lengths=ok.long()), TypeError,
         "key_lengths has dtype torch.int64; it must be torch.int32"),
        (dict(key_lengths=torch.empty(3, dtype=torch.int32, device=META)),
         ValueError, r"one length per batch \(2\), got shape \(3,\)"),
        (dict(key_lengths=torch.empty(2, 1, dtype=torch.int32, device=META)),
         ValueError, "key_lengths must be 1-D"),
        (dict(key_lengths=torch.empty(2, dtype=torch.int32)), ValueError,
         "key_lengths is on cpu, q on meta"),
        (dict(key_lengths=ok, layout="sbhd"), ValueError,
         "layout must be 'bhsd' or 'bshd'"),
    ]:
        with pytest.raises(exc, match=match):
            kiln.attention(q, k, v, **kwargs)
    q, k, v = qkv(B=2, grad=True)
    with pytest.raises(ValueError, match="key_lengths has no backward"):
        kiln.attention(q, k, v, key_lengths=ok)
    with torch.no_grad():
        assert kiln.attention(q, k, v, key_lengths=ok).shape == q.shape
