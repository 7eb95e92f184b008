"""Running an ablation: every variant of a grid planned and validated, run as its own `attnzoo.fit` process
(`--jobs` at a time, or one per GPU group), each recorded in its run directory; see `attnzoo.ablate`."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, load
from .grid import Grid, Variant, load_grid

log = logging.getLogger("attnzoo")
DEFAULTS = ["trainer.enable_progress_bar=false"]  # output goes to log files; the user's overrides can undo it
TAIL_LINES = 40  # lines of a failed run's stderr kept in its ablate.json
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# exit codes of a fit stopped by SIGINT/SIGTERM: killed outright, or stopped cleanly by attnzoo.run.reliability
INTERRUPTED = {-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}


@dataclass
class Planned:
    variant: Variant
    overrides: list[str]
    config_sha: str  # of the resolved config: a finished run is reused only if it was made from the same config
    run_dir: Path


def plan(configs: Sequence[str | Path], grid: Grid, overrides: Sequence[str], out: Path) -> list[Planned]:
    """Every run of the grid, each config validated (an invalid one raises ConfigError naming the variant)."""
    base = load(configs, [*DEFAULTS, *grid.fixed_overrides(), *overrides])
    clash = sorted(k for k in grid.keys() if any(o.split("=", 1)[0] == k for o in overrides))
    if clash:
        raise ConfigError(f"overrides {clash} set keys that are axes of the grid {grid.path}")
    runs = []
    for variant in grid.variants(default_seed=int(base.data.get("seed", 0))):
        items = [*DEFAULTS, *grid.fixed_overrides(), *overrides, *variant.overrides]
        try:
            cfg = load(configs, items)
        except ConfigError as err:
            raise ConfigError(f"grid {grid.path}, variant {variant.id}: {err}") from err
        sha = hashlib.sha256(cfg.to_yaml().encode()).hexdigest()[:16]
        runs.append(Planned(variant, items, sha, out / "runs" / variant.id))
    return runs


def status(run: Planned) -> str:
    """The run's state: ok, failed or missing (never started, or interrupted).

    Raises ConfigError when its directory holds a finished run made from another config (a changed recipe or
    grid); an unfinished or failed one from another config is just run again.
    """
    record = read_record(run.run_dir)
    same = record.get("config_sha") in (None, run.config_sha)
    if (run.run_dir / "summary.json").is_file() and record.get("status", "ok") in ("ok", "running"):
        if not same:
            raise ConfigError(
                f"{run.run_dir} holds a finished run of variant {run.variant.id} made from a different config; "
                "use another --out, or delete that run directory to run it again"
            )
        return "ok"  # fit writes summary.json last: it finished, and the ablation stopped before recording it
    return "failed" if record.get("status") == "failed" and same else "missing"


def read_record(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "ablate.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def fit_command(configs: Sequence[str | Path], run: Planned) -> list[str]:
    args = [a for c in configs for a in ("--config", str(Path(c).resolve()))]
    return [sys.executable, "-m", "attnzoo.fit", *args, "--run-dir", str(run.run_dir), *run.overrides]


class Runner:
    """Runs planned runs as subprocesses, `len(slots)` at a time; each slot adds its environment (e.g. a GPU)."""

    def __init__(self, configs: Sequence[str | Path], slots: Sequence[dict[str, str]]) -> None:
        self.configs = list(configs)
        self.slots = list(slots) or [{}]
        self._free = list(range(len(self.slots)))
        self._lock = threading.Lock()
        self._active: set[subprocess.Popen] = set()
        self.stopping = False

    def run(self, run: Planned, command: Sequence[str] | None = None) -> dict[str, Any]:
        if self.stopping:
            return {"variant": run.variant.id, "status": "interrupted", "wall_seconds": 0.0}
        with self._lock:
            slot = self._free.pop(0)
        try:
            return self._run(run, list(command or fit_command(self.configs, run)), self.slots[slot])
        finally:
            with self._lock:
                self._free.append(slot)

    def _run(self, run: Planned, command: list[str], slot_env: dict[str, str]) -> dict[str, Any]:
        if run.run_dir.exists():
            shutil.rmtree(run.run_dir)  # an interrupted or failed attempt: start again from scratch
        run.run_dir.mkdir(parents=True)
        record: dict[str, Any] = {
            "variant": run.variant.id,
            "status": "running",
            "config_sha": run.config_sha,
            "command": command,
            "env": slot_env,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        _write_json(run.run_dir / "ablate.json", record)
        pythonpath = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath, **slot_env}
        start = time.perf_counter()
        with open(run.run_dir / "stdout.log", "w") as out, open(run.run_dir / "stderr.log", "w") as err:
            proc = subprocess.Popen(command, stdout=out, stderr=err, env=env)
            with self._lock:
                self._active.add(proc)
            try:
                code = proc.wait()
            finally:
                with self._lock:
                    self._active.discard(proc)
        record["wall_seconds"] = time.perf_counter() - start
        record["returncode"] = code
        record["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        tail = (run.run_dir / "stderr.log").read_text(errors="replace").splitlines()[-TAIL_LINES:]
        if code == 0 and (run.run_dir / "summary.json").is_file():
            record["status"] = "ok"
        elif self.stopping or code in INTERRUPTED or any("KeyboardInterrupt" in t for t in tail):
            record["status"] = "interrupted"  # not a result: runs again next time
        else:
            record.update(status="failed", error=_error_line(tail, code), stderr_tail=tail)
        _write_json(run.run_dir / "ablate.json", record)
        return record

    def stop(self) -> None:
        """Terminate the runs in progress (their dirs stay unfinished and run again next time)."""
        self.stopping = True
        with self._lock:
            for proc in self._active:
                proc.terminate()


def _error_line(tail: list[str], code: int) -> str:
    """The most telling line of a failed run's stderr: the last exception or `error:` line."""
    for line in reversed(tail):
        text = line.strip()
        if "Error" in text.split(":")[0] or "error:" in text or text.startswith("Killed"):
            return text
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}" + (f": {tail[-1].strip()}" if tail else "")


