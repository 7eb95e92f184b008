"""Absolute position encodings added to token embeddings x [B, L, C] by the model builders.

Each is a module `forward(x) -> x + encoding`; 1D encodings also take `offset`, the position of x's first token
(incremental decoding feeds a few tokens at a time). Grid encodings (`sincos_2d`, `learned` with a grid) expect
P prefix tokens (cls, distillation) then the grid in row-major order, and follow the grid set by
`set_grid_size` (which also reaches 2D biases and rotary); a learned grid table is resampled for other
grids (timm's `resample_abs_pos_embed`), in forward and when loading a checkpoint of another grid.

`POSITIONS` maps config short names to classes.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor


def set_grid_size(model: nn.Module, grid_size: int | tuple[int, int]) -> int:
    """Set the token grid on every submodule that has one (2D biases, 2D rotary, grid encodings).

    Returns how many modules were set. Call it before a forward at a grid other than the current one.
    """
    count = 0
    for module in model.modules():
        if hasattr(module, "set_grid_size") and isinstance(module, nn.Module):
            module.set_grid_size(grid_size)
            count += 1
    return count


def _pair(size: Any, what: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise ValueError(f"{what} must be a positive int or (rows, cols); got {size!r}")
    return pair


def _check_x(x: Tensor, dim: int, name: str) -> None:
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"{name} (dim {dim}) expects x [B, L, {dim}]; got {list(x.shape)}")


def sinusoidal(length: int, dim: int, *, base: float = 10000.0, device=None, start: int = 0) -> Tensor:
    """[L, C]: PE(p, 2i) = sin(p / base^(2i/C)), PE(p, 2i+1) = cos(p / base^(2i/C)) ("Attention Is All You Need")
    for positions p = start .. start + L - 1."""
    pos = torch.arange(start, start + length, device=device, dtype=torch.float64)[:, None]
    angle = pos / base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim)  # [L, C/2]
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()  # interleaved sin, cos


class Sinusoidal(nn.Module):
    """Fixed 1D sinusoidal encoding of any length.

    Args:
        dim: C (even).
        base: wavelength base.
    """

    def __init__(self, *, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if dim % 2 or dim <= 0:
            raise ValueError(f"sinusoidal positions need an even dim; got {dim}")
        self.dim, self.base = dim, base

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_x(x, self.dim, "Sinusoidal")
        return x + sinusoidal(x.shape[1], self.dim, base=self.base, device=x.device, start=offset).to(x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}"


class SinCos2D(nn.Module):
    """Fixed 2D sin-cos encoding of a grid (MAE / timm `build_sincos2d_pos_embed`); prefix tokens get zeros.

    Args:
        dim: C (a multiple of 4): a quarter each for sin(row), sin(col), cos(row), cos(col) in timm's layout.
        grid_size: (rows, cols), or an int for a square grid.
        num_prefix_tokens: P.
    """

    def __init__(self, *, dim: int, grid_size: int | tuple[int, int], num_prefix_tokens: int = 0) -> None:
        super().__init__()
        if dim % 4 or dim <= 0:
            raise ValueError(f"2D sin-cos positions need dim divisible by 4; got {dim}")
        self.dim, self.num_prefix_tokens = dim, num_prefix_tokens
        self.set_grid_size(grid_size)

    def set_grid_size(self, grid_size: int | tuple[int, int]) -> None:
        self.grid_size = _pair(grid_size, "SinCos2D grid_size")

    def encoding(self, device=None) -> Tensor:
        """[P + N, C]."""
        from timm.layers import build_sincos2d_pos_embed

        grid = build_sincos2d_pos_embed(list(self.grid_size), dim=self.dim, device=device)  # [N, C]
        return torch.cat([grid.new_zeros(self.num_prefix_tokens, self.dim), grid], dim=0)

    def forward(self, x: Tensor) -> Tensor:
        _check_x(x, self.dim, "SinCos2D")
        want = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if x.shape[1] != want:
            raise ValueError(
                f"SinCos2D: {x.shape[1]} tokens, but grid {self.grid_size} + {self.num_prefix_tokens} prefix "
                f"tokens = {want}; call attnzoo.attention.positions.set_grid_size(model, (rows, cols)) first"
            )
        return x + self.encoding(x.device).to(x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, grid={self.grid_size}, prefix_tokens={self.num_prefix_tokens}"


class Learned(nn.Module):
    """A learned table, either 1D (`max_len` positions) or over a grid (`grid_size`, plus prefix tokens).

    A grid table is resampled bicubically to the current grid when it differs from the trained one, and a
    checkpoint table of another grid is resampled on load (so a ViT/AST fine-tunes at another image size or
    clip length). A 1D table serves any length up to `max_len`.

    Args:
        dim: C.
        max_len: positions of a 1D table (text).
        grid_size: (rows, cols) of a grid table (patches); exactly one of `max_len`, `grid_size`.
        num_prefix_tokens: P; prefix tokens get their own learned rows (grid tables only).
        std: init standard deviation.
    """

    def __init__(
        self,
        *,
        dim: int,
        max_len: int | None = None,
        grid_size: int | tuple[int, int] | None = None,
        num_prefix_tokens: int = 0,
        std: float = 0.02,
    ) -> None:
        super().__init__()
        if (max_len is None) == (grid_size is None):
            raise ValueError(f"Learned positions need exactly one of max_len, grid_size; got {max_len}, {grid_size}")
        if max_len is not None and (not isinstance(max_len, int) or max_len <= 0):
            raise ValueError(f"Learned max_len must be a positive int; got {max_len!r}")
        self.dim, self.num_prefix_tokens = dim, num_prefix_tokens
        self.train_grid = self.grid_size = None if grid_size is None else _pair(grid_size, "Learned grid_size")
        n = max_len if grid_size is None else num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        self.table = nn.Parameter(torch.randn(1, n, dim) * std)  # [1, P + N, C]
        self._register_load_state_dict_pre_hook(self._resample_loaded)

    def set_grid_size(self, grid_size: int | tuple[int, int]) -> None:
        if self.train_grid is None:
            raise ValueError("a 1D Learned position table has no grid; build it with grid_size for patches")
        self.grid_size = _pair(grid_size, "Learned grid_size")

    def encoding(self) -> Tensor:
        """[1, P + N, C] for the current grid (1D: the whole table)."""
        if self.grid_size == self.train_grid:
            return self.table
        from timm.layers import resample_abs_pos_embed

        return resample_abs_pos_embed(
            self.table, list(self.grid_size), list(self.train_grid), num_prefix_tokens=self.num_prefix_tokens
        )

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x [B, L, C] + the encoding; `offset` (1D tables only) is the position of x's first token."""
        _check_x(x, self.dim, "Learned")
        table = self.encoding()
        if self.train_grid is None:
            if offset + x.shape[1] > table.shape[1]:
                at = f" from position {offset}" if offset else ""
                raise ValueError(f"Learned positions: {x.shape[1]} tokens{at} exceed max_len {table.shape[1]}")
            table = table[:, offset : offset + x.shape[1]]
        elif offset:
            raise ValueError("a grid Learned position table takes no offset (it encodes a whole grid)")
        elif x.shape[1] != table.shape[1]:
            raise ValueError(
                f"Learned: {x.shape[1]} tokens, but grid {self.grid_size} + {self.num_prefix_tokens} prefix tokens "
                f"= {table.shape[1]}; call attnzoo.attention.positions.set_grid_size(model, (rows, cols)) first"
            )
        return x + table.to(x.dtype)

    def _resample_loaded(self, state_dict, prefix, *args) -> None:
        """A loaded table of another size: a longer 1D table keeps its first max_len rows (shorter inputs read only
        those); a grid table is resampled to this grid. A shorter 1D table is left for load_state_dict to refuse."""
        key = prefix + "table"
        table = state_dict.get(key)
        if table is None or table.shape == self.table.shape or table.dim() != 3 or table.shape[-1] != self.dim:
            return
        if self.train_grid is None:
            if table.shape[1] > self.table.shape[1]:
                state_dict[key] = table[:, : self.table.shape[1]]
                log.info("%s: kept the first %d of %d loaded positions (max_len)", key, self.table.shape[1],
                         table.shape[1])  # fmt: skip
            return
        old = self._loaded_grid(table.shape[1] - self.num_prefix_tokens)
        if old is None:
            raise ValueError(
                f"{key}: cannot tell the grid of a loaded table of {table.shape[1]} rows ({self.num_prefix_tokens} "
                f"prefix rows + a grid that is neither square nor shares a side with {self.train_grid}); resample it "
                "with timm.layers.resample_abs_pos_embed(table, new_size, old_size) before loading"
            )
        from timm.layers import resample_abs_pos_embed

        new = list(self.train_grid)
        state_dict[key] = resample_abs_pos_embed(table, new, list(old), num_prefix_tokens=self.num_prefix_tokens)
        log.info("%s: resampled a loaded table of grid %s (inferred) to %s", key, old, self.train_grid)

    def _loaded_grid(self, n: int) -> tuple[int, int] | None:
        """The grid of a loaded table with n grid rows: square, else sharing rows (AST clip length), else cols."""
        side = int(round(n**0.5))
        rows, cols = self.train_grid
        if side * side == n:
            return side, side
        if n % rows == 0:
            return rows, n // rows
        if n % cols == 0:
            return n // cols, cols
        return None

    def extra_repr(self) -> str:
        size = f"max_len={self.table.shape[1]}" if self.train_grid is None else f"grid={self.grid_size}"
        return f"dim={self.dim}, {size}, prefix_tokens={self.num_prefix_tokens}"


class NoPosition(nn.Module):
    """No absolute encoding (e.g. with rotary or a relative bias): returns x unchanged."""

    def __init__(self, **context: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x


# config short names -> classes; builders pass dim, grid_size, num_prefix_tokens, ... as each accepts
POSITIONS: dict[str, type[nn.Module]] = {
    "sinusoidal": Sinusoidal,
    "sincos_2d": SinCos2D,
    "learned": Learned,
    "none": NoPosition,
}
