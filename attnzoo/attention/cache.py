"""KV caches for incremental decoding: `Attention.forward(x, ..., cache=...)` adds a few tokens per call.

A self-attention cache holds the keys and values of every token seen so far (`KVCache`), or only the last
ones a window of W keys needs (`SlidingWindowKVCache`, for patterns that never read further back: memory
O(W)). A cross-attention cache (`CrossKVCache`) holds the keys and values of one source, computed once.
Every cache counts the queries it has seen (`offset`: the position of the next one), so a call's positions
continue where the cache ends: rotary angles, bias rows and pattern rows are taken at those positions
(`Pattern.shifted`, `Bias.shifted`). Keys are cached after qk-norm and rotary, with the layer's Hkv heads
(grouped-query attention caches Hkv, not H).

`DecodingCache` gathers the caches of a model's layers for generation: `reorder` (beam search), `nbytes`.
Caches are for inference: they are filled under `torch.no_grad()` (gradients would keep every step alive).

Notation: B batch (rows, beams included), Hkv key/value heads, T cached tokens, L new tokens, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

Tensor = torch.Tensor


class Cache:
    """What every layer cache has: keys and values [B, Hkv, T, D], per-key state, and the query count."""

    def __init__(self) -> None:
        self.k: Tensor | None = None  # [B, Hkv, T, D]
        self.v: Tensor | None = None
        self.state: dict[str, Tensor] = {}  # name -> [B, T, ...], aligned with the keys
        self.offset = 0  # queries seen: the position of the next one
        self.plain_backend: tuple[tuple, str] | None = None  # (situation, backend): `Attention._plain_step`

    @property
    def length(self) -> int:
        """Keys held (T)."""
        return 0 if self.k is None else self.k.shape[2]

    def advance(self, n: int) -> int:
        """Count n new queries; returns the position of the first."""
        start, self.offset = self.offset, self.offset + n
        return start

    def reorder(self, index: Tensor) -> None:
        """Rows become rows[index] (beam search: each new beam continues the beam it came from)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        self.state = {name: t.index_select(0, index) for name, t in self.state.items()}

    def tensors(self) -> Iterator[Tensor]:
        yield from (t for t in (self.k, self.v, *self.state.values()) if t is not None)

    def nbytes(self) -> int:
        """Bytes of the cached keys, values and state (a `KVCache` buffer has room for up to about twice as many)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(offset={self.offset}, keys={self.length})"


class KVCache(Cache):
    """Keys and values of one self-attention layer, growing by each call's tokens.

    They live in buffers [B, Hkv, capacity, D] written in place: a step copies only its own keys, and the buffers
    grow by doubling, so appending costs O(1) copies per token on average (not a copy of the whole cache per step).
    Their capacity is odd: with a power of two, the [T, D] blocks of the B * Hkv rows start a power of two apart and
    share cache sets, and CPU sdpa reads them ~1.4x slower (measured at batch 1 and 8, D = 64).
    `k` and `v` are views of the filled part. Kind-specific per-key state (e.g. DCMHA's key-wise weights) rides
    along in `key_state`, aligned with the keys.
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None  # [B, Hkv, capacity, D]
        self._v: Tensor | None = None
        self._start = self._end = 0  # the filled part of the buffers: [_start, _end)
        super().__init__()

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, self._start : self._end]

    @k.setter
    def k(self, value: Tensor | None) -> None:  # a new set of keys (reorder): buffers exactly as large
        self._k, self._start, self._end = value, 0, 0 if value is None else value.shape[2]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, self._start : self._end]

    @v.setter
    def v(self, value: Tensor | None) -> None:
        self._v = value

    def reorder(self, index: Tensor) -> None:
        """As `Cache.reorder`, written into the same buffers when the row count stays (beam search)."""
        if self._k is None or index.shape[0] != self._k.shape[0]:
            return super().reorder(index)
        for buf in (self._k, self._v):
            buf[:, :, self._start : self._end] = buf[:, :, self._start : self._end].index_select(0, index)
        self.state = {name: t.index_select(0, index) for name, t in self.state.items()}

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this call's keys and values [B, Hkv, L, D]; returns every key and value the call reads."""
        if self._k is not None and (self._k.shape[:2], self._k.shape[3]) != (k.shape[:2], k.shape[3]):
            raise ValueError(
                f"KV cache holds keys [B, Hkv, T, D] = {list(self.k.shape)}; got new keys {list(k.shape)} "
                "(a cache belongs to one layer and one batch: make a new one with new_cache())"
            )
        self._reserve(k.shape[2], like=(k, v))
        end = self._end + k.shape[2]
        self._k[:, :, self._end : end] = k
        self._v[:, :, self._end : end] = v
        k_all, v_all = self._k[:, :, self._start : end], self._v[:, :, self._start : end]  # [B, Hkv, T + L, D]
        self._end = end
        self._start = end - self._kept(end - self._start)
        return k_all, v_all

    def _reserve(self, n: int, like: tuple[Tensor, Tensor]) -> None:
        """Room for n more keys after `_end`: the filled part moves to the front, into larger buffers if needed."""
        held = self._end - self._start
        if self._k is not None and self._end + n <= self._k.shape[2]:
            return
        capacity = max(2 * (held + n), 16) + 1  # odd: see the class docstring
        if self._k is not None and held + n <= self._k.shape[2] // 2:  # large enough: move to the front only
            capacity = self._k.shape[2]
        buffers = []
        for old, new in zip((self._k, self._v), like, strict=True):
            shape = (*new.shape[:2], capacity, new.shape[3])
            buf = new.new_empty(shape)
            if old is not None and held:
                buf[:, :, :held] = old[:, :, self._start : self._end]
            buffers.append(buf)
        self._k, self._v = buffers
        self._start, self._end = 0, held

    def key_state(self, name: str, make: Callable[[], Tensor]) -> Tensor:
        """Per-key state [B, L, ...] of this call's new keys (`make()`), appended to what is kept under `name`
        (call it after `update`); returns the state of every key the call reads, [B, T + L, ...]."""
        new = make()
        old = self.state.get(name)
        full = new if old is None else torch.cat([old, new], dim=1)
        keep = self._kept(full.shape[1])
        self.state[name] = full if keep == full.shape[1] else full[:, full.shape[1] - keep :].clone()
        return full

    def _kept(self, n: int) -> int:
        """Of n keys, how many the cache keeps for the next call."""
        return n


