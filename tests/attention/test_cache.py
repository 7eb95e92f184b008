"""Incremental decoding in the attention core: every kind, pattern, bias and rotary in the registries either
decodes exactly as a full forward does, or refuses with a clear error; caches keep what they should."""

import itertools

import pytest
import torch

import attnzoo.attention.attention as attention_module
from attnzoo.attention import ATTENTION_KINDS, BACKENDS, PATTERNS, Attention, Causal, SlidingWindow
from attnzoo.attention.backends import Request
from attnzoo.attention.biases import BIASES, ALiBi, T5RelativeBias
from attnzoo.attention.cache import CrossKVCache, KVCache, SlidingWindowKVCache
from attnzoo.attention.factory import attention_layer
from attnzoo.attention.flex import Flex
from attnzoo.attention.patterns import And, BigBird, GlobalTokens, KeyPadding, RandomBlocks, Shifted
from attnzoo.attention.positions import Learned, Sinusoidal
from attnzoo.attention.rotary import ROTARY
from attnzoo.attention.specs import build

DIM, HEADS = 32, 4

# one or more example specs per registered pattern: a new pattern must add its examples here
PATTERN_EXAMPLES = {
    "causal": ["causal"],
    "sliding_window": [
        {"kind": "sliding_window", "window": 3, "causal": True},
        {"kind": "sliding_window", "window": 3},
    ],
    "dilated": [{"kind": "dilated", "window": 2, "dilation": 2, "causal": True}, {"kind": "dilated", "window": 2}],
    "global": [{"kind": "global", "tokens": [0]}],
    "bigbird": [{"kind": "bigbird", "window": 2, "block": 4, "num_random": 1}],
    "block_local": [{"kind": "block_local", "block": 4}],
    "random_blocks": [{"kind": "random_blocks", "block": 4, "num_random": 1}],
}
BIAS_EXAMPLES = {
    "t5": {"kind": "t5", "bidirectional": False, "num_buckets": 8, "max_distance": 16},
    "alibi": {"kind": "alibi", "bidirectional": False},
    "relative_2d": {"kind": "relative_2d", "grid_size": 3},
}
ROTARY_EXAMPLES = {"rope": "rope", "rope_2d": {"kind": "rope_2d", "grid_size": 3}}


def test_every_registered_part_has_an_example():
    assert set(PATTERN_EXAMPLES) == set(PATTERNS)
    assert set(BIAS_EXAMPLES) == set(BIASES)
    assert set(ROTARY_EXAMPLES) == set(ROTARY)


def _layer(kind="mha", *, pattern="causal", bias=None, rotary=None, kv=HEADS, cross=False, seq_len=16):
    cfg = {"kind": kind, "pattern": pattern, "bias": bias, "rotary": rotary, "num_kv_heads": kv, "qkv_bias": True}
    if cross:
        cfg["context_dim"] = 24
    layer = attention_layer(cfg, seq_len=seq_len, grid_size=3)(DIM, HEADS).eval()
    with torch.no_grad():  # move kind-specific parts away from the identity, so they matter
        shared = set(Attention(DIM, HEADS, qkv_bias=True).state_dict())
        for name, p in layer.named_parameters():
            if name not in shared and not name.startswith(("kv.", "q.")):
                p.add_(torch.randn_like(p) * 0.3)
    return layer


def _incremental(layer, x, context=None, pad=None, chunks=(3, 1, 2)):
    """Feed x in chunks (a prompt, then single tokens and small groups) through a fresh cache."""
    cache = layer.new_cache()
    outs, at, sizes = [], 0, itertools.cycle(chunks)
    while at < x.shape[1]:
        n = min(next(sizes), x.shape[1] - at)
        ctx = context if at == 0 else None  # cross-attention projects the source once
        outs.append(layer(x[:, at : at + n], ctx, key_padding_mask=pad, cache=cache))
        at += n
    return torch.cat(outs, dim=1), cache


def _decodable(layer) -> bool:
    return layer.cannot_decode() is None


# (kind, pattern spec, bias spec, rotary spec, kv heads): every kind x every pattern example, then every bias and
# rotary with the causal pattern, GQA throughout
SELF_CASES = [
    (kind, pattern, None, None, 2)
    for kind in ATTENTION_KINDS
    for specs in PATTERN_EXAMPLES.values()
    for pattern in specs
] + [
    (kind, "causal", bias, rotary, kv)
    for kind in ATTENTION_KINDS
    for bias, rotary in [*((b, None) for b in BIAS_EXAMPLES.values()), *((None, r) for r in ROTARY_EXAMPLES.values())]
    for kv in (HEADS, 1)
]


