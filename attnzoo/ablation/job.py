"""One run of an ablation, wherever it runs: `run_one` runs a planned run's command in its run directory and
records how it ended in `ablate.json`. Every launcher (`attnzoo.ablation.runner`, `.slurm`, `.ray_tune`) runs
each run with it; `python -m attnzoo.ablation.job` is the same routine as a command, for job scripts. This module
imports only the standard library (and `attnzoo.util`, which does too), so a job starts at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.files import write_json

TAIL_LINES = 40  # lines of a failed run's stderr kept in its ablate.json
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# exit codes of a fit stopped by SIGINT/SIGTERM: killed outright, or stopped cleanly by attnzoo.run.signals
INTERRUPTED = {-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}


def finished(run_dir: Path) -> bool:
    """Whether fit wrote the run's final summary.json (one stopped by a signal says "finished": false)."""
    try:
        return bool(json.loads((run_dir / "summary.json").read_text()).get("finished", True))
    except (OSError, json.JSONDecodeError):
        return False


def read_record(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "ablate.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


RUNNING = "running"
POLL_SECONDS = 0.2  # how often a run in progress checks whether it was asked to stop


def run_one(
    run_dir: Path,
    command: Sequence[str],
    *,
    variant: str,
    config_sha: str,
    launcher: str = "local",
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stop: Callable[[], int] = lambda: 0,
) -> dict[str, Any]:
    """Run one planned run in `run_dir` and record it in `run_dir/ablate.json`: the routine every launcher runs,
    wherever it runs it (a thread of `ablate`, a SLURM job, a Ray trial).

    The directory is cleared first, so a run starts from scratch (except in a SLURM job started again whose
    earlier start left the run there: fit continues it). The command's output goes to stdout.log and stderr.log,
    and the record ends as ok, failed (with the error line and the end of stderr) or interrupted.
    `stop()` is polled while the run goes: 1 asks it to stop (SIGTERM: fit saves and exits), 2 kills it; a run
    asked to stop before it starts is not started and its directory is left as it was.

    Args:
        env: variables added to this process's environment (e.g. the GPUs of a slot).
        cwd: the working directory of the command (relative paths in a config are read from there).
    """
    if stop():
        return {"variant": variant, "status": "not started", "wall_seconds": 0.0}
    restarts = _slurm_restarts(run_dir, config_sha)
    if restarts is None and run_dir.exists():
        busy = _in_use(run_dir)
        if busy:  # a fit still at work (its ablate was killed, SIGKILL or the OOM killer): its directory stays
            return {"variant": variant, "status": "failed", "error": busy, "wall_seconds": 0.0}
        shutil.rmtree(run_dir)  # an interrupted or failed attempt: start again from scratch
    run_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "variant": variant,
        "status": RUNNING,
        "config_sha": config_sha,
        "command": list(command),
        "env": dict(env or {}),
        "launcher": launcher,
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if os.environ.get("SLURM_JOB_ID"):
        record["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    if restarts is not None:
        record["slurm_restarts"] = restarts
    write_json(run_dir / "ablate.json", record)
    pythonpath = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": pythonpath, **(env or {})}
    start = time.perf_counter()
    sent = 0  # the stop level already passed on to the process
    mode = "w" if restarts is None else "a"
    with open(run_dir / "stdout.log", mode) as out, open(run_dir / "stderr.log", mode) as err:
        proc = subprocess.Popen(list(command), stdout=out, stderr=err, env=full_env, cwd=cwd)
        try:
            while (code := _wait(proc, POLL_SECONDS)) is None:
                level = stop()
                if level > sent:
                    proc.kill() if level >= 2 else proc.terminate()
                    sent = level
        finally:
            if proc.poll() is None:  # this process is going down (an exception): take the run with it
                proc.kill()
                proc.wait()
    record["wall_seconds"] = time.perf_counter() - start
    record["returncode"] = code
    record["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    tail = (run_dir / "stderr.log").read_text(errors="replace").splitlines()[-TAIL_LINES:]
    if code == 0 and finished(run_dir):
        record["status"] = "ok"
    elif sent or stop() or code in INTERRUPTED or any("KeyboardInterrupt" in t for t in tail):
        record["status"] = "interrupted"  # not a result: runs again next time
    else:
        record.update(status="failed", error=_error_line(tail, code), stderr_tail=tail)
    write_json(run_dir / "ablate.json", record)
    return record


def _in_use(run_dir: Path) -> str | None:
    """What holds the run directory's lock (`attnzoo.run.lock.RunLock`, its `.lock` file): a fit still training
    there; None when no process does (the kernel drops a lock with its process, however that ends)."""
    import errno
    import fcntl

    path = run_dir / ".lock"
    try:
        fd = os.open(path, os.O_RDWR)  # as RunLock opens it: NFS emulates flock with fcntl locks, which need writing
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # no lock to be had: no holder known
            return None
        try:
            who = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            who = {}
        return (
            f"{run_dir} is in use by process {who.get('pid', '?')} on {who.get('host', '?')} (a fit of an earlier "
            "ablate that was killed?): it is left as it is; wait for that process to end, or stop it, then run "
            "ablate again"
        )
    finally:
        os.close(fd)  # releases the lock if this took it
    return None


def _slurm_restarts(run_dir: Path, config_sha: str) -> int | None:
    """How many times SLURM started this job again (requeued it after a preemption or a node failure) when an
    earlier start of the same job left its run in `run_dir`, else None. fit then continues that run from its last
    checkpoint, as any requeued SLURM job does (`attnzoo.run.train`), instead of training it again from scratch."""
    job, restarts = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_RESTART_COUNT", "0")
    record = read_record(run_dir)
    if not job or not restarts.isdigit() or int(restarts) == 0:
        return None
    return int(restarts) if record.get("slurm_job_id") == job and record.get("config_sha") == config_sha else None


def _wait(proc: subprocess.Popen, seconds: float) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _error_line(tail: list[str], code: int) -> str:
    """The most telling line of a failed run's stderr: the last exception or `error:` line."""
    for line in reversed(tail):
        text = line.strip()
        if "Error" in text.split(":")[0] or "error:" in text or text.startswith("Killed"):
            return text
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}" + (f": {tail[-1].strip()}" if tail else "")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m attnzoo.ablation.job --run-dir DIR --variant ID --config-sha SHA [--launcher NAME] -- COMMAND`:
    `run_one` as a command, what a SLURM job script of `attnzoo.ablation.slurm` runs. SIGTERM or SIGINT stops the
    run (fit saves and exits; recorded as interrupted), a second signal kills it. Exit status: 0 ok, 1 failed,
    128 + the signal number when interrupted."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m attnzoo.ablation.job", description=main.__doc__)
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--variant", required=True)
    p.add_argument("--config-sha", required=True)
    p.add_argument("--launcher", default="local")
    p.add_argument("command", nargs="+", help="the run's command, after --")
    args = p.parse_args(argv)
    got: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    record = run_one(args.run_dir, args.command, variant=args.variant, config_sha=args.config_sha,
                     launcher=args.launcher, stop=lambda: min(len(got), 2))  # fmt: skip
    print(f"attnzoo: run {args.variant}: {record['status']} ({args.run_dir})", file=sys.stderr)
    return {"ok": 0, "failed": 1}.get(record["status"], 128 + (got[0] if got else signal.SIGTERM))


if __name__ == "__main__":
    sys.exit(main())
