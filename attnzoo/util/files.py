"""Small files written whole: a reader (another process, a later command) sees the old file or the new one, never
half of one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON at `path`, written to a temporary file beside it and renamed over it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
