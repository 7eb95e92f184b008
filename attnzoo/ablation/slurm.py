"""`attnzoo ablate --launcher slurm`: every run of an ablation as its own SLURM batch job.

Each run gets a job script, `<out>/slurm/<variant id>.sbatch`, submitted with `sbatch --parsable`. The script runs
the routine every launcher runs (`attnzoo.ablation.job.run_one`, as `python -m attnzoo.ablation.job`), which
runs `python -m attnzoo.fit` in the run directory and records it, as a local run. SLURM's own log of the job is
`<out>/slurm/<variant id>-<job id>.out` (the run directory is cleared when the run starts).

The submitting `ablate` then waits: every `poll_seconds` it lists the user's jobs (`squeue`), and a run has ended
when its job left the queue (or recorded ok / failed). A job that left the queue without recording a result
(cancelled, past its time limit, its node failed) is recorded as failed, naming the job and its log, so it runs
again next time. The job ids are kept in `<out>/slurm/jobs.json`: started again, `ablate` waits for the runs whose
job is still queued instead of submitting them twice. The ablation directory must be on a filesystem the nodes
share, and the nodes must see the same Python environment (the scripts call this `sys.executable`).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..util.files import write_json, write_text
from ..util.names import shortened
from .job import PACKAGE_ROOT, read_record
from .runner import Planned, check_gpus, fit_command, status

log = logging.getLogger("attnzoo")
TERMINAL = ("ok", "failed")  # what a job records when its run ended on its own
POLL_SECONDS = 30.0  # how often ablate looks at the queue
# how long a job may be out of the queue before its run's record is read as final (a shared filesystem can show
# another node's writes late)
GRACE_SECONDS = 90.0
CANCELLED_GRACE = 10.0  # the same for a job ablate cancelled (Ctrl-C): its run records interrupted, or stays as it was
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
# what sbatch's reading of an #SBATCH line takes apart: it splits at whitespace, strips quotes (one unmatched is an
# error), ends the line at '#', reads '\' as an escape and '%' as a filename pattern
SBATCH_UNSAFE = r"[\s'\"#\\%]"
# the #SBATCH options the launcher writes itself, and the ablate option that sets each
OWN = {"job-name": None, "output": None, "error": None, "chdir": None, "requeue": None, "ntasks": None,
       "ntasks-per-node": "--gpus-per-run", "nodes": None, "cpus-per-task": "--cpus-per-run",
       "gres": "--gpus-per-run", "gpus": "--gpus-per-run", "partition": "--slurm-partition",
       "time": "--slurm-time", "signal": None}  # fmt: skip


class SlurmLauncher:
    """Submits each run as a SLURM batch job and (unless `wait=False`) waits for them all to end.

    Args:
        partition: `#SBATCH --partition` (default: the cluster's).
        time: `#SBATCH --time`, the limit of each run (e.g. 2:00:00; default: the partition's).
        cpus_per_run: `--cpus-per-task` of each run (and its OMP_NUM_THREADS).
        gpus_per_run: GPUs of each run (`--gres=gpu:N`); more than one runs fit with `srun`, one task per GPU
            (`--ntasks-per-node=N`, as Lightning expects with trainer.devices=N).
        options: more `#SBATCH` options, each "key=value" or "key" (e.g. "account=proj", "exclusive").
        wait: wait for the jobs and record how each ended; False submits and returns.
        poll_seconds: how often to look at the queue (default POLL_SECONDS).
        grace_seconds: how long a job may be out of the queue before its record is read as final (GRACE_SECONDS).
    """

    name = "slurm"

    def __init__(
        self,
        *,
        partition: str | None = None,
        time: str | None = None,
        cpus_per_run: int = 1,
        gpus_per_run: int = 0,
        options: Sequence[str] = (),
        wait: bool = True,
        poll_seconds: float | None = None,
        grace_seconds: float | None = None,
    ) -> None:
        if cpus_per_run < 1 or gpus_per_run < 0:
            raise ConfigError(f"--cpus-per-run ({cpus_per_run}) must be >= 1 and --gpus-per-run ({gpus_per_run}) >= 0")
        for flag, value in (("--slurm-partition", partition), ("--slurm-time", time)):
            _one_line(flag, value)
            _one_word(flag, value)
        self.partition, self.time = partition, time
        self.cpus_per_run, self.gpus_per_run = cpus_per_run, gpus_per_run
        self.options = [_option(o) for o in options]
        self.wait = wait
        self.poll_seconds = POLL_SECONDS if poll_seconds is None else poll_seconds
        self.grace_seconds = GRACE_SECONDS if grace_seconds is None else grace_seconds
        self._level = 0  # 0 running, 1 asked to stop (cancel the jobs), 2 asked again (stop waiting)

    def script(self, configs: Sequence[str | Path], out: Path, run: Planned) -> str:
        """The job script of `run` (paths made absolute)."""
        out, run = out.resolve(), replace(run, run_dir=run.run_dir.resolve())
        for what, path in (("the ablation directory (--out)", out), ("the working directory", Path.cwd())):
            if re.search(SBATCH_UNSAFE, str(path)):
                raise ConfigError(f"--launcher slurm: {what} {str(path)!r} has a space, a quote, '#', '\\' or '%', "
                                  "which #SBATCH paths cannot hold")  # fmt: skip
        gpus = self.gpus_per_run
        lines = [
            "#!/bin/bash",
            f"# run {run.variant.id} of the ablation in {out}",
            "# written by `attnzoo ablate --launcher slurm`, which submits it with `sbatch --parsable <this file>`",
            f"#SBATCH --job-name={out.name}:{run.variant.id}",
            f"#SBATCH --output={out / 'slurm' / run.variant.id}-%j.out",
            f"#SBATCH --chdir={Path.cwd()}",
            "#SBATCH --nodes=1",
            f"#SBATCH --ntasks-per-node={gpus}" if gpus > 1 else "#SBATCH --ntasks=1",
            f"#SBATCH --cpus-per-task={self.cpus_per_run}",
        ]
        lines += [f"#SBATCH --gres=gpu:{gpus}"] if gpus else []
        lines += [f"#SBATCH --partition={self.partition}"] if self.partition else []
        lines += [f"#SBATCH --time={self.time}"] if self.time else []
        lines += ["#SBATCH --requeue"]  # a preempted or failed-node job runs again (its run starts over)
        lines += [f"#SBATCH --{key}" + (f"={value}" if value is not None else "") for key, value in self.options]
        fit = fit_command(configs, run)
        if gpus > 1:
            fit = ["srun", "--kill-on-bad-exit=1", *fit]  # one fit process per GPU; Lightning reads SLURM's ranks
        command = [sys.executable, "-m", "attnzoo.ablation.job", "--launcher", "slurm", "--run-dir",
                   str(run.run_dir), "--variant", run.variant.id, "--config-sha", run.config_sha,
                   "--", *fit]  # fmt: skip
        lines += [
            "",
            f'export PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))}"${{PYTHONPATH:+{os.pathsep}$PYTHONPATH}}"',
            f"export OMP_NUM_THREADS={self.cpus_per_run}",
            "exec " + shlex.join(command),
        ]
        return "\n".join(lines) + "\n"

    def write_scripts(self, configs: Sequence[str | Path], out: Path, runs: Sequence[Planned]) -> list[Path]:
        """Write the job script of every run into `<out>/slurm/`; returns their paths."""
        check_gpus(runs, self.gpus_per_run, "--gpus-per-run")
        on_gpus = [r.variant.id for r in runs if r.devices[0] in ("gpu", "cuda")]
        if on_gpus and not self.gpus_per_run:  # a partition may grant GPUs without --gres; most clusters do not
            log.warning(
                "--launcher slurm: %d run(s) train on a GPU (trainer.accelerator gpu; the first: %s) but their jobs "
                "ask SLURM for none (--gpus-per-run 0): add --gpus-per-run N unless the partition gives its jobs GPUs "
                "by itself", len(on_gpus), on_gpus[0],
            )  # fmt: skip
        scripts = {run.variant.id: self.script(configs, out, run) for run in runs}  # checked before anything is made
        folder = out / "slurm"
        if folder.is_symlink():  # the scripts (and the jobs' logs) would go wherever it points
            raise ConfigError(f"{folder} is a symbolic link (to {os.readlink(folder)}): the job scripts go into the "
                              "ablation directory itself; remove the link")  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for variant, text in scripts.items():
            path = folder / f"{variant}.sbatch"
            write_text(path, text)  # a link there is replaced, not written through
            paths.append(path)
        return paths

    def launch(
        self, configs: Sequence[str | Path], out: Path, runs: list[Planned], done: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        missing = [c for c in ("sbatch", "squeue", "scancel") if shutil.which(c) is None]
        if missing:
            raise ConfigError(f"--launcher slurm: {missing} not found on PATH; run ablate where SLURM jobs are "
                              "submitted from (a login node)")  # fmt: skip
        jobs_file = out / "slurm" / "jobs.json"
        jobs = _read_json(jobs_file)  # variant id -> its last job
        queue = self._queue()
        if queue is None:
            raise ConfigError("--launcher slurm: squeue failed (see above); is the SLURM controller reachable?")
        other = {r.variant.id: jobs[r.variant.id]["job"] for r in runs if (jobs.get(r.variant.id) or {}).get("job")
                 in queue and jobs[r.variant.id].get("config_sha") != r.config_sha}  # fmt: skip
        if other:  # a job of a changed config still queued would write the run directory the new job writes
            raise ConfigError(
                f"SLURM job(s) {_ids(list(other.values()))} of {len(other)} run(s) submitted from another config "
                f"({shortened(list(other))}) are still queued: a new job would share its run directory. Cancel them "
                f"(scancel {' '.join(other.values())}) or wait for them to end, then run ablate again"
            )
        pending: dict[str, str] = {}  # variant id -> job id
        adopted, records = [], []
        for run, script in zip(runs, self.write_scripts(configs, out, runs), strict=True):
            old = jobs.get(run.variant.id) or {}
            if self._level:  # Ctrl-C while submitting: submit no more
                records.append({"variant": run.variant.id, "status": "not started"})
                continue
            if status(run) == "ok":  # its job from before ended since the plan was made
                continue
            if old.get("config_sha") == run.config_sha and old.get("job") in queue:
                pending[run.variant.id] = old["job"]
                adopted.append(old["job"])
                continue
            job = self._submit(script, submitted=list(pending.values()))
            pending[run.variant.id] = job
            jobs[run.variant.id] = {"job": job, "config_sha": run.config_sha, "script": str(script),
                                    "submitted": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
            write_json(jobs_file, jobs)  # after every job: an ablate stopped midway knows what it submitted
        submitted = [j for j in pending.values() if j not in adopted]
        print(f"attnzoo ablate: submitted {len(submitted)} SLURM job(s) {_ids(submitted)}"
              + (f", {len(adopted)} still queued from before {_ids(adopted)}" if adopted else "")
              + f"; scripts and logs in {out / 'slurm'}", file=sys.stderr)  # fmt: skip
        if not self.wait:
            return [{"variant": v, "status": "submitted", "slurm_job_id": j} for v, j in pending.items()]
        return self._wait({r.variant.id: r for r in runs}, pending, out, done) + records

    def stop(self, *, kill: bool = False) -> str:
        self._level = 2 if kill else max(self._level, 1)  # the waiting loop cancels the jobs (not a signal handler)
        if kill:
            return "not waiting for the cancelled jobs to record how they ended"
        return "cancelling the ablation's SLURM jobs (again to stop waiting for them)"

    def _wait(
        self, runs: dict[str, Planned], pending: dict[str, str], out: Path, done: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        gone_since: dict[str, float] = {}
        cancelled = False
        while pending and self._level < 2:
            if self._level and not cancelled:
                _run(["scancel", *pending.values()])
                cancelled = True
            queue = self._queue()
            now = time.monotonic()
            for variant, job in list(pending.items()):
                run_dir = runs[variant].run_dir
                record = read_record(run_dir)
                mine = record.get("slurm_job_id") == job and record.get("config_sha") == runs[variant].config_sha
                if not (mine and record.get("status") in TERMINAL):
                    if queue is None or job in queue:
                        gone_since.pop(variant, None)
                        continue
                    # a job that left the queue may not have written its record yet on a shared filesystem (one
                    # this ablate cancelled has its end to record, not a result: it gets CANCELLED_GRACE)
                    grace = min(self.grace_seconds, CANCELLED_GRACE) if cancelled else self.grace_seconds
                    if now - gone_since.setdefault(variant, now) < grace:
                        continue
                    record = self._ended_early(out, variant, job, record if mine else {}, runs[variant])
                del pending[variant]
                records.append(record)
                done(record)
            level, until = self._level, time.monotonic() + (min(self.poll_seconds, 2.0) if cancelled else
                                                             self.poll_seconds)  # fmt: skip
            while pending and self._level == level and time.monotonic() < until:
                time.sleep(min(0.5, self.poll_seconds))  # a signal's stop() ends the wait early
        records += [{"variant": v, "status": "not started", "slurm_job_id": j} for v, j in pending.items()]
        return records

    def _ended_early(self, out: Path, variant: str, job: str, record: dict[str, Any], run: Planned) -> dict[str, Any]:
        """The record of a run whose job left the queue without recording ok or failed."""
        if self._level:  # cancelled by this ablate: interrupted if it had started, else never started
            if record.get("status") in ("interrupted", "running"):
                return {**record, "status": "interrupted"}
            return {"variant": variant, "status": "not started"}
        log_file = out / "slurm" / f"{variant}-{job}.out"
        tail = log_file.read_text(errors="replace").splitlines()[-20:] if log_file.is_file() else []
        record = {**record, "variant": variant, "config_sha": run.config_sha, "slurm_job_id": job, "status": "failed",
                  "error": f"SLURM job {job} ended before its run did (a time limit, scancel, a node failure; see "
                           f"{log_file})", "stderr_tail": tail}  # fmt: skip
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run.run_dir / "ablate.json", record)
        return record

    def _submit(self, script: Path, *, submitted: list[str]) -> str:
        result = _run(["sbatch", "--parsable", str(script)])
        job = result.stdout.strip().split(";")[0] if result.returncode == 0 else ""
        if not job.isdigit():
            left = f"; the jobs submitted so far stay queued: {_ids(submitted)}" if submitted else ""
            raise ConfigError(f"sbatch rejected {script} (exit {result.returncode}): "
                              f"{(result.stderr or result.stdout).strip()}{left}")  # fmt: skip
        return job

    def _queue(self) -> set[str] | None:
        """The ids of this user's jobs in the queue (pending, running, completing), or None when squeue failed."""
        result = _run(["squeue", "--noheader", "--user", getpass.getuser(), "--format", "%i"])
        if result.returncode != 0:
            log.warning("squeue failed (exit %d): %s", result.returncode, result.stderr.strip())
            return None
        return {line.strip() for line in result.stdout.splitlines() if line.strip()}


def _one_line(flag: str, value: str | None) -> None:
    """ConfigError for a value with a newline or another control character (it would add lines to the job script)."""
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(f"{flag} {value!r}: a newline or another control character would write more lines into "
                          "the job script; give a one-line value")  # fmt: skip


def _one_word(flag: str, value: str | None) -> None:
    """ConfigError for a value sbatch would read otherwise in an #SBATCH line (%j and the like are its patterns)."""
    if value is not None and re.search(SBATCH_UNSAFE.replace("%", ""), value):
        raise ConfigError(f"{flag} {value!r}: sbatch reads an #SBATCH line word by word, so a space, a quote, '#' or "
                          "'\\' in it would reach sbatch as something else; give a value without them")  # fmt: skip


def _option(text: str) -> tuple[str, str | None]:
    _one_line("--slurm-option", text)
    key, eq, value = text.removeprefix("--").partition("=")
    if not _KEY.match(key):
        raise ConfigError(f"--slurm-option {text!r}: expected KEY=VALUE or KEY, a long sbatch option without its "
                          "dashes (e.g. account=myproject, qos=high, exclusive)")  # fmt: skip
    if key == "signal":
        raise ConfigError(f"--slurm-option {text!r}: ablate's jobs take no warning signal; at its time limit a run "
                          "is stopped and recorded as failed (give it more --slurm-time); a job SLURM requeues "
                          "(preemption, a node failure) continues its run from its last checkpoint")  # fmt: skip
    if key in OWN:
        instead = f"use {OWN[key]}" if OWN[key] else "ablate sets it itself"
        raise ConfigError(f"--slurm-option {text!r}: {instead}")
    _one_word("--slurm-option", text)
    return key, value if eq else None


def _ids(jobs: Sequence[str]) -> str:
    return f"({', '.join(jobs)})" if len(jobs) <= 8 else f"({jobs[0]} ... {jobs[-1]})"


def _run(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(command, 1, "", str(err))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}
