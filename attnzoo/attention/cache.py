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
        """Bytes held by the cached tensors."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(offset={self.offset}, keys={self.length})"


class KVCache(Cache):
    """Keys and values of one self-attention layer, growing by each call's tokens.

    Kind-specific per-key state (e.g. DCMHA's key-wise weights) rides along in `key_state`, aligned with the keys.
    """

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this call's keys and values [B, Hkv, L, D]; returns every key and value the call reads."""
        if self.k is not None and (self.k.shape[:2], self.k.shape[3]) != (k.shape[:2], k.shape[3]):
            raise ValueError(
                f"KV cache holds keys [B, Hkv, T, D] = {list(self.k.shape)}; got new keys {list(k.shape)} "
                "(a cache belongs to one layer and one batch: make a new one with new_cache())"
            )
        k_all = k if self.k is None else torch.cat([self.k, k], dim=2)  # [B, Hkv, T + L, D]
        v_all = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.k, self.v = self._keep(k_all, dim=2), self._keep(v_all, dim=2)
        return k_all, v_all

    def key_state(self, name: str, make: Callable[[], Tensor]) -> Tensor:
        """Per-key state [B, L, ...] of this call's new keys (`make()`), appended to what is kept under `name`
        (call it after `update`); returns the state of every key the call reads, [B, T + L, ...]."""
        new = make()
        old = self.state.get(name)
        full = new if old is None else torch.cat([old, new], dim=1)
        self.state[name] = self._keep(full, dim=1)
        return full

    def _keep(self, x: Tensor, dim: int) -> Tensor:
        return x


class SlidingWindowKVCache(KVCache):
    """For patterns whose queries read at most `window` keys, themselves included (`Pattern.lookback` + 1;
    `Attention.new_cache()` sizes it): between calls it keeps only the last window - 1 keys, those the next
    token reads besides itself, so a one-token step reads exactly `window` keys. Memory O(window)."""

    def __init__(self, *, window: int) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"SlidingWindowKVCache window must be an int >= 1, got {window!r}")
        self.window = window

    def _keep(self, x: Tensor, dim: int) -> Tensor:
        keep = self.window - 1
        if x.shape[dim] <= keep:
            return x
        return x.narrow(dim, x.shape[dim] - keep, keep).clone()  # a copy: the rest is freed

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

    def reorder(self, index: Tensor) -> None:
        """Rows become rows[index] in every layer (beam search)."""
        for layer in self.layers():
            layer.reorder(index)

    def nbytes(self) -> int:
        """Bytes held by every cached tensor (keys, values and kind-specific state)."""
        return sum(layer.nbytes() for layer in self.layers())

    def __repr__(self) -> str:
        return f"DecodingCache(blocks={len(self.blocks)}, offset={self.offset}, bytes={self.nbytes()})"
