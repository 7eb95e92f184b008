"""CPU attention with an additive bias that needs gradients (a learned relative table), for `sdpa`.

On CPU, `F.scaled_dot_product_attention` takes its fused flash kernel only when `attn_mask` needs no
gradient; a learned bias drops it to the math path, which materializes scores, weights and their
gradients ([B, H, Lq, Lk] each). Here the forward runs the fused kernel on the detached bias (it also
returns the log-sum-exp of each query row), and the backward recomputes the weights in query-row chunks,
giving dq, dk, dv and the score gradient dS = P * (dP - rowsum(dO * O)) of each chunk.

Where dS goes depends on the bias:
- `sdpa_with_bias_grad`: any dense bias tensor; dS is the bias gradient, written out whole.
- `sdpa_with_relative_bias`: a bias given by a table over (row, column) offsets (T5 and ALiBi-like 1D
  tables, Swin/BEiT 2D tables, see `toeplitz.py`). Each chunk's dS is reduced to the table's gradient
  (sums along diagonals) while it is still in cache, and the bias itself is built from the table a chunk
  at a time (a 1D table not at all: see `_SdpaRelative`), so neither the [B, H, Lq, Lk] bias nor its
  gradient is ever stored whole.

Notation: B batch, H heads, Lq/Lk lengths, D head dim, c rows per chunk, P prefix tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .toeplitz import diagonal_sums, relative_rows, row_chunks

Tensor = torch.Tensor

_CHUNK_ELEMENTS = 1 << 21  # scores per backward chunk (B * H * c * Lk), 8 MiB in fp32
_FORWARD_CHUNK_ELEMENTS = 1 << 23  # bias values per forward chunk (H * c * Lk): the fused kernel gains from more rows
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the fused CPU kernel takes here


def unit_stride(*tensors: Tensor) -> tuple[Tensor, ...]:
    """`tensors`, each copied when its last dimension is not unit-stride: the raw CPU flash op (unlike
    F.scaled_dot_product_attention, which copies them itself) misreads such q, k, v (a transposed view; rotary's
    head dimension 2)."""
    return tuple(t if t.stride(-1) == 1 else t.contiguous() for t in tensors)


def _chunked_backward(q, k, v, out, lse, dout, scale, bounds, fill, sink):
    """dq, dk, dv of attention with an additive bias and mask, one query-row range of `bounds` at a time.

    `fill(r0, r1, s)` writes the bias (-inf where masked) of rows r0:r1 into s [B, H, c, Lk] (fp32);
    `sink.buffer(r0, r1)` gives a [B*H, c, Lk] fp32 tensor (maybe a strided view) to compute dS in, and
    `sink.take(r0, r1, ds)` consumes it.
    """
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    f32 = torch.float32
    q3 = q.to(f32).reshape(b * h, lq, d)
    k3 = k.to(f32).reshape(b * h, lk, d)
    v3 = v.to(f32).reshape(b * h, lk, d)
    do3 = dout.to(f32).reshape(b * h, lq, d)
    lse3 = lse.reshape(b * h, lq, 1)
    delta = (do3 * out.to(f32).reshape(b * h, lq, d)).sum(-1, keepdim=True)  # [BH, Lq, 1]
    dq = torch.empty_like(q3)
    dk = torch.zeros_like(k3)
    dv = torch.zeros_like(v3)
    scores = torch.empty(b * h, max(r1 - r0 for r0, r1 in bounds), lk, dtype=f32, device=q.device)  # reused
    for r0, r1 in bounds:
        c = r1 - r0
        s = scores[:, :c]
        fill(r0, r1, s.view(b, h, c, lk))
        s.baddbmm_(q3[:, r0:r1], k3.transpose(1, 2), alpha=scale)  # scores [BH, c, Lk]
        p = s.sub_(lse3[:, r0:r1]).exp_()  # weights
        dv.baddbmm_(p.transpose(1, 2), do3[:, r0:r1])
        ds = sink.buffer(r0, r1)
        torch.bmm(do3[:, r0:r1], v3.transpose(1, 2), out=ds)
        ds.sub_(delta[:, r0:r1]).mul_(p)  # dScores = P * (dP - rowsum(dO * O))
        dq[:, r0:r1] = torch.bmm(ds, k3)
        dk.baddbmm_(ds.transpose(1, 2), q3[:, r0:r1])
        sink.take(r0, r1, ds)
    dq = (dq * scale).view(b, h, lq, d).to(q.dtype)
    dk = (dk * scale).view(b, h, lk, d).to(k.dtype)
    return dq, dk, dv.view(b, h, lk, d).to(v.dtype)


def _rows_per_chunk(q: Tensor, lk: int) -> int:
    return max(1, min(q.shape[-2], _CHUNK_ELEMENTS // (q.shape[0] * q.shape[1] * lk)))


class _DenseSink:
    """dS is the gradient of a dense bias (summed over the dimensions it broadcasts along)."""

    def __init__(self, bias: Tensor, b: int, h: int, lk: int) -> None:
        self.shape, self.bh, self.lk = tuple(bias.shape), (b, h), lk
        self.grad = torch.empty(bias.shape, device=bias.device, dtype=bias.dtype)
        self.direct = bias.dtype == torch.float32 and self.shape[:2] == (b, h)  # dS written in place
        self.scratch = None

    def buffer(self, r0, r1):
        b, h = self.bh
        if self.direct:
            return self.grad[:, :, r0:r1].view(b * h, r1 - r0, self.lk)
        if self.scratch is None:
            self.scratch = torch.empty(b * h, r1 - r0, self.lk, device=self.grad.device)
        return self.scratch[:, : r1 - r0]

    def take(self, r0, r1, ds):
        if not self.direct:
            b, h = self.bh
            self.grad[..., r0:r1, :] = ds.view(b, h, r1 - r0, self.lk).sum_to_size(*self.shape[:-2], r1 - r0, self.lk)


class _SdpaBiasGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale):
        q, k, v = unit_stride(q, k, v)
        out, lse = _FLASH(q, k, v, attn_mask=bias.detach(), scale=scale)  # out [B, H, Lq, D], lse [B, H, Lq]
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, out, lse = ctx.saved_tensors
        b, h, lq, lk = *q.shape[:3], k.shape[-2]
        sink = _DenseSink(bias, b, h, lk)
        full = bias.expand(b, h, lq, lk)
        bounds = row_chunks(lq, _rows_per_chunk(q, lk), (1, lq))  # even chunks of any rows
        dq, dk, dv = _chunked_backward(
            q, k, v, out, lse, dout, ctx.scale, bounds, lambda r0, r1, s: s.copy_(full[:, :, r0:r1]), sink
        )
        return dq, dk, dv, sink.grad, None


def sdpa_with_bias_grad(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Attention over q [B, H, Lq, D], k, v [B, H, Lk, D] plus `bias` (broadcastable to [B, H, Lq, Lk])."""
    if bias.dim() < 4:
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))  # [1|B, 1|H, Lq, Lk]
    return _SdpaBiasGrad.apply(q, k, v, bias.to(q.dtype), scale)


