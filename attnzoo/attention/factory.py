"""Attention config -> an attention class: kind, pattern, bias and rotary specs plus `Attention` options.

Specs are built by `specs.build` (short names for built-ins, a dotted import path for a user's own class).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Mapping
from typing import Any

from .specs import build, import_path, suggest

ATTENTION_OPTIONS = ("backend", "num_kv_heads", "qkv_bias", "qk_norm", "attn_drop", "proj_drop")


def attention_layer(cfg: Mapping[str, Any] | None, what: str = "model.attention", **context: Any) -> type:
    """A class built from an attention config, for timm's `attn_layer` or attnzoo's own blocks.

    `cfg` keys: `kind` (attention kind, default "mha"), `pattern`, `bias`, `rotary` (specs, see `build`),
    and `Attention` options (`backend`, `num_kv_heads`, `qk_norm`, ...). Each instance gets its own pattern,
    bias and rotary objects, built with `context` plus the instance's `num_heads`, `head_dim` and
    `layer_index` (instances of the returned class count from 0 in the order they are built: per-layer random
    blocks draw from it).
    """
    from .attention import ATTENTION_KINDS, Attention
    from .biases import BIASES
    from .patterns import PATTERNS
    from .rotary import ROTARY

    cfg = dict(cfg or {})
    kind = cfg.pop("kind", "mha")
    if kind in ATTENTION_KINDS:
        base = ATTENTION_KINDS[kind]
    elif "." in str(kind):
        base = import_path(kind)
    else:
        valid = list(ATTENTION_KINDS)
        raise ValueError(f"{what}.kind: unknown {kind!r}; valid: {valid} or a dotted import path{suggest(kind, valid)}")
    specs = {name: cfg.pop(name, None) for name in ("pattern", "bias", "rotary")}
    options = cfg
    own = inspect.signature(base).parameters
    known = set(own) | set(ATTENTION_OPTIONS)
    if issubclass(base, Attention):  # a kind's constructor passes Attention's options on through **kwargs
        known |= set(inspect.signature(Attention).parameters)
    # model context a kind's constructor names explicitly (e.g. linformer's seq_len), unless the config sets it
    from_context = {k: v for k, v in context.items() if k in own and k not in options and k not in ("dim", "num_heads")}
    for key in options:
        if key not in known:
            valid = sorted(known - {"self", "dim", "num_heads", "unsupported", "kwargs", "device", "dtype"})
            raise ValueError(f"{what}: unknown option {key!r}; valid: {valid}{suggest(key, valid)}")
    tables = {"pattern": PATTERNS, "bias": BIASES, "rotary": ROTARY}

    layers = itertools.count()

    def make_parts(dim: int, num_heads: int) -> dict[str, Any]:
        ctx = {**context, "num_heads": num_heads, "head_dim": dim // num_heads, "dim": dim}
        ctx["layer_index"] = next(layers)
        return {name: build(spec, tables[name], f"{what}.{name}", **ctx) for name, spec in specs.items()}

    def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
        # the config wins over what a host model (timm) passes for the same option
        base.__init__(self, dim, num_heads, **{**kwargs, **from_context, **make_parts(dim, num_heads), **options})

    return type(f"Configured{base.__name__}", (base,), {"__init__": __init__, "__module__": base.__module__})
