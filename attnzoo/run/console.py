"""What every command prints: attnzoo's log messages (which process speaks: `attnzoo.run.cluster.is_rank_zero`)."""

from __future__ import annotations

import logging
import sys
from typing import Any


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of each message (not the stream of when it was made)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _rank_zero_info(record: logging.LogRecord) -> bool:
    """INFO lines from global rank 0 only: every DDP process builds the run again and would repeat each of them;
    warnings and errors, which may be one process's own, come from every process."""
    if record.levelno >= logging.WARNING:
        return True
    from .cluster import is_rank_zero

    return is_rank_zero()


def show_log() -> None:
    """Print attnzoo's INFO messages (backend choices, data sizes); Lightning keeps its own handler."""
    logger = logging.getLogger("attnzoo")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        handler.addFilter(_rank_zero_info)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
