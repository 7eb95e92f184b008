"""What a folder dataset reads of a tree: entries that tools leave beside the data are not data, and split folders
(train/, val/, test/ of class folders) are splits."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ...util.files import written_by_a_run
from ...util.names import shortened

log = logging.getLogger("attnzoo")

# what zip tools, notebooks, version control and Windows' Explorer leave beside data: never classes, never read
NOT_DATA = {"__MACOSX", "__pycache__", "Thumbs.db", "desktop.ini", "Desktop.ini"}


def hidden(name: str) -> bool:
    """Whether a file or folder named `name` is not data: hidden (".DS_Store", ".ipynb_checkpoints/", macOS's
    "._photo.png" copies of a file's metadata) or one of `NOT_DATA`."""
    return name.startswith(".") or name in NOT_DATA


ABLATION_FILES = ("ablation.json", "ablate.json")  # an ablation directory's record (ablate.json: its earlier name)
RUN_WRITTEN = ("checkpoints", "metrics.csv", "summary.json")  # what a run writes beside its config.yaml


def run_output(folder: Path | str) -> bool:
    """Whether `folder` is a directory attnzoo wrote: a run's (its config.yaml written by a run, or beside what a run
    writes) or an ablation's. A run made inside the data (`data.root=.`: runs/ among the class folders) is no data."""
    folder = Path(folder)
    if any((folder / name).is_file() for name in ABLATION_FILES):
        return True
    config = folder / "config.yaml"
    return config.is_file() and (written_by_a_run(config) or any((folder / n).exists() for n in RUN_WRITTEN))


def holds_runs(folder: Path | str, depth: int = 3) -> bool:
    """Whether `folder`, or a folder at most `depth` levels under it (not a hidden one), is a `run_output`: the
    run.dir of runs made inside the data (`runs/<run.name>/<timestamp>/`, `runs/ablate/<name>/`)."""
    if run_output(folder):
        return True
    if depth <= 0:
        return False
    try:
        inner = [e.path for e in os.scandir(folder) if e.is_dir() and not hidden(e.name)]
    except OSError:
        return False
    return any(holds_runs(path, depth - 1) for path in inner)


_said_runs: set[str] = set()
_runs_here: set[Path] = set()  # the run directories this process trains in (`note_run_dir`)


def note_run_dir(path: Path | str) -> None:
    """Record a run directory this process trains in (`attnzoo.run.train.fit`): a data folder holding it
    (`data.root=.`, run.dir runs/ made there) is no data from the start, when the run has written nothing in it."""
    _runs_here.add(Path(path).resolve())


def within_run_here(path: Path | str) -> bool:
    """Whether `path` is or holds a run directory this process trains in (`note_run_dir`)."""
    path = Path(path).resolve()
    return any(run == path or run.is_relative_to(path) for run in _runs_here)


def data_folders(folder: Path) -> list[Path]:
    """The subfolders of `folder` that may hold data, sorted by name: not hidden (`hidden`) and not holding attnzoo's
    runs (`holds_runs`, or the run this process trains in: `within_run_here`), which the log names once."""
    found = []
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and not hidden(p.name)):
        if not holds_runs(path) and not within_run_here(path):
            found.append(path)
        elif str(path) not in _said_runs:
            _said_runs.add(str(path))
            log.warning("data: %s holds attnzoo runs or ablations (run.dir inside the data folder): not read as "
                        "data", path)  # fmt: skip
    return found


def under_hidden(path: Path | str, root: Path | str) -> bool:
    """Whether `path` or a folder between `root` and it is `hidden` (the folders above `root` do not count)."""
    return any(hidden(part) for part in Path(path).relative_to(root).parts)


# split folder names, in any letter case (Train/, VALIDATION/); such a folder is a split when it holds class folders
SPLIT_NAMES = {  # a split folder's name, in any letter case -> the split
    **{name: "train" for name in ("train", "training")},
    **{name: "val" for name in ("val", "valid", "validation", "dev")},
    **{name: "test" for name in ("test", "testing")},
}


