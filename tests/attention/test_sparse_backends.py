"""Sparse backends (blocked, flex) against the eager oracle with each pattern's dense mask, forward and backward.

Lengths are not multiples of the block size, batch > 1 with key padding, grouped-query heads. Biases: every
entry of BIASES plus a small learned bias defined here. Flex runs forward only on CPU (no CPU backward);
its full grid is compiled and slow, the default run checks its wiring uncompiled and one compiled case.
"""

import logging

import pytest
import torch
from torch import nn

from attnzoo.attention import BACKENDS, Attention, GlobalTokens, SlidingWindow, attend, choose_backend
from attnzoo.attention.backends import Request
from attnzoo.attention.biases import BIASES, Bias, T5RelativeBias
from attnzoo.attention.flex import Flex
from attnzoo.attention.specs import build
from tests.helpers.patterns import PATTERN_CASES

H, HKV, D = 4, 2, 16


class LearnedOffsetBias(Bias):
    """A learned per-head bias on the clipped offset q - k (stands in until relative biases land)."""

    learned = True

    def __init__(self, *, num_heads: int) -> None:
        super().__init__(num_heads)
        self.table = nn.Parameter(torch.randn(num_heads, 65) * 0.5)

    def values(self, q_idx, kv_idx):
        return self.table[:, (q_idx - kv_idx).clamp(-32, 32) + 32]


BIAS_KINDS = ["none", "learned_offset", *BIASES]


