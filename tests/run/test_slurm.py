"""`fit` in a SLURM job, without SLURM: the job's environment variables and a recording `scontrol` on PATH.

The job id names the run directory, every task agrees on it and on who is rank 0, SIGUSR1 (`#SBATCH --signal`) stops
at the end of a batch with `last.ckpt` saved and requeues the job once, and the same command, started again by SLURM
(`SLURM_RESTART_COUNT`), continues the run in that directory without losing or repeating a metrics row.
"""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.config import ConfigError, load
from attnzoo.run import fit, is_rank_zero, new_run_dir
from attnzoo.run.cluster import slurm_job
from attnzoo.run.signals import SELF_SIGNAL_ENV
from tests.helpers import TINY_RUN as TINY
from tests.helpers import VIT

ROOT = Path(__file__).resolve().parents[2]
QUIET = [*TINY, "run.baseline=false"]  # 2 epochs of 4 batches
JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_LOCALID": "0"}


def _task(rank: int, nodes: int) -> dict[str, str]:
    """What srun sets for task `rank` of a job of `nodes` nodes with one task each."""
    return {**JOB, "SLURM_NTASKS": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_NTASKS_PER_NODE": "1",
            "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "job", "rank_zero"),
    [
        ({**_task(0, 2)}, "4242", True),
        ({**_task(1, 2)}, "4242", False),  # srun sets no RANK: SLURM_PROCID says who is rank 0
        ({**_task(1, 2), "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"}, "4240_2", False),
        ({**_task(1, 2), "SLURM_JOB_NAME": "interactive"}, None, True),  # salloc: Lightning starts the processes
        ({**_task(0, 2), "TORCHELASTIC_RUN_ID": "x", "RANK": "1"}, None, False),  # torchrun inside SLURM wins
    ],
    ids=["task0", "task1", "array", "interactive", "torchrun"],
)
def test_the_slurm_job_names_the_run_dir_and_its_task_id_the_rank(env, job, rank_zero, monkeypatch, tmp_path):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load([VIT], [f"run.dir={tmp_path}"])
    assert slurm_job() == job and is_rank_zero() is rank_zero
    run_dir = new_run_dir(cfg)
    if job is None:
        assert run_dir.parent == tmp_path / "vit" and not run_dir.name.startswith("slurm")
    else:
        assert run_dir == tmp_path / "vit" / f"slurm-{job}"
        assert new_run_dir(cfg) == run_dir  # the same for every task and every start of the job


