"""Multi-head latent attention (DeepSeek-AI, 2024, "DeepSeek-V2"): keys and values come from one low-rank latent
per token, and positions from a small rotary part shared by all heads, so a decoding cache keeps only
r + dr numbers per token (the latent and the rotary key), not 2 H D.

    c     = RMSNorm(x W_dkv)            [r]      the latent (`kv`, first r outputs; `kv_norm`)
    k_R   = RoPE(x W_kr)                [dr]     the decoupled rotary key, shared by all heads (`kv`, last dr)
    k_h   = [c W_uk,h ; k_R]            [D + dr]  (`kv_up`: W_uk and W_uv for every head)
    v_h   = c W_uv,h                    [D]
    q_h   = [q_C,h ; RoPE(q_R,h)]       [D + dr]  from x (`q`), or from a query latent of rank `q_rank`
    out   = softmax(q_h k_h^T / sqrt(D + dr)) v_h, heads concatenated and projected (`proj`)

Training and full forwards run the expanded keys and values through any backend (values zero-padded to the key
width, the padding dropped from the output). Decoding with a cache (`new_cache()`) keeps [c ; k_R] as the cache's
single key head and runs the absorbed form: q_h W_uk,h^T is a query in the latent space, so each step reads the
cached latents directly (multi-query attention over r + dr channels) and W_uv,h maps the result back; nothing of
size H D per token is rebuilt. `rotary` (built with head_dim = rope_dim) rotates the dr channels only.

Notation: B batch, H heads, L tokens (Lq queries, Lk keys, T cached), D head dim (C / H), r `kv_rank`,
dr `rope_dim`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import Attention, Call
from ..cache import Cache, CrossKVCache, KVCache, SlidingWindowKVCache

Tensor = torch.Tensor


class MultiHeadLatentAttention(Attention):
    """Multi-head attention with keys and values from a low-rank latent and a decoupled rotary part.

    Its projections differ from `Attention`'s (`q` or `q_down` + `q_down_norm` + `q`, `kv`, `kv_norm`, `kv_up`,
    `proj`), so MHA checkpoints do not load into it except `proj`.

    Args:
        kv_rank: r, width of the key/value latent (default 4 * head_dim, DeepSeek-V2's ratio).
        q_rank: width of a query latent (DeepSeek-V2 compresses queries too); None projects queries directly.
        rope_dim: dr, width of the rotary part of each query and of the shared rotary key (default head_dim / 2).
        kwargs: `Attention` options, except qk_norm (the latents are normalized instead) and num_kv_heads other
            than num_heads (the latent is shared by all heads already).
    """

    kind = "mla"

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        kv_rank: int | None = None,
        q_rank: int | None = None,
        rope_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("qk_norm"):
            raise ValueError("attention kind 'mla' normalizes its latents (RMSNorm), not q and k: qk_norm must be off")
        if kwargs.get("num_kv_heads") not in (None, num_heads):
            raise ValueError(
                f"attention kind 'mla' shares one latent among all heads instead of grouping them: num_kv_heads must "
                f"be unset or num_heads ({num_heads}), got {kwargs['num_kv_heads']}"
            )
        rotary = kwargs.pop("rotary", None)
        super().__init__(dim, num_heads, **kwargs)
        d = self.head_dim
        self.kv_rank = 4 * d if kv_rank is None else kv_rank
        self.q_rank = q_rank
        self.rope_dim = self.rotary_dim(dim, num_heads, rope_dim=rope_dim)
        for name, value in (("kv_rank", self.kv_rank), ("q_rank", q_rank), ("rope_dim", self.rope_dim)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"attention kind 'mla': {name} must be a positive int, got {value!r}")
        if self.rope_dim % 2:
            raise ValueError(f"attention kind 'mla': rope_dim must be even (rotary rotates pairs), got {self.rope_dim}")
        if rotary is not None and getattr(rotary, "head_dim", self.rope_dim) != self.rope_dim:
            raise ValueError(
                f"attention kind 'mla' rotates rope_dim = {self.rope_dim} channels per head: build its rotary with "
                f"head_dim={self.rope_dim}, got {rotary!r}"
            )
        self.rope = rotary  # not `rotary`: `Attention.forward` would rotate all D + dr channels
        dd = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        bias = kwargs.get("qkv_bias", False)
        h, dr, r = num_heads, self.rope_dim, self.kv_rank
        for name in ("qkv", "q", "kv"):  # Attention's projections, replaced by the latent ones
            if hasattr(self, name):
                delattr(self, name)
        if q_rank is None:
            self.q = nn.Linear(dim, h * (d + dr), bias=bias, **dd)
        else:
            self.q_down = nn.Linear(dim, q_rank, bias=bias, **dd)
            self.q_down_norm = nn.RMSNorm(q_rank, eps=1e-6, **dd)
            self.q = nn.Linear(q_rank, h * (d + dr), bias=bias, **dd)
        self.kv = nn.Linear(kwargs.get("context_dim") or dim, r + dr, bias=bias, **dd)  # [latent ; rotary key]
        self.kv_norm = nn.RMSNorm(r, eps=1e-6, **dd)
        self.kv_up = nn.Linear(r, h * 2 * d, bias=False, **dd)  # no bias: the absorbed form needs a linear map
        self.scale = (d + dr) ** -0.5

    @classmethod
    def rotary_dim(cls, dim: int, num_heads: int, **options: Any) -> int:
        rope_dim = options.get("rope_dim")
        return (dim // num_heads) // 2 if rope_dim is None else rope_dim

    def _adapt_loaded(self, state: dict[str, Tensor], prefix: str, *args: Any) -> None:
        """Load hook: nothing to regroup (one latent serves every head) and no multi-head tensors to start from."""

    # ------------------------------------------------------------------------------------------------------------
    # projections

    def _queries(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, Lq, C] -> (q_C [B, H, Lq, D], q_R [B, H, Lq, dr]), q_R not rotated yet."""
        b, lq, _ = x.shape
        src = x if self.q_rank is None else _norm(self.q_down_norm, self.q_down(x))
        q = self.q(src).view(b, lq, self.num_heads, -1).transpose(1, 2)  # [B, H, Lq, D + dr]
        return q.split([self.head_dim, self.rope_dim], dim=-1)

    def latent(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, Lk, C or Cc] -> (latent c [B, Lk, r], rotary key k_R [B, 1, Lk, dr], not rotated yet)."""
        c, k_rope = self.kv(src).split([self.kv_rank, self.rope_dim], dim=-1)
        return _norm(self.kv_norm, c), k_rope[:, None]

    def _up(self) -> tuple[Tensor, Tensor]:
        """(W_uk, W_uv), each [H, D, r]."""
        w = self.kv_up.weight.view(self.num_heads, 2, self.head_dim, self.kv_rank)  # [H, 2, D, r]
        return w[:, 0], w[:, 1]

    def _rotate(self, q_rope: Tensor, k_rope: Tensor, q_pos=None, k_pos=None) -> tuple[Tensor, Tensor]:
        if self.rope is None:
            return q_rope, k_rope
        return self.rope(q_rope, k_rope, q_pos, k_pos)

    def _project(self, x: Tensor, context: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """q, k [B, H, L, D + dr] and v [B, H, Lk, D]: the expanded form, for full forwards."""
        if self.is_cross and context is None:
            raise ValueError("this Attention was built for cross-attention (context_dim set): pass context")
        if not self.is_cross and context is not None:
            raise ValueError("this Attention was built for self-attention; build it with context_dim to pass context")
        src = x if context is None else context
        b, lk, h = src.shape[0], src.shape[1], self.num_heads
        q_c, q_r = self._queries(x)
        c, k_r = self.latent(src)
        kv = self.kv_up(c).view(b, lk, h, 2, self.head_dim).permute(3, 0, 2, 1, 4)  # [2, B, H, Lk, D]
        q_r, k_r = self._rotate(q_r, k_r)
        q = torch.cat([q_c, q_r], dim=-1)  # [B, H, Lq, D + dr]
        k = torch.cat([kv[0], k_r.expand(b, h, lk, self.rope_dim)], dim=-1)  # [B, H, Lk, D + dr]
        return q, k, kv[1]

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        if call.cache is None:  # expanded: values padded to the key width (backends take one head dim), padding dropped
            width, v = v.shape[-1], F.pad(v, (0, q.shape[-1] - v.shape[-1]))
        else:  # absorbed: the values are the cached keys themselves; only their latent channels are kept
            width = self.kv_rank
        out, weights = super().attend_heads(q, k, v, call)
        out = out[..., :width]
        if call.cache is not None:  # out [B, H, Lq, r] is a mix of latents; W_uv maps it to the head
            out = torch.einsum("bhlr,hdr->bhld", out, self._up()[1].to(out.dtype))  # [B, H, Lq, D]
        return out, weights

    # ------------------------------------------------------------------------------------------------------------
    # decoding: the cache keeps [c ; k_R] as one key head, and no values of its own

    def cannot_decode(self, pattern: Any | None = None) -> str | None:
        if self.rope is not None and not getattr(self.rope, "decodes", False):
            return f"rotary {type(self.rope).__name__} is not defined over 1D positions that grow"
        return super().cannot_decode(pattern)

    def _read_cache(
        self, cache: Cache, x: Tensor, context: Tensor | None, pattern: Any | None, bias: Any | None
    ) -> tuple[Tensor, Tensor, Tensor, Any | None, Any | None]:
        """Absorbed q [B, H, L, r + dr], the cached keys [B, 1, T, r + dr] (also the values: `attend_heads` keeps the
        output's latent channels), pattern and bias read at the new tokens' positions."""
        reason = self.cannot_decode(pattern)
        if reason is not None:
            raise ValueError(f"{type(self).__name__} cannot decode incrementally: {reason}")
        b, lq, _ = x.shape
        start = cache.advance(lq)
        positions = torch.arange(start, start + lq, device=x.device)

        def latent_keys(src: Tensor, pos: Tensor) -> Tensor:
            c, k_r = self.latent(src)
            _, k_r = self._rotate(k_r[:, :, :0], k_r, pos[:0], pos)
            return torch.cat([c[:, None], k_r], dim=-1)  # [B, 1, L, r + dr]

        if self.is_cross:
            if not isinstance(cache, CrossKVCache):
                raise ValueError(f"cross-attention takes a CrossKVCache (from new_cache()), got {cache!r}")

            def project() -> tuple[Tensor, Tensor]:
                if context is None:
                    raise ValueError("the first call with an empty CrossKVCache needs the context (the source)")
                keys = latent_keys(context, torch.arange(context.shape[1], device=x.device))
                return keys, keys[..., :0]

            keys, _ = cache.keys(project)
            k_start = 0
        else:
            if not isinstance(cache, KVCache):
                raise ValueError(f"self-attention takes a KVCache (from new_cache()), got {cache!r}")
            lookback = pattern.lookback
            if isinstance(cache, SlidingWindowKVCache) and lookback is not None and cache.window <= lookback:
                raise ValueError(
                    f"SlidingWindowKVCache(window={cache.window}) is too small for pattern {pattern!r}, whose "
                    f"queries read {lookback} positions back: it needs window >= {lookback + 1}"
                )
            new = latent_keys(x, positions)
            keys, _ = cache.update(new, new[..., :0])  # values: none of their own (the latent part of the keys)
            k_start = start + lq - keys.shape[2]
        q_c, q_r = self._queries(x)
        q_r, _ = self._rotate(q_r, q_r[:, :, :0], positions, positions[:0])
        q_latent = torch.einsum("bhld,hdr->bhlr", q_c, self._up()[0].to(q_c.dtype))  # [B, H, L, r]
        q = torch.cat([q_latent, q_r], dim=-1)  # [B, H, L, r + dr]
        if pattern is not None:
            pattern = pattern.shifted(start, k_start)
        if bias is not None:
            bias = bias.shifted(start, k_start, lq, keys.shape[2], device=x.device)
        return q, keys, keys, pattern, bias

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kv_rank={self.kv_rank}, q_rank={self.q_rank}, rope_dim={self.rope_dim}"


def _norm(norm: nn.RMSNorm, x: Tensor) -> Tensor:
    """RMSNorm in fp32 (its weight's dtype; the fused kernel wants them equal), back in x's dtype."""
    return norm(x.to(norm.weight.dtype)).to(x.dtype)