def _id(case):
    kind, pattern, bias, rotary, kv = case
    name = lambda spec: spec if isinstance(spec, str) or spec is None else "-".join(map(str, spec.values()))
    return f"{kind}|{name(pattern)}|{name(bias)}|{name(rotary)}|kv{kv}"


@pytest.mark.parametrize("case", SELF_CASES, ids=_id)
def test_self_attention_decodes_exactly_or_refuses(case):
    kind, pattern, bias, rotary, kv = case
    try:
        layer = _layer(kind, pattern=pattern, bias=bias, rotary=rotary, kv=kv)
    except ValueError:  # the kind refuses the part altogether (linformer takes no pattern)
        return
    x = torch.randn(2, 11, DIM)
    reason = layer.cannot_decode()
    if reason is not None:
        with pytest.raises(ValueError, match="cannot decode incrementally"):
            layer.new_cache()
        cache = KVCache()
        with pytest.raises(ValueError, match="cannot decode incrementally"):
            layer(x[:, :1], cache=cache)
        return
    with torch.no_grad():
        full = layer(x)
        inc, cache = _incremental(layer, x)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
    # GQA caches its Hkv heads; mla caches one: its latent and rotary key, shared by all heads
    assert cache.offset == 11 and cache.k.shape[1] == (1 if kind == "mla" else kv)


def test_which_parts_decode():
    """The refusals the registries above rely on are the intended ones."""
    ok = lambda **kw: _layer(**kw).cannot_decode() is None
    assert ok(pattern="causal") and ok(pattern={"kind": "sliding_window", "window": 2, "causal": True})
    assert ok(pattern="causal", bias=BIAS_EXAMPLES["t5"]) and ok(pattern="causal", rotary="rope")
    assert ok(kind="dcmha") and ok(kind="talking_heads")
    assert not ok(pattern=None) and not ok(pattern={"kind": "sliding_window", "window": 2})
    assert not ok(pattern={"kind": "global", "tokens": [0]}) and ok(
        pattern={"kind": "dilated", "causal": True, "window": 1}
    )
    assert "later keys" in _layer(pattern={"kind": "block_local", "block": 4}).cannot_decode()
    assert (
        "bias RelativeBias2D is not defined over 1D positions"
        in _layer(bias=BIAS_EXAMPLES["relative_2d"]).cannot_decode()
    )
    assert "1D positions" in _layer(rotary=ROTARY_EXAMPLES["rope_2d"]).cannot_decode()
    linformer = _layer("linformer", pattern=None)
    with pytest.raises(ValueError, match="linformer projects keys and values along the whole sequence"):
        linformer.new_cache()


def test_decoding_patterns_compose():
    sw = SlidingWindow(window=3)
    assert (sw & Causal()).causal_only and (sw & Causal()).lookback == 3
    assert not (sw | Causal()).causal_only and (sw | Causal()).lookback is None
    assert (SlidingWindow(window=2, causal=True) | Causal() & sw).causal_only
    assert (GlobalTokens(tokens=[0]) & Causal()).causal_only
    assert not (RandomBlocks(block=4) & Causal()).causal_only  # drawn per length: a longer prefix redraws it
    assert not (BigBird(window=2, block=4) & Causal()).causal_only
    assert not (KeyPadding(torch.zeros(1, 4, dtype=torch.bool)) & Causal()).causal_only
    assert isinstance(And(Causal()).shifted(2, 1), Shifted) and Causal().shifted(0, 0).is_causal


@pytest.mark.parametrize("spec", [s for specs in PATTERN_EXAMPLES.values() for s in specs], ids=str)
def test_shifted_pattern_is_a_block_of_the_full_mask(spec):
    pattern = build(spec, PATTERNS, "pattern")
    if isinstance(pattern, RandomBlocks | BigBird):
        pattern = pattern.bind(12, 12)
    full = pattern.dense_mask(12, 12)
    assert torch.equal(pattern.shifted(5, 2).dense_mask(4, 9), full[5:9, 2:11])
    assert torch.equal(pattern.shifted(5, 2).shifted(1, 1).dense_mask(3, 8), full[6:9, 3:11])


