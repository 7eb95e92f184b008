"""`DecoderBlock` and `Decoder`: masked self-attention, cross-attention to a memory, MLP; incremental decoding.

Notation: B batch, L target tokens, S source (memory) tokens, C width.
Parameter names follow `TransformerBlock` (norm1, attn, ls1, norm2, mlp, ls2), with the cross-attention
sub-layer as norm_cross, cross_attn, ls_cross.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..attention.cache import BlockCache, DecodingCache
from .block import _drop, _scale, own_bias
from .encoder import Encoder

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: x + attn(norm1(x)), then x + cross_attn(norm_cross(x), memory), then x + mlp(norm2(x)).

    Args:
        dim: width C.
        attn: masked self-attention: an `Attention` whose pattern never lets a query read a later key
            (`Pattern.causal_only`; `make_decoder` builds one from any config).
        cross_attn: attention built for cross-attention (`Attention(..., context_dim=Cm)`), or None for a
            decoder-only stack (a causal language model).
        mlp: a module [B, L, C] -> [B, L, C] (e.g. `attnzoo.layers.Mlp`, timm's).
        norm_layer: normalization constructor, called with `dim`.
        drop_path: stochastic depth rate of every residual branch.
        layer_scale: initial value of per-channel residual scales (CaiT), None for none.
    """

    post_norm = False  # PostNormDecoderBlock: norms after the residual sums (`_in`, `_out`)

    def __init__(
        self,
        *,
        dim: int,
        attn: nn.Module,
        mlp: nn.Module,
        cross_attn: nn.Module | None = None,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
    ) -> None:
        super().__init__()
        pattern = getattr(attn, "pattern", None)
        if not getattr(pattern, "causal_only", False):
            raise ValueError(
                f"DecoderBlock: self-attention must be masked (a causal pattern), got pattern {pattern!r}; build it "
                "with pattern 'causal' (or a causal sliding window), or use make_decoder, which does"
            )
        if cross_attn is not None and not getattr(cross_attn, "is_cross", True):
            raise ValueError("DecoderBlock: cross_attn must be built for cross-attention (Attention(context_dim=...))")
        self.norm1 = norm_layer(dim)
        self.attn = attn
        self.ls1 = _scale(dim, layer_scale)
        self.drop_path1 = _drop(drop_path)
        if cross_attn is not None:
            self.norm_cross = norm_layer(dim)
            self.cross_attn = cross_attn
            self.ls_cross = _scale(dim, layer_scale)
            self.drop_path_cross = _drop(drop_path)
        else:
            self.cross_attn = None
        self.norm2 = norm_layer(dim)
        self.mlp = mlp
        self.ls2 = _scale(dim, layer_scale)
        self.drop_path2 = _drop(drop_path)
        self.checkpoint_attention = False  # set by Decoder.set_grad_checkpointing(attention_only=True)

    def new_cache(self) -> BlockCache:
        """Empty caches for this block's attention layers (raises if one cannot decode incrementally)."""
        cross = None if self.cross_attn is None else self.cross_attn.new_cache()
        return BlockCache(self_attn=self.attn.new_cache(), cross_attn=cross)

    def _self_attend(self, x: Tensor, bias: Any | None, cache: BlockCache | None) -> Tensor:
        kwargs = {}
        if bias is not None:
            kwargs["bias"] = bias
        if cache is not None:
            kwargs["cache"] = cache.self_attn
        return self.attn(self._in(self.norm1, x), **kwargs)

    def _cross_attend(self, x: Tensor, memory: Tensor | None, mask: Tensor | None, cache: BlockCache | None) -> Tensor:
        kwargs = {"key_padding_mask": mask}
        if cache is not None:
            kwargs["cache"] = cache.cross_attn
        return self.cross_attn(self._in(self.norm_cross, x), memory, **kwargs)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        bias: Any | None = None,
        cache: BlockCache | None = None,
    ) -> Tensor:
        """x [B, L, C] (with a cache: the next L tokens); memory [B, S, Cm] and its padding mask bool [B, S]
        (True = pad) for cross-attention; `bias` a shared bias module; `cache` from `new_cache()`."""
        recompute = self.checkpoint_attention and cache is None and torch.is_grad_enabled()
        a = self._run(recompute, own_bias(self._self_attend, bias) if recompute else self._self_attend, x, bias, cache)
        x = self._out(self.norm1, self._residual(x, self.ls1(a), self.drop_path1))
        if self.cross_attn is not None:
            if memory is None and (cache is None or cache.cross_attn.k is None):
                raise ValueError("this DecoderBlock has cross-attention: pass memory (the encoder output)")
            a = self._run(recompute, self._cross_attend, x, memory, memory_padding_mask, cache)
            x = self._out(self.norm_cross, self._residual(x, self.ls_cross(a), self.drop_path_cross))
        return self._out(self.norm2, self._residual(x, self.ls2(self.mlp(self._in(self.norm2, x))), self.drop_path2))

    def _in(self, norm: nn.Module, x: Tensor) -> Tensor:
        """A branch's input: normed before the branch (pre-norm), or as it is (post-norm)."""
        return x if self.post_norm else norm(x)

    def _out(self, norm: nn.Module, x: Tensor) -> Tensor:
        """A residual sum: as it is (pre-norm), or normed after it (post-norm)."""
        return norm(x) if self.post_norm else x

    @staticmethod
    def _run(recompute: bool, fn: Callable[..., Tensor], *args: Any) -> Tensor:
        return checkpoint(fn, *args, use_reentrant=False) if recompute else fn(*args)

    def _residual(self, x: Tensor, branch: Tensor, drop_path: nn.Module) -> Tensor:
        """x + drop_path(branch); drop path is the identity outside training, where the call is skipped (a decoding
        step is made of many such small calls)."""
        return x + (drop_path(branch) if self.training else branch)


