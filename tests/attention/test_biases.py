"""Every bias in BIASES on every backend against eager (forward and backward, bias gradients included),
its dense and score_mod forms against `values`, and the published T5 buckets and ALiBi slopes."""

import copy
import itertools
import math

import pytest
import torch

from attnzoo.attention import BACKENDS, Attention, Causal, attend
from attnzoo.attention.backends import Request, backend_name
from attnzoo.attention.biases import BIASES, ALiBi, Bias, RelativeBias2D, T5RelativeBias, alibi_slopes, t5_bucket
from attnzoo.attention.specs import build
from attnzoo.attention.toeplitz import diagonal_sums, relative_dense

HEADS = 4
# (grid, prefix tokens): sequence length P + rows * cols, odd and even, with and without prefix tokens
GRIDS = [((1, 1), 0), ((3, 3), 0), ((2, 3), 1), ((3, 5), 1), ((5, 7), 2)]


def make_bias(name, grid=(3, 5), prefix=1, heads=HEADS):
    """Any bias from its short name, given the context a ViT builder passes."""
    return build(name, BIASES, f"bias {name}", num_heads=heads, head_dim=8, dim=8 * heads, grid_size=grid,
                 num_prefix_tokens=prefix)  # fmt: skip


def length(grid, prefix):
    return prefix + grid[0] * grid[1]


def index_grid(lq, lk):
    return torch.arange(lq)[:, None], torch.arange(lk)[None, :]


@pytest.mark.parametrize("name", list(BIASES))
@pytest.mark.parametrize("grid, prefix", GRIDS)
def test_dense_and_score_mod_equal_values(name, grid, prefix):
    bias = make_bias(name, grid, prefix)
    n = length(grid, prefix)
    q_idx, kv_idx = index_grid(n, n)
    want = bias.values(q_idx, kv_idx).expand(HEADS, n, n)
    torch.testing.assert_close(bias.dense(n, n), want)
    mod = bias.score_mod(n, n)
    h = torch.arange(HEADS)[:, None, None]
    score = torch.randn(HEADS, n, n)
    b = torch.zeros((), dtype=torch.long)
    torch.testing.assert_close(mod(score, b, h, q_idx[None], kv_idx[None]), score + want)


@pytest.mark.parametrize("name", [n for n in BIASES if BIASES[n].learned])
@pytest.mark.parametrize("grid, prefix", GRIDS)
def test_dense_gradient_equals_gather_gradient(name, grid, prefix):
    # the fast dense form (strided expand, diagonal-sum backward) against autograd through `values`
    bias = make_bias(name, grid, prefix)
    n = length(grid, prefix)
    g = torch.randn(HEADS, n, n)
    fast = torch.autograd.grad((bias.dense(n, n) * g).sum(), list(bias.parameters()))
    slow = torch.autograd.grad((Bias._dense(bias, n, n, None, None) * g).sum(), list(bias.parameters()))
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _claims(backend, needs_grad, pattern, bias, n):
    return (
        BACKENDS[backend].supports(
            Request(
                device_type="cpu",
                needs_grad=needs_grad,
                return_weights=False,
                pattern=pattern,
                bias=bias,
                has_padding=True,
                lq=n,
                lk=n,
            )
        )
        is None
    )


def _claims_any(backend, name, grid, prefix, causal):
    n, bias, pattern = length(grid, prefix), make_bias(name, grid, prefix), Causal() if causal else None
    return _claims(backend, True, pattern, bias, n) or _claims(backend, False, pattern, bias, n)


BACKEND_CASES = [  # each backend on every case its supports() claims (the GPU-only ones have their own tests)
    (backend, name, grid, prefix, kv, causal)
    for backend, name, (grid, prefix), (kv, causal) in itertools.product(
        [b for b in BACKENDS if b != "eager"], list(BIASES), GRIDS[1:], [(HEADS, False), (2, True)]
    )
    if _claims_any(backend, name, grid, prefix, causal)
]


