"""`Attention`: projections and heads around `attend()`; self-attention, or cross-attention with `context`.

Notation: B batch, Lq query tokens, Lk key tokens, C model width, Cc context width, H query heads,
Hkv key/value heads, D head dim.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..util.checks import divisors
from . import kv_heads
from .backends import AUTO_ORDER, Transform, attend, check_backend_name
from .cache import Cache, CrossKVCache, KVCache, SlidingWindowKVCache
from .patterns import Causal, as_pattern

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

# a stack of active `capture_attention()` records: (the weights, the modules that made them), in call order
_capture: list[tuple[list[Tensor], list[nn.Module]]] = []
_SMALL_MASK = 1 << 16  # a decoding call's mask this small is checked on the CPU for rows with nothing masked


@dataclass(frozen=True)
class Call:
    """What one forward hands `Attention.attend_heads` besides q, k and v."""

    x: Tensor  # the layer's input [B, Lq, C]
    context: Tensor | None  # cross-attention's source [B, Lk, Cc], or None
    pattern: Any | None  # which (query, key) pairs interact (the layer's, with is_causal and the cache applied)
    bias: Any | None  # what adds to the scores: a bias module or an additive tensor (with `attn_mask` added), or None
    key_padding_mask: Tensor | None  # bool [B, Lk], True marks padding
    backend: str  # "auto" or a name in `backends.BACKENDS`
    return_weights: bool
    cache: Cache | None = None  # when decoding: the layer's cache (k and v already come from it)
    # the same in two parts, for kinds that transform scores before masking them (head mixing must not mix a mask
    # across heads): the caller's `attn_mask` as an additive tensor (-inf where a bool one is False), and the bias
    # without it; `attn_mask` None: `layer_bias` is `bias`
    attn_mask: Tensor | None = None
    layer_bias: Any | None = None


class Attention(nn.Module):
    """Multi-head attention with grouped-query heads, optional qk-norm, patterns, biases and rotary.

    State-dict compatible with timm's `Attention` (`qkv`, `q_norm`, `k_norm`, `proj`) for self-attention
    with `num_kv_heads == num_heads`; cross-attention uses `q` and `kv` projections instead of `qkv`.
    Pass the class itself as timm's `attn_layer` (or `Attention.configure(...)` for non-default options).

    Args:
        dim: model width C (input and output).
        num_heads: query heads H; `dim` must be divisible by it.
        context_dim: width of `context` for cross-attention; None means self-attention (or context of width C).
        num_kv_heads: key/value heads (grouped-query attention); must divide `num_heads`. Default `num_heads`.
        qkv_bias: bias in the q/k/v projections.
        qk_norm: normalize q and k per head (`norm_layer`, default LayerNorm) before the dot product.
        attn_drop: dropout on attention weights (training only).
        proj_drop: dropout after the output projection.
        pattern: which (query, key) pairs may interact (`attnzoo.attention.patterns`); None means all.
        bias: a bias module adding to scores (`attnzoo.attention.biases`), or None.
        rotary: a rotary embedding applied to q and k (`attnzoo.attention.rotary`), or None.
        backend: "auto" or a backend name from `attnzoo.attention.backends.BACKENDS`.

    A new attention kind subclasses this and changes one of two things:
    - how weights come from scores (sinks, sigmoid): set `transform_class` to a `backends.Transform` subclass,
      built from the layer on each call (`transform_class(layer)`); the backend table runs it;
    - what attention reads or returns (gated, differential, mla, linformer): override `attend_heads`.

    Loading another layer's tensors (a load_state_dict pre-hook, which `attnzoo.pretrained.transfer` runs too)
    regroups their key/value heads to `num_kv_heads` (`kv_heads`), and gives a kind's own tensors that a multi-head
    checkpoint lacks their starting values (`start_from_mha`).
    """

    # a kind whose weights are not a softmax of its scores names its `Transform` here
    transform_class: type[Transform] | None = None
    # how the kind's own parts start when its projections come from a multi-head checkpoint (for the log), and
    # whether the layer then computes what the checkpoint's attention did (a kind sets both; unset, the log says the
    # kind may change the function)
    mha_start: str = ""
    starts_as_mha: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_attend" in vars(cls):
            raise TypeError(
                f"{cls.__name__} overrides _attend, which Attention no longer calls: override "
                "attend_heads(q, k, v, call) instead, or set transform_class for weights that are not a softmax"
            )

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        context_dim: int | None = None,
        num_kv_heads: int | None = None,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        proj_bias: bool = True,
        norm_layer: type[nn.Module] | None = None,
        pattern: Any | None = None,
        bias: nn.Module | None = None,
        rotary: nn.Module | None = None,
        backend: str = "auto",
        scale_norm: bool = False,
        device: Any = None,
        dtype: Any = None,
        **unsupported: Any,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("dim", dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be an int > 0, got {value!r}")
        if dim % num_heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads}), and num_heads must be > 0")
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
                + (f"; valid num_kv_heads: {divisors(num_heads)}" if num_heads > 0 else "")
            )
        if not 0.0 <= attn_drop < 1.0 or not 0.0 <= proj_drop < 1.0:
            raise ValueError(f"attn_drop ({attn_drop}) and proj_drop ({proj_drop}) must be in [0, 1)")
        if scale_norm:
            raise ValueError("scale_norm=True (timm's attention-output norm) is not supported by attnzoo Attention")
        unsupported.pop("depth", None)  # timm passes a block index to some attention layers
        if any(v not in (None, False) for v in unsupported.values()):
            raise ValueError(f"unsupported Attention arguments: {sorted(unsupported)}")
        check_backend_name(backend)
        type(self).check_config({"backend": backend, "attn_drop": attn_drop})  # what the kind refuses, too
        if isinstance(pattern, str | Mapping):  # a config's spec ("causal", {kind: sliding_window, window: 64})
            from .patterns import PATTERNS
            from .specs import build as build_spec

            pattern = build_spec(pattern, PATTERNS, "pattern")
        pattern = as_pattern(pattern)  # a user's own object with only mask_mod, or the function, is wrapped
        heads_of_bias = getattr(bias, "num_heads", None)  # one head is shared by all (it broadcasts)
        if heads_of_bias not in (None, 1, num_heads):  # it failed in the first forward, in torch's words
            raise ValueError(
                f"bias {type(bias).__name__} has {heads_of_bias} heads, and this attention {num_heads}: build it "
                f"with num_heads={num_heads} (one value per attention head), or 1 (one shared by all)"
            )
        dd = {"device": device, "dtype": dtype}

        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.is_cross = context_dim is not None
        self.attn_drop = attn_drop
        self.backend = backend
        self.pattern = pattern
        self.bias = bias
        self.rotary = rotary
        self.backend_used: str | None = None  # what the last forward ran on (for run summaries)

        kv_dim = num_kv_heads * self.head_dim
        if self.is_cross:
            self.q = nn.Linear(dim, dim, bias=qkv_bias, **dd)
            self.kv = nn.Linear(context_dim, 2 * kv_dim, bias=qkv_bias, **dd)
        else:
            self.qkv = nn.Linear(dim, dim + 2 * kv_dim, bias=qkv_bias, **dd)
        norm_layer = norm_layer or nn.LayerNorm
        self.q_norm = norm_layer(self.head_dim, **dd) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim, **dd) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=proj_bias, **dd)
        self.proj_drop = nn.Dropout(proj_drop)
        self._register_load_state_dict_pre_hook(self._adapt_loaded)

    def _adapt_loaded(self, state: dict[str, Tensor], prefix: str, *args: Any) -> None:
        """Load hook: another layer's key/value heads regrouped to this one's; a multi-head checkpoint's layer (its
        `proj` present) completed with the kind's own starting tensors."""
        kv_heads.adapt_loaded(self, state, prefix)
        if prefix + "proj.weight" in state:
            self.start_from_mha(state, prefix)

    def start_from_mha(self, state: dict[str, Tensor], prefix: str) -> None:
        """Add to `state` (a load hook's state dict; keys `prefix` + the layer's names) the kind's own tensors that
        it lacks, at the values `mha_start` describes, adapting the checkpoint's where that keeps the function (see
        `GatedAttention`). Kinds with no such values leave theirs as built (they start fresh); `Attention` has none."""

    @classmethod
    def check_config(cls, options: Mapping[str, Any], parts: Collection[str] = ()) -> None:
        """Raise ValueError for what this kind refuses in a config whatever the model: `options` are its `Attention`
        options (backend, attn_drop, ...), `parts` the specs it is given ("pattern", "bias", "rotary").
        `factory.attention_builder` calls it when a config is checked, before anything is built or trained, and so
        does every layer's constructor. Plain attention checks the backend's name and that `num_kv_heads` is a count,
        and refuses FlexAttention with attention dropout (it has none); its other values are checked when a layer is
        built (whether `num_kv_heads` divides the model's heads: `attnzoo.config.check_model_sizes` too)."""
        backend, drop = options.get("backend", "auto"), options.get("attn_drop", 0.0)
        check_backend_name(backend)
        kv = options.get("num_kv_heads")
        if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 1):
            raise ValueError(f"num_kv_heads: {kv!r} must be a whole number >= 1 (that divides the heads), or null")
        dropout = isinstance(drop, int | float) and drop > 0
        if backend == "flex" and dropout:  # known now, not at the first step
            raise ValueError(
                f"backend 'flex' cannot train with attn_drop {drop}: FlexAttention has no attention dropout; use "
                "backend 'blocked' (or 'auto'), or attn_drop 0"
            )
        transform = cls.transform_class
        if transform is None:
            return
        if backend in transform.refuses:
            runs_on = [name for name in reversed(AUTO_ORDER) if name not in transform.refuses]
            raise ValueError(
                f"attention kind {transform.name!r} cannot run on backend {backend!r}: {transform.refuses[backend]}; "
                f"it runs on {runs_on} (or 'auto')"
            )
        if backend == "sdpa" and dropout:
            raise ValueError(
                f"attention kind {transform.name!r} cannot train on backend 'sdpa' with attn_drop {drop}: the fused "
                "CPU kernel it uses runs without attention dropout (and off the CPU sdpa gives no log-sum-exp); use "
                "backend 'eager' or 'blocked' (or 'auto'), or attn_drop 0"
            )

    @classmethod
    def rotary_dim(cls, dim: int, num_heads: int, **options: Any) -> int:
        """Channels per head a rotary embedding rotates: the head dim here; kinds with a rotary part of their own
        (mla) override it. `factory.attention_builder` builds a config's rotary with this `head_dim`."""
        return dim // num_heads

    @classmethod
    def configure(cls, **defaults: Any) -> type[Attention]:
        """A subclass whose constructor defaults are `defaults`: a class to hand to timm's `attn_layer`."""
        for key in defaults:
            if key in ("dim", "num_heads"):
                raise ValueError(f"configure() sets options, not {key!r}; timm passes dim and num_heads itself")

        def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
            cls.__init__(self, dim, num_heads, **{**defaults, **kwargs})

        return type(f"Configured{cls.__name__}", (cls,), {"__init__": __init__, "__module__": cls.__module__})

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        return_weights: bool = False,
        *,
        bias: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: Cache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from x [B, Lq, C] to itself or to `context` [B, Lk, Cc].

        Args:
            key_padding_mask: bool [B, Lk], True marks padding (as in `nn.MultiheadAttention`).
            return_weights: also return weights [B, H, Lq, Lk] (runs the eager backend).
            bias: a precomputed additive bias broadcastable to [B, H, Lq, Lk], used instead of the bias
                module (to share one bias across layers, computed once per forward); with a cache, a bias module.
            attn_mask, is_causal: timm's calling convention; a float `attn_mask` adds to scores, a bool one
                marks allowed pairs with True. It broadcasts to [B, H, Lq, Lk]: a 3-dim mask is read as [H, Lq, Lk]
                (give a per-example one as [B, 1, Lq, Lk]).
            cache: incremental decoding (`new_cache()`, `attnzoo.attention.cache`): x holds the next tokens,
                whose positions continue where the cache ends; self-attention appends their keys and values to
                the cache and reads everything it keeps, cross-attention projects `context` on the first call
                only (later calls may pass context=None).
        """
        if x.dim() != 3 or x.shape[-1] != self.proj.in_features:
            raise ValueError(f"x: expected [B, L, {self.proj.in_features}] (batch first), got {list(x.shape)}")
        if context is not None and self.is_cross and (context.dim() != 3 or context.shape[-1] != self.kv.in_features):
            raise ValueError(f"context: expected [B, Lk, {self.kv.in_features}], got {list(context.shape)}")
        b, lq, _ = x.shape
        pattern = self.pattern
        if is_causal:
            pattern = Causal() if pattern is None else pattern & Causal()
        bias = self.bias if bias is None else bias
        causal_form = getattr(bias, "causal_form", False) and not self.is_cross  # (cross: no later keys to hide)
        if causal_form and attn_mask is None and not getattr(pattern, "causal_only", False):
            raise ValueError(  # its positive values for later keys would win every row, without an error
                f"bias {type(bias).__name__}(bidirectional=False) is the causal form, which scores keys after the "
                "query higher: give a causal pattern (pattern='causal', a causal sliding window) or is_causal=True, "
                "or bidirectional=True for attention in both directions"
            )
        if cache is None:
            q, k, v = self._project(x, context)  # [B, H, Lq, D], [B, Hkv, Lk, D] x2
            q, k = self.q_norm(q), self.k_norm(k)
            if self.rotary is not None:
                q, k = self.rotary(q, k)
        else:
            self_padding = key_padding_mask is not None and not self.is_cross
            if attn_mask is not None or isinstance(bias, Tensor) or self_padding:
                raise ValueError(
                    "with a cache, Attention takes no attn_mask, bias tensor or self-attention key_padding_mask: "
                    "masks and biases come from the pattern and bias modules, read at the cached positions"
                )
            q, k, v, pattern, bias = self._read_cache(cache, x, context, pattern, bias)
        if attn_mask is not None:
            want = (b, self.num_heads, lq, k.shape[-2])
            try:
                torch.broadcast_shapes(attn_mask.shape, want)
            except RuntimeError:
                raise ValueError(
                    f"attn_mask: shape {list(attn_mask.shape)} does not broadcast to [B, H, Lq, Lk] = {list(want)} "
                    "([Lq, Lk], [B, 1, Lq, Lk] or [B, H, Lq, Lk]; nn.MultiheadAttention's [B * H, Lq, Lk]: reshape "
                    "it to [B, H, Lq, Lk])"
                ) from None
            if not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):  # 1/0 integers would add
                raise ValueError(
                    f"attn_mask: dtype {attn_mask.dtype}; valid: bool (True attends; a 1/0 integer mask: "
                    "attn_mask.bool()) or a float added to the scores"
                )
            if attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(~attn_mask, float("-inf"))
        layer_bias = bias
        if attn_mask is not None:
            bias = attn_mask if bias is None else _dense(bias, q, k) + attn_mask

        capturing = bool(_capture)
        backend = "auto" if capturing else self.backend
        returns = return_weights or capturing
        call = Call(x, context, pattern, bias, key_padding_mask, backend, returns, cache, attn_mask, layer_bias)
        out, weights = self.attend_heads(q, k, v, call)  # [B, H, Lq, D], [B, H, Lq, Lk] or None
        if capturing:
            _capture[-1][0].append(weights.detach())
            _capture[-1][1].append(self)
        out = self.proj(out.transpose(1, 2).reshape(b, lq, -1))  # [B, H, Lq, D] -> [B, Lq, C]
        if self.training:  # dropout is the identity in eval: no call (a decoding step is made of small calls)
            out = self.proj_drop(out)
        return (out, weights) if return_weights else out

    # ------------------------------------------------------------------------------------------------------------
    # incremental decoding

    def cannot_decode(self, pattern: Any | None = None) -> str | None:
        """Why this layer cannot decode incrementally with `pattern` (default its own), or None when it can.

        Kinds that cannot (their math needs every key at once) override this with their reason.
        """
        pattern = self.pattern if pattern is None else pattern
        if self.is_cross:
            if pattern is not None:
                return f"a cross-attention pattern ({pattern!r}) is not supported with a cache"
        elif pattern is None or not pattern.causal_only:
            return (
                f"self-attention pattern {pattern!r} lets queries read later keys (or depends on the lengths); "
                "incremental decoding needs a causal pattern: 'causal', or a sliding window with causal: true"
            )
        if self.bias is not None and not getattr(self.bias, "decodes", False):
            return f"bias {type(self.bias).__name__} is not defined over 1D positions that grow"
        if self.rotary is not None and not getattr(self.rotary, "decodes", False):
            return f"rotary {type(self.rotary).__name__} is not defined over 1D positions that grow"
        return None

    def new_cache(self, *, is_causal: bool = False) -> Cache:
        """An empty cache for this layer: `CrossKVCache` for cross-attention, else a `SlidingWindowKVCache` when
        the pattern reads a bounded distance back (memory O(window)), else a `KVCache`.

        Args:
            is_causal: the calls will pass is_causal=True (the pattern is then this layer's & Causal).
        """
        pattern = self.pattern
        if is_causal:
            pattern = Causal() if pattern is None else pattern & Causal()
        reason = self.cannot_decode(pattern)
        if reason is not None:
            raise ValueError(f"{type(self).__name__} cannot decode incrementally: {reason}")
        if self.is_cross:
            return CrossKVCache()
        return KVCache() if pattern.lookback is None else SlidingWindowKVCache(window=pattern.lookback + 1)

    def _read_cache(
        self, cache: Cache, x: Tensor, context: Tensor | None, pattern: Any | None, bias: Any | None
    ) -> tuple[Tensor, Tensor, Tensor, Any | None, Any | None]:
        """q [B, H, L, D] of the new tokens, k and v [B, Hkv, Lk, D] of every key they read (through the cache),
        and the pattern and bias read at their positions."""
        reason = self.cannot_decode(pattern)
        if reason is not None:
            raise ValueError(f"{type(self).__name__} cannot decode incrementally: {reason}")
        if self.is_cross and not isinstance(cache, CrossKVCache):
            raise ValueError(f"cross-attention takes a CrossKVCache (from new_cache()), got {cache!r}")
        if not self.is_cross and not isinstance(cache, KVCache):
            raise ValueError(f"self-attention takes a KVCache (from new_cache()), got {cache!r}")
        lookback = None if pattern is None else pattern.lookback
        if isinstance(cache, SlidingWindowKVCache) and (lookback is None or cache.window <= lookback):
            raise ValueError(
                f"SlidingWindowKVCache(window={cache.window}) is too small for pattern {pattern!r}, whose queries "
                f"read {'any distance' if lookback is None else lookback} back: "
                + ("use a KVCache" if lookback is None else f"it needs window >= {lookback + 1}")
            )
        b, lq, _ = x.shape
        h, d = self.num_heads, self.head_dim
        start = cache.advance(lq)  # the new tokens' first position
        positions = torch.arange(start, start + lq, device=x.device) if self.rotary is not None else None
        if self.is_cross:

            def project() -> tuple[Tensor, Tensor]:
                if context is None:
                    raise ValueError("the first call with an empty CrossKVCache needs the context (the source)")
                k, v = self._project_kv(context)  # [B, Hkv, S, D] x2
                k = self.k_norm(k)
                if self.rotary is not None:  # source keys at positions 0 .. S - 1 (rotary rotates q and k: no q here)
                    _, k = self.rotary(k[:, :, :0], k, positions[:0], torch.arange(k.shape[2], device=k.device))
                return k, v

            k, v = cache.keys(project)
            q = self.q_norm(self.q(x).view(b, lq, h, d).transpose(1, 2))  # [B, H, L, D]
            if self.rotary is not None:  # the new queries at their positions (no keys to rotate)
                q, _ = self.rotary(q, q[:, :, :0], positions, positions[:0])
            k_start = 0
        else:
            q, k, v = self._project(x, None)
            q, k = self.q_norm(q), self.k_norm(k)
            if self.rotary is not None:
                q, k = self.rotary(q, k, positions, positions)
            k, v = cache.update(k, v)  # [B, Hkv, kept + L, D]: keys at positions start + L - Lk ..
            k_start = start + lq - k.shape[2]
        if pattern is not None and lq == 1 and type(pattern) is Causal:
            pattern = None  # the one new token reads every key before it: no mask to build (the usual decoding step)
        if pattern is not None:
            pattern = pattern.shifted(start, k_start)
            if lq * k.shape[2] <= _SMALL_MASK and bool(pattern.dense_mask(lq, k.shape[2]).all()):
                pattern = None  # every key the call reads is allowed (a decoding step, usually): no mask at all
        if bias is not None:
            bias = bias.shifted(start, k_start, lq, k.shape[2], device=x.device)
        return q, k, v, pattern, bias

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        """q [B, H, Lq, D], k and v [B, Hkv, Lk, D] -> (out [B, H, Lq, D], weights [B, H, Lq, Lk] or None).

        The step a kind overrides to change what attention reads or returns, calling this (or `attend`) inside;
        `call.x` and `call.context` are the layer's inputs, `call.cache` its cache when decoding (for kinds with
        per-key state of their own). Sets `backend_used`, what ran.
        """
        plain = None  # a plain decoding step: what the choice of its backend depends on
        if call.cache is not None and self._plain_step(call):
            plain = (call.backend, q.device.type, q.dtype, q.shape[-1])
            if call.cache.plain_backend == (plain, "sdpa"):  # chosen by `attend` at the cache's first such step
                gqa = q.shape[1] != k.shape[1]
                return F.scaled_dot_product_attention(q, k, v, scale=self.scale, enable_gqa=gqa), None
        out, weights, used = attend(
            q,
            k,
            v,
            pattern=call.pattern,
            bias=call.bias,
            key_padding_mask=call.key_padding_mask,
            dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.scale,
            backend=call.backend,
            return_weights=call.return_weights,
            transform=None if self.transform_class is None else self.transform_class(self),
        )
        if used != self.backend_used:  # set on change only: a module's __setattr__ is slow, and decoding steps short
            self.backend_used = used
        if plain is not None:
            call.cache.plain_backend = (plain, used)
        return out, weights

    def _plain_step(self, call: Call) -> bool:
        """Whether a decoding call is plain: no mask, bias, padding, weights or dropout, nothing to train, and softmax
        weights. Which backend runs such a call depends on the backend asked for, the device, dtype and head size,
        not on how many keys the cache holds; so the cache's first plain step in a situation chooses it through
        `attend` (logged as usual), and when that is torch's sdpa kernel, later ones call it directly: the same kernel
        with the same arguments, without the per-call dispatch (some 60 microseconds a layer on a CPU, a good share
        of a small model's decoding step)."""
        return (
            call.pattern is None
            and call.bias is None
            and call.key_padding_mask is None
            and not call.return_weights
            and self.transform_class is None
            and not self.training
            and not torch.is_grad_enabled()
        )

    def _project(self, x: Tensor, context: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        b, lq, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        if self.is_cross:
            if context is None:
                raise ValueError("this Attention was built for cross-attention (context_dim set): pass context")
            q = self.q(x).view(b, lq, h, d).transpose(1, 2)  # [B, H, Lq, D]
            return (q, *self._project_kv(context))
        if context is not None:
            raise ValueError("this Attention was built for self-attention; build it with context_dim to pass context")
        qkv = self.qkv(x)  # [B, Lq, (H + 2 Hkv) D]
        if hkv == h:
            return qkv.view(b, lq, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x [B, H, Lq, D]
        q, k, v = qkv.split([h * d, hkv * d, hkv * d], dim=-1)
        q = q.view(b, lq, h, d).transpose(1, 2)  # [B, H, Lq, D]
        k = k.view(b, lq, hkv, d).transpose(1, 2)  # [B, Hkv, Lq, D]
        v = v.view(b, lq, hkv, d).transpose(1, 2)
        return q, k, v

    def _project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values [B, Hkv, Lk, D] of context [B, Lk, Cc]."""
        b, lk, _ = context.shape
        kv = self.kv(context).view(b, lk, 2, self.num_kv_heads, self.head_dim)  # [B, Lk, 2, Hkv, D]
        kv = kv.permute(2, 0, 3, 1, 4)  # [2, B, Hkv, Lk, D]
        return kv[0], kv[1]

    def extra_repr(self) -> str:
        parts = [f"heads={self.num_heads}", f"kv_heads={self.num_kv_heads}", f"backend={self.backend}"]
        if self.pattern is not None:
            parts.append(f"pattern={self.pattern!r}")
        return ", ".join(parts)


def _dense(bias: Any, q: Tensor, k: Tensor) -> Tensor:
    if isinstance(bias, Tensor):
        return bias
    return bias.dense(q.shape[-2], k.shape[-2], device=q.device, dtype=q.dtype)


@contextlib.contextmanager
def capture_attention(modules: list[nn.Module] | None = None) -> Iterator[list[Tensor]]:
    """Record the weights [B, H, Lq, Lk] of every `Attention` call inside the block, in call order; `modules`, when
    given, gets the module of each call (a multimodal model's calls are not one stack of layers).

    Captured calls run on the eager backend (the only one that returns weights); this is logged.
    """
    records: list[Tensor] = []
    entry = (records, [] if modules is None else modules)
    log.info("capture_attention: attention calls run on the eager backend while capturing weights")
    _capture.append(entry)
    try:
        yield records
    finally:
        del _capture[next(i for i, e in enumerate(_capture) if e is entry)]  # by identity: == compares tensors


# config short names -> attention kinds (see attnzoo.attention.factory); variants/ add theirs
ATTENTION_KINDS: dict[str, type[nn.Module]] = {"mha": Attention}
