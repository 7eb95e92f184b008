"""Attention config -> an attention class: kind, pattern, bias and rotary specs plus `Attention` options.

Specs are built by `specs.build` (short names for built-ins, a dotted import path for a user's own class).
A model tells its attention layers what it knows about its tokens as their *layer shape* (keys of
`LAYER_SHAPE_KEYS`), made by `layer_shape` from the token layout; `attention_builder` adds each layer's width,
heads and index. (Not to be confused with cross-attention's `context`, the tokens attended to.)
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from .specs import build, check_context, check_spec, import_path, suggest

ATTENTION_OPTIONS = ("backend", "num_kv_heads", "qkv_bias", "qk_norm", "attn_drop", "proj_drop")
# what a model may tell its attention layers (see `specs.CONTEXT_KEYS`); `attention_builder` adds the per-layer keys
LAYER_SHAPE_KEYS = ("seq_len", "grid_size", "num_prefix_tokens")


def layer_shape(
    *, grid_size: tuple[int, int] | None = None, max_len: int | None = None, num_prefix_tokens: int = 0
) -> dict[str, Any]:
    """The layer shape of a token layout: a patch grid (images, spectrograms) or the longest text (`max_len`),
    after `num_prefix_tokens` (cls, distillation). `seq_len`, the longest sequence a layer sees, is derived here
    and nowhere else."""
    if (grid_size is None) == (max_len is None):
        raise ValueError(
            f"tokens come from a patch grid or a text, exactly one: grid_size={grid_size}, max_len={max_len}"
        )
    tokens = max_len if grid_size is None else grid_size[0] * grid_size[1]
    shape: dict[str, Any] = {"seq_len": num_prefix_tokens + tokens, "num_prefix_tokens": num_prefix_tokens}
    if grid_size is not None:
        shape["grid_size"] = tuple(grid_size)
    return shape


# the names of an earlier release, for code written against them
MODEL_CONTEXT = LAYER_SHAPE_KEYS
attention_context = layer_shape


def attention_builder(cfg: Mapping[str, Any] | None, what: str = "model.attention", **shape: Any) -> Callable[..., Any]:
    """A function that builds one attention layer from an attention config: `make(dim, num_heads, layer_index=i)`.

    `cfg` keys: `kind` (attention kind, default "mha"), `pattern`, `bias`, `rotary` (specs, see `build`),
    and `Attention` options (`backend`, `num_kv_heads`, `qk_norm`, ...). Each call builds its own pattern,
    bias and rotary objects, with `shape` plus the layer's `num_heads`, `head_dim` (the channels rotary
    rotates: `Attention.rotary_dim`) and `layer_index` (per-layer random blocks draw from it, and so does a kind
    that names it). The config is checked here, before any layer is built: a typo stops before training.

    Precedence of a layer's constructor arguments, lowest first (later ones win):
    1. `host` keywords of `make` (what the block or model passes: `context_dim`, a model default such as ViT's
       `proj_drop`);
    2. layer shape keys the kind's constructor names (e.g. linformer's `seq_len`);
    3. `layer_index`, when the kind's constructor names it;
    4. the built `pattern`, `bias` and `rotary`;
    5. the config's own options.

    Args:
        shape: the layer shape, keys of `LAYER_SHAPE_KEYS` (`layer_shape` makes it); any other key raises.
    """
    check_context(shape, LAYER_SHAPE_KEYS, f"{what} (attention_layer)")
    from .attention import ATTENTION_KINDS, Attention
    from .biases import BIASES
    from .patterns import PATTERNS
    from .rotary import ROTARY

    if cfg is not None and not isinstance(cfg, Mapping):
        example = ("kind" if cfg in ATTENTION_KINDS else "pattern" if cfg in PATTERNS else "bias" if cfg in BIASES
                   else "rotary" if cfg in ROTARY else None) if isinstance(cfg, str) else None  # fmt: skip
        hint = f": {{{example!r}: {cfg!r}}}" if example else " such as {'pattern': 'causal'}"
        raise ValueError(
            f"{what}: expected a mapping of attention options (kind, pattern, bias, rotary, backend, ...), got "
            f"{type(cfg).__name__} {cfg!r}; give a mapping{hint}"
        )
    cfg = dict(cfg or {})
    kind = cfg.pop("kind", "mha")
    if not isinstance(kind, str):
        raise ValueError(f"{what}.kind: expected a name of {list(ATTENTION_KINDS)}, got {kind!r}")
    if kind in ATTENTION_KINDS:
        base = ATTENTION_KINDS[kind]
    elif "." in str(kind):
        base = import_path(kind, f"{what}.kind")
    else:
        valid = list(ATTENTION_KINDS)
        raise ValueError(f"{what}.kind: unknown {kind!r}; valid: {valid} or a dotted import path{suggest(kind, valid)}")
    specs = {name: cfg.pop(name, None) for name in ("pattern", "bias", "rotary")}
    options = cfg
    own = inspect.signature(base).parameters
    known = set(own) | set(ATTENTION_OPTIONS)
    if issubclass(base, Attention):  # a kind's constructor passes Attention's options on through **kwargs
        known |= set(inspect.signature(Attention).parameters)
    # layer shape keys a kind's constructor names explicitly (e.g. linformer's seq_len), unless the config sets it
    from_shape = {k: v for k, v in shape.items() if k in own and k not in options}
    for key in options:
        if key not in known:
            hidden = {"self", "dim", "num_heads", "unsupported", "kwargs", "device", "dtype"}
            valid = sorted((known | {"kind"}) - hidden)
            raise ValueError(f"{what}: unknown option {key!r}; valid: {valid}{suggest(key, valid)}")
    tables = {"pattern": PATTERNS, "bias": BIASES, "rotary": ROTARY}
    for name, spec in specs.items():
        check_spec(spec, tables[name], f"{what}.{name}")
    if hasattr(base, "check_config"):  # what the kind refuses whatever the model (Attention.check_config)
        given = [name for name, spec in specs.items() if spec not in (None, "none", False)]
        try:
            base.check_config(options, given)
        except ValueError as err:
            raise ValueError(f"{what}: {err}") from err

    def make(dim: int, num_heads: int = 8, *, layer_index: int, **host: Any) -> Any:
        """Layer `layer_index` (from 0 in its stack) of width `dim`; `host` as in the precedence list above."""
        head_dim = base.rotary_dim(dim, num_heads, **options) if hasattr(base, "rotary_dim") else dim // num_heads
        ctx = {**shape, "num_heads": num_heads, "head_dim": head_dim, "dim": dim, "layer_index": layer_index}
        parts = {name: build(spec, tables[name], f"{what}.{name}", **ctx) for name, spec in specs.items()}
        indexed = {"layer_index": layer_index} if "layer_index" in own and "layer_index" not in options else {}
        return base(dim, num_heads, **{**host, **from_shape, **indexed, **parts, **options})

    return make


def attention_layer(cfg: Mapping[str, Any] | None, what: str = "model.attention", **shape: Any) -> type:
    """A class for timm's `attn_layer` hook (timm checks `issubclass`), from an attention config.

    attnzoo's own layers use `attention_builder` with explicit layer indices. timm constructs its blocks in
    order, so instances of this class take layer indices 0, 1, ... in the order they are built; for anything
    else, build the layers with `attention_builder` in a loop.
    """
    make = attention_builder(cfg, what, **shape)
    from .attention import ATTENTION_KINDS

    kind = dict(cfg or {}).get("kind", "mha")
    base = ATTENTION_KINDS[kind] if kind in ATTENTION_KINDS else import_path(kind)
    built = itertools.count()

    def __new__(cls, dim: int, num_heads: int = 8, **kwargs: Any) -> Any:
        return make(dim, num_heads, layer_index=next(built), **kwargs)

    return type(f"Configured{base.__name__}", (base,), {"__new__": __new__, "__module__": base.__module__})
