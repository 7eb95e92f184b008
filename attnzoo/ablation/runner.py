"""Running an ablation: every variant of a grid planned and validated, run as its own `attnzoo.fit` process
(`--jobs` at a time, or one per GPU group, or by another launcher), each recorded in its run directory by
`attnzoo.ablation.job.run_one`; see `attnzoo.ablate`."""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from omegaconf import OmegaConf

from ..config import ConfigError, load
from ..run.lock import RunLock
from ..util.files import write_json
from ..util.imports import imports_allowed
from .grid import Grid, Variant, inside, load_grid
from .job import RUNNING, finished, read_record, run_one

log = logging.getLogger("attnzoo")
DEFAULTS = ["trainer.enable_progress_bar=false"]  # output goes to log files; the user's overrides can undo it
OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=")  # a key=value word of a run's command (not a path, not a flag)


@dataclass
class Planned:
    variant: Variant
    overrides: list[str]
    config_sha: str  # of the resolved config: a finished run is reused only if it was made from the same config
    run_dir: Path
    devices: tuple[Any, Any] = (None, None)  # its trainer.accelerator and trainer.devices (`check_gpus`)
    # the sha of the config with its paths as typed (before they were made absolute here), and the absolute paths:
    # a finished run of an earlier ablation is reused when its config.yaml names those same files
    typed_sha: str | None = None
    paths: dict[str, Any] | None = None
    # what the run starts from: (model.init_from, model.timm_name, data.tokenizer), or None from scratch
    start: tuple[Any, Any, Any] | None = None


# what an ablation writes into --out beside ablation.json and runs/ (`attnzoo.ablation.report`)
REPORT_FILES = ("report.md", "report.csv", "runs.csv", "metric.png", "metric_vs_throughput.png")


def check_gpus(runs: Sequence[Planned], gpus: int, flag: str) -> None:
    """ConfigError when runs that hold `gpus` GPUs each (a SLURM job's --gres, a Ray trial's bundle) would not train
    on them: a recipe's trainer.accelerator cpu, or fewer trainer.devices than the GPUs of a multi-GPU run."""
    for run in runs if gpus > 0 else ():
        accelerator, devices = run.devices
        if accelerator == "cpu":
            more = f" trainer.devices={gpus} trainer.strategy=ddp" if gpus > 1 else ""
            raise ConfigError(
                f"{flag}: each run holds {gpus} GPU(s), but variant {run.variant.id} trains on the CPU "
                f"(trainer.accelerator 'cpu', the recipes' default): add trainer.accelerator=gpu{more}"
            )
        fewer = len(devices) if isinstance(devices, list) else devices if isinstance(devices, int) else None
        if gpus > 1 and fewer is not None and 0 < fewer < gpus:  # auto and -1 take every GPU the job has
            raise ConfigError(
                f"{flag}: each run holds {gpus} GPUs, one fit process per GPU, but variant {run.variant.id} has "
                f"trainer.devices {devices!r}: add trainer.devices={gpus} trainer.strategy=ddp"
            )