def split_folders(root: Path, data: tuple[str, ...] = ()) -> dict[str, Path]:
    """{split: its folder} of the split subfolders of `root` (see SPLIT_NAMES), when at least one of them holds class
    folders; else {} (a `Train/` of files only is a class, say of vehicles). Two folders for one split are an error
    naming both, and so, with `data` (the suffixes of the data files: images, clips), is a folder beside the split
    folders that holds such files itself or in its subfolders (a class folder no split would read: bus/ and car/
    beside a class named train/ of subfolders). Other folders there (runs/, lost+found/, labels/) are not data."""
    named = (
        [(SPLIT_NAMES.get(p.name.lower()), p) for p in sorted(root.iterdir()) if p.is_dir()] if root.is_dir() else []
    )
    named = [(split, p) for split, p in named if split is not None]
    if not any(c.is_dir() for _, p in named for c in p.iterdir()):
        return {}
    found: dict[str, Path] = {}
    for split, child in named:
        if split in found:
            raise ValueError(
                f"data.root {str(root)!r}: both {found[split].name}/ and {child.name}/ name the {split} split; keep one"
            )
        found[split] = child
    beside = [n for n in class_folders(root) if n.lower() not in SPLIT_NAMES and data and _holds(root / n, data)]
    if beside:  # read as splits, the folders beside them would be left out without a word
        raise ValueError(
            f"data.root {str(root)!r} holds split folders ({', '.join(f'{d.name}/' for d in found.values())}) and, "
            f"beside them, {len(beside)} folder(s) of data files that no split reads: {shortened(beside)}. Files are "
            f"read from <root>/<split>/<class>/, or from <root>/<class>/ where no split folder holds folders: put "
            f"those class folders into the split folders; or, if a class of yours is named like a split "
            f"({sorted(SPLIT_NAMES)}), rename it"
        )
    return found


def _data_file(path: Path, suffixes: tuple[str, ...]) -> bool:
    """Whether `path` is a data file: a file, not hidden, named with one of `suffixes` (any letter case)."""
    return path.is_file() and not hidden(path.name) and path.name.lower().endswith(suffixes)


def _holds(folder: Path, suffixes: tuple[str, ...]) -> bool:
    """Whether `folder` holds a data file (`_data_file`) itself or one folder down (not a hidden one)."""
    try:
        for entry in folder.iterdir():
            if _data_file(entry, suffixes) or (
                entry.is_dir() and not hidden(entry.name) and any(_data_file(f, suffixes) for f in entry.iterdir())
            ):
                return True
    except OSError:  # a folder this user may not read (lost+found): nothing of it is read
        return False
    return False


def say_loose_files(root: Path, split_dirs: dict[str, Path], suffixes: tuple[str, ...], what: str) -> None:
    """Warn about the data files (`_data_file`; `what`: "image", "clip") lying in `root` itself or in a split folder
    itself (`split_dirs`, of `split_folders`; a root of class folders may stand as its train split), outside every
    class folder: no class reads them."""
    places = dict.fromkeys([root, *split_dirs.values()])
    loose = sorted(str(p.relative_to(root)) for place in places for p in place.iterdir() if _data_file(p, suffixes))
    if loose:
        home = root / "<split>" if any(folder != root for folder in split_dirs.values()) else root
        log.warning("data: %d %s(s) lie outside the class folders, so no class reads them: %s; a class's %ss go in "
                    "%s/<class>/", len(loose), what, shortened(loose, 5), what, home)  # fmt: skip


def require_train_split(root: Path, split_dirs: dict[str, Path], what: str) -> None:
    """ValueError when `root` holds split folders (`split_folders`) but none for training: they would be read as
    the classes. `what`: the files the train folder holds ("images", "clips"), for the message."""
    if split_dirs and "train" not in split_dirs:
        found = ", ".join(f"{d.name}/ ({s})" for s, d in split_dirs.items())
        raise ValueError(
            f"data.root {str(root)!r} holds split folders ({found}) but no train split: name the folder of the "
            f"training {what} train/ (or training/), beside them; valid split names: {sorted(SPLIT_NAMES)}"
        )


def refuse_one_class(root: Path, classes: list[str]) -> None:
    """Raise when `root` holds one class folder: one that itself holds two or more folders is `data.root` given one
    level above the class folders (`clips/audio/<class>/`), which would train one class on every file; any other
    is data of one class, which a classifier cannot learn (the error came from the model, naming no folder)."""
    if len(classes) != 1:
        return
    inner = class_folders(root / classes[0])
    if len(inner) > 1:
        raise ValueError(
            f"data.root: {root} has one class folder, {classes[0]}, which holds folders itself ({shortened(inner)}): "
            f"classes are the folders right under data.root, and it takes two or more; did you mean "
            f"data.root={root / classes[0]}?"
        )
    raise ValueError(
        f"data.root: {root} has one class folder, {classes[0]}: classification needs two or more classes, one "
        f"folder each ({root}/<class>/...)"
    )


def class_folders(folder: Path) -> list[str]:
    """The class folder names under `folder`: its `data_folders` not named _* (Speech Commands'
    `_background_noise_`)."""
    return [p.name for p in data_folders(folder) if p.name[0] != "_"]