class SlidingWindowKVCache(KVCache):
    """For patterns whose queries read at most `window` keys, themselves included (`Pattern.lookback` + 1;
    `Attention.new_cache()` sizes it): between calls it keeps only the last window - 1 keys, those the next
    token reads besides itself, so a one-token step reads exactly `window` keys. Memory O(window)."""

    def __init__(self, *, window: int) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"SlidingWindowKVCache window must be an int >= 1, got {window!r}")
        self.window = window

    def _kept(self, n: int) -> int:
        return min(n, self.window - 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(window={self.window}, offset={self.offset}, keys={self.length})"


class CrossKVCache(Cache):
    """Keys and values of one cross-attention layer over one source [B, Hkv, S, D], computed on the first call."""

    def keys(self, project: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """The source's keys and values, from `project()` on the first call."""
        if self.k is None:
            self.k, self.v = project()
        return self.k, self.v

    def key_state(self, name: str, make: Callable[[], Tensor]) -> Tensor:
        """Per-key state [B, S, ...] of the source under `name`, from `make()` on the first call."""
        if name not in self.state:
            self.state[name] = make()
        return self.state[name]


LayerCache = KVCache | CrossKVCache


@dataclass
class BlockCache:
    """The caches of one decoder block: its self-attention and, in an encoder-decoder, its cross-attention."""

    self_attn: KVCache
    cross_attn: CrossKVCache | None = None


class DecodingCache:
    """Every block's caches of a decoder (`Decoder.new_cache()`), as generation drives them.

    Args:
        blocks: one `BlockCache` per decoder block, in order.
    """

    def __init__(self, blocks: Sequence[BlockCache]) -> None:
        self.blocks = list(blocks)

    @property
    def offset(self) -> int:
        """Target tokens decoded so far: the position of the next one."""
        return self.blocks[0].self_attn.offset if self.blocks else 0

    def layers(self) -> Iterator[LayerCache]:
        for block in self.blocks:
            yield block.self_attn
            if block.cross_attn is not None:
                yield block.cross_attn

    def reorder(self, index: Tensor, *, cross: bool = True) -> None:
        """Rows become rows[index] in every layer (beam search).

        Args:
            cross: reorder the cross-attention caches too. False leaves them as they are, which is exact when `index`
                only moves rows among rows that read the same source (the beams of one input, in beam search).
        """
        for block in self.blocks:
            block.self_attn.reorder(index)
            if cross and block.cross_attn is not None:
                block.cross_attn.reorder(index)

    def nbytes(self) -> int:
        """Bytes held by every cached tensor (keys, values and kind-specific state)."""
        return sum(layer.nbytes() for layer in self.layers())

    def __repr__(self) -> str:
        return f"DecodingCache(blocks={len(self.blocks)}, offset={self.offset}, bytes={self.nbytes()})"
