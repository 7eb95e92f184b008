"""Every backend against the eager oracle, forward and backward, plus the dense Attention contract."""

import itertools
import logging

import pytest
import torch
from torch import nn

from attnzoo.attention import (
    BACKENDS,
    Attention,
    Causal,
    SlidingWindow,
    attend,
    capture_attention,
    from_multihead_attention,
)
from attnzoo.attention.backends import Request

FAST = [name for name in BACKENDS if name != "eager"]
# backends that train on CPU with key padding and no pattern (flex has no CPU backward: tested in test_sparse_backends)
TRAINS = [n for n in BACKENDS if BACKENDS[n].supports(Request("cpu", True, False, None, None, True, 8, 8)) is None]

CASES = [
    # (cross, num_kv_heads, lq, lk, batch, padding, causal)
    dict(cross=c, kv=kv, lq=lq, lk=lk, batch=b, padding=p, causal=cz)
    for c, kv, (lq, lk), b, p, cz in itertools.product(
        [False, True], [4, 2, 1], [(1, 1), (7, 7), (129, 129), (7, 129)], [1, 3], [False, True], [False, True]
    )
    if (c or lq == lk) and not (c and cz)
]


def _runs(backend, case):
    req = Request(
        "cpu", True, False, Causal() if case["causal"] else None, None, case["padding"], case["lq"], case["lk"]
    )
    return BACKENDS[backend].supports(req) is None


def _pair(backend, case, dim=32, heads=4):
    kwargs = dict(
        num_kv_heads=case["kv"],
        qkv_bias=True,
        context_dim=24 if case["cross"] else None,
        pattern=Causal() if case["causal"] else None,
    )
    ref = Attention(dim, heads, backend="eager", **kwargs)
    fast = Attention(dim, heads, backend=backend, **kwargs)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


def _inputs(case, dim=32):
    x = torch.randn(case["batch"], case["lq"], dim, requires_grad=True)
    ctx = torch.randn(case["batch"], case["lk"], 24, requires_grad=True) if case["cross"] else None
    pad = None
    if case["padding"]:
        lengths = torch.randint(1, case["lk"] + 1, (case["batch"],))
        lengths[0] = max(1, case["lk"] // 2)  # at least one row is really padded when lk > 1
        pad = torch.arange(case["lk"])[None, :] >= lengths[:, None]
    return x, ctx, pad


def _grads(module, *tensors):
    return [t.grad for t in tensors if t is not None] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize(
    "backend, case",
    [(b, c) for b in FAST for c in CASES if _runs(b, c)],  # each backend on every case it claims
    ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}{x}" for k, x in v.items()),
)
def test_backend_equals_eager_forward_and_backward(backend, case):
    ref, fast = _pair(backend, case)
    x, ctx, pad = _inputs(case)
    x2 = x.detach().clone().requires_grad_()
    ctx2 = ctx.detach().clone().requires_grad_() if ctx is not None else None
    out_ref = ref(x, ctx, key_padding_mask=pad)
    out = fast(x2, ctx2, key_padding_mask=pad)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    out_ref.backward(g)
    out.backward(g)
    for a, b in zip(_grads(fast, x2, ctx2), _grads(ref, x, ctx), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert fast.backend_used == backend


@pytest.mark.parametrize("backend", TRAINS)
@pytest.mark.parametrize("autocast", [False, True])
def test_fully_masked_query_gives_zeros_not_nan(backend, autocast):
    q = torch.randn(2, 4, 5, 16, requires_grad=True)
    k = torch.randn(2, 4, 6, 16, requires_grad=True)
    v = torch.randn(2, 4, 6, 16, requires_grad=True)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1] = True  # every key of the second sequence is padding
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out, _, used = attend(q, k, v, key_padding_mask=pad, backend=backend)
    assert used == backend
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all()
    assert out[0].abs().sum() > 0
    out.float().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert (t.grad[1] == 0).all()


