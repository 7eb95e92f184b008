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


def is_rank_zero() -> bool:
    """Whether this process is global rank 0 (also before Lightning has set up its strategy)."""
    if "RANK" in os.environ:  # torchrun
        return int(os.environ["RANK"]) == 0
    if slurm_job() is not None:  # srun starts every task itself
        return int(os.environ.get("SLURM_PROCID", 0)) == 0
    # Lightning's own launcher: the command on each node (NODE_RANK), its DDP workers (LOCAL_RANK > 0)
    return int(os.environ.get("LOCAL_RANK", 0)) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0


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