def gpu_slots(gpus: str, per_run: int) -> list[dict[str, str]]:
    """One environment per concurrent run: `CUDA_VISIBLE_DEVICES` groups of `per_run` GPUs, or [{}] for none."""
    if gpus == "none":
        return [{}]
    if gpus == "auto":
        import torch

        count = torch.cuda.device_count()
        if count < 2:
            return [{}]
        ids = [str(i) for i in range(count)]
    else:
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        if not ids or not all(g.isdigit() for g in ids):
            raise ConfigError(f"--gpus: expected auto, none or a comma-separated list of GPU indices, got {gpus!r}")
    if per_run < 1 or per_run > len(ids):
        raise ConfigError(f"--gpus-per-run ({per_run}) must be between 1 and the number of GPUs ({len(ids)})")
    groups = [ids[i : i + per_run] for i in range(0, len(ids) - per_run + 1, per_run)]
    log.info("ablate: %d runs at a time on GPUs %s", len(groups), [",".join(g) for g in groups])
    return [{"CUDA_VISIBLE_DEVICES": ",".join(g)} for g in groups]


def ablate(
    configs: Sequence[str | Path],
    grid_path: str | Path,
    out: str | Path,
    overrides: Sequence[str] = (),
    *,
    slots: Sequence[dict[str, str]] = ({},),
    skip_failed: bool = False,
    seeds: Sequence[int] | None = None,
    command_line: str = "",
) -> Path:
    """Run the missing runs of a grid and write the report; returns the ablation directory."""
    from .report import write_report

    grid = load_grid(grid_path)
    if seeds:
        grid.seeds = list(seeds)
    out = Path(out)
    runs = plan(configs, grid, overrides, out)
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "command": command_line,
        "configs": [str(c) for c in configs],
        "grid": str(grid_path),
        "overrides": list(overrides),
        "axes": {grid.labels[k]: {"key": k, "values": list(v)} for k, v in grid.axes.items()},
        "metric": grid.metric,
        "mode": grid.mode,
        "variants": [{"id": r.variant.id, "name": r.variant.name, "values": r.variant.values,
                      "seed": r.variant.seed} for r in runs],
    }  # fmt: skip
    _write_json(out / "ablation.json", info)
    states = {r.variant.id: status(r) for r in runs}
    todo = [
        r for r in runs if states[r.variant.id] == "missing" or states[r.variant.id] == "failed" and not skip_failed
    ]
    done = sum(s == "ok" for s in states.values())
    print(f"attnzoo ablate: {len(runs)} runs, {done} finished, {len(todo)} to run -> {out}", file=sys.stderr)
    runner = Runner(configs, slots)
    previous = signal.signal(signal.SIGTERM, lambda *_: (runner.stop(), sys.exit(143)))
    try:
        with concurrent.futures.ThreadPoolExecutor(len(runner.slots)) as pool:
            futures = {pool.submit(runner.run, r): r for r in todo}
            for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
                record = future.result()
                extra = f" ({record['error']})" if record["status"] == "failed" else ""
                if record["status"] == "interrupted":
                    continue
                print(
                    f"attnzoo ablate: [{n}/{len(todo)}] {record['variant']}: {record['status']} "
                    f"in {record['wall_seconds']:.0f}s{extra}",
                    file=sys.stderr,
                )
                write_report(out)
    except KeyboardInterrupt:
        runner.stop()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    write_report(out)
    return out