@pytest.mark.parametrize("backend", TRAINS)  # eager among them
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_an_attn_mask_row_that_reads_no_key_gives_zeros_on_every_backend(backend, kind):
    """timm's `attn_mask` (bool: True = read; float: added to the scores) with a query it leaves no key: that row
    reads nothing (the output projection's bias), as key padding and patterns do, with finite gradients."""
    torch.manual_seed(0)
    allowed = torch.ones(6, 6, dtype=torch.bool)
    allowed[3] = False  # query 3 reads no key
    allowed[:, 5] = False  # and no query reads key 5
    mask = allowed if kind == "bool" else torch.zeros(6, 6).masked_fill(~allowed, float("-inf"))
    ref, fast = _pair(backend, dict(kv=4, cross=False, causal=False), dim=16)
    x = torch.randn(2, 6, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    want, got = ref(x, attn_mask=mask), fast(x2, attn_mask=mask)
    assert torch.isfinite(got).all() and torch.equal(got[:, 3], fast.proj.bias.expand(2, 16))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(got)
    want.backward(grad)
    got.backward(grad)
    for a, b in zip(_grads(fast, x2), _grads(ref, x), strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", TRAINS)
def test_causal_first_query_of_cross_length_is_finite(backend):
    # causal with Lq > Lk leaves late queries with keys, and early ones always have key 0: never empty.
    q = torch.randn(1, 2, 9, 8)
    k = v = torch.randn(1, 2, 4, 8)
    out, _, _ = attend(q, k, v, pattern=Causal(), backend=backend)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("backend", [b for b in FAST if b in TRAINS])
def test_bf16_autocast_close_to_fp32(backend):
    attn = Attention(64, 4, backend=backend)
    x = torch.randn(2, 50, 64)
    pad = torch.zeros(2, 50, dtype=torch.bool)
    pad[1, 30:] = True
    ref = attn(x, key_padding_mask=pad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attn(x, key_padding_mask=pad)
    assert low.dtype == torch.bfloat16
    assert (low.float() - ref).abs().max() < 2e-2


def test_return_weights_are_a_distribution_and_reproduce_output():
    attn = Attention(32, 4, backend="auto")
    x = torch.randn(2, 9, 32)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, 6:] = True
    out, w = attn(x, key_padding_mask=pad, return_weights=True)
    assert attn.backend_used == "eager"
    assert w.shape == (2, 4, 9, 9)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 9))
    assert (w[0, :, :, 6:] == 0).all()
    torch.testing.assert_close(out, attn(x, key_padding_mask=pad), atol=1e-5, rtol=1e-5)


def test_capture_records_every_layer_and_forces_eager():
    layers = nn.ModuleList([Attention(16, 2, backend="sdpa") for _ in range(3)])
    x = torch.randn(1, 5, 16)
    with capture_attention() as maps:
        for layer in layers:
            x = layer(x)
    assert len(maps) == 3 and all(m.shape == (1, 2, 5, 5) for m in maps)
    assert all(layer.backend_used == "eager" for layer in layers)
    layers[0](x)
    assert layers[0].backend_used == "sdpa" and len(maps) == 3


