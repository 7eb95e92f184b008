"""Paths in a run's config: which data keys hold paths, and whether two spellings name the same file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
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


DATA_FILES_RECORD = "data_files.json"  # a run's data files as they were: a moved one is known again on --resume
FILE_KEYS = ("train", "val", "test", "csv")  # data options that name files (`root` names a folder)
ENDS = 1 << 20  # bytes read at each end of a file for its fingerprint


def _files(value: Any) -> list[str] | None:
    """The file paths a data option holds (one, or a list), or None."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def fingerprint(path: str | Path) -> dict[str, Any]:
    """A file's size and the sha256 of its first and last MiB: the same file moved or copied is known again without
    reading all of a large corpus."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(ENDS))
        if size > ENDS:
            f.seek(max(size - ENDS, ENDS))
            digest.update(f.read())
    return {"size": size, "sha256_ends": digest.hexdigest()}


def record_data_files(data: Mapping[str, Any], run_dir: Path) -> None:
    """Write `DATA_FILES_RECORD`: each file of the data section's `FILE_KEYS` (resolved: absolute paths), with its
    fingerprint."""
    from ..util.files import write_json

    record = {}
    for key in FILE_KEYS:
        files = _files(data.get(key))
        if files and all(Path(f).is_file() for f in files):
            record[f"data.{key}"] = [{"path": f, **fingerprint(f)} for f in files]
    write_json(run_dir / DATA_FILES_RECORD, record)


def gone(value: Any) -> bool:
    """Whether a data option names files (or folders) none of which is here any more."""
    files = _files(value)
    return bool(files) and not any(Path(f).exists() for f in files)


def moved_data(run_dir: Path, key: str, old: Any, new: Any) -> bool:
    """Whether the data file(s) `new` of a resume are the ones `old` named, moved: every old file is gone, and each new
    one has the size and fingerprint the run recorded for it (`record_data_files`)."""
    try:
        recorded = json.loads((run_dir / DATA_FILES_RECORD).read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return False
    news = _files(new)
    if not isinstance(recorded, list) or not news or len(news) != len(recorded) or not gone(old):
        return False
    try:
        return all(
            isinstance(r, dict) and fingerprint(n) == {k: r.get(k) for k in ("size", "sha256_ends")}
            for n, r in zip(news, recorded, strict=True)
        )
    except OSError:
        return False