def plan(configs: Sequence[str | Path], grid: Grid, overrides: Sequence[str], out: Path) -> list[Planned]:
    """Every run of the grid, each config validated (an invalid one raises ConfigError naming the variant)."""
    if not grid.axes and grid.seeds is None:
        raise ConfigError(f"grid {grid.path}: nothing to vary: no axes and no seeds (a seeds: list, or --seeds)")
    keys = [o.split("=", 1)[0] for o in overrides]
    if "seed" in keys and grid.seeds is not None:  # each run's own seed= comes after them: it would be dropped
        raise ConfigError(
            f"override {overrides[keys.index('seed')]!r}: the runs take their seeds from the grid's seeds: list (or "
            "--seeds); use --seeds"
        )
    clash = sorted({k for k in keys for axis in grid.keys() if inside(k, axis)})
    if clash:
        raise ConfigError(
            f"overrides {clash} set keys that axes of the grid {grid.path} set again (an axis value replaces all of "
            "its key): vary them in the grid, or change the grid's values"
        )
    from ..run.build import absolute_config_paths

    given_in = {o: f"grid {grid.path}, fixed" for o in grid.fixed_overrides()}
    base = load(configs, [*DEFAULTS, *grid.fixed_overrides(), *overrides], given_in=given_in)
    runs = []
    for variant in grid.variants(default_seed=int(base.tree.get("seed", 0))):
        typed = [*DEFAULTS, *grid.fixed_overrides(), *overrides, *variant.overrides]
        where = {**given_in, **dict.fromkeys(variant.overrides, "the grid's axes")}
        try:
            typed_cfg = load(configs, typed, given_in=where)
            # data paths and model.init_from as the absolute paths they name from here (wherever they were set): a
            # finished run is reused only when it read the same files, and each run's command reads them from anywhere
            paths = absolute_config_paths(typed_cfg)
            fixed = [f"{key}={json.dumps(value)}" for key, value in paths.items()]
            items = [*typed, *fixed]
            where |= {item: typed_cfg.where(key) for item, key in zip(fixed, paths, strict=True)}
            cfg = load(configs, items, given_in=where) if fixed else typed_cfg
        except ConfigError as err:
            recipes = [Path(c).stem for c in configs]
            made_for = (
                f" (the grid is made for the recipes {grid.recipes}; the config is {', '.join(map(str, configs))})"
                if grid.recipes and not set(recipes) & set(grid.recipes) else ""
            )  # fmt: skip
            raise ConfigError(f"grid {grid.path}, variant {variant.id}: {err}{made_for}") from err
        sha = hashlib.sha256(cfg.to_yaml().encode()).hexdigest()[:16]
        typed_sha = hashlib.sha256(typed_cfg.to_yaml().encode()).hexdigest()[:16] if fixed else None
        trainer = cfg.section("trainer")
        devices = (trainer.get("accelerator"), trainer.get("devices"))
        model = cfg.section("model")
        start = (model.get("init_from"), model.get("timm_name"), cfg.section("data").get("tokenizer"))
        runs.append(Planned(variant, items, sha, out / "runs" / variant.id, devices, typed_sha, paths or None,
                            start if start[0] else None))  # fmt: skip
    return runs


def check_starts(configs: Sequence[str | Path], runs: Sequence[Planned]) -> None:
    """Check every run of `runs` (those to run) as fit would before reading its data: a run from scratch with
    `attnzoo.run.build.check_before_data` (a data.tokenizer that names none, a data folder that is not there, a model
    option its builder refuses); one that starts from a checkpoint (`model.init_from`) with
    `attnzoo.run.start.read_start` and `attnzoo.run.start_check.check_start`, reading each checkpoint (with its timm
    name and tokenizer) once (no tokenizer.json, another architecture, a head count or attention kind the weights do
    not fit). Each stops the ablation (or its dry run) before any run begins, not that run after others finished;
    finished runs are not checked (their report is written where their data is gone)."""
    from ..run.build import check_before_data
    from ..run.start import convert_start, read_start
    from ..run.start_check import check_start

    read: dict[tuple[Any, Any, Any], Any] = {}  # run.start -> the converted checkpoint
    level = log.level
    for i, run in enumerate(runs):
        if run.start is None:
            log.setLevel(max(level, logging.WARNING) if i else level)  # what the data module says: once
            try:
                check_before_data(load(configs, run.overrides))
            except ConfigError as err:
                raise ConfigError(f"variant {run.variant.id}: {err}") from err
            finally:
                log.setLevel(level)
            continue
        # what the start chooses is logged for the first variant of each checkpoint; warnings for every one
        log.setLevel(max(level, logging.WARNING) if run.start in read else level)
        try:
            cfg = load(configs, run.overrides)
            if run.start not in read:
                read[run.start] = convert_start(cfg)
            check_start(cfg, read_start(cfg, converted=read[run.start]))
        except ConfigError as err:
            raise ConfigError(f"variant {run.variant.id}: {err}") from err
        finally:
            log.setLevel(level)


