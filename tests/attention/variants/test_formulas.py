"""Attention kinds that change the math (gated, sinks, differential, sigmoid, mla) against their papers' formulas,
written out here on materialized weights: every backend each kind runs on, forward and backward (inputs, the
kind's own parameters, a learned bias table), with patterns, biases, key padding, grouped-query heads and
cross-attention. Flex runs forward only on CPU (no CPU backward), uncompiled. Then what each kind refuses.

Notation: B batch, H heads, L tokens, D head dim.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnzoo.attention import ATTENTION_KINDS, BACKENDS, Attention
from attnzoo.attention.factory import attention_layer
from attnzoo.attention.flex import Flex
from attnzoo.attention.variants.differential import lambda_init_of
from tests.helpers.kinds import randomize_extras, reduces_to_mha

DIM, HEADS, CTX = 32, 4, 24


def scores(layer, q, k, bias, allowed):
    """Scaled scores [B, H, Lq, Lk] in float64 plus the bias, -inf where not allowed."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = (q.double() @ k.double().transpose(-2, -1)) * layer.scale
    if bias is not None:
        s = s + bias.dense(q.shape[-2], k.shape[-2]).double()
    return s.masked_fill(~allowed, float("-inf"))


def softmax_rows(s):
    """Softmax over the allowed keys; a row with none gives zeros."""
    alive = torch.isfinite(s).any(-1, keepdim=True)
    return torch.where(alive, s, 0.0).softmax(-1).masked_fill(~torch.isfinite(s), 0.0) * alive


