"""Biases: WHAT is added to attention scores. Meaning only; `backends.py` decides how to run them.

A bias is a module with `values(q_idx, kv_idx) -> [H, ...]`: the additive score for query positions
`q_idx` and key positions `kv_idx` (integer tensors broadcast against each other). Everything else derives
from it: `dense(lq, lk)` -> [H, Lq, Lk] for eager and sdpa, and `score_mod(lq, lk)` for FlexAttention.
Subclasses override `_dense` and `score_mod` with fast versions; tests hold both to `values`.

Which backend takes which form: eager and sdpa add `dense`; flex calls `score_mod`. A bias with trainable
parameters (`learned`) trains on every backend whose `supports()` accepts the call with `needs_grad`
(`attend` counts a bias that needs gradients as a reason to need them).

Incremental decoding reads a bias at shifted positions (`shifted`: the values of the new queries' rows).

`dense` results that need no gradient (ALiBi, a frozen table, inference) are kept in a small LRU cache
(`DENSE_CACHE_BYTES`), keyed by the parameters' identity and version, so a fixed bias costs one dense
copy per shape, not one per call. Built-ins are listed in `BIASES` (config short names).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import torch
from torch import nn

from .lasting import lasting
from .toeplitz import relative_dense

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

DENSE_CACHE_BYTES = 512 * 2**20
_cache: OrderedDict[Hashable, Tensor] = OrderedDict()
_tokens = itertools.count()  # cache owners: never reused, unlike id()


def _cache_get(key: Hashable, make: Callable[[], Tensor]) -> Tensor:
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    out = lasting(make)
    size = out.numel() * out.element_size()
    if size <= DENSE_CACHE_BYTES:
        _cache[key] = out
        while sum(t.numel() * t.element_size() for t in _cache.values()) > DENSE_CACHE_BYTES:
            _cache.popitem(last=False)
    return out


def _evict(owner: int) -> None:
    for key in [k for k in _cache if k[0] == owner]:
        del _cache[key]


def _pair(size: Any, what: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise ValueError(f"{what} must be a positive int or (rows, cols); got {size!r}")
    return pair


class Bias(nn.Module):
    """Base class: subclasses implement `values` (and usually faster `_dense` / `score_mod`). H = `num_heads`."""

    learned = False  # True when the bias has trainable parameters
    decodes = True  # `values` is a function of 1D positions: incremental decoding reads it at shifted rows

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        if not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(f"num_heads must be a positive int; got {num_heads!r}")
        self.num_heads = num_heads

    def values(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        raise NotImplementedError

    def dense(self, lq: int, lk: int, device=None, dtype=None) -> Tensor:
        """[H, Lq, Lk] additive scores (cached and shared when no gradient is needed: never modify in place)."""
        tensors = [*self.parameters(), *self.buffers()]
        device = torch.device(device) if device is not None else (tensors[0].device if tensors else None)
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self._once(("dense", lq, lk, str(device), dtype), lambda: self._dense(lq, lk, device, dtype))
        key = (*self._cache_identity(), lq, lk, str(device), dtype)
        return _cache_get(key, lambda: self._dense(lq, lk, device, dtype))

    def shifted(self, q_start: int, k_start: int, lq: int, lk: int, device=None) -> Bias | Tensor:
        """This bias for queries at positions q_start.. and keys at k_start.. (a decoding call's rows): the module
        itself at (0, 0), else its [H, Lq, Lk] values there (`attend` takes either)."""
        if q_start == k_start == 0:
            return self
        q_idx = torch.arange(q_start, q_start + lq, device=device)[:, None]
        kv_idx = torch.arange(k_start, k_start + lk, device=device)[None, :]
        return self.values(q_idx, kv_idx).expand(self.num_heads, lq, lk)

    def relative(self, lq: int, lk: int) -> dict[str, Any] | None:
        """The bias as a table over (row, column) offsets, the keyword arguments of `toeplitz.relative_dense`
        (`table`, `grid_q`, `grid_k`, `prefix`, `num_prefix_tokens`), or None when it is not one. CPU sdpa
        uses it to train the table without a dense bias or its gradient, and to read a fixed 1D table in place
        (`sdpa_bias.py`). Subclasses implement `_relative`."""
        return self._once(("relative", lq, lk), lambda: self._relative(lq, lk))

    def _relative(self, lq: int, lk: int) -> dict[str, Any] | None:
        return None

    @contextlib.contextmanager
    def once_per_call(self) -> Iterator[Bias]:
        """Inside the block, `dense` and `relative` are computed once per shape and reused: one bias for every
        layer of an encoder's forward, as T5 shares its bias (`Encoder(shared_bias=)`), and one table for
        choosing a kernel and running it (`attend`). A block inside another shares the outer one's results."""
        if self.__dict__.get("_memo") is not None:
            yield self
            return
        self._memo: dict[Hashable, Any] | None = {}
        try:
            yield self
        finally:
            self._memo = None

    @contextlib.contextmanager
    def own_call(self) -> Iterator[Bias]:
        """Like `once_per_call`, with results of its own even inside another block: an activation-checkpointed
        layer computes what it reads itself, in its forward and again in its recomputation (had it read the outer
        block's results, the recomputation would compute more than the forward did, which checkpointing refuses)."""
        outer = self.__dict__.get("_memo")
        self._memo = {}
        try:
            yield self
        finally:
            self._memo = outer

    def _once(self, key: Hashable, make: Callable[[], Any]) -> Any:
        memo = self.__dict__.get("_memo")
        if memo is None:
            return make()
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def _dense(self, lq: int, lk: int, device, dtype) -> Tensor:
        q_idx = torch.arange(lq, device=device)[:, None]
        kv_idx = torch.arange(lk, device=device)[None, :]
        out = self.values(q_idx, kv_idx).expand(self.num_heads, lq, lk)
        return out if dtype is None else out.to(dtype)

    def _cache_identity(self) -> tuple:
        """What the dense result depends on besides shapes: this module's tensors and their in-place versions."""
        token = self.__dict__.get("_cache_token")
        if token is None:
            token = self._cache_token = next(_tokens)
            weakref.finalize(self, _evict, token)  # drop this module's entries when it goes
        state = tuple((t.data_ptr(), t._version) for t in [*self.parameters(), *self.buffers()])
        return (token, state, self.extra_repr())

    def score_mod(self, lq: int, lk: int) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
        """FlexAttention `score_mod(score, b, h, q_idx, kv_idx)` adding this bias."""
        table = self.dense(lq, lk)  # [H, Lq, Lk]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx, kv_idx]

        return score_mod


# ---------------------------------------------------------------------------------------------------------------
# T5: one learned scalar per head and bucket of relative distance


def t5_bucket(relative: Tensor, *, num_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    """T5's bucket of each relative position (key minus query): exact below half the buckets, then log-spaced.

    Bidirectional: half the buckets for keys before-or-at the query, half (offset by num_buckets/2) for
    keys after it. Causal: only the distance back to earlier keys counts; later keys share bucket 0.
    """
    back = -relative  # distance from the key back to the query
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = (back < 0).long() * num_buckets
        back = back.abs()
    else:
        back = back.clamp(min=0)
    exact = num_buckets // 2
    log_ratio = torch.log(back.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(back < exact, back, far)


class T5RelativeBias(Bias):
    """T5's bucketed relative position bias. Share one instance across an encoder (`Encoder(shared_bias=)`).

    Args:
        num_heads: H.
        num_buckets: learned values per head (both directions together when bidirectional).
        max_distance: distances at or beyond it share the last bucket.
        bidirectional: False for causal (decoder) attention.
    """

    learned = True

    def __init__(self, *, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
        super().__init__(num_heads)
        exact = num_buckets // 2 // (2 if bidirectional else 1)
        if exact < 1 or max_distance <= exact:
            raise ValueError(
                f"T5 bias needs num_buckets >= {4 if bidirectional else 2} and max_distance > the exact range "
                f"({exact}); got num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.table = nn.Parameter(torch.randn(num_buckets, num_heads) * 0.02)  # [buckets, H], as T5

    def buckets(self, relative: Tensor) -> Tensor:
        kw = dict(num_buckets=self.num_buckets, max_distance=self.max_distance, bidirectional=self.bidirectional)
        return t5_bucket(relative, **kw)

    def offset_values(self, lq: int, lk: int) -> Tensor:
        """[H, Lq + Lk - 1]: the bias of key-minus-query offsets -(Lq - 1) .. Lk - 1."""
        relative = torch.arange(-(lq - 1), lk, device=self.table.device)
        return self.table[self.buckets(relative)].t()

    def values(self, q_idx, kv_idx):
        return self.table[self.buckets(kv_idx - q_idx)].movedim(-1, 0)

    def _relative(self, lq, lk):
        table = self.offset_values(lq, lk)[:, None]  # [H, 1, Lq + Lk - 1]
        return dict(table=table, grid_q=(1, lq), grid_k=(1, lk), prefix=None, num_prefix_tokens=0)

    def _dense(self, lq, lk, device, dtype):
        return relative_dense(**self.relative(lq, lk), dtype=dtype)

    def score_mod(self, lq, lk):
        per_offset = self.offset_values(lq, lk)  # [H, Lq + Lk - 1]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + per_offset[h, kv_idx - q_idx + lq - 1]

        return score_mod

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, buckets={self.num_buckets}, max_distance={self.max_distance}, " + (
            "bidirectional" if self.bidirectional else "causal"
        )


# ---------------------------------------------------------------------------------------------------------------
# ALiBi: a fixed linear penalty on distance, one slope per head


def alibi_slopes(num_heads: int) -> list[float]:
    """The ALiBi paper's head slopes: 2^(-8/n), 2^(-16/n), ... for n heads, n a power of two; otherwise the
    slopes of the power of two below n, then every other slope of the power of two above it."""

    def geometric(n: int) -> list[float]:
        return [2 ** (-8 * (i + 1) / n) for i in range(n)]

    below = 2 ** int(math.log2(num_heads))
    if below == num_heads:
        return geometric(num_heads)
    return geometric(below) + geometric(2 * below)[0::2][: num_heads - below]


class ALiBi(Bias):
    """Attention with Linear Biases: score - slope_h * distance.

    Args:
        num_heads: H (any count; see `alibi_slopes`).
        bidirectional: True uses the symmetric distance |i - j|; False is the causal form slope_h * (j - i),
            meant with a causal pattern (keys after the query get a positive value that the mask removes).
    """

    def __init__(self, *, num_heads: int, bidirectional: bool = True) -> None:
        super().__init__(num_heads)
        self.bidirectional = bidirectional
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)  # [H]

    @property
    def causal_form(self) -> bool:
        """Whether later keys get larger values, which only a causal mask makes right (`Attention` checks it)."""
        return not self.bidirectional

    def _per_offset(self, relative: Tensor) -> Tensor:
        return -relative.abs() if self.bidirectional else relative

    def values(self, q_idx, kv_idx):
        relative = self._per_offset(kv_idx - q_idx).float()
        return self.slopes.view(-1, *[1] * relative.dim()) * relative

    def _relative(self, lq, lk):
        per_offset = self._per_offset(torch.arange(-(lq - 1), lk, device=self.slopes.device)).float()
        table = (self.slopes[:, None] * per_offset)[:, None]  # [H, 1, Lq + Lk - 1]
        return dict(table=table, grid_q=(1, lq), grid_k=(1, lk), prefix=None, num_prefix_tokens=0)

    def _dense(self, lq, lk, device, dtype):
        return relative_dense(**self.relative(lq, lk), dtype=dtype)

    def _cache_identity(self):
        return ("alibi", tuple(self.slopes.tolist()), self.bidirectional)  # every layer shares one dense copy

    def score_mod(self, lq, lk):
        slopes = self.slopes

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * self._per_offset(kv_idx - q_idx)

        return score_mod

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, " + ("bidirectional" if self.bidirectional else "causal")


# ---------------------------------------------------------------------------------------------------------------
# 2D relative bias over a token grid (Swin, BEiT), with prefix tokens


class RelativeBias2D(Bias):
    """A learned value per head and (row, column) offset between grid tokens, as in Swin and BEiT.

    Sequences are P prefix tokens (cls, distillation) then the grid in row-major order. Prefix tokens get
    three learned values per head (BEiT): prefix query -> grid key, grid query -> prefix key, prefix <-> prefix.
    At a grid other than the trained one (`set_grid_size`, e.g. by `positions.set_grid_size(model, ...)`) the
    table is resized bicubically (timm's `resize_rel_pos_bias_table_simple`), keeping gradients to it; a
    checkpoint whose table has another grid is resized the same way on load.

    Args:
        num_heads: H.
        grid_size: (rows, cols) of the token grid the table is built for (an int for a square grid).
        num_prefix_tokens: P.
    """

    learned = True
    decodes = False  # defined over a token grid, not a sequence that grows

    def __init__(self, *, num_heads: int, grid_size: int | tuple[int, int], num_prefix_tokens: int = 0) -> None:
        super().__init__(num_heads)
        gh, gw = _pair(grid_size, "RelativeBias2D grid_size")
        if not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"num_prefix_tokens must be an int >= 0; got {num_prefix_tokens!r}")
        self.num_prefix_tokens = num_prefix_tokens
        self.train_grid = self.grid_size = (gh, gw)
        self.table = nn.Parameter(torch.randn(num_heads, 2 * gh - 1, 2 * gw - 1) * 0.02)  # [H, DY, DX]
        self.prefix = nn.Parameter(torch.randn(num_heads, 3) * 0.02) if num_prefix_tokens else None
        self._register_load_state_dict_pre_hook(self._resize_loaded_table)

    def set_grid_size(self, grid_size: int | tuple[int, int]) -> None:
        """The grid of the next forwards (the table is resized from the trained grid when they differ)."""
        self.grid_size = _pair(grid_size, "RelativeBias2D grid_size")

    def current_table(self) -> Tensor:
        """[H, 2 Gh - 1, 2 Gw - 1] for the current grid."""
        if self.grid_size == self.train_grid:
            return self.table
        from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple

        gh, gw = self.grid_size
        return resize_rel_pos_bias_table_simple(self.table, self.grid_size, (self.num_heads, 2 * gh - 1, 2 * gw - 1))

    def _check_length(self, lq: int, lk: int) -> None:
        want = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if lq != want or lk != want:
            raise ValueError(
                f"RelativeBias2D: got {lq} query and {lk} key tokens, but grid {self.grid_size} with "
                f"{self.num_prefix_tokens} prefix tokens has {want}; for another grid call "
                "attnzoo.attention.positions.set_grid_size(model, (rows, cols)) before the forward"
            )

    def _joined(self) -> Tensor:
        """[H, DY * DX (+ 3)]: the current table, flattened, then the prefix values (BEiT's three) if any. One
        tensor read through one index: compiled flex cannot differentiate several reads of a learned tensor."""
        flat = self.current_table().flatten(1)
        return torch.cat([flat, self.prefix], dim=1) if self.num_prefix_tokens else flat

    def _index(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """Where the bias of (query, key) sits in `_joined()`."""
        p, (gh, gw) = self.num_prefix_tokens, self.grid_size
        qp, kp = (q_idx - p).clamp(min=0), (kv_idx - p).clamp(min=0)  # grid index (prefix tokens clamped to 0)
        idx = (kp // gw - qp // gw + gh - 1) * (2 * gw - 1) + kp % gw - qp % gw + gw - 1
        if not p:
            return idx
        grid = (2 * gh - 1) * (2 * gw - 1)  # prefix values follow: query prefix -> grid key, grid -> prefix, both
        q_pre, k_pre = q_idx < p, kv_idx < p
        return torch.where(q_pre & k_pre, grid + 2, torch.where(q_pre, grid, torch.where(k_pre, grid + 1, idx)))

    def values(self, q_idx, kv_idx):
        heads = torch.arange(self.num_heads, device=self.table.device).view(-1, *[1] * max(q_idx.dim(), kv_idx.dim()))
        return self._joined()[heads, self._index(q_idx, kv_idx)]

    def _relative(self, lq, lk):
        self._check_length(lq, lk)
        grid, p = self.grid_size, self.num_prefix_tokens
        return dict(table=self.current_table(), grid_q=grid, grid_k=grid, prefix=self.prefix, num_prefix_tokens=p)

    def _dense(self, lq, lk, device, dtype):
        return relative_dense(**self.relative(lq, lk), dtype=dtype)

    def score_mod(self, lq, lk):
        self._check_length(lq, lk)
        joined = self._joined()

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + joined[h, self._index(q_idx, kv_idx)]

        return score_mod

    def _cache_identity(self):
        return (*super()._cache_identity(), self.grid_size)

    def _resize_loaded_table(self, state_dict, prefix, *args) -> None:
        key = prefix + "table"
        table = state_dict.get(key)
        if table is None or table.shape == self.table.shape or table.dim() != 3 or table.shape[0] != self.num_heads:
            return
        from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple

        state_dict[key] = resize_rel_pos_bias_table_simple(table, self.train_grid, tuple(self.table.shape))
        log.info("%s: resized a loaded %s table to %s", key, list(table.shape), list(self.table.shape))

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, grid={self.grid_size}, trained_grid={self.train_grid}, " + (
            f"prefix_tokens={self.num_prefix_tokens}"
        )


# config short names -> classes (see attnzoo.attention.specs)
BIASES: dict[str, type[Bias]] = {"t5": T5RelativeBias, "relative_2d": RelativeBias2D, "alibi": ALiBi}
