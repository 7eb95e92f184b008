"""The blocked backend's path for a sliding window on CPU, "blocked[band]": each query block reads its keys in place.

A window's query block i reads the m key blocks i - r .. i - r + m - 1 (r = ceil(window / b); m = 2r + 1, or r + 1
when causal), one contiguous run of keys. So the keys of every query block are one overlapping strided view of the
(padded) key tensor, [nQb, H, m * b, D] with a stride of one block between query blocks: no gathered copies of k
and v. Per batch element, one call of torch's CPU flash kernel covers all interior blocks, which share one band
mask; the few blocks at either end, whose runs reach past the real keys, take a call of their own with a mask per
block. Right padding (`keys`) moves the end of the real keys per row; blocks past the reach of any real key are
skipped (their output is zero).

The backward runs the kernel's own backward on the same views; it returns the key gradients per query block,
[nQb, H, m * b, D], which are folded back onto the keys (m shifted adds). The kernel's forward and backward ops
are called directly (`torch.ops.aten._scaled_dot_product_flash_attention_for_cpu[_backward]`), inside an
autograd Function: through the public SDPA, autograd would take the overlapping view's gradient through the
general `as_strided` backward instead of those adds.

Notation as in backends.py, plus b the block size, nQb = ceil(L / b) query blocks, r and m as above, and
Lp = (nQb + m - 1) * b the padded key length (r * b zeros in front, the rest after).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from .patterns import SlidingWindow

Tensor = torch.Tensor

_FWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
DTYPES = (torch.float32, torch.bfloat16)


# below this much work per batch element and head (query blocks x keys each reads x D, multiply-adds), the band
# path's per-element calls cost more than gathering the blocks saves (fitted on CPU, fp32, fwd+bwd, one thread)
MIN_WORK = 2_500_000


def band_reason(
    device_type: str, pattern, plain: bool, lq: int, lk: int, dtype, block: int, head_dim: int
) -> str | None:
    """None when the band path runs the call, else why not; `plain`: no bias, dropout, returned weights or kind's
    weights, and no key padding other than at the end of rows (`right_padded`)."""
    if _FWD is None or _BWD is None:
        return "this torch has no CPU flash attention ops"
    if device_type != "cpu" or type(pattern) is not SlidingWindow or not plain:
        return "not a plain sliding window on CPU"
    if lq != lk:
        return "queries and keys differ in length"
    if dtype not in DTYPES:
        return f"dtype {dtype}"
    band = Band(pattern.window, pattern.causal, lq, block)
    if band.q_blocks < 2 * band.width or band.q_blocks * block * band.width * block * head_dim < MIN_WORK:
        return "too short for reading keys in place to pay: gathering the blocks is faster"
    return None


@dataclass(frozen=True)
class Band:
    """The geometry of one batch element: `length` queries and keys, of which the first `keys` are real (the rest
    right padding)."""

    window: int
    causal: bool
    length: int
    block: int
    keys: int | None = None  # None: all `length`

    @property
    def before(self) -> int:  # r: key blocks read before the query's own
        return -(-self.window // self.block)

    @property
    def width(self) -> int:  # m: key blocks read per query block
        return self.before + 1 + (0 if self.causal else self.before)

    @property
    def q_blocks(self) -> int:
        return -(-self.length // self.block)

    @property
    def padded(self) -> int:  # Lp
        return (self.q_blocks + self.width - 1) * self.block

    @property
    def real(self) -> int:  # real keys
        return self.length if self.keys is None else self.keys

    def runs(self) -> list[tuple[int, int, bool]]:
        """(first, stop, interior) runs of the query blocks that read some real key; interior blocks read only real
        keys (one shared mask). Blocks after the last run read none (right padding): their output is zero."""
        b, live = self.block, self.q_blocks
        if self.real < self.length:  # query p reads a real key iff p - window < real (causal or not)
            live = min(live, -(-(self.real + self.window) // b))
        lo = min(self.before, live)
        hi = max(lo, min(live, self.real // b - self.width + self.before + 1))
        runs = [(0, lo, False), (lo, hi, True), (hi, live, False)]
        return [run for run in runs if run[1] > run[0]]


def _mask(band: Band, first: int, stop: int, interior: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """The additive mask of query blocks first..stop-1 over their key runs, [1, 1, b, m * b] for interior blocks,
    else [stop - first, 1, b, m * b]; and the rows that read some key, [n, 1, b, 1], or None when all do. Rows that
    read none (queries past the end of the blocks, or more than a window past the real keys) allow every key, so the
    kernel stays finite; their outputs and output gradients are zeroed.

    Cached, except at the padded end of a right-padded row (a mask per length of row)."""
    if band.keys is not None:
        reach = (stop - 1 - band.before + band.width) * band.block  # past the last key these blocks read
        if not interior and band.keys < reach:
            return _build_mask(band, first, stop, interior, dtype)
        band = dataclasses.replace(band, keys=None)  # the padding is out of their reach: the unpadded mask
    if interior:  # the same for every interior block (and every length): built from the first there can be
        first, stop = band.before, band.before + 1
    return _cached_mask(band, first, stop, interior, dtype)


def _build_mask(band: Band, first: int, stop: int, interior: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    b, r, m = band.block, band.before, band.width
    blocks = torch.arange(first, first + 1 if interior else stop)
    q_pos = blocks[:, None] * b + torch.arange(b)  # [n, b]
    k_pos = (blocks[:, None] - r) * b + torch.arange(m * b)  # [n, m * b]
    pattern = SlidingWindow(window=band.window, causal=band.causal)
    allowed = pattern.mask_mod(None, None, q_pos[:, :, None], k_pos[:, None, :])  # [n, b, m * b]
    allowed = allowed & (k_pos >= 0)[:, None, :] & (k_pos < band.real)[:, None, :]
    alive = allowed.any(dim=-1, keepdim=True)  # [n, b, 1]
    allowed = allowed | ~alive
    add = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))
    return add[:, None], None if bool(alive.all()) else alive[:, None].to(dtype)  # [n, 1, b, m * b], [n, 1, b, 1]


_cached_mask = functools.lru_cache(maxsize=32)(_build_mask)


def _views(band: Band, qp: Tensor, kp: Tensor, vp: Tensor, first: int, stop: int) -> tuple[Tensor, Tensor, Tensor]:
    """One batch element's query blocks first..stop-1 [n, H, b, D] and their key and value runs [n, H, m * b, D],
    views of qp [nQb * b, H, D] and kp, vp [Lp, H, D]."""
    b, m = band.block, band.width
    n, h, d = stop - first, qp.shape[1], qp.shape[2]
    q = qp[first * b : stop * b].view(n, b, h, d).transpose(1, 2)
    strides = (b * h * d, d, h * d, 1)
    k = kp[first * b :].as_strided((n, h, m * b, d), strides)  # query block i's run starts at kp[i * b]
    v = vp[first * b :].as_strided((n, h, m * b, d), strides)
    return q, k, v


def _padded(band: Band, k: Tensor, heads: int) -> Tensor:
    """k [B, Hkv, L, D] -> [B, Lp, H, D]: positions first, zeros around, key/value heads repeated for GQA."""
    bsz, hkv, length, d = k.shape
    out = k.new_zeros(bsz, band.padded, heads, d)
    start = band.before * band.block
    out[:, start : start + length].view(bsz, length, hkv, heads // hkv, d).copy_(k.transpose(1, 2)[:, :, :, None])
    return out


def _elements(band: Band, keys: list[int] | None, bsz: int) -> list[Band]:
    """The geometry of each batch element: `keys[i]` real keys (right padding after them), or all."""
    if keys is None:
        return [band] * bsz
    return [band if n == band.length else dataclasses.replace(band, keys=n) for n in keys]


def _to_rows(x: Tensor, rows: int) -> Tensor:
    """[B, L, H, D] -> contiguous [B, rows, H, D], zero rows after L (a view when it already is one)."""
    if x.shape[1] == rows and x.is_contiguous():
        return x
    out = x.new_zeros(x.shape[0], rows, *x.shape[2:])
    out[:, : x.shape[1]] = x
    return out


def _forward(band: Band, q: Tensor, k: Tensor, v: Tensor, scale: float, keys: list[int] | None):
    """out [B, L, H, D], and for the backward: qp [B, nQb * b, H, D], kp, vp [B, Lp, H, D], each run's log-sum-exp
    and the geometry of each batch element."""
    bsz, h, length, d = q.shape
    b, elements = band.block, _elements(band, keys, bsz)
    qp = _to_rows(q.transpose(1, 2), band.q_blocks * b)  # [B, nQb * b, H, D]
    kp, vp = _padded(band, k, h), _padded(band, v, h)  # [B, Lp, H, D]
    # [B, L, H, D]; with right padding, the blocks that read no real key are in no run and stay zero
    out = q.new_empty(bsz, length, h, d) if keys is None else q.new_zeros(bsz, length, h, d)
    lses = []
    for i, element in enumerate(elements):
        for first, stop, interior in element.runs():
            n = stop - first
            mask, alive = _mask(element, first, stop, interior, q.dtype)
            qv, kv, vv = _views(band, qp[i], kp[i], vp[i], first, stop)
            o, lse = _FWD(qv, kv, vv, 0.0, False, attn_mask=mask, scale=scale)  # [n, H, b, D], [n, H, b]
            if alive is not None:
                o = o * alive
            real = min(stop * b, length) - first * b  # the last block may run past the end
            out[i, first * b : first * b + real] = o.transpose(1, 2).reshape(n * b, h, d)[:real]
            lses.append(lse)
    return out, qp, kp, vp, lses, elements


def _backward(band, elements, grad, qp, kp, vp, out, lses, scale: float, kv_heads: int):
    """grad [B, L, H, D] -> dq [B, L, H, D], dk, dv [B, L, Hkv, D]."""
    bsz, rows, h, d = qp.shape
    length, b, m = band.length, band.block, band.width
    go, out = _to_rows(grad, rows), _to_rows(out, rows)  # contiguous, as the kernel reads them
    dq = torch.empty_like(qp) if all(e.keys is None for e in elements) else torch.zeros_like(qp)
    dk, dv = torch.zeros_like(kp), torch.zeros_like(vp)
    lses = iter(lses)
    for i, element in enumerate(elements):
        dk_blocks, dv_blocks = dk[i].view(-1, b, h, d), dv[i].view(-1, b, h, d)  # [Lp / b, b, H, D]
        for first, stop, interior in element.runs():
            n = stop - first
            mask, alive = _mask(element, first, stop, interior, qp.dtype)
            qv, kv, vv = _views(band, qp[i], kp[i], vp[i], first, stop)
            gov, ov = (x[i, first * b : stop * b].view(n, b, h, d).transpose(1, 2) for x in (go, out))
            if alive is not None:
                gov = gov * alive
            gq, gk, gv = _BWD(gov, qv, kv, vv, ov, next(lses), 0.0, False, attn_mask=mask, scale=scale)
            dq[i, first * b : stop * b].view(n, b, h, d).copy_(gq.transpose(1, 2))
            gk = gk.transpose(1, 2).reshape(n, m, b, h, d)  # [n, m, b, H, D]: slot j holds key blocks first + j ..
            gv = gv.transpose(1, 2).reshape(n, m, b, h, d)
            for j in range(m):
                dk_blocks[first + j : stop + j] += gk[:, j]
                dv_blocks[first + j : stop + j] += gv[:, j]
    start = band.before * b
    dk, dv = (x[:, start : start + length] for x in (dk, dv))  # [B, L, H, D]
    if kv_heads != h:
        dk, dv = (x.reshape(bsz, length, kv_heads, h // kv_heads, d).sum(3) for x in (dk, dv))
    return dq[:, :length], dk, dv


class _BandAttention(torch.autograd.Function):
    """q, k, v [B, H | Hkv, L, D] -> out [B, L, H, D] (the caller transposes it: outside the Function, a view of
    it takes in-place ops as any other)."""

    @staticmethod
    def forward(ctx, q, k, v, band, scale, keys):
        out, qp, kp, vp, lses, elements = _forward(band, q, k, v, scale, keys)
        ctx.save_for_backward(qp, kp, vp, out, *lses)  # through saved-tensor hooks (activation checkpointing)
        ctx.band, ctx.scale, ctx.kv_heads, ctx.elements = band, scale, k.shape[1], elements
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        qp, kp, vp, out, *lses = ctx.saved_tensors
        dq, dk, dv = _backward(ctx.band, ctx.elements, grad, qp, kp, vp, out, lses, ctx.scale, ctx.kv_heads)
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), None, None, None


def band_attention(
    q: Tensor, k: Tensor, v: Tensor, *, pattern: SlidingWindow, block: int, scale: float, keys: list[int] | None = None
) -> Tensor:
    """Sliding-window attention of q [B, H, L, D] over k, v [B, Hkv, L, D] in blocks of `block`: [B, H, L, D].
    `keys`: the number of real keys of each row (right padding after them; `patterns.right_padded`), or None for all.

    Under CPU autocast, q, k and v are cast to its dtype (bf16), as autocast casts SDPA's inputs on the other paths.
    """
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") in DTYPES:
        q, k, v = (x.to(torch.get_autocast_dtype("cpu")) for x in (q, k, v))
    band = Band(pattern.window, pattern.causal, q.shape[2], block)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _BandAttention.apply(q, k, v, band, scale, keys).transpose(1, 2)
    return _forward(band, q, k, v, scale, keys)[0].transpose(1, 2)
