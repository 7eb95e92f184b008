"""Config spec -> object: short names for built-ins, a dotted import path for a user's own class.

A dotted path is imported through `attnzoo.util.imports.import_path`, only when the user allows it (a config may
come from anyone).

A spec is None / "none" (nothing), a kind name ("causal"), or a mapping with `kind` and the class's
keyword arguments (`{kind: sliding_window, window: 128}`). Builders also pass *context*, what they know that
the class may need (`CONTEXT_KEYS`: width, heads, patch grid, prefix tokens, ...); each class receives the
context keys its constructor names, and a key outside `CONTEXT_KEYS` is an error, never dropped.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

# the import gate and did-you-mean live in attnzoo.util (every layer uses them); re-exported for attention/ code
from ..util.imports import (  # noqa: F401
    ALLOW_IMPORTS_ENV,
    ALLOW_IMPORTS_HELP,
    OWN_PATHS,
    allow_imports,
    import_path,
    imports_allowed,
)
from ..util.names import suggest

# every context key a builder may pass, and what it means
CONTEXT_KEYS: dict[str, str] = {
    "dim": "width of the layer being built (or of the model, for absolute positions)",
    "num_heads": "query heads of the attention layer",
    "head_dim": "width of one attention head (for rotary: the channels it rotates, `Attention.rotary_dim`)",
    "layer_index": "the layer's place among those built from one attention config (random blocks draw from it)",
    "seq_len": "the longest token sequence a layer sees, prefix tokens included",
    "grid_size": "(rows, cols) of the patch grid",
    "num_prefix_tokens": "tokens before the patches or the text (cls, distillation)",
    "max_len": "positions an absolute position table covers",
    "num_classes": "outputs of the task's head",
}


# kinds that belong under another key than the one they were given under: what to say instead of "did you mean"
ELSEWHERE = {
    "rope": "'rope' is a rotary encoding, set in the attention section (model.attention.rotary=rope), with no "
    "position table (none)",
    "rope_2d": "'rope_2d' is a rotary encoding, set in the attention section (model.attention.rotary=rope_2d)",
    "alibi": "'alibi' is a bias, set in the attention section (model.attention.bias=alibi), with no position table",
    "t5": "'t5' is a bias, set in the attention section (model.attention.bias=t5)",
}


def check_context(context: Mapping[str, Any], valid: Sequence[str], what: str) -> None:
    """Raise a ValueError naming the first key of `context` not in `valid`, and the valid keys."""
    for key in context:
        if key not in valid:
            raise ValueError(
                f"{what}: unknown context key {key!r} (passed by the code building it, not set in the config); "
                f"valid: {list(valid)}{suggest(key, list(valid))}"
            )


def no_spec(spec: Any) -> bool:
    """Whether a spec names nothing: None, "none", false, or a mapping of kind none."""
    return (
        spec is None
        or spec == "none"
        or spec is False
        or (isinstance(spec, Mapping) and spec.get("kind", 0) in (None, "none"))
    )


def _resolve(spec: Any, table: Mapping[str, Any], what: str) -> tuple[Any, str, dict[str, Any], bool] | None:
    """(class, kind, keyword arguments, whether it takes **kwargs) of a spec, or None for an empty one."""
    if no_spec(spec):
        return None
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"{what}: expected a kind name or a mapping with 'kind', got {spec!r}")
    kwargs = {k: v for k, v in spec.items() if k != "kind"}
    kind = spec["kind"]
    if kind in (None, "none"):
        return None
    if not isinstance(kind, str):  # a list or mapping cannot be looked up, nor a number imported
        valid = list(dict.fromkeys(["none", *table]))
        raise ValueError(f"{what}.kind: expected a name of {valid} or a dotted import path, got {kind!r}")
    if kind in table:
        cls = table[kind]
    elif "." in kind:
        cls = import_path(kind, f"{what}.kind")
    else:
        valid = list(dict.fromkeys(["none", *table]))
        hint = f"; {ELSEWHERE[kind]}" if kind in ELSEWHERE else suggest(kind, valid)
        raise ValueError(f"{what}.kind: unknown {kind!r}; valid: {valid} or a dotted import path{hint}")
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = [k for k in kwargs if k not in params and not takes_any]
    if unknown:
        valid = [k for k, p in params.items() if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
        raise ValueError(
            f"{what}: {kind!r} takes no argument {unknown[0]!r}; valid: {valid}{suggest(unknown[0], valid)}"
        )
    return cls, kind, kwargs, takes_any


def build(spec: Any, table: Mapping[str, Any], what: str, **context: Any) -> Any:
    """An object from `spec` using `table` (kind -> class); None for an empty spec.

    Args:
        what: the config key being built, for error messages (e.g. "model.attention.pattern").
        context: what the builder knows (keys of `CONTEXT_KEYS`); each is passed when the class's constructor
            takes it.
    """
    check_context(context, list(CONTEXT_KEYS), what)
    resolved = _resolve(spec, table, what)
    if resolved is None:
        return None
    cls, kind, kwargs, takes_any = resolved
    params = inspect.signature(cls).parameters
    given = {k: v for k, v in context.items() if (k in params or takes_any) and k not in kwargs}
    try:
        return cls(**given, **kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} ({kind}): {err}") from err


def check_spec(spec: Any, table: Mapping[str, Any], what: str) -> None:
    """Raise ValueError for what `build` would refuse in `spec` that needs no context: an unknown kind or
    argument, and, when every required argument is given in the spec itself, a bad value (the object is built).
    Configs are checked with it before anything is built, so a typo stops before training."""
    resolved = _resolve(spec, table, what)
    if resolved is None:
        return
    cls, kind, kwargs, _ = resolved
    params = inspect.signature(cls).parameters.values()
    required = [p.name for p in params if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if all(name in kwargs for name in required):  # else the builder's context supplies the rest
        try:
            cls(**kwargs)
        except (TypeError, ValueError) as err:
            # a count the layer's context may give instead of its default 0 (a global pattern's num_prefix_tokens:
            # a ViT's class token): refused only if it is wrong with that too
            context = {p.name: 1 for p in params if p.name in CONTEXT_KEYS and p.name not in kwargs and p.default == 0}
            try:
                if context:
                    cls(**kwargs, **context)
                    return
            except (TypeError, ValueError):
                pass
            raise ValueError(f"{what} ({kind}): {err}") from err
