"""What a folder dataset reads of a tree: entries that tools leave beside the data are not data."""

from __future__ import annotations

from pathlib import Path

# folders that zip tools, notebooks and version control leave beside data: never classes, never read
NOT_DATA = {"__MACOSX", "__pycache__"}


def hidden(name: str) -> bool:
    """Whether a file or folder named `name` is not data: hidden (".DS_Store", ".ipynb_checkpoints/", macOS's
    "._photo.png" copies of a file's metadata) or one of `NOT_DATA`."""
    return name.startswith(".") or name in NOT_DATA


def under_hidden(path: Path | str, root: Path | str) -> bool:
    """Whether `path` or a folder between `root` and it is `hidden` (the folders above `root` do not count)."""
    return any(hidden(part) for part in Path(path).relative_to(root).parts)
