"""Head composition (talking heads, DCMHA) and the chunked engine under it, against plain references."""

import itertools

import pytest
import torch

from attnzoo.attention import Attention, Causal, attend
from attnzoo.attention.biases import Bias
from attnzoo.attention.patterns import Pattern
from attnzoo.attention.variants import ComposedAttention, DCMHAttention, TalkingHeadsAttention, chunked_attention

COMPOSED = [TalkingHeadsAttention, DCMHAttention]
DIM, HEADS = 32, 4


class Window(Pattern):
    def __init__(self, size: int) -> None:
        self.size = size

    def mask_mod(self, b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= self.size


class Distance(Bias):
    """A learned per-head bias on |i - j| (a test bias exercising `values`)."""

    learned = True

    def __init__(self, num_heads: int) -> None:
        super().__init__(num_heads)
        self.slope = torch.nn.Parameter(torch.randn(num_heads))

    def values(self, q_idx, kv_idx):
        return -self.slope[:, None, None] * (q_idx - kv_idx).abs()  # [H, Lq, Lk]


def _randomize(layer):
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.startswith(("pre.", "post.")):
                p.add_(torch.randn_like(p) * 0.3)


def assert_close_to_scale(got, want, rel=1e-5, msg=""):
    """Equal up to float reordering: max difference within `rel` of the largest magnitude."""
    scale = want.abs().max().clamp(min=1.0)
    assert (got - want).abs().max() <= rel * scale, f"{msg}: max diff {(got - want).abs().max():.3g}, scale {scale:.3g}"


# ---------------------------------------------------------------------------------------------- the engine
ENGINE_CASES = [
    dict(pattern=p, bias=b, padding=pad, kv=[4, 2][n % 2], chunk=[None, 1, 4][n % 3])  # kv heads, chunks cycle
    for n, (p, b, pad) in enumerate(itertools.product([None, "causal", "window"], [None, "tensor", "module"], [0, 1]))
]


@pytest.mark.parametrize("case", ENGINE_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_engine_without_hooks_equals_eager_forward_and_backward(case):
    b, lq, lk, d = 2, 9, 9, 8
    q = torch.randn(b, HEADS, lq, d, requires_grad=True)
    k = torch.randn(b, case["kv"], lk, d, requires_grad=True)
    v = torch.randn(b, case["kv"], lk, d, requires_grad=True)
    pattern = {"causal": Causal(), "window": Window(2), None: None}[case["pattern"]]
    bias = {"tensor": torch.randn(HEADS, lq, lk, requires_grad=True), "module": Distance(HEADS), None: None}
    bias = bias[case["bias"]]
    pad = None
    if case["padding"]:
        pad = torch.zeros(b, lk, dtype=torch.bool)
        pad[0, 5:] = True
        pad[1] = True  # a fully padded sequence: zeros, not NaN
    kw = dict(pattern=pattern, bias=bias, key_padding_mask=pad)
    out, w = chunked_attention(q, k, v, chunk_size=case["chunk"], return_weights=True, **kw)
    want, want_w, _ = attend(q, k, v, backend="eager", return_weights=True, **kw)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w, want_w, atol=1e-6, rtol=1e-5)
    leaves = [q, k, v] + ([bias] if isinstance(bias, torch.Tensor) else list(getattr(bias, "parameters", list)()))
    g = torch.randn_like(out)
    got_grads = torch.autograd.grad(out, leaves, g)
    want_grads = torch.autograd.grad(want, leaves, g)
    for a, e in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)


def test_engine_rejects_bad_chunk_size():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="chunk_size must be a positive number of queries or None, got 0"):
        chunked_attention(q, q, q, chunk_size=0)