# ---------------------------------------------------------------------------------------------------------------
# relative tables: dS reduced to the table gradient chunk by chunk


class _SequenceSink:
    """A 1D table, queries taken in reverse order (see `_SdpaRelative`): the bias of reversed query i and key
    j is values[i + j], so dS is computed straight into a buffer whose row i is shifted right by i, and the
    buffer's column sums are the table gradient (sums along dS's anti-diagonals)."""

    def __init__(self, b, h, lq, lk, device):
        self.b, self.h, self.lk = b, h, lk
        self.acc = torch.zeros(b * h, lq + lk - 1, device=device)  # per key-minus-query offset
        self.buf = self.skew = None

    def buffer(self, r0, r1):
        c = r1 - r0
        if self.skew is None or self.skew.shape[1] != c:
            width = self.lk + c - 1
            self.buf = torch.zeros(self.b * self.h, c, width, device=self.acc.device)
            # skew[:, i, j] is buf[:, i, i + j]: rows never overlap, the gaps stay zero
            self.skew = self.buf.as_strided((self.b * self.h, c, self.lk), (self.buf.stride(0), width + 1, 1))
        return self.skew

    def take(self, r0, r1, ds):
        self.acc[:, r0 : r0 + self.lk + r1 - r0 - 1] += self.buf.sum(1)

    def grads(self):
        return self.acc.view(self.b, self.h, 1, -1).sum(0), None  # [H, 1, Lq + Lk - 1]


