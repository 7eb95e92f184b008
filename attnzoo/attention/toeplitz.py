"""Dense relative biases from offset tables: a strided expand forward, sums along diagonals backward.

A relative bias depends only on the offset between a key and a query position, so its dense form is a
Toeplitz matrix (1D) or a block-Toeplitz matrix of Toeplitz blocks (2D grids). Gathering a learned table
through an [Lq, Lk] index tensor is slow mostly in backward (a scatter-add over Lq * Lk indices);
`relative_dense` instead expands the table with strided windows (`unfold`) in forward, and in backward
sums the incoming gradient along its diagonals, one row chunk at a time, through a zero-padded "skewed"
buffer (row i shifted by -i) whose column sums are exactly the diagonal sums.

Notation: H heads; a grid is (rows, cols) = (Gh, Gw), a 1D sequence is the grid (1, L); P prefix tokens
(cls, distillation) precede the grid tokens in both queries and keys.
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor

_BUFFER_ELEMENTS = 1 << 23  # skew buffer per chunk (32 MiB in fp32): few large ops, which a busy CPU needs


def diagonal_sums(g: Tensor) -> Tensor:
    """g [..., A, B] -> fp32 [..., A + B - 1], where entry j - i + A - 1 sums g[..., i, j] over i."""
    *lead, a, b = g.shape
    n_lead = math.prod(lead)
    out = torch.zeros(*lead, a + b - 1, device=g.device, dtype=torch.float32)
    rows = max(1, min(a, _BUFFER_ELEMENTS // max(1, n_lead * (a + b))))
    buf = skew = None
    for r0 in range(0, a, rows):
        r = min(rows, a - r0)
        if buf is None or buf.shape[-2] != r:
            buf = torch.zeros(*lead, r, b + r - 1, device=g.device, dtype=torch.float32)
            # skew[..., i, j] is buf[..., i, j - i + r - 1]: row i shifted left by i, never overlapping
            skew = buf.as_strided((*lead, r, b), (*buf.stride()[:-2], b + r - 2, 1), buf.storage_offset() + r - 1)
        skew.copy_(g[..., r0 : r0 + r, :])
        start = a - r - r0  # local offset 0 (i = r - 1, j = 0) is global offset -(r0 + r - 1)
        out[..., start : start + b + r - 1] += buf.sum(-2)
    return out


def _check(table: Tensor, grid_q: tuple[int, int], grid_k: tuple[int, int], prefix: Tensor | None, p: int) -> None:
    want = (grid_q[0] + grid_k[0] - 1, grid_q[1] + grid_k[1] - 1)
    if table.dim() != 3 or tuple(table.shape[1:]) != want:
        raise ValueError(
            f"relative table for query grid {grid_q} and key grid {grid_k} must be [H, {want[0]}, {want[1]}]; "
            f"got {list(table.shape)}"
        )
    if p and (prefix is None or tuple(prefix.shape) != (table.shape[0], 3)):
        got = None if prefix is None else list(prefix.shape)
        raise ValueError(f"{p} prefix tokens need prefix values [H, 3] = [{table.shape[0]}, 3]; got {got}")


def _fill_grid(t: Tensor, grid_q: tuple[int, int], grid_k: tuple[int, int], dest: Tensor) -> None:
    """dest [H, Ghq Gwq, Ghk Gwk] (rows and columns row-major over the grids) = the dense bias of table t."""
    (ghq, gwq), (ghk, gwk) = grid_q, grid_k
    # rows[h, dy, xq, xk] = t[h, dy, xk - xq + Gwq - 1]: a Toeplitz block per row offset dy
    rows = t.unfold(2, gwk, 1).flip(2)  # [H, DY, Gwq, Gwk]
    if ghq == ghk == 1:
        dest.copy_(rows[:, 0])
        return
    patch = dest.view(t.shape[0], ghq, gwq, ghk, gwk)  # [H, yq, xq, yk, xk]
    by_column = rows.transpose(1, 2).contiguous()  # [H, Gwq, DY, Gwk], small: the blocks of one query column
    for yq in range(ghq):  # dy index = yk - yq + Ghq - 1: Ghk consecutive blocks, copied in runs of Ghk * Gwk
        patch[:, yq].copy_(by_column[:, :, ghq - 1 - yq : ghq - 1 - yq + ghk])


def _fill_prefix(pre: Tensor, p: int, dest: Tensor, prefix_queries: bool) -> None:
    if prefix_queries:
        dest[:, :, p:] = pre[:, 0, None, None]  # prefix query -> grid key
        dest[:, :, :p] = pre[:, 2, None, None]  # prefix <-> prefix
    else:
        dest[:, :, :p] = pre[:, 1, None, None]  # grid query -> prefix key


class _RelativeDense(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, prefix, grid_q, grid_k, p, dtype):
        (ghq, gwq), (ghk, gwk) = grid_q, grid_k
        ctx.save_for_backward(prefix if p else None)
        ctx.shape = (grid_q, grid_k, p, table.dtype)
        t = table.detach().to(dtype).contiguous()  # a head-last table would give a head-last dense
        if ghq == ghk == 1 and p == 0:
            return t.unfold(2, gwk, 1).flip(2)[:, 0]  # [H, Lq, Lk], the 1D case: the flip is the one dense copy
        out = torch.empty(t.shape[0], p + ghq * gwq, p + ghk * gwk, device=table.device, dtype=dtype)
        _fill_grid(t, grid_q, grid_k, out[:, p:, p:])
        if p:
            pre = prefix.detach().to(dtype)
            _fill_prefix(pre, p, out[:, :p], prefix_queries=True)
            _fill_prefix(pre, p, out[:, p:], prefix_queries=False)
        return out

    @staticmethod
    def backward(ctx, grad):
        grid_q, grid_k, p, table_dtype = ctx.shape
        (ghq, gwq), (ghk, gwk) = grid_q, grid_k
        h = grad.shape[0]
        dprefix = None
        if p:
            (prefix,) = ctx.saved_tensors
            parts = [grad[:, :p, p:], grad[:, p:, :p], grad[:, :p, :p]]
            dprefix = torch.stack([g.float().sum((1, 2)) for g in parts], dim=1).to(prefix.dtype)  # [H, 3]
        patch = grad[:, p:, p:].view(h, ghq, gwq, ghk, gwk)  # [H, yq, xq, yk, xk]
        per_row = diagonal_sums(patch.permute(0, 1, 3, 2, 4))  # [H, yq, yk, xq, xk] -> [H, yq, yk, DX]
        dtable = diagonal_sums(per_row.permute(0, 3, 1, 2)).transpose(1, 2)  # [H, DX, yq, yk] -> [H, DY, DX]
        return dtable.to(table_dtype), dprefix, None, None, None, None


def relative_dense(
    table: Tensor,
    grid_q: tuple[int, int],
    grid_k: tuple[int, int],
    *,
    prefix: Tensor | None = None,
    num_prefix_tokens: int = 0,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The dense bias [H, P + Gh_q Gw_q, P + Gh_k Gw_k] of a table over 2D offsets.

    Args:
        table: [H, Gh_q + Gh_k - 1, Gw_q + Gw_k - 1]; entry [h, dy + Gh_q - 1, dx + Gw_q - 1] is the bias
            for a key (dy, dx) rows and columns away from the query (key minus query).
        prefix: [H, 3] values for prefix query -> grid key, grid query -> prefix key, prefix <-> prefix.
        num_prefix_tokens: P.
        dtype: of the result (default: the table's).
    """
    grid_q, grid_k = tuple(grid_q), tuple(grid_k)
    _check(table, grid_q, grid_k, prefix, num_prefix_tokens)
    return _RelativeDense.apply(table, prefix, grid_q, grid_k, num_prefix_tokens, dtype or table.dtype)