def make_bias(kind: str, length: int):
    if kind == "none":
        return None
    if kind == "learned_offset":
        return LearnedOffsetBias(num_heads=H)
    grid = next((a, (length - 1) // a) for a in range(int((length - 1) ** 0.5), 0, -1) if (length - 1) % a == 0)
    context = dict(num_heads=H, head_dim=D, dim=H * D, grid_size=grid, num_prefix_tokens=1)
    return build(kind, BIASES, f"bias {kind}", **context)


def inputs(length: int, batch: int = 2, grad: bool = True):
    q = torch.randn(batch, H, length, D, requires_grad=grad)
    k = torch.randn(batch, HKV, length, D, requires_grad=grad)
    v = torch.randn(batch, HKV, length, D, requires_grad=grad)
    pad = torch.zeros(batch, length, dtype=torch.bool)
    pad[1, length - length // 3 :] = True
    return q, k, v, pad


def check_against_eager(fn, pattern, bias, length, backward):
    q, k, v, pad = inputs(length, grad=backward)
    ref, _, _ = attend(q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, backend="eager")
    leaves = [q, k, v] + ([] if bias is None else list(bias.parameters()))
    grad_out = torch.randn_like(ref)
    if backward:
        want = torch.autograd.grad(ref, leaves, grad_out)
    with torch.set_grad_enabled(backward):
        out = fn(q, k, v, pattern, bias, pad)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    if backward:
        got = torch.autograd.grad(out, leaves, grad_out)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.cpu(), b, atol=5e-5, rtol=1e-3)  # a bias moved to a GPU has its grad there


def via(backend: str):
    def fn(q, k, v, pattern, bias, pad):
        out, _, used = attend(q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, backend=backend)
        learned = bias is not None and any(p.requires_grad for p in bias.parameters()) and torch.is_grad_enabled()
        band = bias is None and type(pattern) is SlidingWindow  # a plain window, right-padded: keys read in place
        path = "[bias_grad]" if learned else "[band]" if band else ""
        assert used == (f"{backend}{path}" if backend == "blocked" else backend)
        return out

    return fn


def flex_uncompiled(q, k, v, pattern, bias, pad):
    out, _ = Flex(compile=False)(
        q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, dropout_p=0.0, scale=D**-0.5, return_weights=False
    )
    return out


def grid(slow_with_bias: bool):
    """(pattern, bias, length) cases; with `slow_with_bias` the biased cases at the longer length run with -m slow."""
    return [
        pytest.param(
            name, bias, length, marks=[pytest.mark.slow] if slow_with_bias and bias != "none" and length > 1000 else []
        )
        for name in PATTERN_CASES
        for bias in BIAS_KINDS
        for length in (1000, 1537)
    ]


@pytest.mark.parametrize("name, bias_kind, length", grid(slow_with_bias=True))
def test_blocked_equals_eager_forward_and_backward(name, bias_kind, length):
    check_against_eager(via("blocked"), PATTERN_CASES[name], make_bias(bias_kind, length), length, backward=True)


# mask_mod and score_mod are wired independently: every pattern without a bias, every bias with one pattern
# (the full cross runs compiled under -m slow)
FLEX_WIRING = [(name, "none") for name in PATTERN_CASES] + [("window_or_global", b) for b in BIAS_KINDS[1:]]


@pytest.mark.parametrize("name, bias_kind", FLEX_WIRING)
def test_flex_wiring_equals_eager_forward(name, bias_kind):
    # torch's unfused flex reference: checks our BlockMask, mask_mod, score_mod and padding, not the kernel
    check_against_eager(flex_uncompiled, PATTERN_CASES[name], make_bias(bias_kind, 333), 333, backward=False)


def test_flex_compiled_equals_eager_forward():
    pattern = SlidingWindow(window=100) | GlobalTokens(tokens=[0])
    check_against_eager(via("flex"), pattern, LearnedOffsetBias(num_heads=H), 1000, backward=False)


@pytest.mark.slow
@pytest.mark.parametrize("name, bias_kind, length", grid(slow_with_bias=False))
def test_flex_compiled_grid_equals_eager_forward(name, bias_kind, length):
    check_against_eager(via("flex"), PATTERN_CASES[name], make_bias(bias_kind, length), length, backward=False)


def on_cuda(backend: str, dtype: torch.dtype = torch.float32):
    """attend() on the CUDA device in `dtype` through `backend`."""

    def fn(q, k, v, pattern, bias, pad):
        dev = torch.device("cuda")
        b = None if bias is None else bias.to(dev)
        q, k, v = (t.to(dev, dtype) for t in (q, k, v))
        out, _, used = attend(q, k, v, pattern=pattern, bias=b, key_padding_mask=pad.to(dev), backend=backend)
        assert used.split("[")[0] == backend
        return out.float().cpu()

    return fn


@pytest.mark.cuda
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("name", list(PATTERN_CASES))
@pytest.mark.parametrize("backend", ["flex", "sdpa", "blocked"])
def test_cuda_backends_equal_eager_forward_and_backward(backend, name, bias_kind):
    # fp32 on the GPU against the CPU's eager oracle
    check_against_eager(on_cuda(backend), PATTERN_CASES[name], make_bias(bias_kind, 1000), 1000, backward=True)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.cuda
@pytest.mark.parametrize("bias_kind", ["none", "alibi", "t5"])
@pytest.mark.parametrize("name", [None, "causal", "sliding_window", "bigbird"])
@pytest.mark.parametrize("backend", ["flex", "sdpa", "blocked", "eager"])
def test_cuda_bf16_backends_are_close_to_fp32_eager(backend, name, bias_kind):
    # the dtype training runs in on a GPU (bf16 kernels: flash, efficient, flex's Triton): close to fp32 eager on the
    # same bf16-rounded inputs, forward and backward, and finite where whole rows are padding. Rows of padding
    # queries are left out, as a model's loss leaves them out: their nearest keys can be hundreds of positions away,
    # where a bf16 ALiBi bias (as the fused kernels take it, in the inputs' dtype) is rounded by up to 0.5
    pattern = None if name is None else PATTERN_CASES[name]
    q, k, v, pad = inputs(777)
    pad[0, :] = True  # a sequence of padding only: zeros, not NaN
    q, k, v = (t.detach().bfloat16().float().requires_grad_() for t in (q, k, v))
    bias = make_bias(bias_kind, 777)
    ref, _, _ = attend(q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, backend="eager")
    real = ~pad[:, None, :, None]
    grad_out = torch.randn_like(ref) * real
    leaves = [q, k, v] + ([] if bias is None else [p for p in bias.parameters() if p.requires_grad])
    want = torch.autograd.grad(ref, leaves, grad_out)
    out = on_cuda(backend, torch.bfloat16)(q, k, v, pattern, bias, pad)
    got = torch.autograd.grad(out, leaves, grad_out)
    assert torch.isfinite(out).all() and (out[0] == 0).all()
    assert relative_error(out * real, ref * real) < 1e-2
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all() and relative_error(a.cpu(), b) < 3e-2


@pytest.mark.parametrize("backend", ["blocked", "flex"])
def test_fully_masked_rows_are_zero_not_nan(backend):
    pattern = SlidingWindow(window=3)
    q, k, v, _ = inputs(300, grad=backend == "blocked")
    pad = torch.zeros(2, 300, dtype=torch.bool)
    pad[1] = True  # every key of the second sequence
    pad[0, 100:200] = True  # queries 103..196 of the first see only padding through their window
    out, _, _ = attend(q, k, v, pattern=pattern, key_padding_mask=pad, backend=backend)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0, :, 104:196] == 0).all() and (out[0, :, :100].abs().sum(-1) > 0).all()
    if backend == "blocked":
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() and (t.grad[1] == 0).all() for t in (q, k, v))