class _GridSink:
    """A 2D table over (dy, dx) with P prefix tokens; chunks from `toeplitz.row_chunks`. Each chunk's dS is
    copied into a buffer in which the row of query (yq, xq) is shifted left by xq and each key row's block is
    padded to Gwq + Gwk - 1 columns, so that summing over xq gives the sums along the column-offset
    diagonals of every (query row, key row) block; the row-offset diagonals are summed once at the end."""

    def __init__(self, b, h, grid_q, grid_k, p, device):
        self.b, self.h, self.grid_q, self.grid_k, self.p = b, h, grid_q, grid_k, p
        (ghq, gwq), (ghk, gwk) = grid_q, grid_k
        self.per_row = torch.zeros(h, ghq, ghk, gwq + gwk - 1, device=device)  # [H, yq, yk, DX]
        self.dprefix = torch.zeros(h, 3, device=device)
        self.scratch = None
        self.padded: dict[int, Tensor] = {}  # per query columns in a chunk row

    def buffer(self, r0, r1):
        if self.scratch is None or self.scratch.shape[1] < r1 - r0:
            lk = self.grid_k[0] * self.grid_k[1] + self.p
            self.scratch = torch.empty(self.b * self.h, r1 - r0, lk, device=self.per_row.device)
        return self.scratch[:, : r1 - r0]

    def take(self, r0, r1, ds):
        p, (ghq, gwq), (ghk, gwk) = self.p, self.grid_q, self.grid_k
        if p:
            g = ds.view(self.b, self.h, r1 - r0, -1).sum(0)  # [H, c, Lk]
            self.dprefix[:, 2 if r1 <= p else 1] += g[:, :, :p].sum((1, 2))
            if r1 <= p:  # prefix queries
                self.dprefix[:, 0] += g[:, :, p:].sum((1, 2))
                return
        if ghq == 1:  # query columns x0:x1 of the one grid row: their offsets start Gwq - x1 into DX
            y0, n, wq, at = 0, 1, r1 - r0, gwq - (r1 - p)
        else:  # whole grid rows
            y0, n, wq, at = (r0 - p) // gwq, (r1 - r0) // gwq, gwq, 0
        width = wq + gwk - 1  # column offsets this chunk reaches
        pad = self.padded.get(wq)
        if pad is None or pad.shape[1] < n:
            pad = self.padded[wq] = torch.zeros(self.b * self.h, n, wq, ghk * width, device=ds.device)
        pad = pad[:, :n]
        bh, sb, sy, sx = self.b * self.h, pad.stride(0), pad.stride(1), pad.stride(2)
        # [., yq, xq, yk, xk] -> pad[., yq, xq, yk * width + xk - xq + wq - 1]: never overlapping, gaps stay 0
        shifted = pad.as_strided((bh, n, wq, ghk, gwk), (sb, sy, sx - 1, width, 1), pad.storage_offset() + wq - 1)
        shifted.copy_(ds[:, :, p:].view(bh, n, wq, ghk, gwk))
        sums = pad.sum(2).view(self.b, self.h, n, ghk, width).sum(0)  # [H, yq, yk, offsets]
        self.per_row[:, y0 : y0 + n, :, at : at + width] += sums

    def grads(self):
        dtable = diagonal_sums(self.per_row.permute(0, 3, 1, 2)).transpose(1, 2)  # [H, DX, yq, yk] -> [H, DY, DX]
        return dtable, (self.dprefix if self.p else None)


