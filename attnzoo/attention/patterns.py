"""Patterns: WHICH (query, key) pairs may interact. Meaning only; `backends.py` decides how to run them.

A pattern gives three views of one rule:
- `mask_mod(b, h, q_idx, kv_idx) -> bool` (FlexAttention's convention, True = allowed), elementwise over
  broadcast integer tensors;
- `dense_mask(lq, lk)` -> bool [Lq, Lk] (or [B, Lq, Lk] for per-batch patterns such as `KeyPadding`);
- `block_mask(lq, lk, block_q, block_k)` -> bool [nQb, nKb], True where query block i may read key block j
  (a superset is allowed: exact masks are applied inside blocks), and `block_layout(...)`, the key blocks
  each query block reads, for the blocked and flex backends.
Patterns compose with `&` and `|`. Patterns whose rule depends on the lengths (random blocks) resolve it in
`bind(lq, lk)`; backends call it, and `dense_mask`/`block_mask` do it themselves.

Incremental decoding (`cache.py`) needs a pattern that never lets a query read a later key (`causal_only`)
and whose rule depends on positions alone; `lookback` bounds how far back a query reads, so a sliding-window
cache keeps `lookback + 1` keys. A decoding call reads its rows through `shifted(q_start, k_start)`: local
query i and key j stand for positions q_start + i and k_start + j.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..util.checks import at_least

Tensor = torch.Tensor


def num_blocks(length: int, block: int) -> int:
    return -(-length // block)


def _starts_ends(length: int, block: int, device) -> tuple[Tensor, Tensor]:
    """First and last position of each block of a `length` sequence cut into `block`-sized blocks."""
    starts = torch.arange(num_blocks(length, block), device=device) * block
    return starts, (starts + block).clamp(max=length) - 1


class Pattern:
    """Base class. Subclasses implement `mask_mod`; everything else derives from it (and may be sped up)."""

    is_causal = False  # exactly the causal mask (lets sdpa use its is_causal fast path)
    batch_size: int | None = None  # set by patterns whose mask differs per batch element (uses `b`)
    causal_only = False  # no query ever reads a later key, and the rule depends on positions only (decodes)
    lookback: int | None = None  # every allowed pair has i - j <= lookback (None: no bound)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        raise NotImplementedError

    def bind(self, lq: int, lk: int) -> Pattern:
        """This pattern for lengths (lq, lk); only patterns whose rule depends on the lengths return another."""
        return self

    def dense_mask(self, lq: int, lk: int, device: torch.device | str | None = None) -> Tensor:
        """bool [Lq, Lk] (or [B, Lq, Lk] when `batch_size` is set), True where query i may read key j."""
        return self.bind(lq, lk).mask_at(torch.arange(lq, device=device), torch.arange(lk, device=device))

    def mask_at(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """The mask of a bound pattern (see `bind`) at queries q_idx [c] and keys kv_idx [n]: bool [c, n], or
        [B, c, n] when `batch_size` is set (each batch element its own rows)."""
        c, n = len(q_idx), len(kv_idx)
        zero = torch.zeros((), dtype=torch.long, device=q_idx.device)
        if self.batch_size is None:
            return self.mask_mod(zero, zero, q_idx[:, None], kv_idx[None, :]).expand(c, n)
        b = torch.arange(self.batch_size, device=q_idx.device)[:, None, None]
        return self.mask_mod(b, zero, q_idx[:, None], kv_idx[None, :]).expand(self.batch_size, c, n)

    def block_mask(self, lq: int, lk: int, block_q: int, block_k: int, device=None) -> Tensor:
        """bool [nQb, nKb]: True where some query of block i may read some key of block j (superset allowed).

        Derived from `mask_mod` chunk by chunk (exact, O(Lq * Lk) work); built-ins override it with O(nQb * nKb).
        """
        bound = self.bind(lq, lk)
        nqb, nkb = num_blocks(lq, block_q), num_blocks(lk, block_k)
        out = torch.zeros(nqb, nkb, dtype=torch.bool, device=device)
        chunk = max(1, (1 << 22) // (block_q * nkb * block_k))
        kv_idx = torch.arange(nkb * block_k, device=device).clamp(max=lk - 1)[None, :]
        kv_real = (torch.arange(nkb * block_k, device=device) < lk)[None, :]
        for i in range(0, nqb, chunk):
            q_idx = torch.arange(i * block_q, min((i + chunk) * block_q, nqb * block_q), device=device)
            q_idx = q_idx.clamp(max=lq - 1)[:, None]
            m = bound.dense_rows(q_idx, kv_idx) & kv_real  # [rows, nKb * block_k]
            out[i : i + chunk] = m.view(-1, block_q, nkb, block_k).any(dim=3).any(dim=1)
        return out

    def dense_rows(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """mask_mod over index tensors, reduced over the batch for per-batch patterns."""
        zero = torch.zeros((), dtype=torch.long, device=q_idx.device)
        if self.batch_size is None:
            return self.mask_mod(zero, zero, q_idx, kv_idx)
        b = torch.arange(self.batch_size, device=q_idx.device).view(-1, *([1] * q_idx.dim()))
        return self.mask_mod(b, zero, q_idx, kv_idx).any(dim=0)

    def block_layout(self, lq: int, lk: int, block_q: int, block_k: int, device=None) -> tuple[Tensor, Tensor]:
        """(kv_blocks long [nQb, K], counts long [nQb]): the key blocks query block i reads are
        kv_blocks[i, :counts[i]] (ascending; the rest of the row is padding with 0)."""
        bm = self.block_mask(lq, lk, block_q, block_k, device=device)
        counts = bm.sum(dim=1)
        width = max(int(counts.max()), 1) if bm.numel() else 1
        # stable sort puts the True columns first, in ascending order
        order = torch.sort((~bm).to(torch.int8), dim=1, stable=True).indices[:, :width]
        slot_used = torch.arange(width, device=bm.device)[None, :] < counts[:, None]
        return torch.where(slot_used, order, torch.zeros_like(order)), counts

    def shifted(self, q_start: int, k_start: int) -> Pattern:
        """This pattern read at positions: local query i is position q_start + i, local key j is k_start + j."""
        return self if q_start == k_start == 0 else Shifted(self, q_start, k_start)

    def __and__(self, other: Pattern) -> Pattern:
        return And(self, other)

    def __or__(self, other: Pattern) -> Pattern:
        return Or(self, other)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class Causal(Pattern):
    """Query i reads keys j <= i (top-left aligned, as `F.scaled_dot_product_attention(is_causal=True)`)."""

    is_causal = True
    causal_only = True

    def mask_mod(self, b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        _, q_end = _starts_ends(lq, block_q, device)
        k_start, _ = _starts_ends(lk, block_k, device)
        return k_start[None, :] <= q_end[:, None]


class SlidingWindow(Pattern):
    """Query i reads keys j with |i - j| <= window (2 * window + 1 keys), or i - window <= j <= i when causal."""

    def __init__(self, *, window: int, causal: bool = False) -> None:
        self.window = at_least("window", window, 0)
        self.causal = bool(causal)

    @property
    def causal_only(self) -> bool:
        return self.causal

    @property
    def lookback(self) -> int:
        return self.window

    def mask_mod(self, b, h, q_idx, kv_idx):
        d = q_idx - kv_idx
        return (d >= 0) & (d <= self.window) if self.causal else d.abs() <= self.window

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        q_start, q_end = _starts_ends(lq, block_q, device)
        k_start, k_end = _starts_ends(lk, block_k, device)
        # the smallest and largest q - k over the block pair must straddle the allowed offsets
        lo = q_start[:, None] - k_end[None, :]
        hi = q_end[:, None] - k_start[None, :]
        if self.causal:
            return (hi >= 0) & (lo <= self.window)
        return (hi >= -self.window) & (lo <= self.window)


class DilatedSlidingWindow(Pattern):
    """Query i reads keys j = i + n * dilation for |n| <= window (0 <= n <= window, keys before i, when causal).

    The receptive field spans window * dilation positions on each side (Longformer's dilated window).
    """

    def __init__(self, *, window: int, dilation: int = 2, causal: bool = False) -> None:
        self.window = at_least("window", window, 0)
        self.dilation = at_least("dilation", dilation, 1)
        self.causal = bool(causal)
        self._span = SlidingWindow(window=self.window * self.dilation, causal=self.causal)

    @property
    def causal_only(self) -> bool:
        return self.causal

    @property
    def lookback(self) -> int:
        return self.window * self.dilation

    def mask_mod(self, b, h, q_idx, kv_idx):
        return self._span.mask_mod(b, h, q_idx, kv_idx) & ((q_idx - kv_idx) % self.dilation == 0)

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        return self._span.block_mask(lq, lk, block_q, block_k, device)


class _TokenSet:
    """Membership test `i in tokens` for index tensors, on any device (compile friendly: one gather)."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = sorted(set(tokens))
        self._flags: dict[torch.device, Tensor] = {}

    def contains(self, idx: Tensor) -> Tensor:
        flags = self._flags.get(idx.device)
        if flags is None:
            if torch.compiler.is_compiling():
                # no tensor is made while compiling: Dynamo refuses keeping it (a side effect inside FlexAttention's
                # traced graph) and Inductor cannot lower one made inside flex's mask_mod on CUDA. One comparison
                # per token instead (outside a compiled net, flex builds its BlockMask first, which keeps the flags)
                out = idx == self.tokens[0]
                for t in self.tokens[1:]:
                    out = out | (idx == t)
                return out
            flags = torch.zeros(self.tokens[-1] + 1, dtype=torch.bool, device=idx.device)
            flags[self.tokens] = True
            self._flags[idx.device] = flags
        last = len(flags) - 1
        return (idx <= last) & flags[idx.clamp(0, last)]

    def block_flags(self, length: int, block: int, device) -> Tensor:
        """bool [nBlocks]: the block holds a token of the set."""
        out = torch.zeros(num_blocks(length, block), dtype=torch.bool, device=device)
        inside = [t // block for t in self.tokens if t < length]
        out[inside] = True
        return out


class GlobalTokens(Pattern):
    """Longformer-style global tokens: the chosen positions read every key and every query reads them.

    Args:
        tokens: positions of the global tokens (positions past a sequence's length are ignored).
        num_prefix_tokens: also make the first n positions global (a model passes its cls/register count).
    """

    def __init__(self, *, tokens: Sequence[int] = (), num_prefix_tokens: int = 0) -> None:
        at_least("num_prefix_tokens", num_prefix_tokens, 0)
        if not isinstance(tokens, Sequence) or isinstance(tokens, str):
            raise ValueError(
                f"global tokens: {tokens!r} is not a list of token positions; give a list, e.g. [0] for the first "
                "token (or [0, 1, 2] for the first three)"
            )
        for t in tokens:
            at_least("each global token position", t, 0)
        self.tokens = tuple(sorted(set(tokens) | set(range(num_prefix_tokens))))
        if not self.tokens:
            raise ValueError("GlobalTokens needs at least one token: give tokens=[...] or num_prefix_tokens > 0")
        self._set = _TokenSet(self.tokens)

    def mask_mod(self, b, h, q_idx, kv_idx):
        return self._set.contains(q_idx) | self._set.contains(kv_idx)

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        return self._set.block_flags(lq, block_q, device)[:, None] | self._set.block_flags(lk, block_k, device)[None]


class BlockLocal(Pattern):
    """Query i reads keys j in the same block of `block` positions (i // block == j // block)."""

    def __init__(self, *, block: int) -> None:
        self.block = at_least("block", block, 1)

    @property
    def lookback(self) -> int:
        return self.block - 1

    def mask_mod(self, b, h, q_idx, kv_idx):
        return q_idx // self.block == kv_idx // self.block

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        q_start, q_end = _starts_ends(lq, block_q, device)
        k_start, k_end = _starts_ends(lk, block_k, device)
        lo = torch.maximum(q_start[:, None] // self.block, k_start[None, :] // self.block)
        hi = torch.minimum(q_end[:, None] // self.block, k_end[None, :] // self.block)
        return lo <= hi


class RandomBlocks(Pattern):
    """Each query block of `block` positions reads `num_random` key blocks drawn at random.

    The draw is a function of (seed, layer_index, lq, lk) only: reproducible, and fixed for the life of the
    pattern. Layers built from one attention config get their index in the model as `layer_index`
    (`factory.attention_builder`), so each layer has its own fixed random blocks.
    """

    def __init__(self, *, num_random: int = 2, block: int = 64, seed: int = 0, layer_index: int = 0) -> None:
        self.num_random = at_least("num_random", num_random, 0)
        self.block = at_least("block", block, 1)
        self.seed = at_least("seed", seed, 0)
        self.layer_index = at_least("layer_index", layer_index, 0)
        self._bound: dict[tuple[int, int], _BoundRandomBlocks] = {}

    def mask_mod(self, b, h, q_idx, kv_idx):
        raise ValueError("RandomBlocks depends on the sequence lengths: use pattern.bind(lq, lk).mask_mod")

    def bind(self, lq, lk):
        if (lq, lk) not in self._bound:
            g = torch.Generator().manual_seed(self.seed + 1_000_003 * self.layer_index)  # layer 0: `seed` itself
            nqb, nkb = num_blocks(lq, self.block), num_blocks(lk, self.block)
            picks = torch.rand(nqb, nkb, generator=g).argsort(dim=1)[:, : self.num_random]  # [nQb, r]
            table = torch.zeros(nqb, nkb, dtype=torch.bool)
            table.scatter_(1, picks, True)
            self._bound[(lq, lk)] = _BoundRandomBlocks(table, self.block)
        return self._bound[(lq, lk)]

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        return self.bind(lq, lk).block_mask(lq, lk, block_q, block_k, device)


class _BoundRandomBlocks(Pattern):
    def __init__(self, table: Tensor, block: int) -> None:
        self.block = block
        self._tables = {table.device: table}

    def _table(self, device) -> Tensor:
        if device not in self._tables:
            self._tables[device] = next(iter(self._tables.values())).to(device)
        return self._tables[device]

    def mask_mod(self, b, h, q_idx, kv_idx):
        table = self._table(q_idx.device)
        qb = (q_idx // self.block).clamp(max=table.shape[0] - 1)
        kb = (kv_idx // self.block).clamp(max=table.shape[1] - 1)
        return table[qb, kb]

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        # a block pair is read when the rectangle of random-table cells it covers holds a True (integral image)
        table = self._table(torch.device(device) if device is not None else torch.device("cpu"))
        integral = torch.nn.functional.pad(table.long().cumsum(0).cumsum(1), (1, 0, 1, 0))  # [nQr + 1, nKr + 1]
        q_start, q_end = _starts_ends(lq, block_q, table.device)
        k_start, k_end = _starts_ends(lk, block_k, table.device)
        r0, r1 = (q_start // self.block)[:, None], (q_end // self.block + 1)[:, None]
        c0, c1 = (k_start // self.block)[None, :], (k_end // self.block + 1)[None, :]
        return (integral[r1, c1] - integral[r0, c1] - integral[r1, c0] + integral[r0, c0]) > 0


def unpadded(padding_mask: Tensor) -> Tensor:
    """True where a position holds a real token, from a padding mask (True = padding, as `key_padding_mask` in
    `torch.nn.MultiheadAttention`). The one place attnzoo turns padding around: every backend, the chunked
    engine, `KeyPadding` and pooling over tokens call this."""
    return ~padding_mask


def right_padded(padding_mask: Tensor) -> list[int] | None:
    """The real tokens of each row when `padding_mask` [B, L] (True = padding) pads only the end of rows, else None."""
    keep = unpadded(padding_mask)
    lengths = keep.sum(dim=1)
    positions = torch.arange(keep.shape[1], device=keep.device)
    return lengths.tolist() if torch.equal(keep, positions[None, :] < lengths[:, None]) else None


class KeyPadding(Pattern):
    """Per-batch key padding as a pattern: `padding_mask` bool [B, Lk], True marks padding (never read).

    `attend(key_padding_mask=...)` is the usual way to pass padding; this form lets it compose with `&`.
    """

    def __init__(self, padding_mask: Tensor) -> None:
        if padding_mask.dim() != 2 or padding_mask.dtype != torch.bool:
            raise ValueError(f"padding_mask must be bool [B, Lk]; got {padding_mask.dtype} {list(padding_mask.shape)}")
        self.padding_mask = padding_mask
        self.batch_size = padding_mask.shape[0]
        self._keys = unpadded(padding_mask)  # [B, Lk], True = a key to read

    def mask_mod(self, b, h, q_idx, kv_idx):
        keys = self._keys.to(kv_idx.device)
        return keys[b, kv_idx.clamp(max=keys.shape[1] - 1)]

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        nkb = num_blocks(lk, block_k)
        keep = torch.nn.functional.pad(self._keys.to(device), (0, nkb * block_k - lk))
        has_key = keep.view(-1, nkb, block_k).any(dim=2).any(dim=0)  # [nKb]
        return has_key[None, :].expand(num_blocks(lq, block_q), nkb)


class OwnMaskMod(Pattern):
    """A user's own pattern that is not a `Pattern`: an object with a `mask_mod` method, or a FlexAttention
    `mask_mod` function itself (b, h, q_idx, kv_idx -> bool). What the object defines of a pattern's interface is
    used (`bind` for a rule that depends on the lengths, its own `dense_mask` / `block_mask`, `is_causal`,
    `batch_size`, `causal_only`, `lookback`); the rest derives from `mask_mod` as for a subclass (not causal, one
    mask for the whole batch, no bound)."""

    def __init__(self, source: Any) -> None:
        self.source = source
        for name in ("is_causal", "batch_size", "causal_only", "lookback"):
            if hasattr(source, name):
                setattr(self, name, getattr(source, name))

    def mask_mod(self, b, h, q_idx, kv_idx):
        rule = self.source.mask_mod if hasattr(self.source, "mask_mod") else self.source
        return rule(b, h, q_idx, kv_idx)

    def bind(self, lq, lk):
        bound = self.source.bind(lq, lk) if hasattr(self.source, "bind") else self.source
        return self if bound is self.source else as_pattern(bound)

    def dense_mask(self, lq, lk, device=None):
        if hasattr(self.source, "dense_mask"):
            return self.source.dense_mask(lq, lk, device=device)
        return super().dense_mask(lq, lk, device=device)

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        if hasattr(self.source, "block_mask"):
            return self.source.block_mask(lq, lk, block_q, block_k, device=device)
        return super().block_mask(lq, lk, block_q, block_k, device=device)

    def __repr__(self) -> str:
        return repr(self.source)


def as_pattern(pattern: Any) -> Pattern | None:
    """`pattern` as a `Pattern` (None stays None): a subclass as it is; an object with a `mask_mod` method, or a
    `mask_mod` function (a plain function, method or functools.partial), wrapped (`OwnMaskMod`); TypeError for
    anything else (a bias or other module passed as the pattern by mistake)."""
    import functools
    import inspect

    from torch import nn

    if pattern is None or isinstance(pattern, Pattern):
        return pattern
    function = inspect.isfunction(pattern) or inspect.ismethod(pattern) or isinstance(pattern, functools.partial)
    if not isinstance(pattern, nn.Module) and (hasattr(pattern, "mask_mod") or function):
        return OwnMaskMod(pattern)
    raise TypeError(
        f"pattern: expected a pattern (attnzoo.attention.Causal(), SlidingWindow(window=...), ...), an object with a "
        f"mask_mod(b, h, q_idx, kv_idx) method or such a function, a kind name or a {{kind: ...}} mapping; got "
        f"{type(pattern).__name__} {pattern!r}"
    )


class And(Pattern):
    def __init__(self, *parts: Pattern) -> None:
        parts = tuple(as_pattern(p) for p in parts)
        self.parts = parts
        self.is_causal = all(p.is_causal for p in parts)
        sizes = {p.batch_size for p in parts} - {None}
        self.batch_size = max(sizes) if sizes else None
        self.causal_only, self.lookback = self._decoding()

    def _decoding(self) -> tuple[bool, int | None]:
        # a pair must pass every part: one causal part makes the whole causal, the tightest bound holds
        fixed = all(_position_only(p) for p in self.parts)
        bounds = [p.lookback for p in self.parts if p.lookback is not None]
        return fixed and any(p.causal_only for p in self.parts), min(bounds) if bounds else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.parts!r}"

    def bind(self, lq, lk):
        bound = [p.bind(lq, lk) for p in self.parts]
        return self if all(b is p for b, p in zip(bound, self.parts, strict=True)) else type(self)(*bound)

    def mask_mod(self, b, h, q_idx, kv_idx):
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out & p.mask_mod(b, h, q_idx, kv_idx)
        return out

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        out = self.parts[0].block_mask(lq, lk, block_q, block_k, device)
        for p in self.parts[1:]:
            out = out & p.block_mask(lq, lk, block_q, block_k, device)
        return out


class Or(And):
    def _decoding(self) -> tuple[bool, int | None]:
        # a pair may pass any part: causal only when every part is, bounded only when every part is
        bounds = [p.lookback for p in self.parts]
        causal = all(p.causal_only and _position_only(p) for p in self.parts)
        return causal, None if None in bounds else max(bounds)

    def mask_mod(self, b, h, q_idx, kv_idx):
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out | p.mask_mod(b, h, q_idx, kv_idx)
        return out

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        out = self.parts[0].block_mask(lq, lk, block_q, block_k, device)
        for p in self.parts[1:]:
            out = out | p.block_mask(lq, lk, block_q, block_k, device)
        return out


class BigBird(Or):
    """BigBird: a sliding window, global tokens and random blocks (Zaheer et al., 2020).

    Args:
        window: each query reads keys within this distance (see `SlidingWindow`).
        global_tokens: positions that read and are read by everything (see `GlobalTokens`).
        num_random: random key blocks per query block; block: their size; seed: their draw.
        layer_index: the layer's index, given by `factory.attention_builder`: each layer draws its own blocks.
    """

    def __init__(
        self,
        *,
        window: int = 64,
        global_tokens: Sequence[int] = (0,),
        num_random: int = 2,
        block: int = 64,
        seed: int = 0,
        layer_index: int = 0,
    ) -> None:
        super().__init__(
            SlidingWindow(window=window),
            GlobalTokens(tokens=global_tokens),
            RandomBlocks(num_random=num_random, block=block, seed=seed, layer_index=layer_index),
        )

    def bind(self, lq, lk):
        return Or(*(p.bind(lq, lk) for p in self.parts))


def _position_only(pattern: Pattern) -> bool:
    """False for patterns whose rule depends on the lengths or the batch (random blocks, key padding)."""
    if isinstance(pattern, And):
        return all(_position_only(p) for p in pattern.parts)
    if isinstance(pattern, OwnMaskMod):  # a user's rule per batch element or per length is not one of positions
        return pattern.batch_size is None and not hasattr(pattern.source, "bind")
    return not isinstance(pattern, RandomBlocks | KeyPadding | _BoundRandomBlocks)


class Shifted(Pattern):
    """`pattern` read at positions: local query i is position q_start + i and local key j is k_start + j.

    What a decoding call attends with (`Attention.forward(cache=...)`): its queries start where the cache
    ends, its keys where the cache's kept keys start.
    """

    def __init__(self, pattern: Pattern, q_start: int, k_start: int) -> None:
        self.pattern, self.q_start, self.k_start = pattern, int(q_start), int(k_start)
        self.batch_size = pattern.batch_size

    @property
    def causal_only(self) -> bool:
        return self.pattern.causal_only

    @property
    def lookback(self) -> int | None:
        return self.pattern.lookback

    def mask_mod(self, b, h, q_idx, kv_idx):
        return self.pattern.mask_mod(b, h, q_idx + self.q_start, kv_idx + self.k_start)

    def shifted(self, q_start: int, k_start: int) -> Pattern:
        return self.pattern.shifted(self.q_start + q_start, self.k_start + k_start)


# config short names -> classes (see attnzoo.attention.specs)
PATTERNS: dict[str, type[Pattern]] = {
    "causal": Causal,
    "sliding_window": SlidingWindow,
    "dilated": DilatedSlidingWindow,
    "global": GlobalTokens,
    "bigbird": BigBird,
    "block_local": BlockLocal,
    "random_blocks": RandomBlocks,
}
