"""DecoderBlock and Decoder: masking, cross-attention with padding, incremental decoding, checkpointing parity."""

import pytest
import torch
from timm.layers import Mlp

from attnzoo.attention import Attention, Causal, SlidingWindow
from attnzoo.attention.cache import DecodingCache
from attnzoo.attention.patterns import And
from attnzoo.layers import Decoder, DecoderBlock, make_decoder

DIM, HEADS = 32, 4


def _decoder(cross=True, **kw):
    return make_decoder(dim=DIM, depth=3, num_heads=HEADS, cross=cross, **kw)


def _inputs(batch=3, length=9, source=6):
    x, memory = torch.randn(batch, length, DIM), torch.randn(batch, source, DIM)
    pad = torch.arange(source)[None, :] >= torch.tensor([source, 4, 1])[:batch, None]  # [B, S], True = pad
    return x, memory, pad


def test_block_refuses_self_attention_that_reads_ahead():
    mlp = Mlp(DIM, 2 * DIM)
    with pytest.raises(ValueError, match="self-attention must be masked"):
        DecoderBlock(dim=DIM, attn=Attention(DIM, HEADS), mlp=mlp)
    with pytest.raises(ValueError, match="self-attention must be masked"):
        DecoderBlock(dim=DIM, attn=Attention(DIM, HEADS, pattern=SlidingWindow(window=2)), mlp=mlp)
    with pytest.raises(ValueError, match="cross_attn must be built for cross-attention"):
        DecoderBlock(dim=DIM, attn=Attention(DIM, HEADS, pattern=Causal()), cross_attn=Attention(DIM, HEADS), mlp=mlp)


def test_make_decoder_makes_self_attention_causal():
    plain = _decoder()
    assert all(isinstance(b.attn.pattern, Causal) for b in plain.blocks)
    windowed = _decoder(attention={"pattern": {"kind": "sliding_window", "window": 2}})
    pattern = windowed.blocks[0].attn.pattern
    assert isinstance(pattern, And) and pattern.causal_only and pattern.lookback == 2
    with pytest.raises(ValueError, match="linformer' cannot use a pattern"):
        _decoder(attention={"kind": "linformer"}, layer_shape={"seq_len": 16})


@pytest.mark.parametrize("cross", [True, False], ids=["seq2seq", "decoder-only"])
def test_no_position_reads_a_later_one(cross):
    dec = _decoder(cross=cross).eval()
    x, memory, pad = _inputs()
    memory = memory if cross else None
    pad = pad if cross else None
    changed = x.clone()
    changed[:, 5:] = torch.randn_like(changed[:, 5:])
    with torch.no_grad():
        a, b = dec(x, memory, pad), dec(changed, memory, pad)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_padded_source_positions_change_nothing():
    dec = _decoder().eval()
    x, memory, pad = _inputs()
    garbage = memory.masked_fill(pad[..., None], 1e3)
    with torch.no_grad():
        torch.testing.assert_close(dec(x, memory, pad), dec(x, garbage, pad))
        alone = dec(x[1:2], memory[1:2, :4])  # row 1 has 4 real source tokens
    torch.testing.assert_close(dec(x, memory, pad)[1:2], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "attention",
    [
        None,
        {"num_kv_heads": 2, "rotary": "rope"},
        {"bias": "alibi", "pattern": {"kind": "sliding_window", "window": 3}},
    ],
    ids=["mha", "gqa-rope", "alibi-window"],
)
def test_incremental_decoding_equals_the_full_forward(attention):
    dec = _decoder(attention=attention).eval()
    x, memory, pad = _inputs()
    cache = dec.new_cache()
    assert isinstance(cache, DecodingCache) and cache.offset == 0
    with torch.no_grad():
        full = dec(x, memory, pad)
        steps = [dec(x[:, :4], memory, pad, cache=cache)]
        steps += [dec(x[:, i : i + 1], None, pad, cache=cache) for i in range(4, 9)]  # the source was projected once
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.offset == 9 and cache.nbytes() > 0