# ---------------------------------------------------------------------------------------------- DCMHA math
def reference_compose(comp, a, xq, xk):
    """Per (i, j) mixing matrix M = W + Wq1_i Wq2_i + Wk1_j Wk2_j + diag(gq_i + gk_j), built explicitly."""
    h = a.shape[1]
    m = comp.static.expand(a.shape[0], a.shape[2], a.shape[3], h, h)  # [B, Lq, Lk, H, H]
    if comp.dynamic:
        qw1, qw2, qg = comp.query(xq)
        kw1, kw2, kg = comp.key(xk)
        m = m + (qw1 @ qw2)[:, :, None] + (kw1 @ kw2)[:, None, :]
        m = m + torch.diag_embed(qg[:, :, None] + kg[:, None, :])
    return torch.einsum("bhij,bijhg->bgij", a, m)


def reference_forward(layer, x, pad):
    b, n, _ = x.shape
    q, k, v = layer.qkv(x).view(b, n, 3, HEADS, -1).permute(2, 0, 3, 1, 4)  # [B, H, N, D]
    scores = reference_compose(layer.pre, (q @ k.transpose(-2, -1)) * layer.scale, x, x)
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    weights = reference_compose(layer.post, scores.softmax(-1), x, x)
    out = (weights @ v).transpose(1, 2).reshape(b, n, -1)
    return layer.proj(out)


@pytest.mark.parametrize("cls", COMPOSED)
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_composition_matches_its_definition(cls, chunk_size):
    layer = cls(DIM, HEADS, chunk_size=chunk_size, rank=3) if cls is DCMHAttention else cls(DIM, HEADS)
    _randomize(layer)
    x = torch.randn(2, 10, DIM)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    torch.testing.assert_close(layer(x, key_padding_mask=pad), reference_forward(layer, x, pad), atol=1e-4, rtol=1e-4)