@pytest.mark.parametrize("learned", [False, True])
def test_blocked_rows_a_bias_masks_whole_are_zero_as_in_eager(learned):
    # a bool attn_mask reaches blocked as -inf in the bias: a row it emptied gave NaN there (its alive rows were
    # those of the pattern and the padding only), zeros on eager and sdpa
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16, requires_grad=True)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[2], mask[4, :3] = False, False
    outs = {}
    for backend in ("eager", "blocked"):
        torch.manual_seed(1)
        layer = Attention(16, 2, bias=T5RelativeBias(num_heads=2), backend=backend)
        with torch.set_grad_enabled(learned):
            out = layer(x, attn_mask=mask)
        grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()]) if learned else ()
        outs[backend] = (out, grads)
    assert layer.backend_used == ("blocked[bias_grad]" if learned else "blocked")
    torch.testing.assert_close(outs["blocked"][0], outs["eager"][0], atol=1e-5, rtol=1e-5)
    for mine, ref in zip(outs["blocked"][1], outs["eager"][1], strict=True):
        torch.testing.assert_close(mine, ref, atol=1e-5, rtol=1e-5)


def test_blocked_dense_tensor_bias_and_no_pattern():
    q, k, v, pad = inputs(300)
    bias = torch.randn(2, 1, 300, 300)  # per batch, shared by heads
    check = lambda pattern: check_against_eager(  # noqa: E731
        lambda q, k, v, p, b, pad: attend(q, k, v, pattern=p, bias=bias, key_padding_mask=pad, backend="blocked")[0],
        pattern,
        None,
        300,
        backward=True,
    )
    with pytest.raises(AssertionError):  # the lambda adds a bias the oracle lacks: the check must notice
        check(None)
    out, _, _ = attend(q, k, v, pattern=SlidingWindow(window=20), bias=bias, key_padding_mask=pad, backend="blocked")
    ref, _, _ = attend(q, k, v, pattern=SlidingWindow(window=20), bias=bias, key_padding_mask=pad, backend="eager")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    out, _, _ = attend(q, k, v, key_padding_mask=pad, backend="blocked")
    ref, _, _ = attend(q, k, v, key_padding_mask=pad, backend="eager")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_blocked_names_its_bias_grad_path(monkeypatch):
    from attnzoo.attention import blocked

    ran = []
    real = blocked._explicit
    monkeypatch.setattr(blocked, "_explicit", lambda *a: ran.append(1) or real(*a))
    q, k, v, pad = inputs(300)
    kw = dict(pattern=SlidingWindow(window=20), bias=LearnedOffsetBias(num_heads=H), key_padding_mask=pad)
    assert attend(q, k, v, backend="blocked", **kw)[2] == "blocked[bias_grad]" and ran  # trains the bias
    ran.clear()
    with torch.no_grad():
        assert attend(q, k, v, backend="blocked", **kw)[2] == "blocked" and not ran  # SDPA per group


