"""Linformer: sharing modes, shorter sequences, backends, and the options it refuses."""

import pytest
import torch

from attnzoo.attention import Attention, Causal, attend
from attnzoo.attention.variants import LinformerAttention
from attnzoo.attention.variants.linformer import SHARING

DIM, HEADS = 32, 4


def reference(layer, x, lk):
    """Projection by hand: E[:, :lk] @ K and F[:, :lk] @ V per key/value head, then eager attention."""
    b, n, _ = x.shape
    q, k, v = layer._project(x, None)  # [B, H, N, D], [B, Hkv, N, D] x2
    e = layer.proj_k[..., :lk]
    f = e if layer.proj_v is None else layer.proj_v[..., :lk]
    k = torch.stack([e[h % e.shape[0]] @ k[:, h] for h in range(k.shape[1])], dim=1)  # [B, Hkv, P, D]
    v = torch.stack([f[h % f.shape[0]] @ v[:, h] for h in range(v.shape[1])], dim=1)
    out, _, _ = attend(q, k, v, backend="eager")
    return layer.proj(out.transpose(1, 2).reshape(b, n, -1))


@pytest.mark.parametrize("share", SHARING)
@pytest.mark.parametrize("length", [16, 9, 1])
def test_shorter_sequences_use_the_first_columns(share, length):
    layer = LinformerAttention(DIM, HEADS, num_kv_heads=2, seq_len=16, proj_len=5, share=share)
    x = torch.randn(2, length, DIM)
    torch.testing.assert_close(layer(x), reference(layer, x, length), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "share, shapes",
    [("heads", [(1, 5, 16), (1, 5, 16)]), ("kv", [(1, 5, 16)]), ("none", [(2, 5, 16), (2, 5, 16)])],
)
def test_sharing_modes_own_their_projections(share, shapes):
    layer = LinformerAttention(DIM, HEADS, num_kv_heads=2, seq_len=16, proj_len=5, share=share)
    own = [tuple(p.shape) for n, p in layer.named_parameters() if n.startswith("proj_")]
    assert own == shapes


@pytest.mark.parametrize("share", SHARING)
def test_identity_projection_equals_full_attention_per_sharing_mode(share):
    layer = LinformerAttention(DIM, HEADS, num_kv_heads=2, seq_len=12, proj_len=12, share=share)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.startswith("proj_"):
                p.copy_(torch.eye(12).expand_as(p))
    ref = Attention(DIM, HEADS, num_kv_heads=2, backend="eager")
    ref.load_state_dict(layer.state_dict(), strict=False)
    x = torch.randn(2, 12, DIM, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out, want = layer(x), ref(x2)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_runs_on_dense_backends(backend):
    layer = LinformerAttention(DIM, HEADS, seq_len=20, proj_len=6, backend=backend)
    ref = LinformerAttention(DIM, HEADS, seq_len=20, proj_len=6, backend="eager")
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 20, DIM)
    pad = torch.zeros(2, 20, dtype=torch.bool)
    pad[0, 11:] = True
    torch.testing.assert_close(layer(x, key_padding_mask=pad), ref(x, key_padding_mask=pad), atol=1e-5, rtol=1e-5)
    assert layer.backend_used == backend


def test_projection_learns():
    layer = LinformerAttention(DIM, HEADS, seq_len=10, proj_len=4)
    layer(torch.randn(2, 7, DIM)).sum().backward()
    assert layer.proj_k.grad[..., :7].abs().sum() > 0
    assert (layer.proj_k.grad[..., 7:] == 0).all()  # columns past the sequence are not used


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seq_len=16, pattern=Causal()), r"'linformer' cannot use a pattern \(got Causal\(\)\)"),
        (dict(seq_len=16, bias=torch.nn.Identity()), r"'linformer' cannot use a bias"),
        (dict(), r"'linformer' needs seq_len.*got None"),
        (dict(seq_len=16, proj_len=17), r"proj_len \(17\) must be in \[1, seq_len \(16\)\]"),
        (dict(seq_len=16, share="layers"), r"share must be one of \['heads', 'kv', 'none'\], got 'layers'"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LinformerAttention(DIM, HEADS, **kwargs)


def test_bad_calls():
    layer = LinformerAttention(DIM, HEADS, seq_len=8)
    assert layer.proj_len == 8  # default min(64, seq_len)
    with pytest.raises(ValueError, match=r"key length 9 exceeds seq_len \(8\)"):
        layer(torch.randn(1, 9, DIM))
    with pytest.raises(ValueError, match="cannot take a pattern, is_causal or attn_mask"):
        layer(torch.randn(1, 8, DIM), is_causal=True)
