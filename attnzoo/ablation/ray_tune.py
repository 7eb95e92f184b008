"""`attnzoo ablate --launcher ray`: the runs of an ablation as Ray Tune trials, one resource bundle each.

Ray is an optional extra: `pip install "attnzoo[ray]"`. Each run is one trial holding `cpus_per_run` CPUs and
`gpus_per_run` GPUs; Ray starts as many at once as the bundles fit (at most `max_concurrent`). A trial runs the
routine every launcher runs (`attnzoo.ablation.job.run_one`): `python -m attnzoo.fit` as a subprocess in the
run directory, recorded there as a local run, so Lightning never runs inside a Ray worker. Ray's own files (its
experiment state, one folder per trial) go to `<out>/ray/<time>/`.

Without `address`, `ablate` starts a Ray instance on this machine with `num_cpus` CPUs (default: every core) and
stops it at the end; that instance listens on 127.0.0.1 only (set `ATTNZOO_RAY_HOST` to an address of this machine
for other machines to join it). With an address (`auto`, `host:6379`, or `ray://host:10001`) the trials run on that
cluster, whose nodes must share the ablation directory and the Python environment; an address where nothing
answers within `CONNECT_SECONDS` is an error. Ctrl-C (or SIGTERM) asks every trial to stop its run
(fit saves and exits; the run is recorded as interrupted) and the queued trials not to start them, through the
file `<out>/ray/stop`; a second Ctrl-C kills the runs. Started again, the ablation runs what is missing, as local.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import ConfigError
from ..util.files import write_json
from .job import PACKAGE_ROOT, read_record, run_one

if TYPE_CHECKING:
    from .runner import Planned

# Tune's console output (tables of trials) and its SIGINT handler: ablate prints its own progress and handles
# Ctrl-C itself
TUNE_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_SIGINT_HANDLER": "1"}
RECORDED = ("ok", "failed", "interrupted")
HOST_ENV = "ATTNZOO_RAY_HOST"  # the address a Ray instance started here listens on (default 127.0.0.1)
CONNECT_SECONDS = 10.0


def check_address(address: str, timeout: float = CONNECT_SECONDS) -> None:
    """ConfigError unless something answers at a Ray cluster address `host:port` or `ray://host:port` (`auto` is
    left to Ray, which says at once when it finds no cluster on this machine)."""
    import socket

    if address == "auto" or address.startswith("local"):
        return
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray-address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ConfigError(
            f"--ray-address {address}: a ray:// address connects through Ray Client, which needs pip install "
            "'ray[client]' (the [ray] extra installs ray[tune] only); or run ablate on a node of the cluster with "
            "--ray-address auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        why = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise ConfigError(
            f"--ray-address {address}: no Ray cluster answers there ({why} within {timeout:g} s); start one with "
            "`ray start --head` on that machine, or leave --ray-address (and RAY_ADDRESS) out to start one here"
        ) from None


def _trial(config: dict[str, Any]) -> dict[str, Any]:
    """One Tune trial: `run_one` for the run in `config["run"]` (runs in a Ray worker)."""
    spec = config["run"]
    stop_file = Path(spec["stop_file"])
    seen = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS") if k in os.environ}  # set by Ray
    record = run_one(Path(spec["run_dir"]), spec["command"], variant=spec["variant"], config_sha=spec["config_sha"],
                     launcher="ray", env=seen, cwd=spec["cwd"], stop=lambda: _stop_level(stop_file))  # fmt: skip
    return {"status": record["status"]}


def _stop_level(path: Path) -> int:
    """What the ablation asks of its trials: 0 go on, 1 stop (SIGTERM to the run), 2 kill."""
    try:
        return 2 if path.read_text().strip() == "kill" else 1
    except OSError:
        return 0


def import_ray() -> tuple[Any, Any]:
    """(ray, ray.tune), or a ConfigError saying how to install them."""
    try:
        import ray
        from ray import tune
    except ImportError as err:
        raise ConfigError(
            f'--launcher ray needs Ray Tune ({err}); install it with: pip install "attnzoo[ray]"'
        ) from err
    return ray, tune


class RayLauncher:
    """Runs each run as a Ray Tune trial with a bundle of `cpus_per_run` CPUs and `gpus_per_run` GPUs.

    Args:
        address: a running Ray cluster (`auto`, `ray://host:port`); default: start one on this machine.
        num_cpus: CPUs of the Ray instance started here (default: every core); not with `address`.
        gpus_per_run: default 1 when the cluster has GPUs and the runs train on them (trainer.accelerator not cpu),
            else 0.
        max_concurrent: at most this many trials at once (0: as many as the bundles fit).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        cpus_per_run: int = 1,
        gpus_per_run: int | None = None,
        max_concurrent: int = 0,
    ) -> None:
        import_ray()
        joined = address or os.environ.get("RAY_ADDRESS")
        if joined and num_cpus:
            raise ConfigError(f"--ray-cpus ({num_cpus}) sizes a Ray instance started here; with --ray-address "
                              f"(or RAY_ADDRESS) {joined} the cluster has its own")  # fmt: skip
        if cpus_per_run < 1 or (gpus_per_run or 0) < 0 or (num_cpus is not None and num_cpus < 1):
            raise ConfigError(f"--cpus-per-run ({cpus_per_run}) and --ray-cpus ({num_cpus}) must be >= 1, "
                              f"--gpus-per-run ({gpus_per_run}) >= 0")  # fmt: skip
        self.address, self.num_cpus = address, num_cpus
        self.cpus_per_run, self.gpus_per_run, self.max_concurrent = cpus_per_run, gpus_per_run, max_concurrent
        self._stop_file: Path | None = None
        self._level = 0  # 0 running, 1 stopping, 2 killing

    def launch(
        self, configs: Sequence[str | Path], out: Path, runs: list[Planned], done: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        if not runs:
            return []
        from . import runner  # here, not at the top: a Ray worker imports this module for `_trial` alone

        ray, tune = import_ray()
        folder = (out / "ray").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        self._stop_file = folder / "stop"
        self._stop_file.unlink(missing_ok=True)  # left by an ablation stopped before (ablate holds out's lock)
        self._signal_trials()  # a Ctrl-C that came before
        address = self.address or os.environ.get("RAY_ADDRESS")  # ray.init reads RAY_ADDRESS too
        started = not ray.is_initialized()
        if started:
            pythonpath = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
            local = {} if address else {"_node_ip_address": os.environ.get(HOST_ENV) or "127.0.0.1"}
            if address:
                check_address(address)
            try:
                ray.init(address=address, num_cpus=None if address else self.num_cpus or os.cpu_count(),
                         include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **local)  # fmt: skip
            except (ConnectionError, ValueError) as err:  # `auto` with no cluster here, one that went away; ray://
                # without the ray[client] package
                raise ConfigError(f"--ray-address {address}: {str(err).strip().splitlines()[0]}") from None
        try:
            on_gpu = all(r.devices[0] != "cpu" for r in runs)  # a CPU recipe takes no GPU unless one is asked for
            bundle = self._bundle(ray.cluster_resources(), local=started and not address, on_gpu=on_gpu)
            runner.check_gpus(runs, bundle["gpu"], "--gpus-per-run")
            specs = [{"variant": r.variant.id, "run_dir": str(r.run_dir.resolve()), "config_sha": r.config_sha,
                      "command": runner.fit_command(configs, r), "cwd": str(Path.cwd()),
                      "stop_file": str(self._stop_file)} for r in runs]  # fmt: skip
            print(f"attnzoo ablate: {len(runs)} Ray trials, each {bundle}; Ray's files in {folder}", file=sys.stderr)
            progress = _progress_callback(tune, done)
            tuner = tune.Tuner(
                tune.with_resources(_trial, bundle),
                param_space={"run": tune.grid_search(specs)},
                tune_config=tune.TuneConfig(
                    max_concurrent_trials=self.max_concurrent or None,
                    trial_name_creator=lambda t: t.config["run"]["variant"],
                    trial_dirname_creator=lambda t: t.config["run"]["variant"],
                ),
                run_config=tune.RunConfig(name=time.strftime("%Y%m%d-%H%M%S"), storage_path=str(folder), verbose=0,
                                          callbacks=[progress], failure_config=tune.FailureConfig(max_failures=0)),
            )  # fmt: skip
            with _environ(TUNE_ENV):
                tuner.fit()
        finally:
            if started:
                ray.shutdown()
        return [progress.records.get(r.variant.id) or {"variant": r.variant.id, "status": "not started"} for r in runs]

    def _bundle(self, cluster: dict[str, float], *, local: bool, on_gpu: bool = True) -> dict[str, int]:
        gpus = self.gpus_per_run if self.gpus_per_run is not None else int(on_gpu and cluster.get("GPU", 0) > 0)
        bundle = {"cpu": self.cpus_per_run, "gpu": gpus}
        have = {"cpu": cluster.get("CPU", 0), "gpu": cluster.get("GPU", 0)}
        short = [k for k in bundle if bundle[k] > have[k]]
        if short and local:  # a cluster may add nodes (autoscaling); the instance started here will not
            raise ConfigError(f"a run asks for {bundle} (--cpus-per-run, --gpus-per-run) but the Ray instance "
                              f"has {have} (--ray-cpus sets its CPUs)")  # fmt: skip
        return bundle

    def stop(self, *, kill: bool = False) -> str:
        self._level = 2 if kill else max(self._level, 1)
        self._signal_trials()
        if kill:
            return "killing the runs of the Ray trials in progress"
        return "stopping the runs of the Ray trials in progress, starting no more (again to kill them at once)"

    def _signal_trials(self) -> None:
        if self._level and self._stop_file is not None:
            self._stop_file.write_text("kill" if self._level == 2 else "stop")


def _progress_callback(tune: Any, done: Callable[[dict[str, Any]], None]) -> Any:
    """A Tune callback (in the driver) passing each ended trial's record to `done` and keeping it in `.records`."""

    class Progress(tune.Callback):
        def __init__(self) -> None:
            self.records: dict[str, dict[str, Any]] = {}

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            spec = trial.config["run"]
            if (trial.last_result or {}).get("status") == "not started":
                record = {"variant": spec["variant"], "status": "not started"}
            else:
                record = read_record(Path(spec["run_dir"]))
            self._ended(spec, record)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            spec = trial.config["run"]  # the trial itself failed (its worker died, ...): its run did not record
            record = read_record(Path(spec["run_dir"]))
            if record.get("status") not in RECORDED:
                error = trial.get_error()
                text = str(error).strip().splitlines()[-1] if error else "see the trial's error.txt"
                record = {**record, "variant": spec["variant"], "config_sha": spec["config_sha"], "status": "failed",
                          "error": f"Ray trial failed: {text}", "ray_trial_dir": trial.path}  # fmt: skip
                Path(spec["run_dir"]).mkdir(parents=True, exist_ok=True)
                write_json(Path(spec["run_dir"]) / "ablate.json", record)
            self._ended(spec, record)

        def _ended(self, spec: dict[str, Any], record: dict[str, Any]) -> None:
            self.records[spec["variant"]] = record
            done(record)

    return Progress()


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