def test_blocked_trains_attention_layer_with_dropout():
    attn = Attention(32, 4, pattern=SlidingWindow(window=16), attn_drop=0.1, backend="auto").train()
    x = torch.randn(2, 1200, 32, requires_grad=True)
    attn(x).sum().backward()
    assert attn.backend_used == "blocked" and torch.isfinite(x.grad).all()


def req(device="cpu", grad=True, pattern=None, weights=False, n=4096, dropout=0.0, head_dim=0):
    return Request(device, grad, weights, pattern, None, False, n, n, dropout, head_dim=head_dim)


WINDOW = SlidingWindow(window=256)


@pytest.mark.parametrize(
    "request_, want",
    [
        (req(pattern=WINDOW), "blocked"),  # CPU training
        (req(pattern=WINDOW, grad=False), "blocked"),  # CPU inference: no per-shape compile
        (req(pattern=WINDOW, weights=True), "eager"),
        (req(pattern=None), "sdpa"),
        (req(pattern=SlidingWindow(window=3000)), "sdpa"),  # too dense to gain
        (req(pattern=WINDOW, n=100), "sdpa"),  # one block: nothing to skip
        (req("cuda", pattern=WINDOW), "flex"),
        (req("cuda", pattern=WINDOW, grad=False), "flex"),
        (req("cuda", pattern=WINDOW, dropout=0.1), "blocked"),
        (req("cuda", pattern=WINDOW, head_dim=16), "flex"),
        (req("cuda", pattern=WINDOW, head_dim=8), "blocked"),  # flex's CUDA kernel needs a head dim >= 16
    ],
)
def test_auto_choice(request_, want):
    assert choose_backend(request_) == want


def test_auto_logs_sparse_choice_once(caplog):
    pattern = SlidingWindow(window=64)
    q, k, v, _ = inputs(1000)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        for _ in range(3):
            assert attend(q, k, v, pattern=pattern)[2] == "blocked[band]"  # a plain window on CPU
    assert len([r for r in caplog.records if "auto -> blocked" in r.getMessage()]) <= 1


def test_explicit_flex_training_on_cpu_names_blocked():
    q, k, v, _ = inputs(300)
    with pytest.raises(ValueError, match="'flex' cannot run.*no backward on CPU.*backend='blocked'"):
        attend(q, k, v, pattern=WINDOW, backend="flex")
    assert BACKENDS["flex"].supports(req(grad=False, pattern=WINDOW)) is None


def test_blocked_rows_emptied_by_the_pattern_alone_are_zero():
    pattern = SlidingWindow(window=2) & GlobalTokens(tokens=[0])  # only queries 0..2 read anything
    q, k, v, _ = inputs(700)
    out, _, _ = attend(q, k, v, pattern=pattern, backend="blocked")
    ref, _, _ = attend(q, k, v, pattern=pattern, backend="eager")
    torch.testing.assert_close(out, ref)
    assert (out[:, :, 3:] == 0).all() and (out[:, :, :3] != 0).any()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[:, :, 3:] == 0).all()


def test_flex_makes_a_patterns_lookup_tensors_before_compiling():
    # global tokens' flags made inside the compiled kernel cannot be lowered on CUDA: building the BlockMask on a
    # device makes them there first
    pattern = SlidingWindow(window=30) | GlobalTokens(tokens=[3, 700])
    flags = pattern.parts[1]._set._flags
    assert not flags
    Flex().block_mask(pattern, 1000, 1000, torch.device("cpu"))
    assert list(flags) == [torch.device("cpu")] and flags[torch.device("cpu")].sum() == 2