def _fake_slurm(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `scontrol` appends its arguments to the returned file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return env, calls


def _train_rows(run_dir: Path) -> tuple[list[int], list[str]]:
    """(steps of the train rows, epochs of the validation rows) of metrics.csv."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [int(r["step"]) for r in rows if r["train/loss"]], [r["epoch"] for r in rows if r["val/acc"]]


def test_sigusr1_requeues_the_job_and_the_same_command_started_again_continues_the_run(tmp_path, monkeypatch):
    env, calls = _fake_slurm(tmp_path)
    env.update(_task(0, 1))
    cmd = [sys.executable, "-m", "attnzoo.fit", "--config", str(VIT), *QUIET, f"run.dir={tmp_path / 'runs'}"]
    run_dir = tmp_path / "runs" / "vit" / "slurm-4242"

    at = 5  # mid way through the second epoch
    first = subprocess.run(cmd, env={**env, SELF_SIGNAL_ENV: f"SIGUSR1@{at}"}, capture_output=True, text=True)
    assert first.returncode == 128 + signal.SIGUSR1, first.stderr[-3000:]
    assert "Traceback" not in first.stderr, first.stderr[-3000:]
    assert f"SLURM job 4242 requeued: started again, the same command continues {run_dir}" in first.stderr
    assert calls.read_text() == "requeue 4242\n"  # Lightning's own requeue did not run as well
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == at + 1
    assert not list(run_dir.glob("hpc_ckpt_*")) and not (run_dir / ".lock").exists()
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is False

    again = subprocess.run(cmd, env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"SLURM job 4242 started again (restart 1): continuing its run in {run_dir}" in again.stderr
    assert [p.name for p in run_dir.parent.iterdir()] == ["slurm-4242"]
    assert _train_rows(run_dir) == (list(range(8)), ["0", "1"])  # no row lost or repeated
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True and summary["global_step"] == 8
    assert [r["step"] for r in summary["resumes"]] == [at + 1]
    assert calls.read_text() == "requeue 4242\n"

    # the job started once more after its run finished (requeued by SLURM itself): nothing to train
    for key, value in {**_task(0, 1), "SLURM_RESTART_COUNT": "2"}.items():
        monkeypatch.setenv(key, value)
    cfg = load([VIT], [*QUIET, f"run.dir={tmp_path / 'runs'}"])
    assert fit(cfg) == run_dir
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    # a second run of the same name in the same job (not a restart) is refused, naming the way out
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    with pytest.raises(ConfigError, match=r"already holds a run .*\(each run of SLURM job 4242 needs its own run.name"):
        fit(load([VIT], [*QUIET, f"run.dir={tmp_path / 'runs'}"]))


def test_a_requeued_job_whose_run_stopped_before_its_first_checkpoint_trains_it_again(tmp_path, monkeypatch):
    """With --run-dir (fit's run_dir) too: a requeued job's same command continues the run in it."""
    for key, value in _task(0, 1).items():
        monkeypatch.setenv(key, value)
    run_dir = tmp_path / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("stale: true\n")  # killed during its first epoch: rows, no checkpoint
    (run_dir / "metrics.csv").write_text("epoch,step,train/loss\n0,0,2.3\n0,1,2.2\n")
    cfg = [*QUIET, "trainer.max_epochs=1"]
    with pytest.raises(ConfigError, match="already holds a run"):  # the job's first start: not its run
        fit(load([VIT], cfg), run_dir=run_dir)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert fit(load([VIT], cfg), run_dir=run_dir) == run_dir
    assert _train_rows(run_dir) == ([0, 1, 2, 3], ["0"])  # the stale rows went with the stale run
    assert "stale" not in (run_dir / "config.yaml").read_text() and not (run_dir / "resumes.json").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")  # requeued once more: it finished, nothing to train
    assert fit(load([VIT], cfg), run_dir=run_dir) == run_dir
    assert json.loads((run_dir / "summary.json").read_text()) == summary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_slurm_nodes_stop_together_on_one_nodes_sigusr1_requeue_once_and_continue_the_run(tmp_path):
    """Two srun tasks as two nodes (gloo on CPU): the signal reaches only node 1."""
    env, calls = _fake_slurm(tmp_path)
    cmd = [sys.executable, "-m", "attnzoo.fit", "--config", str(VIT), *QUIET, "data.batch_size=4",
           "trainer.num_nodes=2", "trainer.strategy=ddp", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    run_dir = tmp_path / "runs" / "vit" / "slurm-4242"

    def both(extra: dict[str, str], signalled: dict[str, str]) -> list[subprocess.CompletedProcess]:
        port = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        logs = [tmp_path / f"task{rank}.log" for rank in (0, 1)]  # files: a full pipe would stall a task
        tasks = []
        for rank, log in enumerate(logs):
            with open(log, "w") as out:
                task_env = {**env, **port, **extra, **_task(rank, 2), **(signalled if rank else {})}
                tasks.append(subprocess.Popen(cmd, env=task_env, stdout=out, stderr=subprocess.STDOUT))
        codes = [t.wait(timeout=240) for t in tasks]
        return [subprocess.CompletedProcess(cmd, c, "", log.read_text()) for c, log in zip(codes, logs, strict=True)]

    stopped = both({}, {SELF_SIGNAL_ENV: "SIGUSR1@5"})
    for rank, task in enumerate(stopped):
        assert task.returncode == 128 + signal.SIGUSR1, f"task {rank}:\n{task.stderr[-3000:]}"
        assert f"stopped at step 6, saved {run_dir / 'checkpoints' / 'last.ckpt'}; SLURM job 4242 requeued" in (
            task.stderr
        ), f"task {rank}:\n{task.stderr[-3000:]}"
    assert calls.read_text() == "requeue 4242\n"  # by rank 0 alone
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6

    finished = both({"SLURM_RESTART_COUNT": "1"}, {})
    for rank, task in enumerate(finished):
        assert task.returncode == 0, f"task {rank}:\n{task.stderr[-3000:]}"
    assert [p.name for p in (tmp_path / "runs" / "vit").iterdir()] == ["slurm-4242"]
    assert _train_rows(run_dir) == (list(range(8)), ["0", "1"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 8 and len(summary["resumes"]) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints", "config.yaml", "labels.json", "metrics.csv", "resumes.json", "summary.json"]  # fmt: skip
