"""Rank variables checked against the launcher before a run writes anything: a stale RANK / NODE_RANK / LOCAL_RANK
(set while no torchrun, srun or Lightning launcher started the process) and a rank that is not a number are clear
errors, never a run that writes nothing and exits 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit
from attnzoo.run.cluster import RANK_VARIABLES, check_rank_variables

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"
LAUNCHERS = ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_JOB_NAME", "ATTNZOO_RUN_DIR")


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*RANK_VARIABLES, *LAUNCHERS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (
            {"RANK": "3"},
            r"RANK=3, but this process was not started by torchrun \(nor by srun\).*unset it \(e.g. `env -u RANK",
        ),
        ({"RANK": "0"}, r"RANK=0, but this process was not started by torchrun"),
        ({"NODE_RANK": "1"}, r"NODE_RANK=1, but trainer.num_nodes is 1 .*unset it"),
        ({"LOCAL_RANK": "1"}, r"LOCAL_RANK=1, but neither torchrun nor Lightning's DDP launcher"),
        ({"SLURM_PROCID": "1"}, r"SLURM_PROCID=1, but this process is not a task of a SLURM job.*env -u SLURM_PROCID"),
        ({"RANK": "abc"}, r"RANK='abc' is not a rank \(a whole number >= 0\)"),
        ({"NODE_RANK": "-1"}, r"NODE_RANK='-1' is not a rank"),
        ({"WORLD_SIZE": "0"}, r"WORLD_SIZE='0' is not a process count"),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "RANK": "0"}, r"SLURM gives it rank 1"),
    ],
)
def test_a_stale_or_malformed_rank_is_refused_before_anything_is_written(clean_env, tmp_path, env, match):
    for name, value in env.items():
        clean_env.setenv(name, value)
    cfg = load([VIT], [f"run.dir={tmp_path / 'runs'}", "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match=match):
        fit(cfg)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"NODE_RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},  # what Lightning's launcher leaves in rank 0
        {"LOCAL_RANK": "1", "ATTNZOO_RUN_DIR": "/somewhere"},  # a DDP worker Lightning started
        {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1"},  # node 1 of a 2-node run launched by hand
        {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1"},  # torchrun
        {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "RANK": "1"},  # srun, RANK agreeing
    ],
)
def test_rank_variables_a_launcher_set_are_accepted(clean_env, env):
    for name, value in env.items():
        clean_env.setenv(name, value)
    check_rank_variables(num_nodes=2, devices=2)


@pytest.mark.parametrize("command", ["fit", "evaluate", "viz", "translate", "generate", "baseline", "ablate"])
def test_every_command_says_why_and_exits_2_without_a_traceback(tmp_path, command):
    env = {k: v for k, v in os.environ.items() if k not in (*RANK_VARIABLES, *LAUNCHERS)}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "RANK": "abc"})
    args = ["--config", str(VIT), f"run.dir={tmp_path}"] if command in ("fit", "baseline") else [str(tmp_path)]
    if command == "ablate":
        grid = ROOT / "configs" / "ablations" / "attention.yaml"
        args = ["--config", str(VIT), "--grid", str(grid), "--out", str(tmp_path / "ablation"), "--dry-run"]
    done = subprocess.run([sys.executable, "-m", f"attnzoo.{command}", *args], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"attnzoo {command}: error: the environment variable RANK='abc' is not a rank" in done.stderr
    assert not list(tmp_path.iterdir())


def test_info_lines_come_from_rank_zero_only_and_warnings_from_every_process(clean_env, capsys):
    # every DDP process builds the run again: each of its INFO lines (data sizes, auto values) came out twice
    import logging

    from attnzoo.run import show_log

    show_log()
    log = logging.getLogger("attnzoo")
    clean_env.setenv("LOCAL_RANK", "1")  # a worker of Lightning's DDP launcher
    log.info("data: 10 examples")
    log.warning("rank 1's own trouble")
    clean_env.setenv("LOCAL_RANK", "0")
    log.info("data: 10 examples, rank 0")
    err = capsys.readouterr().err
    assert "rank 1's own trouble" in err and "data: 10 examples, rank 0" in err
    assert "data: 10 examples\n" not in err
