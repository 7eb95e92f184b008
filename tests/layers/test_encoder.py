"""Blocks and Encoder: timm parity, padding, and activation checkpointing identical on and off."""

import pytest
import torch
from timm.models.vision_transformer import Block as TimmBlock
from torch import nn

from attnzoo.attention import Attention
from attnzoo.attention.biases import T5RelativeBias
from attnzoo.layers import CrossAttentionBlock, Encoder, Mlp, TransformerBlock
from attnzoo.layers.encoder import make_encoder


def test_transformer_block_matches_timm_block():
    theirs = TimmBlock(32, 4, qkv_bias=True, init_values=0.1).eval()
    ours = TransformerBlock(dim=32, attn=Attention(32, 4, qkv_bias=True), mlp=Mlp(32, 128), layer_scale=0.1).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


def _encoder(**kw):
    enc = make_encoder(dim=32, depth=4, num_heads=4, attention={"attn_drop": 0.1}, drop_path_rate=0.1, **kw)
    return enc.train()  # dropout and drop path on: checkpointing must replay the same randomness


@pytest.mark.parametrize("shared", [False, True], ids=["own_biases", "shared_t5"])
@pytest.mark.parametrize("mode", [dict(every=1), dict(every=2), dict(every=1, attention_only=True)])
def test_grad_checkpointing_is_identical(mode, shared):
    enc = _encoder()
    if shared:  # one trained T5 bias for every layer, computed once per forward (and by each recomputed block)
        enc = Encoder(list(enc.blocks), norm=enc.norm, shared_bias=T5RelativeBias(num_heads=4)).train()
    x = torch.randn(2, 11, 32, requires_grad=True)
    pad = torch.zeros(2, 11, dtype=torch.bool)
    pad[1, 7:] = True

    def run():
        torch.manual_seed(123)
        x.grad = None
        enc.zero_grad()
        out = enc(x, key_padding_mask=pad)
        out.square().sum().backward()
        return out.detach(), x.grad.clone(), [p.grad.clone() for p in enc.parameters()]

    ref = run()
    enc.set_grad_checkpointing(True, **mode)
    got = run()
    torch.testing.assert_close(got[0], ref[0], atol=0, rtol=0)
    torch.testing.assert_close(got[1], ref[1], atol=1e-6, rtol=1e-5)
    for a, b in zip(got[2], ref[2], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    enc.set_grad_checkpointing(False)
    assert enc.checkpoint_every == 0 and not any(b.checkpoint_attention for b in enc.blocks)


def test_padding_does_not_leak_into_real_tokens():
    enc = make_encoder(dim=32, depth=2, num_heads=4).eval()
    x = torch.randn(1, 5, 32)
    padded = torch.cat([x, torch.randn(1, 20, 32)], dim=1)
    pad = torch.zeros(1, 25, dtype=torch.bool)
    pad[0, 5:] = True
    torch.testing.assert_close(enc(padded, key_padding_mask=pad)[:, :5], enc(x), atol=1e-5, rtol=1e-5)


def test_gated_cross_attention_block_starts_as_identity():
    block = CrossAttentionBlock(dim=32, cross_attn=Attention(32, 4, context_dim=16), mlp=Mlp(32, 64), gated=True)
    x, ctx = torch.randn(2, 5, 32), torch.randn(2, 7, 16)
    torch.testing.assert_close(block(x, ctx), x)
    out = block(x, ctx)
    out.sum().backward()
    assert block.attn_gate.grad is not None and block.attn_gate.grad.abs() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"every \(0\)"):
        make_encoder(dim=32, depth=2, num_heads=4).set_grad_checkpointing(True, every=0)
    with pytest.raises(ValueError, match=r"depth \(0\)"):
        make_encoder(dim=32, depth=0, num_heads=4)
    with pytest.raises(ValueError, match=r"drop_path \(1.5\)"):
        TransformerBlock(dim=8, attn=nn.Identity(), mlp=nn.Identity(), drop_path=1.5)
