"""`ablate --launcher slurm|ray`: the same run directories, records, resume and report as the local launcher.

SLURM: a fake `sbatch` / `squeue` / `scancel` on PATH (`sbatch` runs the job script with bash in the background, as
a node would; `squeue` lists the jobs still alive; `scancel` sends SIGTERM to a job's processes). Ray: a real local
Ray instance with 2 CPUs.
"""

import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import attnzoo.ablation.runner as runner
import attnzoo.ablation.slurm as slurm
from attnzoo.ablate import main
from attnzoo.ablation.job import run_one
from attnzoo.ablation.ray_tune import RayLauncher
from attnzoo.ablation.runner import ablate
from attnzoo.ablation.slurm import SlurmLauncher
from tests.helpers import VIT
from tests.helpers.ablation import FAKE_FIT, SLOW_FIT, write_grid

ROOT = Path(__file__).resolve().parent.parent
AXES = {"model.attention.backend": ["eager", "sdpa"]}  # with FAKE_FIT: eager fails, sdpa is ok

_SBATCH = """
import os, re, subprocess, sys
from pathlib import Path
state = Path(os.environ["FAKE_SLURM"])
script = Path(sys.argv[-1])
with open(state / "sbatch.log", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
job = str(100 + len((state / "sbatch.log").read_text().splitlines()))
text = script.read_text()
out = re.search(r"^#SBATCH --output=(.*)$", text, re.M).group(1).replace("%j", job)
chdir = re.search(r"^#SBATCH --chdir=(.*)$", text, re.M).group(1)
proc = subprocess.Popen(["bash", str(script)], stdout=open(out, "w"), stderr=subprocess.STDOUT, cwd=chdir,
                        env={**os.environ, "SLURM_JOB_ID": job}, start_new_session=True)
(state / f"{job}.pid").write_text(str(proc.pid))
print(job)
"""
_SQUEUE = """
import os
from pathlib import Path
state = Path(os.environ["FAKE_SLURM"])
with open(state / "squeue.log", "a") as f:
    f.write("squeue\\n")
for path in sorted(state.glob("*.pid")):
    try:  # alive, and not a zombie nobody reaped yet
        if Path(f"/proc/{path.read_text()}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            print(path.stem)
    except OSError:
        pass
"""
_SCANCEL = """
import os, signal, sys
from pathlib import Path
state = Path(os.environ["FAKE_SLURM"])
for job in sys.argv[1:]:
    with open(state / "scancel.log", "a") as f:
        f.write(job + "\\n")
    try:
        os.killpg(int((state / f"{job}.pid").read_text()), signal.SIGTERM)  # every process of the job, as SLURM does
    except ProcessLookupError:
        pass
"""
# a fit that waits for the file $GO, then ends ok
_WAITING_FIT = """
import json, os, sys, time
from pathlib import Path
args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.05)
(run_dir / "summary.json").write_text(json.dumps({"test": {"test/acc": 0.5}, "best": {"path": "x", "val/acc": 0.5}}))
"""
# a fit whose process is killed with its job's run_one before it records anything (a node failure)
_LOST_FIT = "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> Iterator[Path]:
    """A fake SLURM on PATH; returns its state folder (sbatch.log: one line per submission)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    for name, code in (("sbatch", _SBATCH), ("squeue", _SQUEUE), ("scancel", _SCANCEL)):
        (bin_dir / name).write_text(f"#!{sys.executable}\n{code}")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(state))
    yield state
    for pid_file in state.glob("*.pid"):  # a test that failed midway leaves no job running
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _fake_fit(code: str):
    return lambda configs, run: [sys.executable, "-c", code, *run.overrides, "--run-dir", str(run.run_dir)]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _records(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/ablate.json"))}


def _report(out: Path) -> list[dict[str, str]]:
    """report.csv without what differs from one execution to the next (wall time)."""
    return [{k: v for k, v in row.items() if not k.startswith("wall_s")} for row in _csv(out / "report.csv")]


def _submitted(state: Path, command: str = "sbatch") -> int:
    log = state / f"{command}.log"
    return len(log.read_text().splitlines()) if log.is_file() else 0


def test_a_slurm_ablation_directory_sbatch_cannot_hold_is_refused_before_it_is_made(tmp_path, capsys):
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "with space"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm", "--dry-run"]
    assert main(args) == 2
    assert "has a space, a quote, '#', '\\' or '%', which #SBATCH paths cannot hold" in capsys.readouterr().err
    assert not out.exists()


def test_slurm_scripts_carry_the_options_and_run_the_shared_routine(tmp_path, capsys):
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "out"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm", "--dry-run",
            "--slurm-partition", "gpu", "--slurm-time", "1:30:00", "--cpus-per-run", "4", "--gpus-per-run", "2",
            "--slurm-option", "account=proj", "--slurm-option", "exclusive", "trainer.max_epochs=2"]  # fmt: skip
    # GPUs held by runs that would train on the CPU (the recipes' trainer.accelerator), or on fewer devices
    assert main(args) == 2
    assert "each run holds 2 GPU(s), but variant backend=eager,seed=0 trains on the CPU" in capsys.readouterr().err
    assert main([*args, "trainer.accelerator=gpu"]) == 2
    assert "one fit process per GPU, but variant backend=eager,seed=0 has trainer.devices 1" in capsys.readouterr().err
    assert not (out / "slurm").exists()
    args += ["trainer.accelerator=gpu", "trainer.devices=2", "trainer.strategy=ddp"]
    assert main(args) == 0
    assert "2 job scripts in" in capsys.readouterr().err
    script = (out / "slurm" / "backend=sdpa,seed=0.sbatch").read_text()
    lines = script.splitlines()
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=out:backend=sdpa,seed=0",
        f"#SBATCH --output={out.resolve()}/slurm/backend=sdpa,seed=0-%j.out",
        f"#SBATCH --chdir={Path.cwd()}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=2",  # one fit process per GPU, started by srun, as Lightning expects
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=1:30:00",
        "#SBATCH --requeue",
        "#SBATCH --account=proj",
        "#SBATCH --exclusive",
    ]
    assert lines[0] == "#!/bin/bash" and "export OMP_NUM_THREADS=4" in lines
    run_dir = out.resolve() / "runs" / "backend=sdpa,seed=0"
    command = lines[-1]
    assert command.startswith(
        f"exec {sys.executable} -m attnzoo.ablation.job --launcher slurm --run-dir {shlex.quote(str(run_dir))}"
    )
    fit = f"{sys.executable} -m attnzoo.fit --config {VIT} --run-dir {shlex.quote(str(run_dir))}"
    assert f" -- srun --kill-on-bad-exit=1 {fit}" in command
    assert "trainer.max_epochs=2" in command and "'model.attention.backend=\"sdpa\"'" in command
    assert not (out / "runs").exists() and not (out / "slurm" / "jobs.json").exists()  # a dry run submits nothing

    assert main([*args[:6], "--launcher", "slurm", "--dry-run"]) == 0  # the defaults: one task, 1 CPU, no GPU
    script = (out / "slurm" / "backend=sdpa,seed=0.sbatch").read_text()
    assert "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n#SBATCH --requeue\n" in script
    assert "--gres" not in script and " srun " not in script and "--partition" not in script
    capsys.readouterr()
    assert main([*args[:6], "--launcher", "slurm", "--dry-run", "trainer.accelerator=gpu"]) == 0  # GPUs asked of none
    assert (
        "2 run(s) train on a GPU (trainer.accelerator gpu; the first: backend=eager,seed=0) but their jobs ask "
        "SLURM for none (--gpus-per-run 0)" in capsys.readouterr().err
    )
    # trainer.devices auto or -1 takes every GPU the job holds; a CPU recipe on a Ray cluster with GPUs takes none
    assert main([*args[:6], "--launcher", "slurm", "--dry-run", "--gpus-per-run", "2", "trainer.accelerator=gpu",
                 "trainer.devices=-1"]) == 0  # fmt: skip
    bundle = RayLauncher(num_cpus=2)._bundle
    assert bundle({"CPU": 4, "GPU": 1}, local=True, on_gpu=False)["gpu"] == 0
    assert bundle({"CPU": 4, "GPU": 1}, local=True, on_gpu=True)["gpu"] == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slurm-option", "output=x.log"], "ablate sets it itself"),
        (["--slurm-option", "time=1:00:00"], "use --slurm-time"),
        (["--slurm-option", "a b"], "expected KEY=VALUE or KEY"),
        (["--slurm-option", "signal=USR1@90"], "ablate's jobs take no warning signal"),
        (["--launcher", "local", "--slurm-time", "1:00"], "['--slurm-time'] do not apply to --launcher local"),
        (["--launcher", "slurm", "--jobs", "2"], "['--jobs'] do not apply to --launcher slurm"),
        (["--launcher", "ray", "--no-wait"], "['--no-wait'] do not apply to --launcher ray"),
        (["--launcher", "ray", "--ray-address", "auto", "--ray-cpus", "2"], "--ray-cpus (2) sizes a Ray instance"),
        (["--slurm-partition", "gpu\n#SBATCH --wrap=id"], "a newline or another control character would write"),
        (["--slurm-option", "account=a\nb"], "--slurm-option 'account=a\\nb': a newline or another control"),
        (["--slurm-time", "1:00\r"], "--slurm-time '1:00\\r': a newline"),
        # sbatch splits an #SBATCH line at spaces, strips quotes (an unmatched one is fatal) and ends it at '#'
        (["--slurm-option", "comment=a b"], "--slurm-option 'comment=a b': sbatch reads an #SBATCH line word by"),
        (["--slurm-option", "comment=it's"], "a space, a quote, '#' or '\\' in it"),
        (["--slurm-partition", "gpu#2"], "--slurm-partition 'gpu#2': sbatch reads"),
        (["--out-name", "we'ird"], "has a space, a quote, '#', '\\' or '%', which #SBATCH paths cannot hold"),
    ],
)
def test_launcher_options_that_do_not_fit_stop_before_anything_runs(tmp_path, capsys, extra, message):
    grid = write_grid(tmp_path, AXES)
    launcher = [] if "--launcher" in extra else ["--launcher", "slurm"]
    out, extra = (tmp_path / extra[1], ["--dry-run"]) if extra[0] == "--out-name" else (tmp_path / "out", extra)
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(out), *launcher, *extra]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_slurm_launcher_fills_the_same_run_dirs_and_report_as_local_and_resumes_the_same_way(
    tmp_path, fake_slurm, monkeypatch
):
    monkeypatch.setattr(runner, "fit_command", _fake_fit(FAKE_FIT))
    monkeypatch.setattr(slurm, "fit_command", _fake_fit(FAKE_FIT))
    grid = write_grid(tmp_path, AXES, seeds=(0, 1))
    local = ablate([VIT], grid, tmp_path / "local")
    out = ablate([VIT], grid, tmp_path / "slurm", launcher=SlurmLauncher(poll_seconds=0.1, grace_seconds=0))

    assert _submitted(fake_slurm) == 4
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())
    assert sorted(jobs) == sorted(_records(local)) and sorted(j["job"] for j in jobs.values()) == [
        "101",
        "102",
        "103",
        "104",
    ]
    records, expected = _records(out), _records(local)
    assert {k: r["status"] for k, r in records.items()} == {k: r["status"] for k, r in expected.items()}
    for name, record in records.items():
        assert record["launcher"] == "slurm" and record["slurm_job_id"] == jobs[name]["job"]
        assert record["config_sha"] == expected[name]["config_sha"] and record.get("error") == expected[name].get(
            "error"
        )
        assert (out / "slurm" / f"{name}-{record['slurm_job_id']}.out").is_file()  # SLURM's own log of the job
        assert sorted(p.name for p in (out / "runs" / name).iterdir()) == sorted(
            p.name for p in (local / "runs" / name).iterdir()
        )
    assert _report(out) == _report(local)

    # started again: the failed runs are submitted again (unless --skip-failed), the finished ones never
    ablate([VIT], grid, out, launcher=SlurmLauncher(poll_seconds=0.1, grace_seconds=0), skip_failed=True)
    assert _submitted(fake_slurm) == 4
    ablate([VIT], grid, out, launcher=SlurmLauncher(poll_seconds=0.1, grace_seconds=0))
    assert _submitted(fake_slurm) == 6 and "backend=eager,seed=0.sbatch" in (fake_slurm / "sbatch.log").read_text()
    assert _report(out) == _report(local)


_CONTINUING_FIT = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
print("continued" if (run_dir / "checkpoints" / "last.ckpt").is_file() else "from scratch", file=sys.stderr)
(run_dir / "summary.json").write_text(json.dumps({"test": {"test/acc": 0.5}, "best": {"path": "x", "val/acc": 0.5}}))
"""