def _same_files(run: Planned) -> bool:
    """Whether the run directory's config.yaml reads the files of `run.paths` (an earlier ablation's run, planned
    with the paths as typed: the same config if it read the same files)."""
    from ..config import read_yaml
    from ..run.paths import same_path

    try:
        saved = read_yaml(run.run_dir / "config.yaml", run=True)
    except (ConfigError, OSError, ValueError):
        return False
    for key, value in (run.paths or {}).items():
        node = OmegaConf.select(saved, key)
        node = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node  # a list of files
        if node is None or not (node == value or same_path(key, node, value)):
            return False
    return True


def _changed_data(run_dir: Path) -> list[str]:
    """The data files and folders of a finished run (its config.yaml's) whose fingerprint is not the one it recorded
    (`attnzoo.run.paths.changed_data`)."""
    from ..config import read_yaml
    from ..run.paths import changed_data

    try:
        data = OmegaConf.to_container(read_yaml(run_dir / "config.yaml", run=True), resolve=True).get("data")
    except (ConfigError, OSError, ValueError, AttributeError):
        return []
    return changed_data(run_dir, data) if isinstance(data, dict) else []


def status(run: Planned) -> str:
    """The run's state: ok, failed or missing (never started, or interrupted).

    Raises ConfigError when its directory holds a finished run made from another config (a changed recipe or
    grid); an unfinished or failed one from another config is just run again.
    """
    record = read_record(run.run_dir)
    same = _same_config(run, record)
    if finished(run.run_dir) and record.get("status", "ok") in ("ok", "running"):
        if not same:
            raise _other_config(run, record, "use another --out, or delete that run directory to run it again")
        changed = _changed_data(run.run_dir)
        if changed:  # the same config, other data: its numbers would sit beside runs on the data as it is now
            raise ConfigError(
                f"{run.run_dir} holds a finished run of variant {run.variant.id} made from data that changed since "
                f"({'; '.join(changed)}); use another --out, or delete that run directory to run it again"
            )
        return "ok"  # fit writes summary.json last: it finished, and the ablation stopped before recording it
    return "failed" if record.get("status") == "failed" and same else "missing"


def _same_config(run: Planned, record: dict[str, Any]) -> bool:
    """Whether the run's directory (its `record`) was made from the config planned now (or by an ablation that
    recorded none)."""
    same = record.get("config_sha") in (None, run.config_sha)
    if not same and run.typed_sha is not None and record.get("config_sha") == run.typed_sha:
        same = _same_files(run)  # planned from the paths as typed, by an earlier ablation: the same files?
    return same


def _other_config(run: Planned, record: dict[str, Any], what_to_do: str) -> ConfigError:
    """The error for a finished run made from another config than the one planned now, naming what differs."""
    then = [a for a in record.get("command", []) if OVERRIDE.match(a)]  # its key=value words
    gone, added = [a for a in then if a not in run.overrides], [o for o in run.overrides if o not in then]
    what = (
        f"overrides {gone} then, {added} now"
        if gone or added
        else "the config files, or attnzoo's defaults, changed since"
    )
    return ConfigError(
        f"{run.run_dir} holds a finished run of variant {run.variant.id} made from a different config ({what}); "
        f"{what_to_do}"
    )


def check_reported(runs: Sequence[Planned]) -> None:
    """ConfigError when a finished run of the plan was made from another config (`--report-only` after the grid or
    the overrides changed: its numbers would be reported as the plan's); the data is not checked (a report of runs
    whose data is gone is still theirs)."""
    for run in runs:
        record = read_record(run.run_dir)
        if finished(run.run_dir) and not _same_config(run, record):
            raise _other_config(run, record, "--report-only reports the runs of the grid and overrides they were run "
                                             "with: give those")  # fmt: skip