def test_shared_bias_decodes():
    from attnzoo.attention.biases import T5RelativeBias

    bias = T5RelativeBias(num_heads=HEADS, bidirectional=False)
    blocks = list(_decoder().blocks)
    dec = Decoder(blocks, norm=torch.nn.LayerNorm(DIM), shared_bias=bias).eval()
    x, memory, pad = _inputs()
    with torch.no_grad():
        full = dec(x, memory, pad)
        cache = dec.new_cache()
        inc = torch.cat([dec(x[:, i : i + 1], memory, pad, cache=cache) for i in range(9)], dim=1)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)


def test_cache_from_another_decoder_is_refused():
    dec = _decoder()
    with pytest.raises(ValueError, match="cache has 1 blocks, this decoder 3"):
        dec(torch.randn(1, 1, DIM), torch.randn(1, 2, DIM), cache=DecodingCache(dec.new_cache().blocks[:1]))
    with pytest.raises(ValueError, match="pass memory"):
        dec(torch.randn(1, 1, DIM))


@pytest.mark.parametrize("shared", [False, True], ids=["own_biases", "shared_t5"])
@pytest.mark.parametrize("mode", [{"every": 1}, {"every": 2}, {"every": 1, "attention_only": True}], ids=str)
def test_grad_checkpointing_gives_identical_outputs_and_grads(mode, shared):
    from attnzoo.attention.biases import T5RelativeBias

    torch.manual_seed(0)
    dec = _decoder(attention={"num_kv_heads": 2}).train()  # dropout-free: same outputs on and off
    if shared:  # one trained T5 bias for every layer (T5's decoder)
        bias = T5RelativeBias(num_heads=HEADS, bidirectional=False)
        dec = Decoder(list(dec.blocks), norm=dec.norm, shared_bias=bias).train()
    x, memory, pad = _inputs()
    x.requires_grad_(True)
    memory.requires_grad_(True)

    def run():
        for t in (x, memory, *dec.parameters()):
            t.grad = None
        out = dec(x, memory, pad)
        out.square().mean().backward()
        return out.detach(), [t.grad.clone() for t in (x, memory, *dec.parameters())]

    calls = []
    dec.blocks[0].cross_attn.register_forward_pre_hook(lambda *args: calls.append(1))
    out_off, grads_off = run()
    assert len(calls) == 1
    dec.set_grad_checkpointing(True, **mode)
    out_on, grads_on = run()
    assert len(calls) == 3  # recomputed in backward: checkpointing is on
    assert torch.equal(out_on, out_off)
    for a, b in zip(grads_on, grads_off, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_a_decoder_built_in_python_names_a_pattern_that_cannot_be_made_causal():
    # built from Python (not a config), BigBird's random blocks stopped in DecoderBlock: "self-attention must be
    # masked (a causal pattern), got pattern And(BigBird(...), Causal())", though the pattern shown was masked
    from attnzoo.models import CausalLM

    bigbird = {"kind": "bigbird", "window": 2, "global_tokens": [0], "num_random": 1, "block": 4}
    with pytest.raises(ValueError, match="cannot be made causal for a decoder.*random blocks are drawn"):
        CausalLM(vocab_size=50, max_len=40, dim=32, depth=2, num_heads=4, attention={"pattern": bigbird})
    with pytest.raises(ValueError, match="cannot be made causal for a decoder"):
        make_decoder(dim=32, depth=1, num_heads=4, attention={"pattern": bigbird}, cross=False)


def test_a_pattern_made_causal_is_said_once_per_decoder_not_once_per_layer(caplog):
    with caplog.at_level("INFO", logger="attnzoo"):
        dec = make_decoder(dim=DIM, depth=3, num_heads=HEADS, cross=False,
                           attention={"pattern": {"kind": "sliding_window", "window": 4}})  # fmt: skip
    assert caplog.text.count("intersected with Causal") == 1
    assert all(isinstance(b.attn.pattern, And) for b in dec.blocks)  # every layer's is, still