def test_dcmha_composition_depends_on_the_input():
    layer = DCMHAttention(DIM, HEADS)
    _randomize(layer)
    talking = TalkingHeadsAttention(DIM, HEADS)
    talking.load_state_dict(layer.state_dict(), strict=False)  # same projections and static mixing
    x = torch.randn(1, 6, DIM)
    assert (layer(x) - talking(x)).abs().max() > 1e-3
    layer.pre.query.reset_identity(), layer.pre.key.reset_identity()
    layer.post.query.reset_identity(), layer.post.key.reset_identity()
    torch.testing.assert_close(layer(x), talking(x), atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- chunking
@pytest.mark.parametrize("cls", COMPOSED)
@pytest.mark.parametrize("chunk_size, checkpoint", [(1, True), (3, True), (4, False), (64, True)])
@pytest.mark.parametrize("causal", [False, True])
def test_chunked_equals_unchunked_forward_and_backward(cls, chunk_size, checkpoint, causal):
    kw = dict(pattern=Causal() if causal else None, num_kv_heads=2, qkv_bias=True)
    whole = cls(DIM, HEADS, chunk_size=None, **kw)
    _randomize(whole)
    chunked = cls(DIM, HEADS, chunk_size=chunk_size, checkpoint=checkpoint, **kw)
    chunked.load_state_dict(whole.state_dict())
    x = torch.randn(2, 10, DIM, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[0, 6:] = True
    out, want = chunked(x, key_padding_mask=pad), whole(x2, key_padding_mask=pad)
    _assert_same_forward_and_backward(chunked, whole, out, want, x, x2)


def _assert_same_forward_and_backward(layer, reference, out, want, x, x2, param_rel=1e-5):
    assert_close_to_scale(out, want, msg="out")
    g = torch.randn_like(out)
    out.backward(g)
    want.backward(g)
    assert_close_to_scale(x.grad, x2.grad, msg="x.grad")
    for (name, p), q in zip(layer.named_parameters(), reference.parameters(), strict=True):
        assert_close_to_scale(p.grad, q.grad, rel=param_rel, msg=name)


def test_auto_chunks_fit_the_scores_of_a_chunk_to_a_cache_budget_on_cpu_only():
    from attnzoo.attention.variants.compose import AUTO_CHUNK, CHUNK_ELEMENTS, MIN_AUTO_CHUNK, auto_chunk

    def q(b, h, n, device="cpu"):
        return torch.empty(b, h, n, 8, device=device)

    assert auto_chunk(q(64, 4, AUTO_CHUNK), AUTO_CHUNK) == AUTO_CHUNK  # not split: one chunk, as before
    assert auto_chunk(q(1, 4, 1024), 1024) == AUTO_CHUNK  # split, and chunks of 256 fit already
    assert auto_chunk(q(16, 4, 512), 512) == 64 and 16 * 4 * 64 * 512 == CHUNK_ELEMENTS
    assert auto_chunk(q(256, 8, 4096), 4096) == MIN_AUTO_CHUNK
    assert auto_chunk(q(16, 4, 512, device="meta"), 512) == AUTO_CHUNK  # GPUs keep large chunks
    assert auto_chunk(q(0, 4, 512), 512) == AUTO_CHUNK  # an empty batch


@pytest.mark.parametrize("cls", COMPOSED)
def test_auto_chunks_equal_one_chunk_forward_and_backward(cls, monkeypatch):
    """With chunk_size "auto" a batch of 64 x 300 queries runs in chunks of 54, recomputed in backward."""
    from attnzoo.attention.variants import compose

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["chunk_size"])
        return chunked_attention(*args, **kwargs)

    monkeypatch.setattr(compose, "chunked_attention", spy)
    whole = cls(16, 2, chunk_size=None)
    _randomize(whole)
    auto = cls(16, 2, chunk_size="auto")
    assert cls(16, 2).chunk_size == ("auto" if cls is DCMHAttention else 256)  # DCMHA's default (the benchmark)
    auto.load_state_dict(whole.state_dict())
    x = torch.randn(64, 300, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out = auto(x)
    want = whole(x2)
    assert seen == [54, None]  # 64 x 2 x 54 x 300 scores per chunk: at most 2**21
    # parameter gradients are fp32 sums of ~6M terms, added in another order
    _assert_same_forward_and_backward(auto, whole, out, want, x, x2, param_rel=1e-4)


def test_checkpointed_chunks_replay_the_same_dropout():
    layer = DCMHAttention(DIM, HEADS, chunk_size=3, attn_drop=0.3).train()
    x = torch.randn(1, 8, DIM, requires_grad=True)
    grads = []
    for checkpoint in (True, False):
        layer.checkpoint = checkpoint
        torch.manual_seed(1)
        out = layer(x)
        (gx,) = torch.autograd.grad(out.square().sum(), x)
        grads.append((out.detach(), gx))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_backend_used_names_the_kind():
    layer = DCMHAttention(DIM, HEADS)
    layer(torch.randn(1, 3, DIM))
    assert layer.backend_used == "dcmha-chunked"


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (DCMHAttention, dict(backend="sdpa"), r"'dcmha' mixes scores across heads.*'auto' or 'eager', got 'sdpa'"),
        (TalkingHeadsAttention, dict(backend="flash"), r"'talking_heads' mixes scores.*got 'flash'"),
        (DCMHAttention, dict(chunk_size=0), r"chunk_size must be a positive number of queries, None or .auto., got 0"),
        (DCMHAttention, dict(rank=0), r"rank \(0\) and hidden \(None\) must be positive"),
    ],
)
def test_bad_options(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(DIM, HEADS, **kwargs)


def test_identity_composition_loads_a_trained_mha_checkpoint():
    mha = Attention(DIM, HEADS, qkv_bias=True)
    layer = DCMHAttention(DIM, HEADS, qkv_bias=True)
    missing, unexpected = layer.load_state_dict(mha.state_dict(), strict=False)
    assert not unexpected and all(n.startswith(("pre.", "post.")) for n in missing)
    assert isinstance(layer, ComposedAttention)
    x = torch.randn(2, 5, DIM)
    torch.testing.assert_close(layer(x), mha(x), atol=1e-5, rtol=1e-5)  # a fresh layer is the identity
