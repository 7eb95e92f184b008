"""Property test: random attention configurations drawn from the registries are finite and equal to eager.

Heads (grouped-query too), lengths, a pattern from PATTERNS (with example options; optionally composed with
causal), a bias from BIASES, key padding (up to fully padded items) and a backend from BACKENDS are drawn
together, so a new entry in any registry is exercised with no new test code. Backends that train on CPU are
checked forward and backward; flex runs torch's unfused reference on CPU (its compiled form takes ~20 s per
shape) and forward only (no CPU backward on this torch).
"""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnzoo.attention import BACKENDS, Causal, attend
from attnzoo.attention.backends import Request, backend_name
from attnzoo.attention.biases import BIASES
from attnzoo.attention.flex import Flex
from attnzoo.attention.patterns import PATTERNS
from attnzoo.attention.specs import build
from tests.helpers.patterns import EXAMPLES

D = 8


@st.composite
def configs(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    length = draw(st.integers(1, 160))
    pattern_name = draw(st.sampled_from(["none", *PATTERNS]))
    bias_name = draw(st.sampled_from(["none", *BIASES]))
    if bias_name == "relative_2d" and length < 2:  # a grid of patches after one prefix token
        length = 2
    pad_lengths = draw(st.lists(st.integers(0, length), min_size=1, max_size=3))  # 0: every key padded
    return dict(
        heads=heads,
        kv_heads=kv_heads,
        length=length,
        pattern=pattern_name,
        causal=draw(st.booleans()),
        bias=bias_name,
        pad_lengths=pad_lengths if draw(st.booleans()) else None,
        backend=draw(st.sampled_from(sorted(BACKENDS))),
        seed=draw(st.integers(0, 2**16)),
    )


def _pattern(cfg):
    pattern = None
    if cfg["pattern"] != "none":
        pattern = build({"kind": cfg["pattern"], **EXAMPLES[cfg["pattern"]]}, PATTERNS, f"pattern {cfg['pattern']}")
    if cfg["causal"]:
        pattern = Causal() if pattern is None else pattern & Causal()
    return pattern


def _bias(cfg):
    if cfg["bias"] == "none":
        return None
    patches = cfg["length"] - 1
    rows = next(a for a in range(int(patches**0.5), 0, -1) if patches % a == 0) if patches else 1
    context = dict(
        num_heads=cfg["heads"],
        head_dim=D,
        dim=cfg["heads"] * D,
        grid_size=(rows, max(patches // rows, 1)),
        num_prefix_tokens=1,
    )
    bias = build(cfg["bias"], BIASES, f"bias {cfg['bias']}", **context)
    with torch.no_grad():  # learned biases start at zero: make them matter
        for p in bias.parameters():
            p.normal_()
    return bias


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs())
def test_random_attention_configs_are_finite_and_equal_eager(cfg):
    torch.manual_seed(cfg["seed"])
    b, length = len(cfg["pad_lengths"] or [2]), cfg["length"]
    pattern, bias = _pattern(cfg), _bias(cfg)
    pad = None
    if cfg["pad_lengths"] is not None:
        pad = torch.arange(length)[None, :] >= torch.tensor(cfg["pad_lengths"])[:, None]  # [B, L], True = pad
    backend = BACKENDS[cfg["backend"]]
    req = Request("cpu", True, False, pattern, bias, pad is not None, length, length, dtype=torch.float32, head_dim=D)
    backward = backend.supports(req) is None
    if not backward and backend.supports(Request(**{**req.__dict__, "needs_grad": False})) is not None:
        return  # this backend declines the configuration (say why is its own tests' job)

    q = torch.randn(b, cfg["heads"], length, D, requires_grad=True)  # [B, H, L, D]
    k = torch.randn(b, cfg["kv_heads"], length, D, requires_grad=True)  # [B, Hkv, L, D]
    v = torch.randn(b, cfg["kv_heads"], length, D, requires_grad=True)
    leaves = [q, k, v, *(bias.parameters() if bias is not None else [])]
    ref, _, _ = attend(q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, backend="eager")
    if not backward:
        q, k, v = q.detach(), k.detach(), v.detach()
    if isinstance(backend, Flex):  # uncompiled: torch's unfused flex reference checks our wiring
        with torch.set_grad_enabled(backward):
            out, _ = Flex(compile=False)(
                q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, dropout_p=0.0, scale=D**-0.5,
                return_weights=False,
            )  # fmt: skip
    else:
        with torch.set_grad_enabled(backward):
            out, _, used = attend(q, k, v, pattern=pattern, bias=bias, key_padding_mask=pad, backend=cfg["backend"])
        assert backend_name(used) == cfg["backend"]
    assert torch.isfinite(ref).all() and torch.isfinite(out).all(), cfg
    if pad is not None:  # items whose keys are all padding read nothing: zeros, not NaN
        assert (out[pad.all(dim=1)] == 0).all(), cfg
    torch.testing.assert_close(out, ref, atol=3e-5, rtol=1e-4, msg=lambda m: f"{cfg}\n{m}")
    if backward:
        grad_out = torch.randn_like(ref)
        want = torch.autograd.grad(ref, leaves, grad_out, allow_unused=True)
        got = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
        for name, a, w in zip(["q", "k", "v", "bias"], got, want, strict=False):
            if w is None:
                continue
            assert a is not None and torch.isfinite(a).all(), (name, cfg)
            torch.testing.assert_close(a, w, atol=1e-4, rtol=1e-3, msg=lambda m, n=name: f"d{n} {cfg}\n{m}")
