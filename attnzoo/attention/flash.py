"""The `flash` backend: the flash-attn package's kernels, when installed, on CUDA.

Runs dense attention and any pattern whose mask is a band around the diagonal (causal, sliding window,
or their intersection), with grouped-query heads and dropout; no bias, no key padding, no weights.
Which patterns are bands is read off the pattern's own dense mask (once per pattern object and lengths),
so any pattern class qualifies without knowing about this file.

Notation as in `backends.py`: q [B, H, Lq, D], k and v [B, Hkv, Lk, D]. flash-attn wants [B, L, H, D].
Install with `pip install attnzoo[flash]` (needs a CUDA toolkit matching torch).
"""

from __future__ import annotations

import importlib.util
import weakref
from typing import Any

import torch

from .backends import Request, register_backend

Tensor = torch.Tensor

_DTYPES = (torch.float16, torch.bfloat16)
_bands: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], tuple[int, int] | None]] = weakref.WeakKeyDictionary()


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def band_of(pattern: Any | None, lq: int, lk: int) -> tuple[int, int] | None:
    """flash-attn's `window_size` (left, right) for `pattern` at these lengths, or None if it is not a band.

    Query i reads keys i - left <= j <= i + right; -1 means unbounded on that side. Needs Lq == Lk.
    """
    if pattern is None:
        return (-1, -1)
    if lq != lk or getattr(pattern, "batch_size", None) is not None:  # a per-batch pattern carries padding
        return None
    if getattr(pattern, "is_causal", False):
        return (-1, 0)
    try:
        cached = _bands.setdefault(pattern, {})
    except TypeError:  # not weak-referenceable: compute every time
        cached = {}
    if (lq, lk) not in cached:
        cached[(lq, lk)] = _detect_band(pattern.dense_mask(lq, lk, device="cpu"))
    return cached[(lq, lk)]


def _detect_band(allowed: Tensor) -> tuple[int, int] | None:
    """(left, right) when `allowed` [L, L] is exactly a band containing the diagonal, else None."""
    n = allowed.shape[0]
    i = torch.arange(n)
    if not bool(allowed[i, i].all()):
        return None
    as_int = allowed.to(torch.uint8)
    first = as_int.argmax(dim=1)  # first allowed key of each row
    last = n - 1 - as_int.flip(1).argmax(dim=1)
    if not torch.equal(last - first + 1, as_int.sum(dim=1)):
        return None  # a row with a gap
    left, right = int((i - first).max()), int((last - i).max())
    if not (torch.equal(first, (i - left).clamp(min=0)) and torch.equal(last, (i + right).clamp(max=n - 1))):
        return None  # rows of different widths
    return (-1 if left >= n - 1 else left, -1 if right >= n - 1 else right)


class Flash:
    """flash-attn 2 (`flash_attn_func`) on CUDA, fp16/bf16, head dim <= 256 and a multiple of 8."""

    name = "flash"

    def supports(self, req: Request) -> str | None:
        if req.device_type != "cuda":
            return f"flash-attn runs on CUDA only (device={req.device_type})"
        if not flash_attn_installed():
            return "the flash-attn package is not installed (pip install 'attnzoo[flash]')"
        if req.dtype is not None and req.dtype not in _DTYPES:
            return f"flash-attn needs fp16 or bf16 inputs (got {req.dtype}; train with precision bf16-mixed)"
        if req.head_dim and (req.head_dim > 256 or req.head_dim % 8):
            return f"flash-attn needs a head dim <= 256 and a multiple of 8 (got {req.head_dim})"
        if req.return_weights:
            return "fused kernels do not return attention weights"
        if req.transform is not None:
            return f"flash-attn computes a softmax inside; kind {req.transform.name!r} needs other weights"
        if req.bias is not None:
            return "flash-attn takes no additive bias"
        if req.has_padding:
            return "key padding is not wired to flash-attn's varlen kernels"
        if band_of(req.pattern, req.lq, req.lk) is None:
            return f"pattern {req.pattern!r} is not dense, causal or a sliding window at Lq={req.lq}, Lk={req.lk}"
        if torch.cuda.get_device_capability()[0] < 8:
            return "flash-attn 2 needs an Ampere or newer GPU (compute capability >= 8.0)"
        return None

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights):
        from flash_attn import flash_attn_func

        if return_weights or bias is not None or key_padding_mask is not None:
            raise ValueError("backend 'flash' takes no weights, bias or key padding; use backend='auto'")
        band = band_of(pattern, q.shape[-2], k.shape[-2])
        if band is None:
            raise ValueError(f"backend 'flash' cannot run pattern {pattern!r}; use backend='auto'")
        causal = band == (-1, 0)
        out = flash_attn_func(
            q.transpose(1, 2),  # [B, Lq, H, D]
            k.transpose(1, 2),  # [B, Lk, Hkv, D]
            v.transpose(1, 2),
            dropout_p=dropout_p,
            softmax_scale=scale,
            causal=causal,
            window_size=(-1, -1) if causal else band,
        )
        return out.transpose(1, 2), None  # [B, H, Lq, D]


register_backend(Flash(), before="sdpa")
