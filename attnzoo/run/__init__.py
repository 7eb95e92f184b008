"""Runs: building one from a config, its directory, training it, loading it back; resume, signals, switches.

Commands (`attnzoo.fit`, `evaluate`, `viz`, `ablate`) are thin layers over this package.
"""

from .build import build, make_trainer
from .cluster import is_rank_zero
from .console import show_log
from .rundir import LoadedRun, load_run, new_run_dir, resume_target, run_checkpoint
from .train import fit

__all__ = [
    "LoadedRun",
    "build",
    "fit",
    "is_rank_zero",
    "load_run",
    "make_trainer",
    "new_run_dir",
    "resume_target",
    "run_checkpoint",
    "show_log",
]
