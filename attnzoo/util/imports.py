"""Code that a config names by import path (a user's own class), imported only when the user asks for it.

A config may come from elsewhere (a downloaded run's config.yaml), and importing a module or calling what it names
runs code: a dotted path is imported only when the user asks for it (`allow_imports`: the commands' --allow-imports,
or ATTNZOO_ALLOW_IMPORTS=1), except attnzoo's own classes listed in `OWN_PATHS`.
"""

from __future__ import annotations

import importlib
import os
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