@pytest.mark.parametrize("bias", [T5RelativeBias(num_heads=4, bidirectional=False), ALiBi(num_heads=4)])
def test_shifted_bias_is_a_block_of_the_dense_bias(bias):
    full = bias.dense(12, 12)
    torch.testing.assert_close(bias.shifted(5, 2, 4, 9), full[:, 5:9, 2:11])
    assert bias.shifted(0, 0, 12, 12) is bias


def test_positions_continue_from_an_offset():
    x = torch.randn(2, 10, 8)
    for pos in (Sinusoidal(dim=8), Learned(dim=8, max_len=10)):
        torch.testing.assert_close(pos(x[:, 6:], offset=6), pos(x)[:, 6:])
    with pytest.raises(ValueError, match="3 tokens from position 8 exceed max_len 10"):
        Learned(dim=8, max_len=10)(x[:, :3], offset=8)


@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_cross_attention_projects_the_source_once(kind):
    layer = _layer(kind, pattern=None, cross=True, kv=HEADS if kind == "mla" else 2, rotary=None)  # mla: no GQA
    calls = []
    layer.kv.register_forward_hook(lambda *args: calls.append(1))
    x, context = torch.randn(3, 7, DIM), torch.randn(3, 5, 24)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    with torch.no_grad():
        full = layer(x, context, key_padding_mask=pad)
        calls.clear()
        inc, cache = _incremental(layer, x, context, pad)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
    assert len(calls) == 1 and isinstance(cache, CrossKVCache) and cache.offset == 7


def test_cross_attention_rotary_and_bias_read_the_query_positions():
    layer = _layer(pattern=None, cross=True, rotary="rope", bias=BIAS_EXAMPLES["alibi"])
    x, context = torch.randn(2, 6, DIM), torch.randn(2, 5, 24)
    with torch.no_grad():
        torch.testing.assert_close(_incremental(layer, x, context)[0], layer(x, context), atol=1e-5, rtol=1e-5)