class PostNormDecoderBlock(DecoderBlock):
    """Post-norm decoder block (the original Transformer, BART): norm1(x + attn(x)), then
    norm_cross(x + cross_attn(x, memory)), then norm2(x + mlp(x)).

    Same arguments and parameter names as `DecoderBlock`; only where the norms sit differs.
    """

    post_norm = True


class Decoder(Encoder):
    """Runs `DecoderBlock`s in order; `norm` at the end. Activation checkpointing as `Encoder`
    (`set_grad_checkpointing`), for calls without a cache.

    Args:
        blocks: `DecoderBlock`s.
        norm: final normalization, or None.
        shared_bias: a bias module given to every block's self-attention (T5 style), or None.
    """

    def new_cache(self) -> DecodingCache:
        """Empty caches for every block: pass it to `forward` to decode a few tokens per call."""
        return DecodingCache([block.new_cache() for block in self.blocks])

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: DecodingCache | None = None,
    ) -> Tensor:
        """x [B, L, C] -> [B, L, C]; memory [B, S, Cm] with padding mask bool [B, S] (True = pad).

        With a cache, x holds the next L tokens (positions `cache.offset` ..), and the cache advances by L.
        """
        if cache is not None and len(cache.blocks) != len(self.blocks):
            raise ValueError(f"cache has {len(cache.blocks)} blocks, this decoder {len(self.blocks)}: use new_cache()")
        bias = self.shared_bias
        with bias.once_per_call() if bias is not None and cache is None else contextlib.nullcontext():
            for i, block in enumerate(self.blocks):
                layer_cache = None if cache is None else cache.blocks[i]
                every = self.checkpoint_every
                if every and i % every == 0 and cache is None and torch.is_grad_enabled():
                    x = checkpoint(
                        own_bias(block, bias), x, memory, memory_padding_mask, bias, None, use_reentrant=False
                    )
                else:
                    x = block(x, memory, memory_padding_mask, bias, layer_cache)
        return self.norm(x)


def causal(attn: nn.Module, *, say: bool = True) -> nn.Module:
    """Make `attn`'s pattern causal (its pattern & Causal, or Causal when it has none); returns attn. `say`: log an
    intersection (a decoder's first layer does, for all)."""
    from ..attention.patterns import Causal

    pattern = attn.pattern
    if pattern is None:
        attn.pattern = Causal()
    elif not pattern.causal_only:
        attn.pattern = pattern & Causal()
        if say:
            log.info("decoder self-attention: pattern %r intersected with Causal (a decoder reads no later token)",
                     pattern)  # fmt: skip
    return attn


def causal_attention(attention: Mapping[str, Any] | None) -> dict[str, Any]:
    """The self-attention config a decoder builds: pattern none becomes 'causal' (built by the kind itself, so kinds
    that take no pattern say so); `causal()` intersects any other pattern with it once the layer is built."""
    attention = dict(attention or {})
    if attention.get("pattern") in (None, "none"):
        attention["pattern"] = "causal"
    return attention