@pytest.mark.parametrize("restarts", ["0", "1"])
def test_a_slurm_job_started_again_keeps_the_run_its_first_start_left_for_fit_to_continue(
    tmp_path, monkeypatch, restarts
):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_text("")  # the first start was preempted after a checkpoint
    (run_dir / "stderr.log").write_text("first start\n")
    (run_dir / "ablate.json").write_text(json.dumps({"status": "interrupted", "slurm_job_id": "7", "config_sha": "c"}))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", restarts)
    command = [sys.executable, "-c", _CONTINUING_FIT, "--run-dir", str(run_dir)]
    record = run_one(run_dir, command, variant="v", config_sha="c", launcher="slurm")
    assert record["status"] == "ok"
    stderr = (run_dir / "stderr.log").read_text().splitlines()
    if restarts == "1":  # SLURM started the job again: the run dir is kept, fit finds last.ckpt, the log goes on
        assert stderr == ["first start", "continued"] and record["slurm_restarts"] == 1
    else:  # a new job for this run: from scratch
        assert stderr == ["from scratch"] and "slurm_restarts" not in record
    other = run_one(run_dir, command, variant="v", config_sha="other", launcher="slurm")  # another config: scratch
    assert other["status"] == "ok" and (run_dir / "stderr.log").read_text() == "from scratch\n"


