"""Small files written whole: a reader (another process, a later command) sees the old file or the new one, never
half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

# the mode of files written through a temporary file: mkstemp's 0600 would keep them from others who read the run
SHARED_MODE = 0o644


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON at `path`, written to a new temporary file beside it and renamed over it: a link at
    `path` (or at any name beside it) is replaced, never written through, so a folder from elsewhere cannot send the
    write outside it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # a new file, never a link
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2) + "\n")
        os.chmod(tmp, SHARED_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