def row_chunks(lq: int, rows: int, grid_q: tuple[int, int], num_prefix_tokens: int = 0) -> list[tuple[int, int]]:
    """Query-row ranges (r0, r1) of about `rows` rows that `relative_rows` can build: the prefix rows, then
    whole grid rows (any rows of a grid with one row)."""
    p = num_prefix_tokens
    step = rows if grid_q[0] == 1 else max(1, rows // grid_q[1]) * grid_q[1]
    return ([(0, p)] if p else []) + [(r0, min(lq, r0 + step)) for r0 in range(p, lq, step)]


def relative_rows(
    table: Tensor,
    grid_q: tuple[int, int],
    grid_k: tuple[int, int],
    r0: int,
    r1: int,
    *,
    out: Tensor,
    prefix: Tensor | None = None,
    num_prefix_tokens: int = 0,
) -> Tensor:
    """Query rows r0:r1 of `relative_dense(table, ...)`, no gradient, written into out [H, r1 - r0, Lk].

    The rows are a range from `row_chunks`: prefix rows only, or whole grid rows, or any rows of a grid with
    one row; only the table entries those rows use are read.
    """
    p, (ghq, gwq), (ghk, gwk) = num_prefix_tokens, grid_q, grid_k
    t = table.detach().to(out.dtype)
    if r1 <= p:
        _fill_prefix(prefix.detach().to(out.dtype), p, out, prefix_queries=True)
        return out
    if p:
        _fill_prefix(prefix.detach().to(out.dtype), p, out, prefix_queries=False)
    if ghq == 1:  # query columns x0:x1 use column offsets xk - xq from -(x1 - 1) on
        x0, x1 = r0 - p, r1 - p
        sub, sub_grid = t[:, :, gwq - x1 : gwq - x0 + gwk - 1], (1, x1 - x0)
    else:
        if (r0 - p) % gwq or (r1 - p) % gwq:
            raise ValueError(f"relative_rows: rows {r0}:{r1} are not whole rows of grid {grid_q} after {p} prefix")
        y0, y1 = (r0 - p) // gwq, (r1 - p) // gwq
        sub, sub_grid = t[:, ghq - y1 : ghq - y0 + ghk - 1], (y1 - y0, gwq)
    _fill_grid(sub.contiguous(), sub_grid, grid_k, out[:, :, p:])
    return out
