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
# a folder holding one is a run's or an ablation's, not data (the fingerprint's rule since runs recorded it: a
# folder of the data holding a config.yaml of its own is passed over too)
RUNS = ("config.yaml", "ablate.json", "ablation.json")
LISTS = ("validation_list.txt", "testing_list.txt")  # Speech Commands' split lists, read from an audio data.root


def _files(value: Any) -> list[str] | None:
    """The file paths a data option holds (one, or a list), or None."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def fingerprint(path: str | Path, key: str = "data.root") -> dict[str, Any]:
    """A file's size and the sha256 of its first and last MiB: the same file moved or copied is known again without
    reading all of a large corpus. A folder's: how many data files it holds and the sha256 of their relative paths
    (`_listing`; for `data.root`, images and clips, from the folder entries alone: a clip added, removed or moved to
    another class folder shows, a file edited in place does not; for a folder of texts, `data.train` of the
    language models, its .txt files with their sizes)."""
    path = Path(path)
    if path.is_dir():
        listing = sorted(_listing(path, texts=key != "data.root"))
        return {"files": len(listing), "sha256_listing": hashlib.sha256("\n".join(listing).encode()).hexdigest()}
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(ENDS))
        if size > ENDS:
            f.seek(max(size - ENDS, ENDS))
            digest.update(f.read())
    return {"size": size, "sha256_ends": digest.hexdigest()}


def _listing(root: Path, *, texts: bool = False) -> list[str]:
    """The relative paths of the files under `root` that a data folder's readers take (images, WAV clips, Speech
    Commands' lists; with `texts`, .txt files, each with its size), from the folder entries alone; what is not data
    is passed over: hidden and `NOT_DATA` names (`attnzoo.data.formats.folders.hidden`), and runs and ablations
    written inside (`data.root=.`), which change as they go."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from ..data.formats.folders import hidden

    suffixes = (".txt",) if texts else (*IMG_EXTENSIONS, ".wav")
    found, folders = [], [root]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {e.name for e in entries}
        if folder != root and names & set(RUNS):
            continue
        for entry in entries:
            if hidden(entry.name):
                continue
            if entry.is_dir():
                folders.append(Path(entry.path))
            elif entry.name.lower().endswith(suffixes) or entry.name in LISTS and not texts:
                name = Path(entry.path).relative_to(root).as_posix()
                found.append(f"{name}\t{entry.stat().st_size}" if texts else name)
    return found


def record_data_files(data: Mapping[str, Any], run_dir: Path) -> None:
    """Write `DATA_FILES_RECORD`: each file of the data section's `FILE_KEYS` (resolved: absolute paths), with its
    fingerprint."""
    from ..util.files import write_json

    record = {}
    for key in FILE_KEYS:
        files = _files(data.get(key))
        if files and all(Path(f).exists() for f in files):  # a file, a data.root, a folder of texts
            record[f"data.{key}"] = [{"path": f, **fingerprint(f, f"data.{key}")} for f in files]
    write_json(run_dir / DATA_FILES_RECORD, record)


def _recorded(run_dir: Path) -> dict[str, Any]:
    try:
        record = json.loads((run_dir / DATA_FILES_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _same(path: str | Path, recorded: Any, key: str) -> bool:
    """Whether `path` has the fingerprint of a `record_data_files` entry of `key`."""
    if not isinstance(recorded, dict):
        return False
    try:
        return _difference(recorded, Path(path), key) is None
    except OSError:
        return False


def _resolved(paths: list[str]) -> list[Path]:
    return [Path(p).resolve() for p in paths]


def changed_data(run_dir: Path, data: Mapping[str, Any]) -> list[str]:
    """The data files and folders a resume would read where the run read them, whose fingerprint is not the one the
    run recorded (`record_data_files`): each as "data.train: <path> (<what changed>)". A resume trains on the data
    it started with (the same batches, the same splits), so a file edited or a clip added since is named."""
    changed = []
    for key, entries in _recorded(run_dir).items():
        now = _files(data.get(key.removeprefix("data.")))
        then = [e.get("path") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        if not now or not all(isinstance(p, str) for p in then) or _resolved(then) != _resolved(now):
            continue  # another file given (a moved one: `moved_data`), or none
        for entry in [e for e in entries if isinstance(e, dict)]:
            path = Path(entry["path"])
            if not path.exists():
                continue
            what = _difference(entry, path, key)
            if what is not None:
                changed.append(f"{key}: {path} ({what})")
    return changed


def _difference(was: Mapping[str, Any], path: Path, key: str) -> str | None:
    """How `path` differs from the `record_data_files` entry `was` of `key` (None: it does not)."""
    is_ = fingerprint(path, key)
    if is_ == {k: v for k, v in was.items() if k != "path"}:
        return None
    if "files" in was and "files" in is_:
        if was["files"] == is_["files"] and key != "data.root":  # a folder of texts
            return f"{is_['files']} text files, as then, edited or renamed"
        if was["files"] == is_["files"]:
            return f"{is_['files']} data files, as then, renamed or moved between its folders"
        return f"{was['files']} data files then, {is_['files']} now"
    if "size" in was and "size" in is_:
        return (
            f"{was['size']} bytes then, {is_['size']} now"
            if was["size"] != is_["size"]
            else "the same size, other content"
        )
    return "a file then, a folder now" if "size" in was else "a folder then, a file now"


def unlike_recorded(run_dir: Path, key: str, new: Any) -> str | None:
    """For data given elsewhere on a resume (`new`, one file or folder), how it differs from the one the run
    recorded (None: the same, or nothing to compare)."""
    recorded, news = _recorded(run_dir).get(key), _files(new)
    if not isinstance(recorded, list) or len(recorded) != 1 or not news or len(news) != 1:
        return None
    if not isinstance(recorded[0], dict) or not Path(news[0]).exists():
        return None
    try:
        return _difference(recorded[0], Path(news[0]), key)
    except OSError:
        return None


def scored_on_train(data: Mapping[str, Any]) -> list[str]:
    """The splits ("val", "test") whose file is the train file (a path that resolves to data.train's): a copy-paste
    slip that leaves nothing held out. Translation's own warning says it of val (`TranslationDataModule`); the
    language models refuse it."""
    train = data.get("train")
    if not isinstance(train, str) or not Path(train).is_file():
        return []
    splits = ("test",) if data.get("kind") == "translation" else ("val", "test")
    return [s for s in splits if isinstance(data.get(s), str) and same_path(f"data.{s}", data[s], train)]


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
    return all(_same(n, r, key) for n, r in zip(news, recorded, strict=True))
