"""Head composition: mixing attention scores or weights across heads at every (query, key) pair.

For one pair (i, j), with `a` the H-vector of scores (or weights) of all heads, the composed vector is

    a' = a @ W  +  (a @ Wq1_i) @ Wq2_i  +  (a @ Wk1_j) @ Wk2_j  +  a * (tanh(gq_i) + tanh(gk_j))

W [H, H] is static (talking heads is this term alone). The rest is DCMHA's dynamic part (Xiao et al., 2024):
query-wise low-rank weights Wq1_i [H, R], Wq2_i [R, H] computed from the query input x_i by a small MLP,
key-wise ones from the key input x_j, and per-head gates computed linearly from each.

Notation: B batch, H heads, R rank, Lq queries, Lk keys, c queries in a chunk, C input width.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any, Literal

import torch
from torch import nn

from ..attention import Attention, Call
from .chunked import chunked_attention

Tensor = torch.Tensor


class DynamicWeights(nn.Module):
    """Per-token composition weights from an input x [B, L, C]: w1 [B, L, H, R], w2 [B, L, R, H], gate [B, L, H].

    Built so that w1 = 0 and gate = 0 at initialization (the composition starts as the static one) while
    w2 is random, so gradients reach w1 at once.
    """

    def __init__(self, in_dim: int, num_heads: int, rank: int, hidden: int) -> None:
        super().__init__()
        self.num_heads, self.rank = num_heads, rank
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, 2 * num_heads * rank))
        self.gate = nn.Linear(in_dim, num_heads, bias=False)
        self.reset_identity()

    @torch.no_grad()
    def reset_identity(self) -> None:
        """Zero the parts that make w1 and the gate: the dynamic terms then vanish exactly."""
        out = self.mlp[-1]
        nn.init.normal_(out.weight, std=out.in_features**-0.5)
        out.weight[: self.num_heads * self.rank].zero_()
        out.bias.zero_()
        self.gate.weight.zero_()

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = x.shape
        h, r = self.num_heads, self.rank
        w1, w2 = self.mlp(x).split(h * r, dim=-1)
        w1 = w1.view(b, n, h, r)  # [B, L, H, R]
        w2 = w2.view(b, n, r, h)  # [B, L, R, H]
        return w1, w2, torch.tanh(self.gate(x))  # gate [B, L, H]


class HeadComposition(nn.Module):
    """Static head mixing, plus DCMHA's query-wise and key-wise dynamic terms when `query_dim` is given.

    Usage: `state = comp.prepare(xq, xk)` once per forward, then `comp(a, rows, state)` per query chunk. Incremental
    decoding keeps `key_state(xk)` per cached key and combines it with `query_state(xq)` through `arrange`.

    Args:
        num_heads: H.
        query_dim, key_dim: widths of the query and key inputs the dynamic weights are computed from;
            None for static mixing only.
        rank: R, rank of each dynamic low-rank term.
        hidden: hidden width of the MLPs computing them (default 2 * H * R, their output width).
    """

    def __init__(
        self,
        num_heads: int,
        *,
        query_dim: int | None = None,
        key_dim: int | None = None,
        rank: int = 2,
        hidden: int | None = None,
    ) -> None:
        super().__init__()
        if rank <= 0 or (hidden is not None and hidden <= 0):
            raise ValueError(f"rank ({rank}) and hidden ({hidden}) must be positive")
        self.static = nn.Parameter(torch.eye(num_heads))  # [H (from), H (to)]
        self.dynamic = query_dim is not None
        if self.dynamic:
            hidden = hidden or 2 * num_heads * rank
            self.query = DynamicWeights(query_dim, num_heads, rank, hidden)
            self.key = DynamicWeights(key_dim or query_dim, num_heads, rank, hidden)

    @torch.no_grad()
    def reset_identity(self) -> None:
        """Make the composition the identity: the layer then computes plain multi-head attention."""
        self.static.copy_(torch.eye(self.static.shape[0]))
        if self.dynamic:
            self.query.reset_identity()
            self.key.reset_identity()

    def prepare(self, xq: Tensor, xk: Tensor) -> dict[str, Tensor]:
        """Dynamic weights for every query (from xq [B, Lq, Cq]) and key (from xk [B, Lk, Ck])."""
        if not self.dynamic:
            return {}
        return self.arrange(self.query_state(xq), self.key_state(xk))

    def query_state(self, xq: Tensor) -> Tensor:
        """The query-wise weights of xq [B, Lq, Cq], packed as [B, Lq, 2 H R + H] (see `arrange`)."""
        return self._pack(self.query(xq))

    def key_state(self, xk: Tensor) -> Tensor:
        """The key-wise weights of xk [B, Lk, Ck], packed as [B, Lk, 2 H R + H]: what a KV cache keeps per key."""
        return self._pack(self.key(xk))

    def arrange(self, q_state: Tensor, k_state: Tensor) -> dict[str, Tensor]:
        """Packed query-wise and key-wise weights -> the layout `forward` reads."""
        qw1, qw2, qg = self._unpack(q_state)
        kw1, kw2, kg = self._unpack(k_state)
        return {
            "qw1": qw1,  # [B, Lq, H, R]
            "qw2": qw2,  # [B, Lq, R, H]
            "kw1": kw1,  # [B, Lk, H, R]
            "kw2": kw2,  # [B, Lk, R, H]
            "qg": qg.transpose(1, 2)[..., None],  # [B, H, Lq, 1]
            "kg": kg.transpose(1, 2)[:, :, None, :],  # [B, H, 1, Lk]
        }

    @staticmethod
    def _pack(weights: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        w1, w2, gate = weights
        return torch.cat([w1.flatten(2), w2.flatten(2), gate], dim=-1)  # [B, L, 2 H R + H]

    def _unpack(self, packed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = packed.shape
        h, r = self.static.shape[0], self.query.rank
        w1, w2, gate = packed.split([h * r, r * h, h], dim=-1)
        return w1.view(b, n, h, r), w2.view(b, n, r, h), gate  # [B, L, H, R], [B, L, R, H], [B, L, H]

    def forward(self, a: Tensor, rows: slice, state: dict[str, Tensor]) -> Tensor:
        """Compose a [B, H, c, Lk] (scores or weights of the queries `rows`) across heads, in fp32.

        Runs outside autocast: the composed scores feed the softmax, and bf16 mixing of them costs several
        percent of accuracy for little speed (these are small contractions over heads).
        """
        with torch.autocast(a.device.type, enabled=False):
            return self._compose(a.float(), rows, state)

    def _compose(self, a: Tensor, rows: slice, state: dict[str, Tensor]) -> Tensor:
        out = torch.einsum("bhck,hg->bgck", a, self.static.float())  # one [H, H] matmul over all pairs
        if not self.dynamic:
            return out
        f = {name: t.float() for name, t in state.items()}
        # per-pair weights, broadcast against a [B, H, c, Lk]: query-wise over keys, key-wise over queries
        qw1 = f["qw1"][:, rows].permute(0, 2, 3, 1)[..., None]  # [B, H, R, c, 1]
        qw2 = f["qw2"][:, rows].permute(0, 2, 3, 1)[..., None]  # [B, R, H, c, 1]
        kw1 = f["kw1"].permute(0, 2, 3, 1)[..., None, :]  # [B, H, R, 1, Lk]
        kw2 = f["kw2"].permute(0, 2, 3, 1)[..., None, :]  # [B, R, H, 1, Lk]
        gates = f["qg"][:, :, rows] + f["kg"]  # [B, H, c, 1] + [B, H, 1, Lk]
        return out + _low_rank(a, qw1, qw2) + _low_rank(a, kw1, kw2) + a * gates


def _prepare(comp: HeadComposition, name: str, x: Tensor, xk: Tensor, cache: Any | None) -> dict[str, Tensor]:
    """`comp.prepare(x, xk)`; with a KV cache, the key-wise weights of every key come from the cache, which keeps
    them beside the keys (`name` tells the two compositions apart)."""
    if cache is None or not comp.dynamic:
        return comp.prepare(x, xk)
    return comp.arrange(comp.query_state(x), cache.key_state(name, lambda: comp.key_state(xk)))


def _low_rank(a: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """sum_r (sum_h a[h] w1[h, r]) w2[r, g] for a [B, H, c, Lk] and per-pair w1 [B, H, R, ...], w2 [B, R, H, ...].

    Written as H x R broadcast multiply-adds over [B, c, Lk] slices: on CPU this beat einsum and batched
    matmul (whose tiny per-pair matrices fall off the fast paths, 2-5x slower here).
    """
    heads, rank = w1.shape[1], w1.shape[2]
    low = [_sum(a[:, h] * w1[:, h, r] for h in range(heads)) for r in range(rank)]  # R x [B, c, Lk]
    return torch.stack([_sum(low[r] * w2[:, r, g] for r in range(rank)) for g in range(heads)], dim=1)


def _sum(terms) -> Tensor:
    terms = iter(terms)
    total = next(terms)
    for t in terms:
        total = total + t
    return total


Chunk = int | None | Literal["auto"]
AUTO_CHUNK = 256  # queries per chunk at most, with chunk_size "auto"
MIN_AUTO_CHUNK = 32  # and at least, when a chunk is cut to fit CHUNK_ELEMENTS
CHUNK_ELEMENTS = 2**21  # scores per chunk (B x H x chunk x Lk; 8 MiB in fp32) that CPU chunks are cut to


def auto_chunk(q: Tensor, lk: int) -> int:
    """Queries per chunk for chunk_size "auto", for q [B, H, Lq, D] over Lk keys: `AUTO_CHUNK`; on CPU, when Lq is
    split anyway, fewer, so that each chunk's scores fit `CHUNK_ELEMENTS` and the explicit passes over them (bias,
    composition, mask, softmax, their gradients) run nearer the processor's cache."""
    b, h, lq = q.shape[0], q.shape[1], q.shape[2]
    if lq <= AUTO_CHUNK or q.device.type != "cpu":
        return AUTO_CHUNK
    return max(MIN_AUTO_CHUNK, min(AUTO_CHUNK, CHUNK_ELEMENTS // max(b * h * lk, 1)))


class ComposedAttention(Attention):
    """`Attention` whose scores and weights are composed across heads (base of talking heads and DCMHA).

    Runs its own chunked explicit attention (`chunked.py`); fused backends cannot mix heads, so `backend`
    must be "auto" or "eager". Supports everything else `Attention` does: patterns, biases, key padding,
    grouped-query heads, cross-attention, qk-norm, rotary. Subclasses set `pre` and `post` (`HeadComposition`).

    Args:
        chunk_size: queries per chunk (memory O(chunk_size x Lk) per head, in training too); None = all. "auto":
            at most `AUTO_CHUNK` queries, and on CPU, when the queries are split anyway, fewer, so that one chunk's
            scores (B x H x chunk x Lk) stay near `CHUNK_ELEMENTS` (`auto_chunk`). DCMHA's default: 3-8% faster
            there on batches of long sequences; talking heads keeps 256, which "auto" did not beat
            (benchmarks/results/variants.md, "chunk auto").
        checkpoint: recompute each chunk in the backward pass instead of keeping its intermediates.
        kwargs: `Attention` options.
    """

    kind = "composed"  # the config name, for messages
    mha_start = "as the identity composition"
    starts_as_mha = True
    pre: HeadComposition  # on scores, before the softmax
    post: HeadComposition  # on weights, after it

    @classmethod
    def check_config(cls, options: Mapping[str, Any], parts: Collection[str] = ()) -> None:
        super().check_config(options, parts)
        backend = options.get("backend", "auto")
        if backend not in ("auto", "eager"):
            raise ValueError(
                f"attention kind {cls.kind!r} mixes scores across heads, which no fused kernel does: it computes "
                f"attention itself, so backend must be 'auto' or 'eager', got {backend!r}"
            )

    def __init__(
        self, dim: int, num_heads: int = 8, *, chunk_size: Chunk = 256, checkpoint: bool = True, **kwargs: Any
    ) -> None:
        self.check_config(kwargs)
        if chunk_size != "auto" and chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
            raise ValueError(f"chunk_size must be a positive number of queries, None or 'auto', got {chunk_size!r}")
        super().__init__(dim, num_heads, **kwargs)
        self.chunk_size = chunk_size
        self.checkpoint = checkpoint

    def reset_identity(self) -> None:
        """Identity compositions: the layer then equals `Attention` with the same projections."""
        self.pre.reset_identity()
        self.post.reset_identity()

    def start_from_mha(self, state: dict[str, Tensor], prefix: str) -> None:
        """The compositions a multi-head checkpoint lacks, as the identity (whatever init a model gave them since)."""
        for name in ("pre", "post"):
            own = getattr(self, name)
            missing = [k for k in own.state_dict() if f"{prefix}{name}.{k}" not in state]
            if missing:
                identity = copy.deepcopy(own)
                identity.reset_identity()
                state.update({f"{prefix}{name}.{k}": identity.state_dict()[k] for k in missing})

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        x = call.x
        xk = x if call.context is None else call.context
        pre_state = _prepare(self.pre, "pre", x, xk, call.cache)
        post_state = _prepare(self.post, "post", x, xk, call.cache)
        out, weights = chunked_attention(
            q,
            k,
            v,
            pre=lambda a, rows: self.pre(a, rows, pre_state),
            post=lambda a, rows: self.post(a, rows, post_state),
            pattern=call.pattern,
            bias=call.layer_bias,
            attn_mask=call.attn_mask,
            key_padding_mask=call.key_padding_mask,
            dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.scale,
            chunk_size=auto_chunk(q, k.shape[-2]) if self.chunk_size == "auto" else self.chunk_size,
            checkpoint=self.checkpoint,
            return_weights=call.return_weights,
        )
        self.backend_used = f"{self.kind}-chunked"
        return out, weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk_size={self.chunk_size}"