def test_flex_retries_with_smaller_tiles_when_the_default_ones_do_not_fit(monkeypatch, caplog):
    from attnzoo.attention import flex

    def backend_raising(error):
        backend, calls = Flex(compile=False), []

        def fake(q, k, v, kernel_options=None, **kw):
            calls.append(kernel_options)
            if kernel_options is None:
                raise error
            return q

        monkeypatch.setattr(backend, "_flex", lambda device_type: fake)
        return backend, calls

    q = torch.randn(1, H, 64, D)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))  # the retry is for CUDA's Triton kernels
    too_big = RuntimeError("No valid triton configs. OutOfMemoryError: out of resource: Required: 245760")
    backend, calls = backend_raising(too_big)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        backend.run(q, q, q, pattern=None, bias=None, key_padding_mask=None, scale=None)
        backend.run(q, q, q, pattern=None, bias=None, key_padding_mask=None, scale=None)  # remembered for the shape
    assert calls == [None, flex.SMALL_TILES, flex.SMALL_TILES] and backend.small_tiles
    assert "smaller ones" in caplog.text and "245760" in caplog.text
    backend, calls = backend_raising(ZeroDivisionError())
    with pytest.raises(ZeroDivisionError):  # any other error is the caller's to see, without a retry
        backend.run(q, q, q, pattern=None, bias=None, key_padding_mask=None, scale=None)
    assert calls == [None] and not backend.small_tiles
    monkeypatch.undo()
    backend, calls = backend_raising(too_big)
    with pytest.raises(RuntimeError, match="out of resource"):  # on CPU no Triton tiles: no retry
        backend.run(q, q, q, pattern=None, bias=None, key_padding_mask=None, scale=None)
    assert calls == [None]


@pytest.mark.cuda
def test_cuda_flex_trains_a_learned_bias_at_head_dim_64_in_bf16():
    # the default Triton tiles for a learned bias's gradient did not fit an H100's shared memory at head dim 64
    torch.manual_seed(0)
    bias, window = T5RelativeBias(num_heads=8).cuda(), SlidingWindow(window=256)
    q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda").bfloat16().requires_grad_() for _ in range(3))
    out, _, used = attend(q, k, v, pattern=window, bias=bias, backend="flex")
    assert used == "flex"
    grad_out = torch.randn_like(out)
    leaves = [q, k, v, bias.table]
    got = torch.autograd.grad(out, leaves, grad_out)
    ref, _, _ = attend(*(t.float() for t in (q, k, v)), pattern=window, bias=bias, backend="eager")
    want = torch.autograd.grad(ref, leaves, grad_out.float())
    assert relative_error(out, ref) < 1e-2
    for a, b in zip(got, want, strict=True):
        assert relative_error(a, b) < 3e-2


@pytest.mark.parametrize("backend", ["blocked", "auto"])
@pytest.mark.parametrize("case", ["all padding", "global tokens past the end", "learned bias", "scalar bias"])
def test_blocked_where_no_query_reads_any_key_gives_zeros_that_autograd_reaches(backend, case):
    """Eager's zeros are a function of q, k, v (zero gradients); blocked's must be too (`auto` picks it here),
    else autograd.grad raises and DDP finds the layer's parameters unused."""
    q, k, v = (torch.randn(1, 2, 70, 8, requires_grad=True) for _ in range(3))
    from attnzoo.attention.patterns import KeyPadding

    everything = torch.ones(1, 70, dtype=torch.bool)
    pattern, padding, bias = {
        "all padding": (SlidingWindow(window=3) & KeyPadding(everything), None, None),
        "global tokens past the end": (GlobalTokens(tokens=[100]), None, None),
        "learned bias": (GlobalTokens(tokens=[100]), None, torch.randn(2, 70, 70, requires_grad=True)),
        "scalar bias": (GlobalTokens(tokens=[100]), None, torch.tensor(0.5, requires_grad=True)),
    }[case]
    out, _, used = attend(q, k, v, pattern=pattern, key_padding_mask=padding, bias=bias, backend=backend)
    ref = attend(q, k, v, pattern=pattern, key_padding_mask=padding, bias=bias, backend="eager")[0]
    assert used.startswith("blocked")
    assert (out == 0).all() and (ref == 0).all()
    inputs_ = (q, k, v) if bias is None else (q, k, v, bias)
    grads, wants = torch.autograd.grad(out.sum(), inputs_), torch.autograd.grad(ref.sum(), inputs_)
    for grad, want in zip(grads, wants, strict=True):
        assert torch.equal(grad, want) and not grad.any()
