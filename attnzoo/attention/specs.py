"""Config spec -> object: short names for built-ins, a dotted import path for a user's own class.

A config may come from elsewhere (a downloaded run's config.yaml), and importing a module or calling what it names
runs code: a dotted path is imported only when the user asks for it (`allow_imports`: the commands' --allow-imports,
or ATTNZOO_ALLOW_IMPORTS=1), except attnzoo's own classes listed in `OWN_PATHS`.

A spec is None / "none" (nothing), a kind name ("causal"), or a mapping with `kind` and the class's
keyword arguments (`{kind: sliding_window, window: 128}`). Builders also pass *context*, what they know that
the class may need (`CONTEXT_KEYS`: width, heads, patch grid, prefix tokens, ...); each class receives the
context keys its constructor names, and a key outside `CONTEXT_KEYS` is an error, never dropped.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

ALLOW_IMPORTS_ENV = "ATTNZOO_ALLOW_IMPORTS"
# attnzoo's own classes that a config names by import path (they live beside a model, outside the kind tables)
OWN_PATHS = frozenset({"attnzoo.models.ast.TimeWindow"})
ALLOW_IMPORTS_HELP = (
    f"let the config name code by import path (your own class); only for configs you trust (or {ALLOW_IMPORTS_ENV}=1)"
)


def imports_allowed() -> bool:
    """Whether a config may name code by import path (ATTNZOO_ALLOW_IMPORTS set to 1, true or yes)."""
    return os.environ.get(ALLOW_IMPORTS_ENV, "").strip().lower() in ("1", "true", "yes")


def allow_imports(enabled: bool = True) -> None:
    """Let configs name code by import path in this process and the processes it starts (a command's
    --allow-imports); False leaves the environment as it is."""
    if enabled:
        os.environ[ALLOW_IMPORTS_ENV] = "1"


def import_path(path: str, what: str = "kind") -> Any:
    """`package.module.Name` -> the object; refused (nothing imported) unless `imports_allowed()` or the path is
    in `OWN_PATHS`. `what` is the config key, for the error."""
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"{what}: {path!r} is not a dotted import path (package.module.Name)")
    if path not in OWN_PATHS and not imports_allowed():
        raise ValueError(
            f"{what}: {path!r} is an import path, and importing it would run code from {module!r}; attnzoo imports "
            "code a config names only when asked, since a config (a run directory's config.yaml) may come from "
            f"anyone. If you trust this config, pass --allow-imports or set {ALLOW_IMPORTS_ENV}=1"
        )
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what}: cannot import {path!r}: {err}") from err


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


def suggest(word: str, choices: list[str]) -> str:
    """ "; did you mean 'x'?" for the closest of `choices`, or "" when none is close; of equally close ones, the
    first in `choices` (registries list their defaults first: "mah" suggests "mha", not "mla")."""
    close = difflib.get_close_matches(word, choices, n=len(choices), cutoff=0.6)
    if not close:
        return ""
    best = max(difflib.SequenceMatcher(None, word, c).ratio() for c in close)
    first = next(c for c in choices if c in close and difflib.SequenceMatcher(None, word, c).ratio() == best)
    return f"; did you mean {first!r}?"


def check_context(context: Mapping[str, Any], valid: Sequence[str], what: str) -> None:
    """Raise a ValueError naming the first key of `context` not in `valid`, and the valid keys."""
    for key in context:
        if key not in valid:
            raise ValueError(
                f"{what}: unknown context key {key!r} (passed by the code building it, not set in the config); "
                f"valid: {list(valid)}{suggest(key, list(valid))}"
            )


def _resolve(spec: Any, table: Mapping[str, Any], what: str) -> tuple[Any, str, dict[str, Any], bool] | None:
    """(class, kind, keyword arguments, whether it takes **kwargs) of a spec, or None for an empty one."""
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
        cls = import_path(kind, f"{what}.kind")
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
            raise ValueError(f"{what} ({kind}): {err}") from err