def test_auto_logs_its_choice_once(caplog):
    attn = Attention(16, 2)
    x = torch.randn(1, 3, 16)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        for _ in range(3):
            attn(x, key_padding_mask=torch.zeros(1, 3, dtype=torch.bool))
    msgs = [r.getMessage() for r in caplog.records if "auto ->" in r.getMessage()]
    assert len(msgs) <= 1  # may have been logged by an earlier test in this process
    assert attn.backend_used == "sdpa"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=30, num_heads=4), r"dim \(30\) must be divisible by num_heads \(4\)"),
        (dict(dim=32, num_heads=4, num_kv_heads=3), r"multiple of num_kv_heads \(3\); valid num_kv_heads: 1, 2, 4$"),
        (dict(dim=32, num_heads=4, backend="fast"), r"unknown attention backend 'fast'; valid: \['auto', 'eager'"),
        (dict(dim=32, num_heads=4, attn_drop=1.5), r"attn_drop \(1.5\)"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Attention(**kwargs)


@pytest.mark.parametrize(
    "mask, match",
    [
        (torch.zeros(2, 5, dtype=torch.bool), r"shape \[B, Lk\] = \[2, 7\].*got dtype torch.bool, shape \[2, 5\]"),
        (torch.zeros(2, 7), r"must be a bool tensor.*got dtype torch.float32"),
    ],
)
def test_bad_masks(mask, match):
    with pytest.raises(ValueError, match=match):
        Attention(32, 4)(torch.randn(2, 7, 32), key_padding_mask=mask)


def test_inputs_of_the_wrong_shape_are_named():
    # each raised from deep inside: "not enough values to unpack", "mat1 and mat2 shapes cannot be multiplied", a
    # broadcast RuntimeError, "'str' object has no attribute 'batch_size'"
    layer = Attention(32, 4)
    with pytest.raises(ValueError, match=r"x: expected \[B, L, 32\] \(batch first\), got \[5, 32\]"):
        layer(torch.randn(5, 32))
    with pytest.raises(ValueError, match=r"x: expected \[B, L, 32\] .*got \[2, 5, 16\]"):
        layer(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match=r"context: expected \[B, Lk, 8\], got \[2, 4, 9\]"):
        Attention(32, 4, context_dim=8)(torch.randn(2, 5, 32), torch.randn(2, 4, 9))
    mha_style = torch.ones(8, 5, 5, dtype=torch.bool)  # nn.MultiheadAttention's [B * H, Lq, Lk]
    with pytest.raises(ValueError, match=r"attn_mask: shape \[8, 5, 5\] does not broadcast to .*\[2, 4, 5, 5\]"):
        layer(torch.randn(2, 5, 32), attn_mask=mha_style)
    hf_style = torch.ones(5, 5, dtype=torch.long).tril()  # 1 attends, 0 not: it was added to the scores as a bias
    with pytest.raises(ValueError, match=r"attn_mask: dtype torch.int64; valid: bool .*attn_mask.bool\(\)"):
        layer(torch.randn(2, 5, 32), attn_mask=hf_style)
    with pytest.raises(TypeError, match=r"pattern: expected a pattern .*got int 3"):
        Attention(32, 4, pattern=3)
    by_name = Attention(32, 4, pattern="causal")  # a config's spec forms build the pattern
    window = Attention(32, 4, pattern={"kind": "sliding_window", "window": 2})
    assert isinstance(by_name.pattern, Causal) and window.pattern.window == 2


def test_explicit_sdpa_with_weights_is_an_error():
    with pytest.raises(ValueError, match="'sdpa' cannot run.*weights"):
        Attention(32, 4, backend="sdpa")(torch.randn(1, 3, 32), return_weights=True)


def test_self_and_cross_misuse():
    with pytest.raises(ValueError, match="pass context"):
        Attention(32, 4, context_dim=8)(torch.randn(1, 3, 32))
    with pytest.raises(ValueError, match="built for self-attention"):
        Attention(32, 4)(torch.randn(1, 3, 32), torch.randn(1, 3, 32))


# ---------------------------------------------------------------------------------------------- drop-in
def test_loads_timm_attention_state_dict():
    from timm.layers import Attention as TimmAttention

    timm_attn = TimmAttention(64, num_heads=4, qkv_bias=True, qk_norm=True, norm_layer=nn.LayerNorm).eval()
    ours = Attention(64, 4, qkv_bias=True, qk_norm=True).eval()
    ours.load_state_dict(timm_attn.state_dict())
    x = torch.randn(2, 11, 64)
    torch.testing.assert_close(ours(x), timm_attn(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", TRAINS)
def test_plugs_into_timm_vision_transformer(backend):
    from timm.models.vision_transformer import VisionTransformer

    cfg = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5, qkv_bias=True)
    theirs = VisionTransformer(**cfg).eval()
    ours = VisionTransformer(**cfg, attn_layer=Attention.configure(backend=backend)).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)
    assert all(isinstance(b.attn, Attention) for b in ours.blocks)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("backend", TRAINS)
def test_imports_multihead_attention(cross, backend):
    kdim = 24 if cross else None
    mha = nn.MultiheadAttention(32, 4, batch_first=True, kdim=kdim, vdim=kdim).eval()
    ours = from_multihead_attention(mha, backend=backend).eval()
    x = torch.randn(2, 7, 32)
    ctx = torch.randn(2, 9, kdim) if cross else x
    pad = torch.zeros(2, 9 if cross else 7, dtype=torch.bool)
    pad[1, 4:] = True
    want, _ = mha(x, ctx, ctx, key_padding_mask=pad, need_weights=False)
    got = ours(x, ctx if cross else None, key_padding_mask=pad)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "cfg",
    [
        {"backend": "blocked", "pattern": {"kind": "sliding_window", "window": 4}},
        {"backend": "blocked"},
        {"kind": "gated", "backend": "blocked", "pattern": {"kind": "sliding_window", "window": 4}},
        {"kind": "sinks", "bias": "alibi"},
        {"backend": "sdpa", "bias": "alibi"},
        {"backend": "blocked", "bias": "t5"},
    ],
    ids=["blocked-window", "blocked-dense", "gated-blocked", "sinks-alibi", "sdpa-alibi", "blocked-t5"],
)
def test_a_layer_used_under_inference_mode_trains_afterwards(cfg):
    """Masks, plans and dense biases cached during an inference-mode call (trainer.validate before fit) were
    inference tensors, which autograd refused to save once the layer trained."""
    from attnzoo.attention.factory import attention_layer

    torch.manual_seed(0)
    layer = attention_layer(cfg, seq_len=17)(32, 4)
    x = torch.randn(2, 17, 32)
    with torch.inference_mode():
        first = layer(x)
    out = layer(x.clone().requires_grad_())
    out.sum().backward()
    torch.testing.assert_close(out.detach(), first)
    assert all(p.grad is not None for p in layer.parameters() if p.requires_grad)


@pytest.mark.cuda
def test_a_flex_layer_used_under_inference_mode_trains_afterwards_on_cuda():
    """flex saves its cached BlockMask's tensors for backward; one made under inference mode was refused."""
    torch.manual_seed(0)
    layer = Attention(64, 4, pattern=SlidingWindow(window=4), backend="flex").cuda()  # flex on CUDA: head dim >= 16
    x = torch.randn(2, 256, 64, device="cuda")
    with torch.inference_mode():
        layer(x)
    layer(x.clone().requires_grad_()).sum().backward()
    assert all(p.grad is not None for p in layer.parameters())