def mix(weights, v):
    """weights [B, H, Lq, Lk] @ v [B, Hkv, Lk, D] -> [B, H, Lq, D]."""
    return weights @ v.repeat_interleave(weights.shape[1] // v.shape[1], dim=1).double()


def project(layer, x, ctx):
    """q [B, H, Lq, D], k, v [B, Hkv, Lk, D] as `Attention` makes them (qkv, qk-norm, rotary: tested elsewhere)."""
    q, k, v = layer._project(x, ctx)
    q, k = layer.q_norm(q), layer.k_norm(k)
    if layer.rotary is not None:
        q, k = layer.rotary(q, k)
    return q, k, v


def finish(layer, heads):
    """heads [B, H, Lq, D] -> the layer output [B, Lq, C]."""
    b, h, lq, d = heads.shape
    return F.linear(heads.transpose(1, 2).reshape(b, lq, h * d), layer.proj.weight.double(), layer.proj.bias.double())


def gated(layer, x, ctx, bias, allowed):
    q, k, v = project(layer, x, ctx)
    w = softmax_rows(scores(layer, q, k, bias, allowed))
    gate = torch.sigmoid(F.linear(x.double(), layer.gate.weight.double(), layer.gate.bias.double()))  # [B, Lq, ...]
    gate = gate.view(x.shape[0], x.shape[1], HEADS, -1).transpose(1, 2)  # [B, H, Lq, D or 1]
    return finish(layer, mix(w, v) * gate)


def sinks(layer, x, ctx, bias, allowed):
    q, k, v = project(layer, x, ctx)
    s = scores(layer, q, k, bias, allowed)
    sink = layer.sinks.double().view(1, -1, 1, 1)
    top = torch.maximum(s.amax(-1, keepdim=True), sink)  # exp(x) / (exp(s_h) + sum exp(x)), stably
    num = torch.exp(s - top)
    w = num / (torch.exp(sink - top) + num.sum(-1, keepdim=True))
    return finish(layer, mix(w, v))


def sigmoid(layer, x, ctx, bias, allowed):
    q, k, v = project(layer, x, ctx)
    s = scores(layer, q, k, bias, allowed)
    w = torch.where(allowed, torch.sigmoid(s - math.log(SEQ_LEN)), 0.0)  # b = -log n, n = seq_len
    return finish(layer, mix(w, v))


def differential(layer, x, ctx, bias, allowed):
    q, k, v = project(layer, x, ctx)
    d = q.shape[-1] // 2
    maps = []
    for half in (0, 1):  # the two halves of each head: its even and its odd channels
        qh, kh = q[..., half::2], k[..., half::2]
        kh = kh.repeat_interleave(q.shape[1] // kh.shape[1], dim=1)
        s = (qh.double() @ kh.double().transpose(-2, -1)) / math.sqrt(d)
        if bias is not None:
            s = s + bias.dense(q.shape[-2], k.shape[-2]).double()
        maps.append(softmax_rows(s.masked_fill(~allowed, float("-inf"))))
    p = {n: getattr(layer, n).double() for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")}
    lam = torch.exp(p["lambda_q1"] @ p["lambda_k1"]) - torch.exp(p["lambda_q2"] @ p["lambda_k2"]) + layer.lambda_init
    head = mix(maps[0] - lam * maps[1], v)  # [B, H, Lq, D]
    normed = head * torch.rsqrt(head.pow(2).mean(-1, keepdim=True) + 1e-5) * layer.head_norm.weight.double()
    return finish(layer, normed * (1 - layer.lambda_init))


def mla(layer, x, ctx, bias, allowed):
    src = (x if ctx is None else ctx).double()
    b, lq, lk, h, d, r, dr = x.shape[0], x.shape[1], src.shape[1], HEADS, DIM // HEADS, layer.kv_rank, layer.rope_dim

    def rms(t, weight, eps):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * weight.double()

    lin = lambda t, m: F.linear(t, m.weight.double(), None if m.bias is None else m.bias.double())  # noqa: E731
    down = lin(src, layer.kv)
    c, k_rope = rms(down[..., :r], layer.kv_norm.weight, 1e-6), down[..., r:]  # [B, Lk, r], [B, Lk, dr]
    up = (c @ layer.kv_up.weight.double().T).view(b, lk, h, 2, d)
    k_nope, v = up[..., 0, :].transpose(1, 2), up[..., 1, :].transpose(1, 2)  # [B, H, Lk, D]
    q_src = x.double() if layer.q_rank is None else rms(lin(x.double(), layer.q_down), layer.q_down_norm.weight, 1e-6)
    q = lin(q_src, layer.q).view(b, lq, h, d + dr).transpose(1, 2)  # [B, H, Lq, D + dr]
    q_rope, k_rope = q[..., d:], k_rope[:, None]  # the rotary parts: dr channels, one key shared by all heads
    if layer.rope is not None:
        q_rope, k_rope = layer.rope(q_rope, k_rope)
    q = torch.cat([q[..., :d], q_rope], -1)
    k = torch.cat([k_nope, k_rope.expand(b, h, lk, dr)], -1)
    s = q @ k.transpose(-2, -1) / math.sqrt(d + dr)
    if bias is not None:
        s = s + bias.dense(lq, lk).double()
    w = softmax_rows(s.masked_fill(~allowed, float("-inf")))
    return finish(layer, w @ v)


FORMULAS = {"gated": gated, "sinks": sinks, "differential": differential, "sigmoid": sigmoid, "mla": mla}
SEQ_LEN = 160  # the model's sequence length (sigmoid's n)

# every kind either reduces to MHA (test_kinds.py) or has its formula here
KINDS_WITHOUT_IDENTITY = [k for k in ATTENTION_KINDS if not reduces_to_mha(k)]


def test_every_kind_is_checked_against_mha_or_its_formula():
    assert set(KINDS_WITHOUT_IDENTITY) <= set(FORMULAS), "a new kind needs its formula here (or a way to be MHA)"
    assert set(FORMULAS) <= set(ATTENTION_KINDS)


# (name, options): self-attention cases at length L_SELF, cross-attention at (L_CROSS_Q, L_CROSS_K)
CASES = {
    "plain": {},
    "gqa-padding": {"kv": 2, "padding": True},
    "causal-alibi-rope": {"pattern": "causal", "bias": {"kind": "alibi"}, "rotary": "rope"},
    "window-t5-padding": {
        "pattern": {"kind": "sliding_window", "window": 20},
        "bias": {"kind": "t5", "num_buckets": 8, "max_distance": 32},
        "padding": True,
        "kv": 2,
    },
    "cross-padding": {"cross": True, "padding": True},
    "headwise-gate-qrank": {"gate": "headwise", "q_rank": 16, "kv": 2},  # options of gated and mla
}
L_SELF, L_CROSS_Q, L_CROSS_K = 150, 37, 130
RUNS_ON = {
    "gated": ("eager", "sdpa", "blocked"),
    "sinks": ("eager", "sdpa", "blocked"),
    "differential": ("eager", "sdpa", "blocked"),
    "sigmoid": ("eager", "blocked"),
    "mla": ("eager", "sdpa", "blocked"),
}


def make(kind, case, backend):
    cfg = {"kind": kind, "backend": backend, "qkv_bias": True}
    for key in ("pattern", "bias", "rotary"):
        cfg[key] = case.get(key)
    if case.get("kv") and kind != "mla":  # mla shares one latent instead of grouping heads (refused, see below)
        cfg["num_kv_heads"] = case["kv"]
    if case.get("cross"):
        cfg["context_dim"] = CTX
    if kind == "gated" and "gate" in case:
        cfg["gate"] = case["gate"]
    if kind == "mla" and "q_rank" in case:
        cfg["q_rank"] = case["q_rank"]
    layer = attention_layer(cfg, seq_len=SEQ_LEN)(DIM, HEADS)
    torch.manual_seed(1)
    randomize_extras(layer)  # the kind's own parameters away from their initial values
    if layer.bias is not None and any(True for _ in layer.bias.parameters()):
        with torch.no_grad():
            for p in layer.bias.parameters():
                p.normal_(0, 0.5)
    return layer


def inputs(case, grad=True):
    torch.manual_seed(0)
    lq, lk = (L_CROSS_Q, L_CROSS_K) if case.get("cross") else (L_SELF, L_SELF)
    x = torch.randn(2, lq, DIM, requires_grad=grad)
    ctx = torch.randn(2, lk, CTX, requires_grad=grad) if case.get("cross") else None
    pad = None
    if case.get("padding"):
        pad = torch.zeros(2, lk, dtype=torch.bool)
        pad[1, lk - lk // 3 :] = True
    return x, ctx, pad


def allowed_of(layer, case, lq, lk, pad):
    allowed = torch.ones(1, 1, lq, lk, dtype=torch.bool)
    if layer.pattern is not None:
        allowed = allowed & layer.pattern.dense_mask(lq, lk)
    if pad is not None:
        allowed = allowed & ~pad[:, None, None, :]
    return allowed


def check(kind, case, backend, backward=True):
    layer = make(kind, case, backend)
    x, ctx, pad = inputs(case, grad=backward)
    out = layer(x, ctx, key_padding_mask=pad)
    assert layer.backend_used.partition("[")[0] == backend
    # the formula, on a copy of the inputs, in float64
    x2 = x.detach().double().requires_grad_(backward)
    ctx2 = None if ctx is None else ctx.detach().double().requires_grad_(backward)
    allowed = allowed_of(layer, case, x.shape[1], (x if ctx is None else ctx).shape[1], pad)
    ref_layer = make(kind, case, "eager").double()
    ref_layer.load_state_dict(layer.state_dict())
    want = FORMULAS[kind](ref_layer, x2, ctx2, ref_layer.bias, allowed)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    if not backward:
        return
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (want * g.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x2.grad, atol=2e-5, rtol=1e-4)
    if ctx is not None:
        torch.testing.assert_close(ctx.grad.double(), ctx2.grad, atol=2e-5, rtol=1e-4)
    theirs = dict(ref_layer.named_parameters())
    for name, p in layer.named_parameters():
        assert p.grad is not None or theirs[name].grad is None, name
        if p.grad is not None:
            torch.testing.assert_close(p.grad.double(), theirs[name].grad, atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "kind, backend, case",
    [(k, b, c) for k, backends in RUNS_ON.items() for b in backends for c in CASES],
)
def test_kind_equals_its_formula_forward_and_backward(kind, backend, case):
    check(kind, CASES[case], backend)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("kind", list(FORMULAS))
@pytest.mark.parametrize("case", ["plain", "window-t5-padding", "cross-padding"])
def test_flex_wiring_equals_the_formula_forward(kind, case, monkeypatch):
    # torch's unfused flex reference: checks the kinds' score_mod, log-sum-exp rescaling and masks, not the kernel
    monkeypatch.setitem(BACKENDS, "flex", Flex(compile=False))
    with torch.no_grad():
        check(kind, CASES[case], "flex", backward=False)


def test_sink_group_kernel_explicit_path_equals_the_fused_one():
    # the blocked backend writes the formula out per group with dropout and off CPU; without dropout on CPU it runs
    # the fused form: the two must agree
    from types import SimpleNamespace

    from attnzoo.attention.blocked import _explicit, _transformed
    from attnzoo.attention.variants.sinks import SinkWeights

    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 4, 16, 8, requires_grad=True) for _ in range(3))
    sinks = torch.randn(4, requires_grad=True)
    transform = SinkWeights(SimpleNamespace(sinks=sinks))
    mask = torch.zeros(6, 1, 16, 16).masked_fill(torch.rand(6, 1, 16, 16) < 0.3, float("-inf"))
    mask[..., 0] = 0.0
    fused = _transformed(q, k, v, mask, 0.0, 0.3, transform)
    explicit = _explicit(q, k, v, mask, 0.0, 0.3, transform)
    torch.testing.assert_close(fused, explicit)
    grads = torch.autograd.grad(fused.sum(), (q, k, v, sinks))
    for got, want in zip(grads, torch.autograd.grad(explicit.sum(), (q, k, v, sinks)), strict=True):
        torch.testing.assert_close(got, want)


def _layer(kind, **options):
    return attention_layer({"kind": kind, **options}, seq_len=SEQ_LEN)(DIM, HEADS)


@pytest.mark.parametrize(
    "kind, options, match",
    [
        ("sigmoid", {"backend": "sdpa"}, "compute a softmax inside"),
        ("sinks", {"backend": "sdpa", "attn_drop": 0.1}, "without attention dropout"),  # not at the first step
        ("sigmoid", {"backend": "flash"}, "compute a softmax inside"),
        ("sinks", {"backend": "flash"}, "takes no sink logits"),
        ("mla", {"qk_norm": True}, "qk_norm must be off"),
        ("mla", {"num_kv_heads": 2}, "num_kv_heads must be unset or num_heads"),
        ("mla", {"rope_dim": 3}, "rope_dim must be even"),
        ("gated", {"gate": "channel"}, "gate must be one of"),
    ],
)
def test_what_each_kind_refuses_when_built(kind, options, match):
    with pytest.raises(ValueError, match=match):
        _layer(kind, **options)


def test_refusals_name_the_values():
    from attnzoo.attention.rotary import Rotary
    from attnzoo.attention.variants import DifferentialAttention, MultiHeadLatentAttention, SigmoidAttention

    with pytest.raises(ValueError, match="needs seq_len"):
        SigmoidAttention(DIM, HEADS)  # b = -log n needs n
    assert SigmoidAttention(DIM, HEADS, b=-2.0).b == -2.0
    with pytest.raises(ValueError, match=r"head_dim \(dim / num_heads = 9\) must be a multiple of 2"):
        DifferentialAttention(36, 4)
    with pytest.raises(ValueError, match="multiple of 4 with rotary"):
        DifferentialAttention(24, 4, rotary=Rotary(head_dim=6))
    with pytest.raises(ValueError, match="build its rotary with head_dim=4"):
        MultiHeadLatentAttention(DIM, HEADS, rotary=Rotary(head_dim=8))
    with pytest.raises(ValueError, match="lambda_init must be a finite number or None.*got nan"):
        DifferentialAttention(DIM, HEADS, lambda_init=float("nan"))  # every output was nan


@pytest.mark.parametrize("args, match", [((32, 4.0), "num_heads must be an int > 0, got 4.0"),
                                         ((0, 4), "dim must be an int > 0, got 0"),
                                         ((32, 4, 2.0), "num_kv_heads must be an int > 0, got 2.0"),
                                         ((32, True), "num_heads must be an int > 0, got True")])  # fmt: skip
def test_sizes_that_are_no_whole_numbers_are_named(args, match):
    # Attention(32, 4.0) failed inside torch.empty (TypeError), Attention(0, 4) with a ZeroDivisionError
    from attnzoo.attention import Attention

    dim, heads, *kv = args
    with pytest.raises(ValueError, match=match):
        Attention(dim, heads, num_kv_heads=kv[0] if kv else None)


def test_what_each_kind_refuses_at_call_time():
    x = torch.randn(2, 16, DIM)
    with pytest.raises(ValueError, match="cannot run this call.*weights"):
        _layer("sinks", backend="sdpa")(x, return_weights=True)
    for kind in ("sinks", "sigmoid"):  # compiled flex on CPU: no log-sum-exp in torch 2.14
        with torch.no_grad(), pytest.raises(ValueError, match="cannot return the log-sum-exp"):
            _layer(kind, backend="flex")(x)


@pytest.mark.parametrize(
    "kind, options, train, weights, used",
    [
        ("sinks", {}, True, False, "sdpa[sinks]"),
        ("sinks", {"pattern": {"kind": "sliding_window", "window": 16}}, True, False, "blocked[sinks]"),
        ("sinks", {}, False, True, "eager[sinks]"),
        ("sinks", {"attn_drop": 0.1}, True, False, "eager[sinks]"),
        (
            "sinks",
            {"attn_drop": 0.1, "pattern": {"kind": "sliding_window", "window": 16}},
            True,
            False,
            "blocked[sinks]",
        ),
        ("sigmoid", {}, True, False, "eager[sigmoid]"),
        ("sigmoid", {"pattern": {"kind": "sliding_window", "window": 16}}, True, False, "blocked[sigmoid]"),
        ("gated", {}, True, False, "sdpa"),
        ("differential", {"pattern": {"kind": "sliding_window", "window": 16}}, True, False, "blocked"),
        ("mla", {}, True, False, "sdpa"),
    ],
)
def test_auto_picks_and_reports_the_backend(kind, options, train, weights, used):
    layer = _layer(kind, **options).train(train)
    x = torch.randn(2, 640, DIM, requires_grad=train)  # long enough for a window of 16 to be sparse
    out = layer(x, return_weights=weights)
    out = out[0] if weights else out
    assert layer.backend_used == used and torch.isfinite(out).all()
    if train:
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


def test_differential_lambda_init_follows_the_layer_depth():
    cls = attention_layer({"kind": "differential"})
    layers = [cls(DIM, HEADS) for _ in range(4)]
    assert [layer.lambda_init for layer in layers] == [lambda_init_of(i) for i in range(4)]
    assert lambda_init_of(0) == pytest.approx(0.2) and lambda_init_of(30) == pytest.approx(0.8, abs=1e-3)
    assert attention_layer({"kind": "differential", "lambda_init": 0.5})(DIM, HEADS).lambda_init == 0.5


def test_gated_gate_sizes():
    assert _layer("gated").gate.out_features == DIM
    assert _layer("gated", gate="headwise").gate.out_features == HEADS


def test_mla_cache_keeps_the_latent_and_rotary_key_only():
    layer = _layer("mla", pattern="causal", rotary="rope", kv_rank=12).eval()
    mha = _layer("mha", pattern="causal").eval()
    x = torch.randn(2, 9, DIM)
    caches = {}
    for name, attn in (("mla", layer), ("mha", mha)):
        cache = attn.new_cache()
        with torch.no_grad():
            attn(x, cache=cache)
        caches[name] = cache
    assert caches["mla"].nbytes() == 2 * 9 * (12 + layer.rope_dim) * 4  # r + dr numbers per token, fp32
    assert caches["mha"].nbytes() == 2 * 9 * 2 * DIM * 4  # 2 H D
    assert caches["mla"].v.shape[-1] == 0  # values are the latent part of the cached keys


def test_sigmoid_b_is_minus_log_seq_len_and_padding_free():
    layer = _layer("sigmoid")
    assert layer.b == pytest.approx(-math.log(SEQ_LEN))
    assert "sigmoid" in ATTENTION_KINDS and isinstance(layer, Attention)
