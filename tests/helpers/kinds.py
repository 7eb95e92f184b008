"""Building one layer of each attention kind, and setting a kind's extra parts to or away from plain multi-head
attention (shared by the kind tests in tests/attention/variants)."""

import inspect

import torch
from torch import nn

from attnzoo.attention import ATTENTION_KINDS, Attention
from attnzoo.attention.factory import attention_layer

DIM, HEADS = 32, 4


@torch.no_grad()
def to_mha(layer: nn.Module) -> None:
    """Set a kind's extra parts so that it computes plain multi-head attention."""
    if hasattr(layer, "reset_identity"):  # talking_heads, dcmha
        layer.reset_identity()
    if hasattr(layer, "proj_k"):  # linformer with proj_len == seq_len
        eye = torch.eye(layer.seq_len)
        layer.proj_k.copy_(eye)
        if layer.proj_v is not None:
            layer.proj_v.copy_(eye)


def reduces_to_mha(kind: str) -> bool:
    """True for kinds `to_mha` can set to compute plain multi-head attention (the others change the math itself:
    gates, sinks, two maps, sigmoids, latents)."""
    layer = build(kind, seq_len=8)
    return kind == "mha" or hasattr(layer, "reset_identity") or hasattr(layer, "proj_k")


def randomize_extras(layer: nn.Module) -> None:
    """Move every parameter that `Attention` does not have away from the identity."""
    shared = set(Attention(DIM, HEADS, qkv_bias=True).state_dict())
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name not in shared and not name.startswith(("kv.", "q.")):
                p.add_(torch.randn_like(p) * 0.3)


def build(kind: str, *, seq_len: int, cross: bool = False, kv: int = HEADS, causal: bool = False, **options):
    return layer_class(kind, seq_len=seq_len, cross=cross, kv=kv, causal=causal, **options)(DIM, HEADS)


def layer_class(kind: str, *, seq_len: int, cross: bool = False, kv: int = HEADS, causal: bool = False, **options):
    """The class for timm's `attn_layer` hook."""
    cfg = {"kind": kind, "num_kv_heads": kv, "qkv_bias": True, "pattern": "causal" if causal else None}
    takes = inspect.signature(ATTENTION_KINDS[kind]).parameters
    cfg.update({k: v for k, v in options.items() if k in takes})  # e.g. chunk_size for the chunked kinds
    if cross:
        cfg["context_dim"] = 24
    return attention_layer(cfg, seq_len=seq_len)
