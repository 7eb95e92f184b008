"""Paths in a run's config: which data keys hold paths, and whether two spellings name the same file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# data options that name files or folders: the resolved config holds them as absolute paths
# (`attnzoo.run.build.absolute_paths`), so the run directory works from any working directory (--resume, evaluate,
# viz); a tokenizer only when it names a .json file
PATH_KEYS = ("train", "val", "test", "root", "csv", "stats_file", "labels", "tokenizer")


def same_path(key: str, old: Any, new: Any) -> bool:
    """Whether a data path (`PATH_KEYS`) or `model.init_from` is the same file written another
    way: a run's config.yaml from before such paths were made absolute holds them as typed, relative to the working
    directory."""
    section, _, name = key.partition(".")
    if (section, name) != ("model", "init_from") and (section != "data" or name not in PATH_KEYS):
        return False
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return all(same_path(key, a, b) for a, b in zip(old, new, strict=True))
    return isinstance(old, str) and isinstance(new, str) and Path(old).resolve() == Path(new).resolve()
