"""Paths in a run's config: which data keys hold paths, and whether two spellings name the same file."""

from __future__ import annotations

import hashlib
import json
import os
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
FILE_KEYS = ("train", "val", "test", "csv", "root")  # data options that name files or, `root`, a folder
ENDS = 1 << 20  # bytes read at each end of a file for its fingerprint
RUNS = ("config.yaml", "ablate.json", "ablation.json")  # a folder holding one is a run's or an ablation's, not data


def _files(value: Any) -> list[str] | None:
    """The file paths a data option holds (one, or a list), or None."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def fingerprint(path: str | Path) -> dict[str, Any]:
    """A file's size and the sha256 of its first and last MiB: the same file moved or copied is known again without
    reading all of a large corpus. A folder's: how many files it holds (hidden ones aside), their bytes, and the
    sha256 of their relative paths and sizes (a folder of clips or images: no file is read)."""
    path = Path(path)
    if path.is_dir():
        listing = []
        for folder, dirs, names in os.walk(path):
            # hidden folders, and runs and ablations written inside the data folder (data.root=.), which change
            dirs[:] = [d for d in dirs if not d.startswith(".") and not any(Path(folder, d, f).is_file() for f in RUNS)]
            for name in names:
                file = Path(folder, name)
                if not name.startswith(".") and file.is_file():
                    listing.append((file.relative_to(path).as_posix(), file.stat().st_size))
        listing.sort()
        return {
            "files": len(listing),
            "bytes": sum(size for _, size in listing),
            "sha256_listing": hashlib.sha256(json.dumps(listing).encode()).hexdigest(),
        }
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
        if files and all(Path(f).is_file() or (key == "root" and Path(f).is_dir()) for f in files):
            record[f"data.{key}"] = [{"path": f, **fingerprint(f)} for f in files]
    write_json(run_dir / DATA_FILES_RECORD, record)


def _recorded(run_dir: Path) -> dict[str, Any]:
    try:
        record = json.loads((run_dir / DATA_FILES_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _same(path: str | Path, recorded: Any) -> bool:
    """Whether `path` has the fingerprint of a `record_data_files` entry."""
    if not isinstance(recorded, dict):
        return False
    try:
        return fingerprint(path) == {k: v for k, v in recorded.items() if k != "path"}
    except OSError:
        return False


def changed_data(run_dir: Path, data: Mapping[str, Any]) -> list[str]:
    """The data files and folders a resume would read where the run read them, whose fingerprint is not the one the
    run recorded (`record_data_files`): each as "data.train: <path> (<what changed>)". A resume trains on the data
    it started with (the same batches, the same splits), so a file edited or a clip added since is named."""
    changed = []
    for key, entries in _recorded(run_dir).items():
        now = _files(data.get(key.removeprefix("data.")))
        if not isinstance(entries, list) or not now or [e.get("path") for e in entries if isinstance(e, dict)] != now:
            continue  # another file given (a moved one: `moved_data`), or none
        for entry in entries:
            path = Path(entry["path"])
            if not path.exists() or _same(path, entry):
                continue
            was, is_ = entry, fingerprint(path)
            if "files" in was and "files" in is_:
                what = f"{was['files']} files of {was['bytes']} bytes then, {is_['files']} of {is_['bytes']} now"
                if (was["files"], was["bytes"]) == (is_["files"], is_["bytes"]):
                    what = f"{is_['files']} files, as then, renamed or moved between its folders"
            elif "size" in was and "size" in is_:
                what = f"{was['size']} bytes then, {is_['size']} now" if was["size"] != is_["size"] else "edited"
            else:
                what = "a file then, a folder now" if "size" in was else "a folder then, a file now"
            changed.append(f"{key}: {path} ({what})")
    return changed


def gone(value: Any) -> bool:
    """Whether a data option names files (or folders) none of which is here any more."""
    files = _files(value)
    return bool(files) and not any(Path(f).exists() for f in files)


def moved_data(run_dir: Path, key: str, old: Any, new: Any) -> bool:
    """Whether the data file(s) `new` of a resume are the ones `old` named, moved: every old file is gone, and each new
    one has the size and fingerprint the run recorded for it (`record_data_files`)."""
    recorded = _recorded(run_dir).get(key)
    news = _files(new)
    if not isinstance(recorded, list) or not news or len(news) != len(recorded) or not gone(old):
        return False
    return all(_same(n, r) for n, r in zip(news, recorded, strict=True))