def fit_command(configs: Sequence[str | Path], run: Planned) -> list[str]:
    args = [a for c in configs for a in ("--config", str(Path(c).resolve()))]
    if imports_allowed():  # the ablation was told the configs may name code: so is each run, wherever it executes
        args.append("--allow-imports")
    return [sys.executable, "-m", "attnzoo.fit", *args, "--run-dir", str(run.run_dir), *run.overrides]


class Launcher(Protocol):
    """Where the runs of an ablation execute; every launcher runs each of them with `run_one`."""

    name: str

    def launch(
        self, configs: Sequence[str | Path], out: Path, runs: list[Planned], done: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        """Run `runs` (each the way `run_one` does), call `done(record)` as each ends, return every record."""
        ...

    def stop(self, *, kill: bool = False) -> str:
        """Called from a signal handler: stop the runs in progress and start no more; says what it did."""
        ...


class Runner:
    """Runs planned runs on this machine, `len(slots)` at a time; each slot adds its environment (e.g. a GPU)."""

    name = "local"

    def __init__(self, configs: Sequence[str | Path], slots: Sequence[dict[str, str]]) -> None:
        self.configs = list(configs)
        self.slots = list(slots) or [{}]
        self._free = list(range(len(self.slots)))
        self._lock = threading.Lock()
        self._active = 0  # runs taken from the queue and not yet recorded
        self._level = 0  # 0 running, 1 stopping (SIGTERM to the runs), 2 killing (SIGKILL)

    def run(self, run: Planned, command: Sequence[str] | None = None) -> dict[str, Any]:
        """Run `run` to its end and record it; a run whose turn comes after `stop()` is not started (its directory
        is left as it was) and returns status "not started"."""
        with self._lock:
            slot = self._free.pop(0)
            self._active += 1
        try:
            return run_one(run.run_dir, list(command or fit_command(self.configs, run)), variant=run.variant.id,
                           config_sha=run.config_sha, env=self.slots[slot], stop=lambda: self._level)  # fmt: skip
        finally:
            with self._lock:
                self._free.append(slot)
                self._active -= 1

    def launch(
        self, configs: Sequence[str | Path], out: Path, runs: list[Planned], done: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        records = []
        with concurrent.futures.ThreadPoolExecutor(len(self.slots)) as pool:
            for future in concurrent.futures.as_completed([pool.submit(self.run, r) for r in runs]):
                records.append(future.result())
                done(records[-1])
        return records

    def stop(self, *, kill: bool = False) -> str:
        """Start no more runs and stop those in progress (SIGTERM: each saves and exits; `kill`: SIGKILL). Their
        directories are recorded as interrupted and run again, from the start, next time."""
        self._level = 2 if kill else max(self._level, 1)  # a plain assignment: safe in a signal handler
        if kill:
            return f"killing {self._active} run(s) in progress"
        return f"stopping {self._active} run(s) in progress, starting no more (again to kill them at once)"


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
    launcher: Launcher | None = None,
    skip_failed: bool = False,
    seeds: Sequence[int] | None = None,
    command_line: str = "",
) -> Path:
    """Run the missing runs of a grid and write the report; returns the ablation directory.

    Args:
        slots: the environments of the runs at a time on this machine (with the default, local, launcher).
        launcher: where the runs execute (`attnzoo.ablation.slurm`, `attnzoo.ablation.ray_tune`); default: on
            this machine, `len(slots)` at a time.

    Raises:
        AblationInterrupted: SIGINT/SIGTERM stopped it (runs in progress stopped and recorded as interrupted,
            queued ones not started, the report written).
    """
    grid = load_grid(grid_path)
    out = Path(out)
    if seeds:
        grid.seeds = list(seeds)
    runs = plan(configs, grid, overrides, out)
    # one ablation at a time in `out`; its runs/ may be a link (each run checks its own directory)
    with RunLock(out, what="ablation directory", links=("runs",)):
        launcher = launcher or Runner(configs, slots)
        return _ablate(configs, grid, grid_path, overrides, out, runs, launcher, skip_failed, command_line)


def reported_runs(configs: Sequence[str | Path], grid: Grid, overrides: Sequence[str], out: Path) -> list[Planned]:
    """The runs `--report-only` covers: those of every seed that ran in `out` (the grid's, and those an earlier
    --seeds ran beyond them), the grid's seeds where none did: a grid seed no command ran is no row of missing runs.
    A `seed=` override of a grid without seeds stays the runs' one seed."""
    if any(o.startswith("seed=") for o in overrides):
        return plan(configs, grid, overrides, out)
    wide = copy.copy(grid)  # a grid without seeds: (None), its runs the recipe's seed
    wide.seeds = sorted(set(grid.seeds or ()) | _stored_seeds(out)) or grid.seeds
    ran = {r.variant.seed for r in plan(configs, wide, overrides, out) if r.run_dir.exists()} - {None}
    wide.seeds = sorted(ran) if ran else grid.seeds
    return plan(configs, wide, overrides, out)


def _stored_seeds(out: Path) -> set[int]:
    """The seeds of the variants the ablation in `out` recorded last (ablation.json), or none."""
    variants = _stored_plan(out).get("variants")
    return {v["seed"] for v in variants if isinstance(v, dict) and isinstance(v.get("seed"), int)} if isinstance(
        variants, list) else set()  # fmt: skip


def _stored_plan(out: Path) -> dict[str, Any]:
    """The ablation.json an earlier ablation left in `out`, or {}."""
    try:
        stored = json.loads((out / "ablation.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def data_axes(grid: Grid) -> list[str]:
    """The labels of the axes that set a `data.*` key (a dataset, data.max_len): the data, so the baseline, differs
    between their values."""
    from .grid import is_named, set_keys

    return [
        grid.labels[axis]
        for axis, values in grid.axes.items()
        if any(k.startswith("data.") for k in (set_keys(values) if is_named(axis) else [axis]))
    ]


def variant_records(runs: Sequence[Planned]) -> list[dict[str, Any]]:
    """The `variants` of ablation.json (what its report covers): id, name, axis values and seed of each run."""
    return [
        {"id": r.variant.id, "name": r.variant.name, "values": r.variant.values, "seed": r.variant.seed} for r in runs
    ]


def _ablate(
    configs: Sequence[str | Path],
    grid: Grid,
    grid_path: str | Path,
    overrides: Sequence[str],
    out: Path,
    runs: list[Planned],
    launcher: Launcher,
    skip_failed: bool,
    command_line: str,
) -> Path:
    from .report import write_report

    info = {
        "command": command_line,
        "configs": [str(c) for c in configs],
        "grid": str(grid_path),
        "overrides": list(overrides),
        "axes": {grid.labels[k]: {"key": k, "values": list(v)} for k, v in grid.axes.items()},
        "metric": grid.metric,
        "mode": grid.mode,
        "variants": variant_records(runs),
        "data_axes": data_axes(grid),  # the report's baseline: one per value of these
    }
    states = {r.variant.id: status(r) for r in runs}  # before ablation.json: a refused plan leaves it as it was
    todo = [
        r for r in runs if states[r.variant.id] == "missing" or states[r.variant.id] == "failed" and not skip_failed
    ]
    check_starts(configs, todo)
    before = _stored_plan(out)
    theirs = [name for name in REPORT_FILES if (out / name).exists()] if not (out / "ablation.json").exists() else []
    if theirs:  # a folder of the user's (no ablation.json: no ablation wrote these)
        raise ConfigError(
            f"--out {out} holds {', '.join(theirs)} that no ablation wrote (a file of yours?): the report would "
            "replace them; give another --out (or a new folder)"
        )
    keys = lambda axes: sorted(a.get("key") for a in axes.values() if isinstance(a, dict))  # noqa: E731
    if isinstance(before.get("axes"), dict) and keys(before["axes"]) != keys(info["axes"]):  # another study
        print(f"attnzoo ablate: {out} held an ablation over other axes ({keys(before['axes'])}, grid "
              f"{before.get('grid')}); its report is replaced by this grid's (the runs of both stay in runs/)",
              file=sys.stderr)  # fmt: skip
    write_json(out / "ablation.json", info)
    recipes = [Path(c).stem for c in configs]
    if todo and grid.recipes and not set(recipes) & set(grid.recipes):  # a config of another name may be one of them
        print(f"attnzoo ablate: warning: the grid {grid_path} is made for the recipes {grid.recipes}, and the config "
              f"is {', '.join(map(str, configs))}"
              + (f": its metric {grid.metric!r} may be one this recipe does not report" if grid.metric else ""),
              file=sys.stderr)  # fmt: skip
    done = sum(s == "ok" for s in states.values())
    print(f"attnzoo ablate: {len(runs)} runs, {done} finished, {len(todo)} to run -> {out}", file=sys.stderr)
    ended, warned = 0, False

    def report(record: dict[str, Any]) -> None:
        nonlocal ended, warned
        if record["status"] in ("not started", "submitted") or stop.signum is not None:
            return
        ended += 1
        extra = f" ({record['error']})" if record["status"] == "failed" else ""
        wall = f" in {record['wall_seconds']:.0f}s" if record.get("wall_seconds") is not None else ""
        print(f"attnzoo ablate: [{ended}/{len(todo)}] {record['variant']}: {record['status']}{wall}{extra}",
              file=sys.stderr)  # fmt: skip
        try:
            write_report(out)
        except ConfigError as err:  # a metric: no run reports: said now, and raised once every run has ended
            if not warned:
                print(f"attnzoo ablate: warning: {err}", file=sys.stderr)
            warned = True

    with _StopOnSignal(launcher) as stop:
        records = launcher.launch(configs, out, todo, report)
    try:
        write_report(out)
    except ConfigError:
        if stop.signum is None:
            raise  # stopped by a signal, the stop is what to say (the metric was warned about above)
    if stop.signum is not None:
        stopped = sorted(r["variant"] for r in records if r["status"] == "interrupted")
        queued = sorted(r["variant"] for r in records if r["status"] == "not started")
        raise AblationInterrupted(signum=stop.signum, out=out, stopped=stopped, not_started=queued)
    return out


class AblationInterrupted(Exception):
    """An ablation stopped by SIGINT/SIGTERM: runs in progress were stopped, queued ones not started."""

    def __init__(self, *, signum: int, out: Path, stopped: list[str], not_started: list[str]) -> None:
        self.signum, self.out, self.stopped, self.not_started = signum, out, stopped, not_started
        super().__init__(
            f"{signal.Signals(signum).name} received: stopped {len(stopped)} run(s) in progress {stopped}, started "
            f"none of the {len(not_started)} queued; the report of the finished runs is in {out / 'report.md'}. "
            "Run the same command again to run the rest"
        )

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _StopOnSignal:
    """While active (in the main thread), SIGINT/SIGTERM stop the launcher instead of raising: the first stops runs
    in progress (SIGTERM to each) and starts no more; a second kills them (SIGKILL). Either way every run is
    recorded before `ablate` returns, so no run directory is left half written."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handler(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            text = f"{name} received: {self.launcher.stop()}"
        else:
            text = f"{name} received again: {self.launcher.stop(kill=True)}"
        os.write(sys.stderr.fileno(), f"attnzoo ablate: {text}\n".encode())  # print() may be mid-write right now


def failed_runs(out: Path) -> list[str]:
    """Variant ids of the ablation in `out` whose last attempt failed, or that did not run because a fit of an
    earlier ablation (killed, its fit left going) still holds the directory: once the launcher has ended, a record
    still "running" without a finished run is one of those."""
    plan_file = out / "ablation.json"
    variants = json.loads(plan_file.read_text()).get("variants", []) if plan_file.is_file() else []
    records = {v["id"]: read_record(out / "runs" / v["id"]) for v in variants}
    return [
        v["id"]
        for v in variants
        if records[v["id"]].get("status") == "failed"
        or records[v["id"]].get("status") == RUNNING
        and not finished(out / "runs" / v["id"])
    ]