def test_a_run_directory_a_live_fit_still_holds_is_left_as_it_is(tmp_path):
    # ablate killed outright (SIGKILL, the OOM killer) leaves its fit running: the next ablate deleted that live
    # run's directory, and the new fit failed on the files the old one went on writing
    from attnzoo.run.lock import RunLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").write_text("step\n1\n")
    command = [sys.executable, "-c", "print('ran')"]
    with RunLock(run_dir):  # the orphaned fit
        record = run_one(run_dir, command, variant="v", config_sha="c")
    assert record["status"] == "failed" and f"{run_dir} is in use by process {os.getpid()}" in record["error"]
    assert (run_dir / "metrics.csv").read_text() == "step\n1\n" and not (run_dir / "stdout.log").exists()
    run_one(run_dir, command, variant="v", config_sha="c")  # once it ended: from scratch
    assert not (run_dir / "metrics.csv").exists() and (run_dir / "stdout.log").read_text() == "ran\n"


def test_slurm_no_wait_returns_and_the_same_command_waits_for_the_queued_jobs_without_submitting_twice(
    tmp_path, fake_slurm, monkeypatch, capsys
):
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "out"
    monkeypatch.setattr(slurm, "fit_command", _fake_fit(_WAITING_FIT))
    monkeypatch.setattr(slurm, "POLL_SECONDS", 0.1)
    monkeypatch.setenv("GO", str(tmp_path / "go"))
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm"]
    assert main([*args, "--no-wait"]) == 0
    err = capsys.readouterr().err
    assert "submitted 2 SLURM job(s) (101, 102)" in err and "the same command waits for the jobs" in err
    assert _submitted(fake_slurm) == 2 and not (out / ".lock").exists()
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["0", "0"]

    def go() -> None:  # once the second ablate waits for the jobs (its first poll), let them end; not earlier, or
        # a fast job records ok between the second ablate's look at the queue and its message (under load)
        while _submitted(fake_slurm, "squeue") < 3:  # the first ablate's look, the second's look, its first poll
            time.sleep(0.05)
        (tmp_path / "go").write_text("")

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    assert main(args) == 0
    thread.join()
    err = capsys.readouterr().err
    assert "submitted 0 SLURM job(s) (), 2 still queued from before (101, 102)" in err, err
    assert _submitted(fake_slurm) == 2
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["1", "1"]
    assert {r["slurm_job_id"] for r in _records(out).values()} == {"101", "102"}


