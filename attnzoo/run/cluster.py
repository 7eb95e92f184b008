"""The cluster environment a run is launched in, as Lightning detects it, known before Lightning is set up.

Lightning picks torchrun (TorchElastic) first, then SLURM (an `srun` task, or a batch script's single process; not
an interactive allocation, whose job name is `bash` or `interactive`), else starts the DDP processes itself. Under
SLURM the job id names the run directory, so every task of the job, and the job started again after a requeue,
find the same one (`attnzoo.run.rundir.new_run_dir`).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("attnzoo")


def under_torchrun() -> bool:
    """Whether torchrun (TorchElastic) started this process; Lightning prefers it to SLURM."""
    from lightning.fabric.plugins.environments import TorchElasticEnvironment

    return TorchElasticEnvironment.detect()


def slurm_job() -> str | None:
    """The SLURM job this process trains in when Lightning will use its SLURM environment, else None.

    An array task is `<array job id>_<task id>`, as `scontrol` names it.
    """
    # Lightning's own test (SLURMEnvironment.detect), without its warning about srun on machines that have one
    if "SLURM_NTASKS" not in os.environ or os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    if under_torchrun():
        return None
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array is not None and os.environ.get("SLURM_ARRAY_TASK_ID") is not None:
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def slurm_restarts() -> int:
    """How many times SLURM has started this job again (requeued it); 0 on its first start or outside SLURM."""
    if slurm_job() is None:
        return 0
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    except ValueError:
        return 0


RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE", "SLURM_PROCID")
# who sets which rank variable: torchrun all of them, srun SLURM_PROCID (Lightning reads that), Lightning's own launcher
# LOCAL_RANK and NODE_RANK (for its DDP workers; the command on each node of a multi-node run gets NODE_RANK by hand)
STALE_ADVICE = "a leftover of another job or shell? unset it (e.g. `env -u {name} ...`)"


def _rank_variable(name: str) -> int | None:
    """The environment variable `name` as a rank (an int >= 0), None when unset; ValueError for anything else."""
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        rank = int(value)
    except ValueError:
        rank = -1
    if rank < 0 or (name == "WORLD_SIZE" and rank < 1):
        raise ValueError(
            f"the environment variable {name}={value!r} is not a "
            + ("process count (a whole number >= 1)" if name == "WORLD_SIZE" else "rank (a whole number >= 0)")
            + f"; launchers (torchrun, srun, Lightning) set it. A leftover of another job or shell? Unset it (e.g. "
            f"`env -u {name} ...`)"
        )
    return rank


def check_rank_variables(*, num_nodes: int = 1, devices: object = 1) -> None:
    """ValueError for rank variables that no launcher of this process set (a stale `RANK` makes a process believe
    it is not rank 0, so it writes nothing), or that are not whole numbers. Called before anything is written.

    Args:
        num_nodes: `trainer.num_nodes`; `NODE_RANK` must be below it.
        devices: `trainer.devices`; with an int, `LOCAL_RANK` must be below it.
    """
    ranks = {name: _rank_variable(name) for name in RANK_VARIABLES}
    set_by = "torchrun" if under_torchrun() else "srun" if slurm_job() is not None else None
    if set_by == "torchrun":
        return  # torchrun sets every one of them, consistently
    rank = ranks["RANK"]
    if rank is not None and (set_by is None or rank != ranks["SLURM_PROCID"]):
        why = "this process was not started by torchrun" + (
            f" and SLURM gives it rank {ranks['SLURM_PROCID']} (SLURM_PROCID)" if set_by else " (nor by srun)"
        )
        raise ValueError(f"the environment sets RANK={rank}, but {why}; " + STALE_ADVICE.format(name="RANK"))
    task = ranks["SLURM_PROCID"]
    if task and set_by is None:  # Lightning's rank-zero-only writers read it all the same: they would write nothing
        raise ValueError(
            f"the environment sets SLURM_PROCID={task}, but this process is not a task of a SLURM job Lightning runs "
            "in (no SLURM_NTASKS, or an interactive job); as rank "
            f"{task} it would write no metrics; " + STALE_ADVICE.format(name="SLURM_PROCID")
        )
    node = ranks["NODE_RANK"]
    if node is not None and set_by is None and node >= num_nodes:
        raise ValueError(
            f"the environment sets NODE_RANK={node}, but trainer.num_nodes is {num_nodes} (node ranks "
            f"0..{num_nodes - 1}); set trainer.num_nodes for a multi-node run, else "
            + STALE_ADVICE.format(name="NODE_RANK")
        )
    local = ranks["LOCAL_RANK"]
    worker = bool(os.environ.get("ATTNZOO_RUN_DIR"))  # Lightning's DDP workers inherit rank 0's run directory
    if local and set_by is None and not worker:
        raise ValueError(
            f"the environment sets LOCAL_RANK={local}, but neither torchrun nor Lightning's DDP launcher started this "
            f"process; {STALE_ADVICE.format(name='LOCAL_RANK')}"
        )
    if local is not None and isinstance(devices, int) and devices > 0 and local >= devices:
        raise ValueError(f"the environment sets LOCAL_RANK={local}, but trainer.devices is {devices}")


def planned_processes(trainer: Mapping[str, Any]) -> int:
    """The training processes a trainer section starts: `trainer.devices` (a count, a list of indices; `auto` and -1:
    every GPU, one process on the CPU) times `trainer.num_nodes` (a SLURM job's tasks, one per device); under
    torchrun, its WORLD_SIZE."""
    if under_torchrun() and os.environ.get("WORLD_SIZE", "").isdigit():  # the processes torchrun started
        return max(1, int(os.environ["WORLD_SIZE"]))
    devices = trainer.get("devices", "auto")
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, list) or isinstance(devices, str) and "," in devices:
        count = len([d for d in (devices if isinstance(devices, list) else devices.split(",")) if str(d).strip()])
    elif isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        count = devices
    else:  # auto, -1: Lightning's choice of every device of the accelerator
        import torch

        on_cpu = trainer.get("accelerator", "auto") == "cpu" or not torch.cuda.is_available()
        count = 1 if on_cpu else torch.cuda.device_count()
    nodes = trainer.get("num_nodes", 1)
    return max(1, count) * (nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else 1)


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity; macOS has no affinity call: all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def is_rank_zero() -> bool:
    """Whether this process is global rank 0 (also before Lightning has set up its strategy)."""
    if os.environ.get("RANK") is not None:  # torchrun
        return _rank_variable("RANK") == 0
    if slurm_job() is not None:  # srun starts every task itself
        return (_rank_variable("SLURM_PROCID") or 0) == 0
    # Lightning's own launcher: the command on each node (NODE_RANK), its DDP workers (LOCAL_RANK > 0)
    return (_rank_variable("LOCAL_RANK") or 0) == 0 and (_rank_variable("NODE_RANK") or 0) == 0


def requeue(job: str) -> bool:
    """`scontrol requeue <job>`: SLURM starts the job again (the same batch script) once this start has ended."""
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("SLURM job %s: could not run `scontrol requeue %s`: %s", job, job, err)
        return False
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        log.warning(
            "SLURM job %s: `scontrol requeue %s` failed (exit %d)%s",
            job,
            job,
            done.returncode,
            f": {why[-1]}" if why else "",
        )
        return False
    log.info("SLURM job %s requeued: started again, it continues this run from its last checkpoint", job)
    return True
