"""Small files written whole: a reader (another process, a later command) sees the old file or the new one, never
half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# the mode of files written through a temporary file: mkstemp's 0600 would keep them from others who read the run
SHARED_MODE = 0o644
RUN_CONFIG_HEADER = "# attnzoo fit: the run's resolved config\n"  # the first line of the config.yaml a run writes


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new temporary file beside `path` (same suffix: matplotlib reads the format from it) to write, renamed over
    `path` when the block ends: a link at `path` (or at any name beside it) is replaced, never written through, so a
    folder from elsewhere cannot send the write outside it; an error leaves `path` as it was."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")
    os.close(fd)  # a new file, never a link
    try:
        yield Path(tmp)
        os.chmod(tmp, SHARED_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """`text` at `path`, written whole (`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object a file holds (a folder from elsewhere: its reading must not fail with anything but this);
    ValueError saying why not: unreadable, no JSON, nested too deep for the parser, or no object."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError("cannot be read as JSON (RecursionError: nested too deep)") from None
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"cannot be read as JSON ({type(err).__name__}: {str(err)[:200]})") from None
    if not isinstance(value, dict):
        raise ValueError(f"holds no JSON object (a {type(value).__name__})")
    return value


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON at `path`, written whole (`replacing`)."""
    write_text(path, json.dumps(data, indent=2) + "\n")


def written_by_a_run(path: Path) -> bool:
    """Whether `path` is the config.yaml a run wrote (its first line is `RUN_CONFIG_HEADER`)."""
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as f:
            return f.readline() == RUN_CONFIG_HEADER
    except OSError:
        return False


def unfinished(path: Path) -> str | None:
    """Why the file at `path` looks like a copy or a save that did not finish, or None: it is empty, or it starts as a
    zip archive (what torch.save writes) but has no end (a zip archive's directory is its last part)."""
    import zipfile

    if path.stat().st_size == 0:
        return "the file is empty (a copy or a save that did not finish?)"
    with open(path, "rb") as f:
        zip_start = f.read(4) == b"PK\x03\x04"
    if zip_start and not zipfile.is_zipfile(path):
        return (
            "the file is cut short or damaged: it starts as the zip archive torch.save writes, but its end is "
            "missing (a copy or a save that did not finish?)"
        )
    return None


def same_file(a: str | Path, b: str | Path | None) -> bool:
    """Whether `a` and `b` name one file (links and relative paths resolved); False when `b` is None."""
    try:
        return b is not None and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def compressed(path: Path) -> str | None:
    """Why the zip archive at `path` is no file torch.save wrote, or None: an entry of it is compressed (torch.save
    stores each as it is). A compressed entry can expand a thousand times as it is read: a small download taking
    all the memory. None for any other file (safetensors, torch's legacy format)."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as archive:
        packed = next((i for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED), None)
    if packed is None:
        return None
    return (
        f"its entry {packed.filename!r} is compressed ({packed.compress_size} bytes to {packed.file_size}), which "
        "torch.save never writes; it is not read (a compressed entry can expand to fill the memory)"
    )


def runs_in(folder: Path) -> str:
    """For a message about `folder`, which is no run directory: the runs it holds (a `run.dir/run.name` folder, whose
    runs are its timestamped subfolders), newest first; "" when it holds none."""
    try:
        runs = [d for d in folder.iterdir() if (d / "config.yaml").is_file()] if folder.is_dir() else []
    except OSError:
        return ""
    if not runs:
        return ""
    runs.sort(key=lambda d: d.name, reverse=True)  # timestamped names: the newest first
    more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
    return f"; it holds runs: {', '.join(str(d) for d in runs[:3])}{more}: give one of them"


def discard_stdout() -> None:
    """Standard output's reader stopped reading (`| head`: a BrokenPipeError): what Python flushes at exit goes to
    the null device, not into a second error."""
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