def check_decoder_attention(attention: Mapping[str, Any] | None, what: str = "model.attention", **context: Any) -> None:
    """Raise ValueError for a decoder self-attention config that `make_decoder` would refuse whatever the data: an
    attention kind that takes no pattern (linformer), or a pattern that stays no rule of positions once made causal
    (random blocks). For a model's `check_config`, before anything is built; `context` is what the model's options
    say (`dim`, `num_heads`, `seq_len`), for building the pattern."""
    from ..attention.factory import attention_builder
    from ..attention.patterns import PATTERNS, Causal, Pattern
    from ..attention.specs import build

    config = causal_attention(attention)
    try:
        attention_builder(config, what)
    except ValueError as err:
        raise ValueError(f"{err} (in a decoder, where self-attention is causal: pattern 'causal' at least)") from err
    try:
        pattern = build(config["pattern"], PATTERNS, f"{what}.pattern", layer_index=0, **context)
    except (TypeError, ValueError):
        return  # it needs what only the data says: checked when the model is built
    if not isinstance(pattern, Pattern):  # none, or a user's own object: checked when the model is built
        return
    if not pattern.causal_only and not (pattern & Causal()).causal_only:
        raise ValueError(
            f"{what}.pattern: {config['pattern']!r} cannot be made causal for a decoder: intersected with Causal it "
            "is still not a rule of positions that never reads a later key (random blocks are drawn, not derived from "
            "positions), so the decoder could not decode incrementally; use 'causal', or a sliding_window, dilated "
            "or block_local pattern"
        )


def make_decoder(
    *,
    dim: int,
    depth: int,
    num_heads: int,
    mlp_ratio: float = 4.0,
    attention: dict | None = None,
    cross_attention: dict | None = None,
    cross: bool = True,
    drop_path_rate: float = 0.0,
    layer_scale: float | None = None,
    proj_drop: float = 0.0,
    final_norm: bool = True,
    norm_layer=nn.LayerNorm,
    act_layer=nn.GELU,
    what: str = "model.attention",
    layer_shape: Mapping[str, Any] | None = None,
    post_norm: bool = False,
) -> Decoder:
    """A pre-norm `Decoder` of `depth` `DecoderBlock`s with attention from attention configs (post-norm
    `PostNormDecoderBlock`s with `post_norm`, as BART; those have no final norm: `final_norm` is ignored).

    Args:
        attention: the self-attention config (`attnzoo.attention.factory.attention_builder`); its pattern is made
            causal (`causal`): none becomes 'causal', a pattern that could read later keys is intersected with it.
        cross_attention: the cross-attention config (default: multi-head attention, no pattern or bias).
        cross: give each block a cross-attention sub-layer (False: a decoder-only stack).
        drop_path_rate: stochastic depth, rising linearly from 0 to this over the blocks.
        norm_layer: normalization constructor called with `dim`.
        act_layer: the MLP activation's constructor (GPT-2 uses the tanh approximation of GELU).
        what: the config key of `attention`, for error messages.
        layer_shape: what the attention layers know of the tokens (`attnzoo.attention.factory.layer_shape`).
    """
    from ..attention.factory import attention_builder
    from .mlp import Mlp

    if depth < 1:
        raise ValueError(f"depth ({depth}) must be >= 1")
    # a pattern that stays no rule of positions once made causal, named as such (not by DecoderBlock's check)
    check_decoder_attention(attention, what, dim=dim, num_heads=num_heads, **(layer_shape or {}))
    make_self = attention_builder(causal_attention(attention), what, **(layer_shape or {}))
    make_cross = attention_builder(cross_attention, "model.cross_attention", **(layer_shape or {})) if cross else None
    rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()  # cpu: also under torch.device("meta")
    block = PostNormDecoderBlock if post_norm else DecoderBlock
    blocks = [
        block(
            dim=dim,
            attn=causal(make_self(dim, num_heads, layer_index=index), say=index == 0),
            cross_attn=None if make_cross is None else make_cross(dim, num_heads, layer_index=index, context_dim=dim),
            mlp=Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop),
            norm_layer=norm_layer,
            drop_path=rate,
            layer_scale=layer_scale,
        )
        for index, rate in enumerate(rates)
    ]
    return Decoder(blocks, norm=norm_layer(dim) if final_norm and not post_norm else None)