def test_a_job_of_another_config_still_queued_is_named_and_nothing_is_submitted(
    tmp_path, fake_slurm, monkeypatch, capsys
):
    # a rerun with a changed config submitted a second job for each run while the first was queued: two jobs owning
    # one run directory, the new one deleting what the old one wrote
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "out"
    monkeypatch.setattr(slurm, "fit_command", _fake_fit(_WAITING_FIT))
    monkeypatch.setenv("GO", str(tmp_path / "go"))
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm", "--no-wait"]
    assert main(args) == 0 and _submitted(fake_slurm) == 2
    capsys.readouterr()
    assert main([*args, "model.mlp_ratio=2.0"]) == 2
    err = capsys.readouterr().err
    assert "SLURM job(s) (101, 102) of 2 run(s) submitted from another config" in err and "scancel 101 102" in err
    assert _submitted(fake_slurm) == 2
    (tmp_path / "go").write_text("")  # the queued jobs end


def test_a_slurm_job_that_ends_without_recording_its_run_is_recorded_failed_and_runs_again(
    tmp_path, fake_slurm, monkeypatch
):
    monkeypatch.setattr(slurm, "fit_command", _fake_fit(_LOST_FIT))
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa"]})
    out = ablate([VIT], grid, tmp_path / "out", launcher=SlurmLauncher(poll_seconds=0.1, grace_seconds=0.3))
    (record,) = _records(out).values()
    assert record["status"] == "failed" and record["slurm_job_id"] == "101"
    assert (
        record["error"].startswith("SLURM job 101 ended before its run did")
        and "backend=sdpa,seed=0-101.out" in record["error"]
    )
    assert _csv(out / "report.csv")[0]["runs_failed"] == "1"

    monkeypatch.setattr(slurm, "fit_command", _fake_fit(FAKE_FIT))
    ablate([VIT], grid, out, launcher=SlurmLauncher(poll_seconds=0.1, grace_seconds=0.3))
    assert _submitted(fake_slurm) == 2 and [r["status"] for r in _records(out).values()] == ["ok"]