class _SdpaRelative(torch.autograd.Function):
    """Forward and backward in query-row chunks, each chunk's dense bias made from the table when needed: no
    [H, Lq, Lk] tensor is kept, nor its gradient.

    A 1D table (grids (1, Lq) and (1, Lk), no prefix) takes the queries in reverse order: the bias of
    reversed query i and key j is then values[i + j], which `unfold` gives as a view (a Hankel matrix), read
    by the fused kernel in place; the output and dq are reversed back.
    """

    @staticmethod
    def forward(ctx, q, k, v, table, prefix, grid_q, grid_k, p, allowed, scale):
        b, h, lq, _ = q.shape
        lk = k.shape[-2]
        sequence = grid_q[0] == grid_k[0] == 1 and p == 0
        if sequence and allowed is None:
            bounds = [(0, lq)]  # the whole bias is one view: nothing to build
        else:
            bounds = row_chunks(lq, max(1, _FORWARD_CHUNK_ELEMENTS // (h * lk)), grid_q, p)
        q, k, v = unit_stride(q.flip(2) if sequence else q, k, v)
        if sequence:
            allowed = None if allowed is None else allowed.flip(-2)
        rows = _bias_rows(table, prefix, grid_q, grid_k, p, sequence, lk, q.dtype, bounds)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, lq, device=q.device, dtype=torch.float32)
        for r0, r1 in bounds:
            mask = rows(r0, r1)[None]
            if allowed is not None:
                mask = mask.masked_fill(~_rows(allowed, r0, r1), float("-inf"))
            out[:, :, r0:r1], lse[:, :, r0:r1] = _FLASH(q[:, :, r0:r1], k, v, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, table, prefix, allowed, out, lse)
        ctx.geometry = (grid_q, grid_k, p, scale, sequence)
        return out.flip(2) if sequence else out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, table, prefix, allowed, out, lse = ctx.saved_tensors
        grid_q, grid_k, p, scale, sequence = ctx.geometry
        b, h, lq, _ = q.shape
        lk = k.shape[-2]
        bounds = row_chunks(lq, _rows_per_chunk(q, lk), grid_q, p)
        if sequence:
            dout = dout.flip(2)
            sink = _SequenceSink(b, h, lq, lk, q.device)
        else:
            sink = _GridSink(b, h, grid_q, grid_k, p, q.device)
        direct = not sequence and q.dtype == torch.float32  # relative_rows can write into the scores
        rows = None if direct else _bias_rows(table, prefix, grid_q, grid_k, p, sequence, lk, q.dtype, bounds)

        def fill(r0, r1, s):  # s [B, H, c, Lk] fp32; the bias in q's dtype, as the forward saw it
            if rows is None:
                relative_rows(table, grid_q, grid_k, r0, r1, out=s[0], prefix=prefix, num_prefix_tokens=p)
                s[1:] = s[0]
            else:
                s.copy_(rows(r0, r1).expand_as(s))
            if allowed is not None:
                s.masked_fill_(~_rows(allowed, r0, r1), float("-inf"))

        dq, dk, dv = _chunked_backward(q, k, v, out, lse, dout, scale, bounds, fill, sink)
        dtable, dprefix = sink.grads()
        dprefix = None if dprefix is None else dprefix.to(prefix.dtype)
        dq = dq.flip(2) if sequence else dq
        return dq, dk, dv, dtable.to(table.dtype), dprefix, None, None, None, None, None


def _bias_rows(table, prefix, grid_q, grid_k, p, sequence, lk, dtype, bounds):
    """A function (r0, r1) -> the [H, c, Lk] bias of query rows r0:r1 of `bounds` (reversed rows for a sequence)."""
    if sequence:
        hankel = _hankel(table, lk, dtype)
        return lambda r0, r1: hankel[:, r0:r1]
    max_rows = max(r1 - r0 for r0, r1 in bounds)
    buf = torch.empty(table.shape[0], max_rows, lk, device=table.device, dtype=dtype)
    build = dict(prefix=prefix, num_prefix_tokens=p)
    return lambda r0, r1: relative_rows(table, grid_q, grid_k, r0, r1, out=buf[:, : r1 - r0], **build)


def _hankel(table: Tensor, lk: int, dtype: torch.dtype) -> Tensor:
    """[H, 1, Lq + Lk - 1] per-offset values -> the [H, Lq, Lk] bias of reversed queries, a view: values[h, i + j]."""
    return table.detach()[:, 0].to(dtype).contiguous().unfold(-1, lk, 1)


def _rows(allowed: Tensor, r0: int, r1: int) -> Tensor:
    return allowed if allowed.shape[-2] == 1 else allowed[..., r0:r1, :]


def sdpa_with_relative_bias(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor,
    grid_q: tuple[int, int],
    grid_k: tuple[int, int],
    *,
    prefix: Tensor | None = None,
    num_prefix_tokens: int = 0,
    allowed: Tensor | None = None,
    scale: float,
) -> Tensor:
    """Attention over q [B, H, Lq, D], k, v [B, H, Lk, D] plus the relative bias of `table`, on CPU.

    Args:
        table, grid_q, grid_k, prefix, num_prefix_tokens: the bias, as `toeplitz.relative_dense` takes it
            (a 1D table over offsets is [H, 1, Lq + Lk - 1] with grids (1, Lq) and (1, Lk)).
        allowed: bool, broadcastable to [B, H, Lq, Lk], True where a query may read a key; every query row
            must allow at least one key (see `backends.rescue_empty_rows`).
    """
    if allowed is not None:
        allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
    return _SdpaRelative.apply(q, k, v, table, prefix, tuple(grid_q), tuple(grid_k), num_prefix_tokens, allowed, scale)


def sdpa_with_fixed_sequence_bias(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor,
    *,
    allowed: Tensor | None,
    dropout_p: float,
    scale: float,
    enable_gqa: bool,
) -> Tensor:
    """Attention plus a 1D relative bias that needs no gradient (ALiBi, a frozen or inference T5 table).

    `table` [H, 1, Lq + Lk - 1] holds the bias per key-minus-query offset. As in `_SdpaRelative`, the queries
    go in reversed, so the bias is a Hankel view of the table that the fused kernel reads in place: no
    [H, Lq, Lk] tensor is made unless `allowed` (bool, broadcastable to [B, H, Lq, Lk]) has to be folded in.
    """
    mask = _hankel(table, k.shape[-2], q.dtype)[None]  # [1, H, Lq, Lk] for reversed q
    if allowed is not None:
        mask = mask.masked_fill(~allowed.flip(-2), float("-inf"))
    out = F.scaled_dot_product_attention(
        q.flip(2), k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa
    )
    return out.flip(2)