def test_sliding_window_cache_memory_stays_bounded():
    layer = _layer(pattern={"kind": "sliding_window", "window": 3, "causal": True}, kv=2)
    cache = layer.new_cache()
    assert isinstance(cache, SlidingWindowKVCache) and cache.window == 4
    sizes = []
    with torch.no_grad():
        layer(torch.randn(2, 9, DIM), cache=cache)  # a long prompt is cut to the window after the call
        for _ in range(40):
            layer(torch.randn(2, 1, DIM), cache=cache)
            sizes.append(cache.nbytes())
    assert cache.length == 3 and cache.offset == 49  # the W - 1 keys the next token reads besides itself
    assert len(set(sizes)) == 1 and sizes[0] == 2 * 2 * 2 * 3 * (DIM // HEADS) * 4  # k, v: [B, Hkv, W - 1, D] fp32
    full = _layer(pattern="causal", kv=2).new_cache()
    assert type(full) is KVCache


def test_a_step_writes_into_the_buffers_it_has_and_they_grow_by_doubling():
    cache, allocations = KVCache(), []
    for step in range(40):
        k = torch.full((2, 1, 1, 4), float(step))
        keys, values = cache.update(k, -k)
        allocations.append(cache._k.data_ptr())
        assert keys.shape[2] == step + 1 and torch.equal(keys[0, 0, :, 0], torch.arange(step + 1.0))
        torch.testing.assert_close(values, -keys)
    assert len(set(allocations)) <= 3  # 17, 35, 71 slots: 40 steps, 3 buffers (not a copy of the cache per step)
    assert cache._k.shape[2] % 2  # an odd capacity (power-of-two strides make CPU sdpa slower)
    window = SlidingWindowKVCache(window=4)
    for step in range(100):
        keys, _ = window.update(torch.full((1, 1, 1, 2), float(step)), torch.zeros(1, 1, 1, 2))
    assert keys[0, 0, :, 0].tolist() == [96.0, 97.0, 98.0, 99.0] and window.k[0, 0, :, 0].tolist() == [97, 98, 99]
    assert window._k.shape[2] == 17  # O(window): the kept keys move to the front of the same-size buffer


def test_reorder_in_place_keeps_decoding_exact():
    layer = _layer(pattern="causal")
    x = torch.randn(3, 6, DIM)
    with torch.no_grad():
        cache = layer.new_cache()
        layer(x[:, :4], cache=cache)
        buffer = cache._k.data_ptr()
        cache.reorder(torch.tensor([1, 0, 0]))
        assert cache._k.data_ptr() == buffer  # same rows: written into the same buffer
        steps = [layer(x[[1, 0, 0], i : i + 1], cache=cache) for i in (4, 5)]
        ref = layer(x[[1, 0, 0]])[:, 4:]
    torch.testing.assert_close(torch.cat(steps, dim=1), ref, atol=1e-5, rtol=1e-5)


def test_dcmha_keeps_its_key_state_in_a_sliding_window():
    layer = _layer("dcmha", pattern={"kind": "sliding_window", "window": 2, "causal": True})
    x = torch.randn(2, 12, DIM)
    with torch.no_grad():
        inc, cache = _incremental(layer, x)
        torch.testing.assert_close(inc, layer(x), atol=1e-5, rtol=1e-5)
    assert set(cache.state) == {"pre", "post"} and all(t.shape[1] == 2 for t in cache.state.values())


def test_cache_reorder_selects_rows():
    layer = _layer(pattern="causal")
    x = torch.randn(3, 5, DIM)
    with torch.no_grad():
        cache = layer.new_cache()
        layer(x, cache=cache)
        cache.reorder(torch.tensor([2, 2, 0]))
        step = layer(x[[2, 2, 0], :1], cache=cache)
        ref = layer(torch.cat([x[[2, 2, 0]], x[[2, 2, 0], :1]], dim=1))[:, -1:]
    torch.testing.assert_close(step, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cross", [True, False])
def test_decoding_cache_reorder_leaves_cross_attention_alone_when_asked(cross):
    from attnzoo.attention.cache import BlockCache, DecodingCache

    self_attn, cross_attn = KVCache(), CrossKVCache()
    rows = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 4)  # row i holds i everywhere
    self_attn.update(rows, rows)
    cross_attn.keys(lambda: (rows.clone(), rows.clone()))
    cache = DecodingCache([BlockCache(self_attn=self_attn, cross_attn=cross_attn)])
    cache.reorder(torch.tensor([2, 2, 0]), cross=cross)
    assert self_attn.k[:, 0, 0, 0].tolist() == [2, 2, 0]
    assert cross_attn.k[:, 0, 0, 0].tolist() == ([2, 2, 0] if cross else [0, 1, 2])


def test_cache_misuse_is_a_clear_error():
    layer = _layer(pattern="causal")
    x = torch.randn(2, 3, DIM)
    with pytest.raises(ValueError, match="no attn_mask, bias tensor or self-attention key_padding_mask"):
        layer(x, attn_mask=torch.ones(3, 3, dtype=torch.bool), cache=layer.new_cache())
    with pytest.raises(ValueError, match="no attn_mask, bias tensor"):
        layer(x, bias=torch.zeros(4, 3, 3), cache=layer.new_cache())
    with pytest.raises(ValueError, match="self-attention takes a KVCache"):
        layer(x, cache=CrossKVCache())
    with pytest.raises(ValueError, match=r"window=2\) is too small .* needs window >= 4"):
        _layer(pattern={"kind": "sliding_window", "window": 3, "causal": True})(x, cache=SlidingWindowKVCache(window=2))
    cache = layer.new_cache()
    with torch.no_grad():
        layer(x, cache=cache)
        with pytest.raises(ValueError, match="a cache belongs to one layer and one batch"):
            layer(torch.randn(3, 1, DIM), cache=cache)
    cross = _layer(pattern=None, cross=True)
    with pytest.raises(ValueError, match="the first call with an empty CrossKVCache needs the context"):
        cross(x, None, cache=cross.new_cache())
    with pytest.raises(ValueError, match="slidingwindow|window must be an int"):
        SlidingWindowKVCache(window=0)


def test_a_kind_overriding_the_old_attend_hook_is_told_the_new_one():
    with pytest.raises(TypeError, match=r"override attend_heads\(q, k, v, call\)"):

        class Old(Attention):
            def _attend(self, q, k, v, **kwargs):
                return super()._attend(q, k, v, **kwargs)


def test_a_user_kind_overriding_attend_heads_decodes_with_the_cache_in_its_call():
    seen = []

    class Scaled(Attention):  # a kind changing what attention returns: the small hook, four arguments
        def attend_heads(self, q, k, v, call):
            seen.append(call.cache)
            out, weights = super().attend_heads(q, k, v, call)
            return 2 * out, weights

    ref, layer = Attention(DIM, HEADS, pattern=Causal()), Scaled(DIM, HEADS, pattern=Causal())
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, DIM)
    with torch.no_grad():
        want = 2 * (ref(x) - ref.proj.bias) + ref.proj.bias  # proj(2 a) of the full forward's a
        got, _ = _incremental(layer, x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert len(seen) == 3 and all(isinstance(c, KVCache) for c in seen)  # three chunks, one cache


def _decode_request(backend: str) -> bool:
    req = Request("cpu", False, False, Causal(), None, False, 1, 9, dtype=torch.float32, head_dim=DIM // HEADS)
    return BACKENDS[backend].supports(req) is None


@pytest.mark.parametrize("backend", [b for b in BACKENDS if _decode_request(b)])
@pytest.mark.parametrize("bias", [None, BIAS_EXAMPLES["t5"]], ids=["nobias", "t5"])
def test_every_backend_decodes_as_eager(backend, bias, monkeypatch):
    if backend == "flex":  # the uncompiled reference: CPU flex compiles once per new length (each decoding step)
        monkeypatch.setitem(BACKENDS, "flex", Flex(compile=False))
    pattern = {"kind": "dilated", "window": 2, "dilation": 2, "causal": True}  # a mask inside the window every step
    ref = _layer(pattern=pattern, bias=bias, kv=2)
    layer = _layer(pattern=pattern, bias=bias, kv=2)
    layer.load_state_dict(ref.state_dict())
    ref.backend, layer.backend = "eager", backend
    x = torch.randn(2, 10, DIM)
    with torch.no_grad():
        want, _ = _incremental(ref, x)
        got, _ = _incremental(layer, x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert layer.backend_used == backend


@pytest.mark.parametrize("kv", [HEADS, 2], ids=["mha", "gqa"])
def test_plain_decoding_steps_call_sdpa_directly_and_compute_what_attend_computes(kv, monkeypatch):
    """One-token causal steps are plain (no mask, bias, padding or weights): the first goes through `attend`, which
    chooses sdpa on the CPU, and the others call torch's kernel directly, with the same outputs to the bit."""
    layer = _layer(rotary="rope", kv=kv)
    x = torch.randn(2, 10, DIM)
    calls = []
    real = attention_module.attend
    monkeypatch.setattr(attention_module, "attend", lambda *a, **kw: calls.append(kw["backend"]) or real(*a, **kw))
    with torch.no_grad():
        got, cache = _incremental(layer, x, chunks=(1,))
    assert cache.plain_backend == (("auto", "cpu", torch.float32, DIM // HEADS), "sdpa")
    assert calls == ["auto"] and layer.backend_used == "sdpa"
    calls.clear()
    monkeypatch.setattr(Attention, "_plain_step", lambda self, call: False)  # attend every step
    with torch.no_grad():
        want, _ = _incremental(layer, x, chunks=(1,))
    assert len(calls) == 10 and torch.equal(got, want)


def test_a_step_that_is_not_plain_or_another_backend_goes_through_attend(monkeypatch):
    calls = []
    real = attention_module.attend
    monkeypatch.setattr(attention_module, "attend", lambda *a, **kw: calls.append(kw["backend"]) or real(*a, **kw))
    layer = _layer()
    layer.backend = "eager"  # asked for: every step runs it
    x = torch.randn(2, 6, DIM)
    with torch.no_grad():
        _, cache = _incremental(layer, x, chunks=(1,))
    assert calls == ["eager"] * 6 and cache.plain_backend[1] == "eager" and layer.backend_used == "eager"
    calls.clear()
    layer.backend = "auto"
    with torch.no_grad():
        _, cache = _incremental(layer, x, chunks=(3, 1))  # 3, 1 and 2 tokens: the 1 is the first plain step
        assert calls == ["auto"] * 3 and cache.plain_backend[1] == "sdpa"
        calls.clear()
        with torch.enable_grad():  # a step with gradients on is not plain: attend chooses for it
            layer(x[:, :1], cache=cache)
    assert calls == ["auto"]