@pytest.mark.parametrize("backend, name, grid, prefix, kv, causal", BACKEND_CASES)
def test_backend_equals_eager_with_bias(backend, name, grid, prefix, kv, causal):
    n = length(grid, prefix)
    pattern = Causal() if causal else None
    bias = make_bias(name, grid, prefix)
    train = _claims(backend, True, pattern, bias, n)
    ref = Attention(8 * HEADS, HEADS, num_kv_heads=kv, pattern=pattern, bias=bias, backend="eager", qkv_bias=True)
    fast = copy.deepcopy(ref)
    fast.backend = backend
    x = torch.randn(2, n, 8 * HEADS)
    pad = torch.zeros(2, n, dtype=torch.bool)
    pad[1, max(1, n - 3) :] = True
    if not train:
        with torch.no_grad():
            want = ref(x, key_padding_mask=pad)
            torch.testing.assert_close(fast(x, key_padding_mask=pad), want, atol=1e-5, rtol=1e-5)
        return
    x2 = x.clone().requires_grad_()
    x = x.requires_grad_()
    out_ref, out = ref(x, key_padding_mask=pad), fast(x2, key_padding_mask=pad)
    assert backend_name(fast.backend_used) == backend
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    grads_ref = torch.autograd.grad(out_ref, [x, *ref.parameters()], g)
    grads = torch.autograd.grad(out, [x2, *fast.parameters()], g)
    names = ["x", *(k for k, _ in ref.named_parameters())]
    assert any(k.startswith("bias.") for k in names) == bias.learned
    for key, a, b in zip(names, grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=lambda m, key=key: f"grad of {key}: {m}")