def test_ctrl_c_cancels_the_slurm_jobs_records_the_runs_interrupted_and_exits_130(
    tmp_path, fake_slurm, monkeypatch, capfd
):
    monkeypatch.setattr(slurm, "fit_command", _fake_fit(SLOW_FIT))
    monkeypatch.setattr(slurm, "POLL_SECONDS", 0.1)
    monkeypatch.setattr(slurm, "GRACE_SECONDS", 300.0)  # a job cancelled by Ctrl-C waited this out (2.5 min)
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "out"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm"]
    pressed = []

    def ctrl_c() -> None:  # once both jobs run, Ctrl-C to ablate (the jobs run elsewhere: scancel reaches them)
        deadline = time.time() + 120
        while len(list(out.glob("runs/*/started"))) < 2 and time.time() < deadline:
            time.sleep(0.05)
        pressed.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=ctrl_c, daemon=True)
    thread.start()
    assert main(args) == 130
    assert time.monotonic() - pressed[0] < slurm.CANCELLED_GRACE + 20
    thread.join()
    err = capfd.readouterr().err
    assert "cancelling the ablation's SLURM jobs" in err and "stopped 2 run(s) in progress" in err, err
    assert sorted((fake_slurm / "scancel.log").read_text().split()) == ["101", "102"]
    assert {r["status"] for r in _records(out).values()} == {"interrupted"}  # each job recorded its run's end
    assert not (out / ".lock").exists()

    monkeypatch.setenv("FAKE_FIT", "fast")
    assert main(args) == 0
    assert "2 runs, 0 finished, 2 to run" in capfd.readouterr().err and _submitted(fake_slurm) == 4
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["1", "1"]


