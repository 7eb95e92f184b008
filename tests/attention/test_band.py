"""`blocked[band]` (attention/band.py): a plain sliding window on CPU, keys read in place, against the eager oracle."""

from __future__ import annotations

import pytest
import torch

from attnzoo.attention import DilatedSlidingWindow, GlobalTokens, SlidingWindow, attend
from attnzoo.attention.band import Band, band_attention
from attnzoo.attention.blocked import Blocked
from attnzoo.attention.patterns import right_padded

D = 16

# (length, window, causal, batch, heads, kv heads, block): lengths that are and are not whole blocks, windows under,
# at and over a block and over the length, MHA and GQA; small blocks give many interior blocks cheaply
CASES = [
    (1000, 100, False, 2, 4, 4, 128),
    (1000, 100, True, 2, 4, 2, 64),
    (1537, 77, False, 1, 2, 1, 128),
    (300, 5, False, 2, 2, 2, 64),
    (64, 200, False, 2, 2, 2, 64),
    (513, 128, True, 1, 2, 2, 128),
    (129, 0, False, 1, 1, 1, 64),
    (7, 3, True, 2, 2, 2, 7),
    (200, 16, False, 2, 2, 2, 16),
    (203, 16, True, 2, 4, 2, 16),
    (190, 23, False, 3, 2, 2, 8),
]


def qkv(batch, heads, kv_heads, length, dtype=torch.float32):
    g = torch.Generator().manual_seed(length)
    q = torch.randn(batch, heads, length, D, generator=g, dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, length, D, generator=g, dtype=dtype) for _ in range(2))
    return [x.requires_grad_() for x in (q, k, v)]


def run(backend, q, k, v, pattern):
    if isinstance(backend, Blocked):
        out, _ = backend(
            q, k, v, pattern=pattern, bias=None, key_padding_mask=None, dropout_p=0.0, scale=D**-0.5,
            return_weights=False,
        )  # fmt: skip
        return out
    out, _, used = attend(q, k, v, pattern=pattern, backend=backend)
    assert used == {"blocked": "blocked[band]"}.get(backend, backend)
    return out


@pytest.mark.parametrize("length, window, causal, batch, heads, kv_heads, block", CASES)
def test_band_equals_eager_forward_and_backward(length, window, causal, batch, heads, kv_heads, block):
    check(SlidingWindow(window=window, causal=causal), block, *qkv(batch, heads, kv_heads, length))


# (length, window, causal, real keys of each row, block): right padding, down to rows with one real key and none,
# and rows whose last blocks read no real key at all
PADDED = [
    (1000, 100, False, [1000, 700, 37, 0], 64),
    (1000, 100, True, [999, 640, 1, 0], 128),
    (203, 16, True, [203, 150, 20], 16),
    (203, 16, False, [100, 203, 3], 16),
    (190, 23, False, [190, 189, 60], 8),
]


@pytest.mark.parametrize("length, window, causal, keys, block", PADDED)
def test_band_with_right_padding_equals_eager_forward_and_backward(length, window, causal, keys, block):
    pad = torch.arange(length)[None, :] >= torch.tensor(keys)[:, None]
    check(SlidingWindow(window=window, causal=causal), block, *qkv(len(keys), 4, 2, length), pad=pad)


def check(pattern, block, q, k, v, pad=None):
    ref, _, _ = attend(q, k, v, pattern=pattern, key_padding_mask=pad, backend="eager")
    keys = None if pad is None else right_padded(pad)
    out = band_attention(q, k, v, pattern=pattern, block=block, scale=D**-0.5, keys=keys)
    grad = torch.randn_like(ref)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    wants = torch.autograd.grad(ref, (q, k, v), grad)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), grad), wants, strict=True):
        torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-3)


def test_right_padded_finds_the_real_keys_only_when_padding_is_at_the_end():
    pad = torch.tensor([[False, False, True], [False, False, False], [True, True, True]])
    assert right_padded(pad) == [2, 3, 0]
    assert right_padded(pad.flip(1)) is None and right_padded(torch.tensor([[False, True, False]])) is None


def test_band_covers_every_query_block_once_and_interior_blocks_read_only_real_keys():
    for length, window, causal, block in [
        (1000, 100, False, 64),
        (203, 16, True, 16),
        (7, 3, True, 7),
        (64, 200, 0, 64),
    ]:
        band = Band(window, bool(causal), length, block)
        runs = band.runs()
        assert [r[0] for r in runs[1:]] == [r[1] for r in runs[:-1]] and runs[0][0] == 0
        assert runs[-1][1] == band.q_blocks
        for first, stop, interior in runs:
            if interior:  # key blocks first - r .. stop - 1 - r + m - 1 all lie inside the sequence
                assert first - band.before >= 0 and (stop - band.before + band.width - 1) * block <= length


def test_band_in_bfloat16_is_as_close_to_eager_as_the_gathered_blocks():
    q, k, v = qkv(2, 2, 2, 2000, torch.bfloat16)
    pattern = SlidingWindow(window=90)
    ref = run("eager", q, k, v, pattern).float()
    band = run("blocked", q, k, v, pattern).float()
    gathered = run(Blocked(band=False), q, k, v, pattern).float()
    assert (band - ref).abs().max() <= 2 * (gathered - ref).abs().max() + 1e-2


