"""Rotary position embeddings applied to q [B, H, Lq, D] and k [B, Hkv, Lk, D] inside `Attention`.

Interface used by `Attention`: `rotary(q, k) -> (q, k)`, after qk-norm; with a KV cache (a rotary whose
`decodes` is True), `rotary(q, k, q_pos, k_pos)` with the new tokens' positions (keys are cached rotated).
Channel pairs (c, c + D/2) of each head are rotated by angle position * frequency_c (the "rotate half"
layout), so the score between a query at position m and a key at position n depends on m - n only. Angles
are computed in fp64 (large positions stay exact), the rotation in fp32 (fp64 for fp64 inputs), and the
result has the input dtype. Query and key positions are separate (cross-attention, odd lengths,
grouped-query heads all work: the rotation depends on the position, not on the head).

Notation: B batch, H query heads, Hkv key/value heads, L tokens, D head dim.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..util.checks import finite_number

Tensor = torch.Tensor


def rotate(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate channel pairs (c, c + D/2) of x [..., L, D] by angles [L, D/2] (or [B, 1, L, D/2])."""
    half = x.shape[-1] // 2
    work = torch.promote_types(x.dtype, torch.float32)
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    x1, x2 = x[..., :half].to(work), x[..., half:].to(work)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


def inverse_frequencies(channels: int, base: float) -> Tensor:
    """[channels / 2] frequencies base^(-2c / channels), as in RoFormer."""
    return base ** (-torch.arange(0, channels, 2, dtype=torch.float64) / channels)


def check_base(base: Any) -> float:
    """`base` as a float; ValueError unless it is a finite number > 1 (0 or less gives infinite or complex
    frequencies, nan angles; 1 gives every channel pair the same angle 0)."""
    if not finite_number(base) or base <= 1:
        raise ValueError(f"rotary base must be a finite number > 1 (RoFormer: 10000), got {base!r}")
    return float(base)


class Rotary(nn.Module):
    """1D rotary embeddings (RoFormer). Positions default to 0..L-1 for queries and for keys.

    Args:
        head_dim: D (even).
        base: frequency base.
    """

    decodes = True  # positions are 1D: incremental decoding passes the new tokens' positions

    def __init__(self, *, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2 or head_dim <= 0:
            raise ValueError(f"rotary embeddings need an even head_dim; got {head_dim}")
        self.head_dim, self.base = head_dim, check_base(base)

    def angles(self, positions: Tensor) -> Tensor:
        """positions [L] or [B, L] -> angles [L, D/2] or [B, 1, L, D/2]."""
        inv_freq = inverse_frequencies(self.head_dim, self.base).to(positions.device)  # [D/2]
        out = positions.to(torch.float64)[..., None] * inv_freq
        return out if positions.dim() == 1 else out[:, None]

    def forward(
        self, q: Tensor, k: Tensor, q_pos: Tensor | None = None, k_pos: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Rotate q [B, H, Lq, D] and k [B, Hkv, Lk, D]; `q_pos`/`k_pos` are positions [L] or [B, L]."""
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"Rotary was built for head_dim {self.head_dim}; got q {q.shape[-1]}, k {k.shape[-1]}")
        q_pos = torch.arange(q.shape[-2], device=q.device) if q_pos is None else q_pos
        k_pos = torch.arange(k.shape[-2], device=k.device) if k_pos is None else k_pos
        return rotate(q, self.angles(q_pos)), rotate(k, self.angles(k_pos))

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"


class Rotary2D(nn.Module):
    """Axial 2D rotary embeddings for a token grid (RoPE-ViT "axial"): half the frequencies follow the row,
    half the column. Sequences are P prefix tokens (not rotated) then the grid in row-major order.

    The grid comes from `grid_size` and can change per forward (`set_grid_size`, or
    `attnzoo.attention.positions.set_grid_size(model, ...)`); rotary needs no interpolation.

    Args:
        head_dim: D (a multiple of 4).
        grid_size: (rows, cols), or an int for a square grid.
        num_prefix_tokens: P.
        base: frequency base (RoPE-ViT uses 100 for axial 2D).
    """

    def __init__(
        self, *, head_dim: int, grid_size: int | tuple[int, int], num_prefix_tokens: int = 0, base: float = 100.0
    ) -> None:
        super().__init__()
        if head_dim % 4 or head_dim <= 0:
            raise ValueError(f"axial 2D rotary embeddings need head_dim divisible by 4; got {head_dim}")
        if not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"num_prefix_tokens must be an int >= 0; got {num_prefix_tokens!r}")
        self.head_dim, self.base, self.num_prefix_tokens = head_dim, check_base(base), num_prefix_tokens
        self.set_grid_size(grid_size)

    def set_grid_size(self, grid_size: int | tuple[int, int]) -> None:
        pair = (grid_size, grid_size) if isinstance(grid_size, int) else tuple(grid_size)
        if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
            raise ValueError(f"Rotary2D grid_size must be a positive int or (rows, cols); got {grid_size!r}")
        self.grid_size = pair

    def grid_positions(self, device=None) -> Tensor:
        """[N, 2] (row, col) of the grid tokens in row-major order."""
        rows, cols = self.grid_size
        ys, xs = torch.meshgrid(torch.arange(rows, device=device), torch.arange(cols, device=device), indexing="ij")
        return torch.stack([ys.flatten(), xs.flatten()], dim=-1)

    def angles(self, positions: Tensor) -> Tensor:
        """(row, col) positions [N, 2] -> angles [P + N, D/2], zero for the prefix tokens."""
        inv_freq = inverse_frequencies(self.head_dim // 2, self.base).to(positions.device)  # [D/4]
        pos = positions.to(torch.float64)
        grid = torch.cat([pos[:, :1] * inv_freq, pos[:, 1:] * inv_freq], dim=-1)  # [N, D/2]
        return torch.cat([grid.new_zeros(self.num_prefix_tokens, grid.shape[-1]), grid], dim=0)

    def forward(
        self, q: Tensor, k: Tensor, q_pos: Tensor | None = None, k_pos: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Rotate q [B, H, Lq, D] and k [B, Hkv, Lk, D]; `q_pos`/`k_pos` are grid (row, col) positions [N, 2]."""
        want = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        for name, x, pos in (("query", q, q_pos), ("key", k, k_pos)):
            n = x.shape[-2] if pos is None else self.num_prefix_tokens + pos.shape[0]
            if x.shape[-1] != self.head_dim or x.shape[-2] != n or (pos is None and n != want):
                raise ValueError(
                    f"Rotary2D (head_dim {self.head_dim}, grid {self.grid_size}, {self.num_prefix_tokens} prefix "
                    f"tokens = {want}) got {name} tokens {x.shape[-2]} of dim {x.shape[-1]}; for another grid "
                    "call attnzoo.attention.positions.set_grid_size(model, (rows, cols)) before the forward"
                )
        q_pos = self.grid_positions(q.device) if q_pos is None else q_pos
        k_pos = self.grid_positions(k.device) if k_pos is None else k_pos
        return rotate(q, self.angles(q_pos)), rotate(k, self.angles(k_pos))

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, grid={self.grid_size}, prefix_tokens={self.num_prefix_tokens}"


# config short names -> classes (see attnzoo.attention.specs)
ROTARY: dict[str, type[nn.Module]] = {"rope": Rotary, "rope_2d": Rotary2D}