@pytest.mark.parametrize(
    "name, backend, lq, lk",
    [
        (name, backend, lq, lk)
        for name, backend, (lq, lk) in itertools.product(
            ["t5", "alibi"], [b for b in BACKENDS if b != "eager"], [(5, 12), (13, 4), (1, 9)]
        )
        if _claims(backend, True, None, make_bias(name), lq)  # backends that train with it here
    ],
)
def test_one_dimensional_biases_in_cross_attention(name, backend, lq, lk):
    bias = make_bias(name)
    q = torch.randn(2, HEADS, lq, 8, requires_grad=True)
    k, v = (torch.randn(2, 2, lk, 8, requires_grad=True) for _ in range(2))
    want, _, _ = attend(q, k, v, bias=bias, backend="eager")
    got, _, used = attend(q, k, v, bias=bias, backend=backend)
    assert backend_name(used) == backend
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(got)
    for a, b in zip(torch.autograd.grad(got, [q, k, v, *bias.parameters()], g),
                    torch.autograd.grad(want, [q, k, v, *bias.parameters()], g), strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", list(BIASES))
def test_flex_attention_with_score_mod_equals_eager(name):
    from torch.nn.attention.flex_attention import flex_attention

    bias = make_bias(name, (2, 3), 1)
    n = length((2, 3), 1)
    q, k, v = (torch.randn(1, HEADS, n, 8) for _ in range(3))
    want, _, _ = attend(q, k, v, bias=bias, backend="eager")
    with torch.no_grad():
        got = flex_attention(q, k, v, score_mod=bias.score_mod(n, n))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("name", [n for n in BIASES if BIASES[n].learned])
def test_flex_score_mod_trains_bias_tables_on_cuda(name):
    from torch.nn.attention.flex_attention import flex_attention

    bias = make_bias(name, (4, 4), 1).cuda()
    n = length((4, 4), 1)
    q, k, v = (torch.randn(1, HEADS, n, 16, device="cuda") for _ in range(3))
    out = torch.compile(flex_attention)(q, k, v, score_mod=bias.score_mod(n, n))
    want, _, _ = attend(q, k, v, bias=bias, backend="eager")
    fast = torch.autograd.grad(out.sum(), list(bias.parameters()))
    ref = torch.autograd.grad(want.sum(), list(bias.parameters()))
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", list(BIASES))
def test_bf16_autocast_with_bias_is_finite_and_close(name):
    bias = make_bias(name, (4, 4), 1)
    attn = Attention(8 * HEADS, HEADS, bias=bias, backend="sdpa")
    x = torch.randn(2, 17, 8 * HEADS)
    ref = attn(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attn(x)
    low.float().sum().backward()
    assert torch.isfinite(low).all() and (low.float() - ref).abs().max() < 3e-2
    assert all(torch.isfinite(p.grad).all() for p in bias.parameters())


# ---------------------------------------------------------------------------------------------------------------
# the published numbers


# key - query distance -> bucket, from T5's formula by hand: n = query - key; bidirectional halves the 32 buckets
# (16 per direction, key after query adds 16) and exact = 8; causal keeps 32 buckets, exact = 16, n = max(n, 0).
# Beyond exact: exact + floor(log(n / exact) / log(128 / exact) * (buckets - exact)), capped at buckets - 1.
T5_BIDIRECTIONAL = {
    0: 0, -1: 1, -7: 7, -8: 8, -11: 8, -12: 9, -16: 10, -22: 10, -23: 11, -32: 12, -64: 14, -90: 14, -91: 15,
    -127: 15, -128: 15, -1000: 15, 1: 17, 7: 23, 8: 24, 16: 26, 32: 28, 64: 30, 127: 31, 128: 31, 1000: 31,
}  # fmt: skip
T5_CAUSAL = {
    0: 0, 1: 0, 100: 0, -1: 1, -15: 15, -16: 16, -17: 16, -19: 17, -22: 18, -26: 19, -32: 21, -45: 23, -64: 26,
    -98: 29, -99: 30, -112: 30, -113: 31, -127: 31, -128: 31, -5000: 31,
}  # fmt: skip


@pytest.mark.parametrize("bidirectional, table", [(True, T5_BIDIRECTIONAL), (False, T5_CAUSAL)])
def test_t5_buckets_match_the_formula(bidirectional, table):
    rel = torch.tensor(list(table))
    got = t5_bucket(rel, num_buckets=32, max_distance=128, bidirectional=bidirectional)
    assert got.tolist() == list(table.values())
    # and over a dense range, against the formula written out in float64
    rel = torch.arange(-300, 301)
    got = t5_bucket(rel, num_buckets=32, max_distance=128, bidirectional=bidirectional).tolist()
    for r, b in zip(rel.tolist(), got, strict=True):
        buckets, n, base = (16, abs(r), 16 * (r > 0)) if bidirectional else (32, max(-r, 0), 0)
        exact = buckets // 2
        far = min(buckets - 1, exact + int(math.log(max(n, 1) / exact) / math.log(128 / exact) * (buckets - exact)))
        assert b == base + (n if n < exact else far), r


def test_alibi_slopes_are_the_published_sequences():
    assert alibi_slopes(8) == [2**-i for i in range(1, 9)]  # 1/2, 1/4, ..., 1/256
    twelve = [2**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    assert alibi_slopes(12) == pytest.approx(twelve, rel=1e-12)
    assert ALiBi(num_heads=12).slopes.tolist() == pytest.approx(twelve, rel=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_alibi_values(bidirectional):
    bias = ALiBi(num_heads=8, bidirectional=bidirectional)
    dense = bias.dense(5, 5)
    assert dense[0, 3, 1] == -0.5 * 2
    assert dense[7, 1, 3] == (-2 if bidirectional else 2) / 256


# ---------------------------------------------------------------------------------------------------------------
# sharing, caching, grids, errors


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_t5_shared_by_an_encoder_is_computed_once_per_forward_and_trains(backend):
    from attnzoo.layers import Encoder, Mlp, TransformerBlock

    shared = T5RelativeBias(num_heads=HEADS)
    ref = T5RelativeBias(num_heads=HEADS)
    ref.load_state_dict(shared.state_dict())
    blocks = [TransformerBlock(attn=Attention(32, HEADS, backend=backend), mlp=Mlp(32, 64), dim=32) for _ in range(3)]
    encoder = Encoder(blocks, shared_bias=shared)
    calls = []
    original = shared.buckets
    shared.buckets = lambda *a: calls.append(1) or original(*a)
    x = torch.randn(2, 11, 32)
    out = encoder(x)
    assert len(calls) == 1  # the bucket lookup: once per forward, not once per layer
    out.sum().backward()
    assert shared.table.grad is not None and shared.table.grad.abs().sum() > 0
    # the same as giving each layer the bias module itself
    for block in blocks:
        block.attn.bias = ref
    want = Encoder(blocks)(x)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    want.sum().backward()
    torch.testing.assert_close(shared.table.grad, ref.table.grad, atol=1e-5, rtol=1e-4)


def test_fixed_dense_is_cached_until_parameters_change():
    alibi_a, alibi_b = ALiBi(num_heads=4), ALiBi(num_heads=4)
    assert alibi_a.dense(9, 9) is alibi_b.dense(9, 9)  # layers share one copy
    t5 = T5RelativeBias(num_heads=4)
    first = t5.dense(9, 9)  # needs grad: fresh each call
    assert first.requires_grad and t5.dense(9, 9) is not first
    with torch.no_grad():
        frozen = t5.dense(9, 9)
        assert t5.dense(9, 9) is frozen
        t5.table.add_(1.0)  # an optimizer step bumps the version
        torch.testing.assert_close(t5.dense(9, 9), frozen + 1.0)


def test_relative_2d_runs_at_other_grids_and_is_unchanged_at_the_trained_one():
    bias = RelativeBias2D(num_heads=2, grid_size=(4, 4), num_prefix_tokens=1)
    before = bias.dense(17, 17)
    bias.set_grid_size((6, 3))
    other = bias.dense(19, 19)
    assert other.shape == (2, 19, 19) and torch.isfinite(other).all()
    bias.set_grid_size((4, 4))
    assert torch.equal(bias.dense(17, 17), before)
    bigger = RelativeBias2D(num_heads=2, grid_size=(6, 6), num_prefix_tokens=1)
    bigger.load_state_dict(bias.state_dict())  # a checkpoint of another grid is resized on load
    assert bigger.table.shape == (2, 11, 11)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: T5RelativeBias(num_heads=2, num_buckets=2), r"num_buckets >= 4.*num_buckets=2"),
        (lambda: T5RelativeBias(num_heads=2, num_buckets=32, max_distance=4), r"max_distance=4"),
        (lambda: RelativeBias2D(num_heads=2, grid_size=(0, 3)), r"grid_size must be a positive int"),
        (lambda: RelativeBias2D(num_heads=2, grid_size=3).dense(10, 10), r"got 10 query.*grid \(3, 3\).*set_grid_size"),
        (lambda: ALiBi(num_heads=0), r"num_heads must be a positive int; got 0"),
        (lambda: build({"kind": "t5", "buckets": 8}, BIASES, "model.attention.bias", num_heads=2),
         r"takes no argument 'buckets'.*did you mean 'num_buckets'"),
        (lambda: relative_dense(torch.zeros(2, 3, 3), (2, 2), (2, 3)), r"must be \[H, 3, 4\]; got \[2, 3, 3\]"),
    ],
)  # fmt: skip
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_diagonal_sums_of_odd_shapes():
    g = torch.randn(2, 3, 7, 11)
    got = diagonal_sums(g)
    for off in range(-6, 11):
        torch.testing.assert_close(got[..., off + 6], torch.diagonal(g, offset=off, dim1=-2, dim2=-1).sum(-1))


@pytest.mark.parametrize(
    "name, grid, prefix, lq, lk, rows",
    [
        ("t5", None, 0, 37, 37, 5),  # 1D, last chunk shorter
        ("t5", None, 0, 13, 29, 4),  # cross-attention lengths
        ("t5", None, 0, 9, 9, 100),  # one chunk
        ("relative_2d", (5, 7), 2, None, None, 5),  # chunks of one 7-token grid row after the prefix rows
        ("relative_2d", (4, 3), 1, None, None, 7),  # chunks of two 3-token rows, the last one shorter
        ("relative_2d", (3, 4), 0, None, None, 1),
        ("relative_2d", (1, 9), 1, None, None, 4),  # one grid row: chunks of part of it
    ],
)
@pytest.mark.parametrize("masks", ["none", "padding+causal"])
def test_sdpa_reduces_learned_table_gradients_chunk_by_chunk(monkeypatch, name, grid, prefix, lq, lk, rows, masks):
    """CPU sdpa trains a table over offsets without a dense bias gradient; every chunking equals eager."""
    from attnzoo.attention import sdpa_bias

    bias = make_bias(name, grid or (3, 5), prefix)
    if grid is not None:
        lq = lk = length(grid, prefix)
    b, kv = 2, 2
    monkeypatch.setattr(sdpa_bias, "_CHUNK_ELEMENTS", b * HEADS * lk * rows)  # `rows` query rows per chunk
    monkeypatch.setattr(sdpa_bias, "_FORWARD_CHUNK_ELEMENTS", HEADS * lk * (rows + 1))
    calls = []
    fused = sdpa_bias.sdpa_with_relative_bias
    monkeypatch.setattr(sdpa_bias, "sdpa_with_relative_bias", lambda *a, **kw: calls.append(1) or fused(*a, **kw))
    q = torch.randn(b, HEADS, lq, 8, requires_grad=True)
    k, v = (torch.randn(b, kv, lk, 8, requires_grad=True) for _ in range(2))
    kw = {}
    if masks != "none":
        pad = torch.zeros(b, lk, dtype=torch.bool)
        pad[1, lk - 3 :] = True
        kw = dict(key_padding_mask=pad, pattern=Causal() if lq == lk else None)
    want, _, _ = attend(q, k, v, bias=bias, backend="eager", **kw)
    got, _, _ = attend(q, k, v, bias=bias, backend="sdpa", **kw)
    assert calls, "the sdpa backend did not take the relative-table path"
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(got)
    wrt = [q, k, v, *bias.parameters()]
    for a, w in zip(torch.autograd.grad(got, wrt, g), torch.autograd.grad(want, wrt, g), strict=True):
        torch.testing.assert_close(a, w, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["alibi", "t5 frozen"])
@pytest.mark.parametrize("lq, lk", [(11, 11), (5, 12), (13, 4)])
def test_sdpa_reads_fixed_sequence_biases_in_place(monkeypatch, name, lq, lk):
    from attnzoo.attention import sdpa_bias

    bias = make_bias(name.split()[0]).requires_grad_(False)
    calls = []
    real = sdpa_bias.sdpa_with_fixed_sequence_bias
    monkeypatch.setattr(sdpa_bias, "sdpa_with_fixed_sequence_bias", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q = torch.randn(2, HEADS, lq, 8, requires_grad=True)
    k, v = (torch.randn(2, 2, lk, 8, requires_grad=True) for _ in range(2))
    pad = torch.zeros(2, lk, dtype=torch.bool)
    pad[0, lk - 3 :] = True
    kw = dict(bias=bias, key_padding_mask=pad, pattern=Causal() if lq == lk else None)
    got, _, _ = attend(q, k, v, backend="sdpa", **kw)
    want, _, _ = attend(q, k, v, backend="eager", **kw)
    assert calls
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(got)
    for a, w in zip(torch.autograd.grad(got, [q, k, v], g), torch.autograd.grad(want, [q, k, v], g), strict=True):
        torch.testing.assert_close(a, w, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name, grid, prefix", [("t5", (1, 37), 0), ("relative_2d", (5, 7), 1)])
def test_sdpa_relative_table_in_bf16_is_close_to_fp32_eager(name, grid, prefix):
    """bf16 q, k, v (as from autocast projections) through the relative-table path: finite and close."""
    bias = make_bias(name, grid, prefix)
    n = length(grid, prefix)
    q, k, v = (torch.randn(2, HEADS, n, 8) for _ in range(3))
    pad = torch.zeros(2, n, dtype=torch.bool)
    pad[1, n - 4 :] = True
    inputs = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    ref_inputs = [t.detach().float().requires_grad_() for t in inputs]
    got, _, used = attend(*inputs, bias=bias, backend="sdpa", key_padding_mask=pad)
    assert used == "sdpa[table_grad]" and got.dtype == torch.bfloat16
    want, _, _ = attend(*ref_inputs, bias=bias, backend="eager", key_padding_mask=pad)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    g = torch.randn_like(want)
    wrt = [*bias.parameters()]
    grads = torch.autograd.grad(got.float(), [*inputs, *wrt], g)
    grads_ref = torch.autograd.grad(want, [*ref_inputs, *wrt], g)
    for a, w in zip(grads, grads_ref, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.float(), w, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("bias", [ALiBi(num_heads=8), T5RelativeBias(num_heads=8)], ids=["alibi", "t5"])
def test_a_bias_of_another_head_count_is_refused_when_the_layer_is_built(bias):
    # it failed in the first forward with torch's shape error ("The size of tensor a (4) must match ...")
    with pytest.raises(ValueError, match=r"bias (ALiBi|T5RelativeBias) has 8 heads, and this attention 4"):
        Attention(32, 4, bias=bias)
    assert Attention(64, 8, bias=bias).bias is bias
    shared = type(bias)(num_heads=1)  # one head broadcasts over all of them, as it did; flex indexed head h of 1
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        want = Attention(32, 4, bias=shared, backend="eager").eval()
        for backend in ("sdpa", "blocked", "flex"):
            layer = Attention(32, 4, bias=shared, backend=backend).eval()
            layer.load_state_dict(want.state_dict())
            torch.testing.assert_close(layer(x), want(x), atol=1e-5, rtol=0, msg=backend)


def test_causal_alibi_without_a_causal_mask_is_refused_and_with_one_equals_the_symmetric_form():
    # bidirectional=False scores later keys higher: without a causal mask query 0 put its weight on the last key
    from attnzoo.attention.patterns import SlidingWindow

    torch.manual_seed(0)
    x = torch.randn(2, 12, 32)
    causal = Attention(32, 4, bias=ALiBi(num_heads=4, bidirectional=False), backend="eager")
    with pytest.raises(ValueError, match=r"ALiBi\(bidirectional=False\) is the causal form.*is_causal=True"):
        causal(x)
    both = Attention(32, 4, bias=ALiBi(num_heads=4), backend="eager")
    both.load_state_dict(causal.state_dict())
    want = both(x, is_causal=True)
    torch.testing.assert_close(causal(x, is_causal=True), want)  # under the mask the two forms agree
    causal.pattern = SlidingWindow(window=3, causal=True)  # a causal pattern is a causal mask too
    both.pattern = SlidingWindow(window=3, causal=True)
    torch.testing.assert_close(causal(x), both(x))