def test_band_without_grad_and_with_a_broadcast_gradient_equals_the_gathered_blocks():
    q, k, v = qkv(2, 4, 2, 2000, torch.float32)
    pattern = SlidingWindow(window=60, causal=True)
    with torch.no_grad():
        assert torch.equal(run("blocked", q, k, v, pattern), run("blocked", q, k, v, pattern))
        torch.testing.assert_close(run("blocked", q, k, v, pattern), run(Blocked(band=False), q, k, v, pattern))
    run("blocked", q, k, v, pattern).sum().backward()  # an expanded (stride-0) output gradient
    band = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    run(Blocked(band=False), q, k, v, pattern).sum().backward()
    for got, want in zip(band, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "pattern, kw, length",
    [
        (SlidingWindow(window=30), {"key_padding_mask": torch.arange(2000) < torch.tensor([[0], [5]])}, 2000),  # left
        (SlidingWindow(window=30), {"bias": torch.zeros(1, 2, 2000, 2000)}, 2000),
        (SlidingWindow(window=30), {"dropout_p": 0.1}, 2000),
        (DilatedSlidingWindow(window=10, dilation=2), {}, 2000),
        (SlidingWindow(window=30) | GlobalTokens(tokens=[0]), {}, 2000),
        (SlidingWindow(window=30), {}, 300),  # too short to pay: few blocks, little work per batch element and head
        (SlidingWindow(window=300), {}, 1000),
    ],
)
def test_calls_the_band_does_not_run_take_the_gathered_blocks(pattern, kw, length):
    q, k, v = qkv(2, 2, 2, length)
    assert attend(q, k, v, pattern=pattern, backend="blocked", **kw)[2] == "blocked"


def test_queries_and_keys_of_different_lengths_take_the_gathered_blocks():
    q, k, v = qkv(1, 2, 2, 3000)
    assert attend(q[:, :, :2000], k, v, pattern=SlidingWindow(window=30), backend="blocked")[2] == "blocked"


def test_a_long_plain_window_reports_the_band_path_and_the_switch_turns_it_off(monkeypatch):
    from attnzoo.attention import blocked

    q, k, v = qkv(1, 2, 2, 2000)
    pattern = SlidingWindow(window=100)
    assert attend(q, k, v, pattern=pattern, backend="blocked")[2] == "blocked[band]"
    assert attend(q, k, v, pattern=pattern)[2] == "blocked[band]"  # auto
    right = torch.arange(2000)[None, :] >= 1500
    assert attend(q, k, v, pattern=pattern, key_padding_mask=right, backend="blocked")[2] == "blocked[band]"
    ran = []
    monkeypatch.setattr(blocked, "band_attention", lambda *a, **kw: ran.append(1) or band_attention(*a, **kw))
    run(Blocked(band=False), q, k, v, pattern)
    assert not ran
    run(Blocked(), q, k, v, pattern)
    assert ran


def test_band_backward_twice_with_retain_graph_and_through_activation_checkpointing():
    from torch.utils.checkpoint import checkpoint

    q, k, v = qkv(2, 2, 2, 2000)
    pattern, pad = SlidingWindow(window=100), torch.arange(2000)[None, :] >= torch.tensor([[2000], [1500]])

    def attn(q, k, v):
        out, _, used = attend(q, k, v, pattern=pattern, key_padding_mask=pad, backend="blocked")
        assert used == "blocked[band]"
        return out

    loss = attn(q, k, v).square().sum()
    once = torch.autograd.grad(loss, (q, k, v), retain_graph=True)
    again = torch.autograd.grad(loss, (q, k, v))
    for a, b in zip(once, again, strict=True):
        assert torch.equal(a, b)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        attn(q, k, v)
    assert len(packed) >= 4  # what the backward needs goes through the hooks (checkpointing, offloading)
    checkpointed = checkpoint(attn, q, k, v, use_reentrant=False).square().sum()
    for a, b in zip(torch.autograd.grad(checkpointed, (q, k, v)), once, strict=True):
        assert torch.equal(a, b)


def test_band_output_takes_in_place_ops_and_follows_cpu_autocast():
    q, k, v = qkv(1, 2, 2, 2000)
    out, _, _ = attend(q, k, v, pattern=SlidingWindow(window=100), backend="blocked")
    out.transpose(1, 2).reshape(1, 2000, 2 * D).mul_(2)  # a view made outside the autograd Function
    with torch.autocast("cpu", dtype=torch.bfloat16):
        band, _, used = attend(q, k, v, pattern=SlidingWindow(window=100), backend="blocked")
        gathered = run(Blocked(band=False), q, k, v, SlidingWindow(window=100))
    assert used == "blocked[band]" and band.dtype == gathered.dtype == torch.bfloat16


def test_gathered_blocks_with_a_right_padded_window_equal_eager():
    """The path every other pattern takes, on a case that now goes to the band path by default."""
    q, k, v = qkv(3, 4, 2, 1000)
    pattern, pad = (
        SlidingWindow(window=100, causal=True),
        torch.arange(1000)[None, :] >= torch.tensor([[1000], [640], [3]]),
    )
    ref, _, _ = attend(q, k, v, pattern=pattern, key_padding_mask=pad, backend="eager")
    out, _ = Blocked(band=False)(
        q, k, v, pattern=pattern, bias=None, key_padding_mask=pad, dropout_p=0.0, scale=D**-0.5, return_weights=False
    )
    grad = torch.randn_like(ref)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    wants = torch.autograd.grad(ref, (q, k, v), grad)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), grad), wants, strict=True):
        torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-3)
