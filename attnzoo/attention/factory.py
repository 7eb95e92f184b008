"""Config -> attention objects: short names for built-ins, a dotted import path for a user's own class.

A spec is None / "none" (nothing), a kind name ("causal"), or a mapping with `kind` and the class's
keyword arguments (`{kind: sliding_window, window: 128}`). Builders also pass *context* the model knows
(num_heads, grid size, prefix tokens, ...); each class receives only the context its constructor accepts.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import itertools
from collections.abc import Mapping
from typing import Any


def import_path(path: str) -> Any:
    """`package.module.Name` -> the object."""
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"{path!r} is not a dotted import path (package.module.Name)")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import {path!r}: {err}") from err


def suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def build(spec: Any, table: Mapping[str, Any], what: str, **context: Any) -> Any:
    """An object from `spec` using `table` (kind -> class); None for an empty spec.

    Args:
        what: the config key being built, for error messages (e.g. "model.attention.pattern").
        context: keyword arguments the model supplies; passed when the class's constructor takes them.
    """
    if spec is None or spec == "none" or spec is False:
        return None
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"{what}: expected a kind name or a mapping with 'kind', got {spec!r}")
    kwargs = {k: v for k, v in spec.items() if k != "kind"}
    kind = spec["kind"]
    if kind in (None, "none"):
        return None
    if kind in table:
        cls = table[kind]
    elif "." in str(kind):
        cls = import_path(kind)
    else:
        valid = ["none", *table]
        raise ValueError(f"{what}.kind: unknown {kind!r}; valid: {valid} or a dotted import path{suggest(kind, valid)}")
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = [k for k in kwargs if k not in params and not takes_any]
    if unknown:
        valid = [k for k, p in params.items() if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
        raise ValueError(
            f"{what}: {kind!r} takes no argument {unknown[0]!r}; valid: {valid}{suggest(unknown[0], valid)}"
        )
    given = {k: v for k, v in context.items() if (k in params or takes_any) and k not in kwargs}
    try:
        return cls(**given, **kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} ({kind}): {err}") from err


ATTENTION_OPTIONS = ("backend", "num_kv_heads", "qkv_bias", "qk_norm", "attn_drop", "proj_drop")


def attention_layer(cfg: Mapping[str, Any] | None, what: str = "model.attention", **context: Any) -> type:
    """A class built from an attention config, for timm's `attn_layer` or attnzoo's own blocks.

    `cfg` keys: `kind` (attention kind, default "mha"), `pattern`, `bias`, `rotary` (specs, see `build`),
    and `Attention` options (`backend`, `num_kv_heads`, `qk_norm`, ...). Each instance gets its own pattern,
    bias and rotary objects, built with `context` plus the instance's `num_heads`, `head_dim` (the channels
    rotary rotates: `Attention.rotary_dim`) and `layer_index` (instances of the returned class count from 0 in
    the order they are built: per-layer random blocks draw from it, and so does a kind that names it).
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

    def make_parts(dim: int, num_heads: int, layer_index: int) -> dict[str, Any]:
        head_dim = base.rotary_dim(dim, num_heads, **options) if hasattr(base, "rotary_dim") else dim // num_heads
        ctx = {**context, "num_heads": num_heads, "head_dim": head_dim, "dim": dim, "layer_index": layer_index}
        return {name: build(spec, tables[name], f"{what}.{name}", **ctx) for name, spec in specs.items()}

    def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
        index = next(layers)
        # a kind that names layer_index (differential attention's lambda schedule) gets it too
        indexed = {"layer_index": index} if "layer_index" in own and "layer_index" not in options else {}
        parts = make_parts(dim, num_heads, index)
        # the config wins over what a host model (timm) passes for the same option
        base.__init__(self, dim, num_heads, **{**kwargs, **from_context, **indexed, **parts, **options})

    return type(f"Configured{base.__name__}", (base,), {"__init__": __init__, "__module__": base.__module__})