def test_ray_launcher_asks_for_the_extra_when_ray_is_not_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    grid = write_grid(tmp_path, AXES)
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(tmp_path / "out"), "--launcher", "ray"]) == 2
    assert 'pip install "attnzoo[ray]"' in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_ray_launcher_runs_each_run_as_a_trial_like_local(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # Ray sets it for each trial, from its bundle
    monkeypatch.setattr(runner, "fit_command", _fake_fit(FAKE_FIT))
    grid = write_grid(tmp_path, AXES)
    local = ablate([VIT], grid, tmp_path / "local")
    out = ablate([VIT], grid, tmp_path / "ray", launcher=RayLauncher(num_cpus=2))
    records, expected = _records(out), _records(local)
    assert {k: r["status"] for k, r in records.items()} == {
        "backend=eager,seed=0": "failed",
        "backend=sdpa,seed=0": "ok",
    }
    assert {k: r["status"] for k, r in records.items()} == {k: r["status"] for k, r in expected.items()}
    for name, record in records.items():
        assert record["launcher"] == "ray" and record["env"]["OMP_NUM_THREADS"] == "1"  # the bundle's one CPU
        assert record["config_sha"] == expected[name]["config_sha"] and record.get("error") == expected[name].get(
            "error"
        )
    assert _report(out) == _report(local)
    trials = [p.name for p in (out / "ray").glob("*/*") if p.is_dir()]
    assert sorted(trials) == sorted(records)  # Ray's files stay in the ablation directory, one folder per trial


@pytest.mark.slow
def test_ray_and_local_launchers_give_the_same_report_on_a_tiny_vit_grid(tmp_path):
    grid = write_grid(tmp_path, AXES, fixed={"trainer.precision": "32-true", "trainer.num_threads": 1})
    local = ablate([VIT], grid, tmp_path / "local")
    out = ablate([VIT], grid, tmp_path / "ray", launcher=RayLauncher(num_cpus=2))
    assert _records(out).keys() == _records(local).keys()
    assert all(r["status"] == "ok" for r in _records(out).values())
    rows, expected = _report(out), _report(local)
    assert [(r["variant"], r["runs_ok"], r["backends"]) for r in rows] == [
        (r["variant"], r["runs_ok"], r["backends"]) for r in expected
    ]
    for row, other in zip(rows, expected, strict=True):  # one thread each, same seed: the same numbers
        assert float(row["metric_mean"]) == pytest.approx(float(other["metric_mean"]), abs=1e-6), row["variant"]


_RAY_DRIVER = """
import sys
import attnzoo.ablation.runner as runner
fake = sys.argv[1]
runner.fit_command = lambda configs, run: [sys.executable, "-c", fake, *run.overrides, "--run-dir", str(run.run_dir)]
from attnzoo.ablate import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_ctrl_c_stops_the_ray_trials_records_the_runs_interrupted_and_exits_130(tmp_path):
    grid = write_grid(tmp_path, AXES, seeds=(0, 1))
    out = tmp_path / "out"
    command = [sys.executable, "-c", _RAY_DRIVER, SLOW_FIT, "--config", str(VIT), "--grid", str(grid), "--out",
               str(out), "--launcher", "ray", "--ray-cpus", "2"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        while len(list(out.glob("runs/*/started"))) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert len(list(out.glob("runs/*/started"))) == 2, "the first two trials never started their runs"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: SIGINT to the foreground process group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopped 2 run(s) in progress" in err and "none of the 2 queued" in err, err
    assert sorted(r["status"] for r in _records(out).values()) == ["interrupted", "interrupted"]
    assert len(list((out / "runs").iterdir())) == 2 and not (out / ".lock").exists()

    again = subprocess.run(command, env={**env, "FAKE_FIT": "fast"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 runs, 0 finished, 4 to run" in again.stderr
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["2", "2"]


def _ray_init_calls(monkeypatch) -> list[dict]:
    """ray.init replaced by a recorder that stops the launch (ConfigError) before a Ray instance starts."""
    import ray

    from attnzoo.config import ConfigError

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        raise ConfigError("stopped by the test before Ray started")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    return calls


def test_the_ray_instance_ablate_starts_listens_on_localhost_unless_told_otherwise(tmp_path, capsys, monkeypatch):
    from attnzoo.ablation.ray_tune import HOST_ENV

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(HOST_ENV, raising=False)
    calls = _ray_init_calls(monkeypatch)
    args = ["--config", str(VIT), "--grid", str(write_grid(tmp_path, AXES)), "--launcher", "ray"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 2
    assert calls[-1]["_node_ip_address"] == "127.0.0.1" and calls[-1]["address"] is None
    monkeypatch.setenv(HOST_ENV, "10.1.2.3")
    assert main([*args, "--out", str(tmp_path / "b")]) == 2
    assert calls[-1]["_node_ip_address"] == "10.1.2.3"


def test_a_ray_address_where_nothing_answers_is_a_clear_error_at_once(tmp_path, capsys, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    calls = _ray_init_calls(monkeypatch)
    args = [
        "--config",
        str(VIT),
        "--grid",
        str(write_grid(tmp_path, AXES)),
        "--launcher",
        "ray",
        "--out",
        str(tmp_path),
    ]
    started = time.monotonic()
    assert main([*args, "--ray-address", f"127.0.0.1:{port}"]) == 2
    assert time.monotonic() - started < 60 and not calls  # Ray was never asked to connect
    err = capsys.readouterr().err
    assert f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there" in err and "ray start --head" in err
    assert main([*args, "--ray-address", "nonsense"]) == 2
    assert "expected auto, HOST:PORT or ray://HOST:PORT" in capsys.readouterr().err
    # ray:// without Ray Client's package: a traceback of Ray's ValueError and exit status 1 ("a run failed")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a))
    assert main([*args, "--ray-address", f"ray://127.0.0.1:{port}"]) == 2
    assert "connects through Ray Client, which needs pip install 'ray[client]'" in capsys.readouterr().err


def test_reports_and_job_scripts_replace_links_in_the_ablation_directory_never_writing_through(
    tmp_path, capsys, monkeypatch
):
    # a shared ablation directory whose report.md linked to ~/.bashrc had --report-only write its text there
    monkeypatch.setattr(runner, "fit_command", _fake_fit(FAKE_FIT))
    grid = write_grid(tmp_path, AXES)
    out = tmp_path / "out"
    ablate([VIT], grid, out)
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--launcher", "slurm", "--dry-run"]
    assert main(args) == 0
    victims = {name: tmp_path / f"victim_{name}" for name in ("report.md", "report.csv", "runs.csv", "metric.png")}
    for name, victim in victims.items():
        victim.write_text("mine")
        (out / name).unlink()
        (out / name).symlink_to(victim)
    script = out / "slurm" / "backend=sdpa,seed=0.sbatch"
    script.unlink()
    script.symlink_to(tmp_path / "victim_script")
    (tmp_path / "victim_script").write_text("mine")
    assert main(args) == 0
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(out), "--report-only"]) == 0
    assert all(v.read_text() == "mine" for v in [*victims.values(), tmp_path / "victim_script"])
    assert not any((out / name).is_symlink() for name in victims) and not script.is_symlink()
    # a slurm/ folder that is a link would take every script elsewhere
    shutil.rmtree(out / "slurm")
    (tmp_path / "elsewhere").mkdir()
    (out / "slurm").symlink_to(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(args) == 2
    assert "slurm is a symbolic link" in capsys.readouterr().err and not list((tmp_path / "elsewhere").iterdir())


def test_a_run_left_to_an_orphaned_fit_counts_as_failed_for_the_exit_code(tmp_path):
    # the run a live fit of a killed ablation still held was printed "failed", but ablate exited 0: its ablate.json
    # stayed "running", and only "failed" records counted
    from attnzoo.ablation.runner import failed_runs
    from attnzoo.util.files import write_json

    variants = [{"id": v} for v in ("held", "done", "broke")]
    write_json(tmp_path / "ablation.json", {"variants": variants})
    for v, status in (("held", "running"), ("done", "ok"), ("broke", "failed")):
        (tmp_path / "runs" / v).mkdir(parents=True)
        write_json(tmp_path / "runs" / v / "ablate.json", {"variant": v, "status": status})
    write_json(tmp_path / "runs" / "done" / "summary.json", {"finished": True})
    assert failed_runs(tmp_path) == ["held", "broke"]
    write_json(tmp_path / "runs" / "held" / "summary.json", {"finished": True})  # the orphan finished: adopted
    assert failed_runs(tmp_path) == ["broke"]
