"""`<run dir>/.lock`: one process at a time trains in a run directory (a new run, a resume, an ablation's run).

The lock is an exclusive `flock` on the file, which the kernel releases when the process ends however it
ends, so a killed process never leaves the directory locked. The file also records who holds it (host, pid,
start time, command): a second process is refused with that record, and a record left behind by a process
that was killed is recognised when the next one takes the lock, and logged. DDP worker processes (ranks > 0)
work in rank 0's directory and take no lock.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import logging
import os
import socket
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..config import ConfigError

log = logging.getLogger("attnzoo")
LOCK_FILE = ".lock"

# entries of a run directory that may be links: checkpoint files are written to a new file renamed over the old
# (a link is replaced, never written through), and `checkpoints -> /scratch/...` is a usual setup on clusters
LINKS_ALLOWED = ("checkpoints",)
RECORD_MAX = 65536  # bytes of a lock's record read at most


class RunLock:
    """Exclusive use of a directory; `acquire()` creates the directory (checking it can be written) if needed.

    Use as a context manager, or `acquire()` ... `release()` (release is safe to call more than once).
    """

    def __init__(
        self, directory: str | Path, *, what: str = "run directory", links: Collection[str] = LINKS_ALLOWED
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.what = what
        self.links = links  # entries of the directory that may be links (`refuse_links`)
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise ConfigError naming the process that holds it."""
        if self._fd is not None:
            return
        make_writable_dir(self.directory, self.what)
        refuse_links(self.directory, self.what, allowed=self.links)
        for _ in range(10):  # a holder may release (and remove the file) between our open and our flock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise ConfigError(
                    f"{self.what} {str(self.directory)!r} is not writable: {err.strerror or err}"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ConfigError(f"{self.what} {self.directory}: cannot lock {self.path}: {err}") from None
                raise ConfigError(self._in_use_message()) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # locked a file its holder removed while releasing: try the new one
                os.close(fd)
                continue
            previous = _read_record(fd)
            if previous:
                log.warning(
                    "%s %s: taking over the lock of process %s on %s (started %s), which ended without releasing "
                    "it (killed?)",
                    self.what,
                    self.directory,
                    previous.get("pid"),
                    previous.get("host"),
                    previous.get("started"),
                )
            try:
                _write_record(fd)
            except OSError as err:  # a full disk, a quota: leave no lock file behind
                self._fd = fd
                self.release()
                raise ConfigError(
                    f"{self.what} {self.directory}: cannot write {self.path}: {err.strerror or err}"
                ) from None
            self._fd = fd
            return
        raise ConfigError(f"{self.what} {self.directory}: could not take {self.path} (it keeps being replaced)")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still holding it: no one else holds this file
        except OSError:
            pass
        os.close(self._fd)  # releases the flock
        self._fd = None

    def _in_use_message(self) -> str:
        try:
            with open(self.path, "rb") as f:
                record = _parsed(f.read(RECORD_MAX))
        except OSError:
            record = {}
        who = f"process {record.get('pid', '?')} on {record.get('host', '?')}"
        since = f", started {record['started']}" if record.get("started") else ""
        command = f": {record['command']}" if record.get("command") else ""
        return (
            f"{self.what} {self.directory} is in use by {who}{since}{command}. Wait for it to finish or stop it; "
            "two processes writing one run would mix their checkpoints and metrics"
        )


def make_writable_dir(directory: Path, what: str = "run directory") -> None:
    """Create `directory` (and its parents); raise ConfigError when it cannot be created or written into."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{what} {str(directory)!r} cannot be created: {err.strerror or err}") from None
    if not directory.is_dir():
        raise ConfigError(f"{what} {str(directory)!r} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(directory)!r} is not writable")


def refuse_links(
    directory: Path,
    what: str = "run directory",
    *,
    entries: Collection[str] | None = None,
    allowed: Collection[str] = LINKS_ALLOWED,
) -> None:
    """Raise ConfigError naming the symbolic links among what attnzoo writes in place in `directory`: its own
    entries (summary.json, metrics.csv, .lock, ...; only `entries` when given; never `allowed`), and everything
    under a folder among them (`viz/`). `directory` itself may be a link.

    A run directory may come from someone else: a link in it (`summary.json -> ~/.bashrc`) would have a command
    write through it, outside the directory. Commands that write into an existing directory in place call this
    first; reading one does not, and files written whole (`attnzoo.util.files.write_json`) replace a link.
    """
    if not directory.is_dir():
        return
    names = [p.name for p in directory.iterdir()] if entries is None else [n for n in entries if n not in allowed]
    links = [directory / n for n in names if n not in allowed and (directory / n).is_symlink()]
    for name in [n for n in names if n not in allowed and (directory / n).is_dir()]:
        for parent, folders, files in os.walk(directory / name):  # does not descend into linked folders
            links += [Path(parent, f) for f in [*folders, *files] if os.path.islink(os.path.join(parent, f))]
    if links:
        shown = ", ".join(f"{link.relative_to(directory)} -> {os.readlink(link)}" for link in sorted(links)[:5])
        more = f" and {len(links) - 5} more" if len(links) > 5 else ""
        raise ConfigError(
            f"{what} {str(directory)!r} holds {len(links)} symbolic link(s): {shown}{more}; attnzoo writes into it "
            "and never through a link that could lead out of it: replace each link by a copy of its file, or remove it"
        )


def _read_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while len(data) < RECORD_MAX and (chunk := os.read(fd, RECORD_MAX - len(data))):
        data += chunk  # a record is a line of JSON: a larger file (a stranger's run's .lock) is read no further
    return _parsed(data)


def _parsed(data: bytes) -> dict[str, Any]:
    """A lock's record, its values as printable text (a stranger's run's .lock could hold terminal escapes, which
    the messages quoting it would send to the terminal)."""
    try:
        record = json.loads(data.decode() or "{}")
    except ValueError:
        return {"pid": "?", "host": "?", "started": "?"}  # a holder killed while writing its record
    if not isinstance(record, dict):
        return {}
    return {key: "".join(c if c.isprintable() else "?" for c in str(value)[:2000]) for key, value in record.items()}


def _write_record(fd: int) -> None:
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:500],
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(record) + "\n").encode())
