"""Run directories: where a new run goes, what `--resume` continues, and loading a finished run for a command.

A run directory `<run.dir>/<run.name>/<timestamp>/` (`.../slurm-<job id>/` in a SLURM job) holds `config.yaml`
(resolved, with derived values), `checkpoints/` (`last.ckpt`, `best.ckpt`), `metrics.csv`, `summary.json`, and what
the DataModule's `save_artifacts(run_dir)` writes (the class names of text, image, audio and text-image data,
`labels.json`; a learned tokenizer, `tokenizer.json`), which `load_run` reads back. Only global rank 0 writes into
it.
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..config import AUTO, Config, ConfigError, dotted_leaves, load, read_yaml
from ..util.files import runs_in, write_json
from .paths import DATA_FILES_RECORD, moved_data, same_path, unlike_recorded
from .paths import gone as gone_files

log = logging.getLogger("attnzoo")
RUN_DIR_ENV = "ATTNZOO_RUN_DIR"  # how DDP worker processes (re-running the command) find rank 0's run dir


def new_run_dir(cfg: Config) -> Path:
    """`<run.dir>/<run.name>/<timestamp>`, or `.../slurm-<job id>` in a SLURM job; DDP workers started by Lightning
    reuse rank 0's through the environment.

    Processes started apart (torchrun on several machines) may each name another timestamp: only rank 0 writes into
    its directory, and the others take its name when training sets up (`GracefulStop.setup`, ModelCheckpoint's).
    A SLURM job's tasks all name the same directory, and so does the job started again after a requeue.
    """
    return _run_dir(cfg, claim=False)[0]


def claim_new_run_dir(cfg: Config) -> tuple[Path, bool]:
    """(`new_run_dir(cfg)`, whether this call created it): a timestamped directory is created here, empty, so a run
    another process starts in the same second takes the next name (`<timestamp>-1`, ...) rather than the same
    directory. A SLURM job's or DDP worker's directory is named as by `new_run_dir` and not created; nor is one
    that cannot be created (the run's lock then refuses it, naming run.dir). `fit` claims on rank 0."""
    return _run_dir(cfg, claim=True)


def _run_dir(cfg: Config, *, claim: bool) -> tuple[Path, bool]:
    from .cluster import slurm_job

    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV]), False
    run = cfg.section("run")
    root = _runs_here(cfg, Path(run.get("dir", "runs")).expanduser())  # Lightning's loggers expand "~" themselves
    name = str(run.get("name", cfg.section("model").get("kind", "run")))
    base = root / name
    if Path(name).is_absolute() or ".." in Path(name).parts or not name.strip() or name.strip() in (".",):
        raise ConfigError(
            f"run.name: {name!r} (set in {cfg.where('run.name')}) must name a directory inside run.dir ({str(root)!r}),"
            " not a path that leaves it; to write elsewhere set run.dir (or give fit --run-dir)"
        )
    job = slurm_job()
    if job is not None:
        return base / f"slurm-{job}", False
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if claim:
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError:  # a file, a dangling link, no permission: the lock names run.dir and why
            return base / stamp, False
    path, n = base / stamp, 1
    while True:
        if claim:
            try:
                path.mkdir()  # atomic: of two processes, one creates it and the other tries the next name
                return path, True
            except FileExistsError:
                pass
            except OSError:
                return path, False
        elif not path.exists():
            return path, False
        path, n = base / f"{stamp}-{n}", n + 1


def _runs_here(cfg: Config, root: Path) -> Path:
    """`root` (run.dir), or `runs` when another run's config.yaml set it (`--config <run>/config.yaml`, which starts
    a new run like it) and that config does not lie inside it: a run from elsewhere records the folder its maker's
    runs went to (/home/them/runs, created with its parents), which is not for it to choose here; the log says so.
    A run of this machine's run.dir keeps it (the new run goes beside it)."""
    from ..config import COMMAND_LINE, is_run_config
    from ..util.files import written_by_a_run

    source = cfg.where("run.dir")
    if source.startswith(COMMAND_LINE) or source == "defaults":
        return root
    config = Path(source)
    if root == Path("runs") or not (is_run_config(config) or written_by_a_run(config)):
        return root
    if config.resolve().is_relative_to(root.resolve()):
        return root
    log.warning("run.dir: %s (set in %s, a run's config.yaml that does not lie in it: a run from elsewhere) is not "
                "used: the new run goes to runs/ (give run.dir=<folder> or --run-dir to choose)",
                root, source)  # fmt: skip
    return Path("runs")


def resume_target(path: str | Path) -> tuple[Path, Path]:
    """(run dir, checkpoint) from a run directory or a checkpoint inside one (`<run>/checkpoints/*.ckpt`)."""
    path = Path(path)
    if path.is_dir():
        ckpt = path / "checkpoints" / "last.ckpt"
        run_dir = path
    elif path.is_file():
        if path.suffix != ".ckpt":
            raise ConfigError(f"--resume: {str(path)!r} is not a checkpoint (.ckpt); give a run directory or one")
        if path.parent.name != "checkpoints":  # the run is the folder above: a file elsewhere names no run
            raise ConfigError(
                f"--resume: {str(path)!r} is not in a run's checkpoints folder (<run>/checkpoints/*.ckpt): give the "
                "run directory, or a checkpoint in it"
            )
        ckpt, run_dir = path, path.parent.parent
    else:
        raise ConfigError(f"--resume: {str(path)!r} is neither a run directory nor a checkpoint file")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"--resume: {str(run_dir)!r} is not a run directory (it has no config.yaml){runs_in(run_dir)}"
        )
    if not ckpt.is_file():
        raise ConfigError(
            f"--resume: {str(run_dir)!r} has no checkpoint to continue from ({str(ckpt)!r} does not exist): the run "
            f"stopped before its first checkpoint. Start it again there with --config "
            f"{shlex.quote(str(run_dir / 'config.yaml'))} --run-dir {shlex.quote(str(run_dir))}"
        )
    return run_dir, ckpt


# what a resumed run may change: its training budget and when it stops early, what it prints and logs, how many
# threads compute it, and what happens after training. Any other change (model, data, task, seed, precision, ...)
# would continue a checkpoint as something it is not, and is refused.
RESUME_MAY_CHANGE = (
    "trainer.max_epochs",
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.log_every_n_steps",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.num_threads",
    "run.test",
    "run.save_every_n_steps",
    "run.early_stopping",
)
RESUMES_FILE = "resumes.json"  # one record per resume of a run; summary.json repeats it
# options added since runs were made, {key: (data kind, value)}: a run's config.yaml without the key is read with the
# value that does what the run did then (translation BLEU of 13a words), and a resume that adds it so changes nothing
ADDED_OPTIONS = {
    "data.bleu_tokenize": (("translation",), "13a"),
    "task.bleu_tokenize": (("translation",), "13a"),
    "data.stratify": (("image", "text"), False),  # a held-out val part drawn over all examples, as then
}


def added_options(cfg: Config) -> dict[str, Any]:
    """{data key of `ADDED_OPTIONS`: its value} for the ones the config (a run's, made before they were) lacks."""
    kind = cfg.section("data").get("kind")
    return {
        key: value
        for key, (of, value) in ADDED_OPTIONS.items()
        if key.startswith("data.") and kind in of and OmegaConf.select(cfg.tree, key) is None
    }


DATA_FILES = ("data.train", "data.val", "data.test", "data.root", "data.csv")  # where the data is read from


def _given(cfg: Config, key: str, old: Any, new: Any) -> bool:
    """Whether the change of `key` from `old` to `new` is named before the build: a data file the command line set
    (not to auto or null, which the build fills), or `model.init_from` wherever it was set, null included (the build
    would read that start, whose tokenizer and sizes are not the run's). Other keys wait for the build: a start may
    set them from its checkpoint (data.max_len cut to its positions)."""
    if key == "model.init_from":
        return not (old in ("<not set>", None) and new in ("<not set>", None))  # either way no start
    return key in DATA_FILES and new not in ("<not set>", AUTO, None) and cfg.typed(key)


def resume_changes(run_dir: Path, cfg: Config, *, given_only: bool = False) -> dict[str, list[Any]]:
    """`{key: [old, new]}` between the run's `config.yaml` and `cfg` (resolved, with what the data derived);
    `given_only`: of the data files set on the command line and `model.init_from` alone (before the build, which
    reads them: another file or start would first show as what the data derives from it, such as the vocabulary's
    size).

    A data file given where it is now, after the one the run read moved away, is no change when it is that file
    (`attnzoo.run.paths.moved_data`: the size and fingerprint the run recorded); it is kept in the result.

    Raises ConfigError naming every changed key outside `RESUME_MAY_CHANGE`, with its old and new value.
    """
    saved = OmegaConf.to_container(read_yaml(run_dir / "config.yaml", run=True), resolve=True)
    old, new = (
        dotted_leaves(saved if isinstance(saved, dict) else {}),
        dotted_leaves(OmegaConf.to_container(cfg.tree, resolve=True)),
    )
    unset = "<not set>"
    kind = old.get("data.kind")
    added = {key: value for key, (of, value) in ADDED_OPTIONS.items() if kind in of}  # as the run did without them
    changes = {
        k: [old.get(k, unset), new.get(k, unset)]
        for k in sorted(old.keys() | new.keys())
        if old.get(k, unset) != new.get(k, unset)
        and not same_path(k, old.get(k), new.get(k))
        and not (k not in old and k in added and new.get(k) == added[k])
        and (not given_only or _given(cfg, k, old.get(k, unset), new.get(k, unset)))
    }
    refused = [k for k in changes if not any(k == a or k.startswith(f"{a}.") for a in RESUME_MAY_CHANGE)]
    moved = [k for k in refused if k in DATA_FILES and moved_data(run_dir, k, *changes[k])]
    for key in moved if not given_only else ():  # said once: the check after the build
        log.info("resume: %s moved: %s -> %s (the size and content fingerprint the run recorded)", key, *changes[key])
    refused = [k for k in refused if k not in moved]
    if refused:
        shown = "; ".join(f"{k}: {changes[k][0]!r} -> {changes[k][1]!r}" for k in refused)
        away = [k for k in refused if k in DATA_FILES and gone_files(changes[k][0])]
        back = " ".join(f"{k}={json.dumps(changes[k][0])}" for k in refused if changes[k][0] != unset and k not in away)
        unlike = {k: what for k in away if (what := unlike_recorded(run_dir, k, changes[k][1])) is not None}
        moved_note = (
            f" The run's {', '.join(away)} is not where it was any more: put it back there, or give it where it is now "
            f"(known again by its size and content where the run recorded them in {DATA_FILES_RECORD})."
            if away
            else ""
        ) + "".join(f" {changes[k][1]} ({k}) is not the data the run trained on: {what}." for k, what in unlike.items())
        started = "model.init_from" in refused  # its config.yaml holds what its start set (tokenizer, sizes)
        start_note = (
            " model.init_from names the weights a new run starts from: a resume continues from the run's own"
            " checkpoint, whose weights came from the run's start."
            if started else ""
        )  # fmt: skip
        new_run = (
            "the recipe it started with and the changes (the run's config.yaml holds what its start set)"
            if started else f"--config {run_dir / 'config.yaml'} and the changes"
        )  # fmt: skip
        raise ConfigError(
            f"--resume: the config differs from the run's {run_dir / 'config.yaml'} in what defines the run: {shown}."
            f"{moved_note}{start_note} A resume may change only {list(RESUME_MAY_CHANGE)}. Resume without these"
            " changes" + (f" (e.g. {back})" if back else "") + f", or start a new run with {new_run}"
        )
    return changes


def record_resume(run_dir: Path, checkpoint: Path, step: int, changes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Append this resume to the run's `resumes.json`; returns every record so far."""
    path = run_dir / RESUMES_FILE
    records = read_resumes(run_dir)
    records.append(
        {
            "time": datetime.datetime.now().isoformat(timespec="seconds"),
            "checkpoint": str(Path(checkpoint).resolve()),
            "step": step,
            "changed": changes,
        }
    )
    write_json(path, records)
    return records


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's `summary.json` as a dict; {} when it is missing, a link (not the run's own) or no JSON object."""
    path = run_dir / "summary.json"
    try:
        summary = json.loads(path.read_text()) if path.is_file() and not path.is_symlink() else {}
    except (OSError, ValueError, RecursionError):  # deep nesting: a stranger's summary.json
        return {}
    return summary if isinstance(summary, dict) else {}


def read_resumes(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / RESUMES_FILE
    try:
        records = json.loads(path.read_text()) if path.is_file() else []
    except (ValueError, RecursionError):  # RecursionError: nested too deep for the parser
        records = []
    return records if isinstance(records, list) else []


def run_checkpoint(run_dir: Path, checkpoint: str) -> Path:
    """The checkpoint file of a run directory: `best`, `last`, or a path; errors name what is missing."""
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory ({_not_a_run(run_dir)}){runs_in(run_dir)}")
    ckpt = run_dir / "checkpoints" / f"{checkpoint}.ckpt" if checkpoint in ("best", "last") else Path(checkpoint)
    inside = [run_dir / "checkpoints" / checkpoint, run_dir / checkpoint]  # "last.ckpt": the run's own file
    own = (
        next((p for p in inside if p.is_file()), None)
        if checkpoint.endswith(".ckpt") and not ckpt.is_absolute()
        else None
    )
    if own is not None and not ckpt.is_file():
        return own
    if own is not None and own.resolve() != ckpt.resolve():
        log.warning("--checkpoint %s: the file of that name here is read, not the run's %s", checkpoint, own)
    if not ckpt.is_file():
        hint = ""
        # summary.json records a best checkpoint the run saved
        recorded = checkpoint == "best" and isinstance(read_summary(run_dir).get("best"), dict)
        if recorded:
            hint = (
                ": the run saved one (its summary.json records it), and the file is not here (a copy of the run "
                "without it?)" + ("; --checkpoint last uses the weights it saved last"
                                  if (run_dir / "checkpoints" / "last.ckpt").is_file() else "")
            )  # fmt: skip
        elif checkpoint == "best" and (run_dir / "checkpoints" / "last.ckpt").is_file():
            hint = (
                ": the run has no best checkpoint yet (it stopped before its first validation, or none ran); "
                "--checkpoint last uses the weights it saved last"
            )
        elif checkpoint in ("best", "last") and not any((run_dir / "checkpoints").glob("*.ckpt")):
            hint = ": the run has saved no checkpoint yet (it is still training, or it stopped before its first one)"
        elif checkpoint not in ("best", "last") and "/" not in checkpoint and not checkpoint.endswith(".ckpt"):
            hint = "; valid: best, last, or the path of a .ckpt file"  # a misspelled name, not a missing file
        raise ConfigError(f"--checkpoint: no checkpoint file at {str(ckpt)!r}{hint}")
    return ckpt


def _not_a_run(path: Path) -> str:
    """Why `path` is no run directory, for a command given one: missing, a file or folder inside a run (its
    checkpoint, its config.yaml), or a folder without config.yaml."""
    if not path.exists():
        return "it does not exist"
    run = next((p for p in path.absolute().parents if (p / "config.yaml").is_file() and (p / "checkpoints").is_dir()),
               None)  # fmt: skip
    if run is None:
        return "no config.yaml"
    which = f", with --checkpoint {path} to read this checkpoint" if path.suffix == ".ckpt" else ""
    return f"it is inside the run directory {run}: give {run}{which}"


def saved_kind(run_dir: Path) -> str | None:
    """The data kind a run directory's config.yaml names; None where it cannot be read (`load_run` says why)."""
    try:
        return load([run_dir / "config.yaml"], run=True).section("data").get("kind")
    except (ConfigError, OSError, ValueError):
        return None


@dataclass
class LoadedRun:
    """A finished run rebuilt for a command: its config, data (set up; None when loaded without it), task with the
    checkpoint's weights, and the tokenizer its weights were trained with (None for data without one)."""

    run_dir: Path
    checkpoint: Path
    cfg: Config
    data: Any
    task: Any
    tokenizer: Any = None

    @property
    def net(self) -> Any:
        return self.task.net

    @property
    def data_kind(self) -> str:
        return self.cfg.section("data")["kind"]


def load_run(
    run_dir: str | Path,
    checkpoint: str = "best",
    configs: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    *,
    with_data: bool = True,
    classifiers: bool = False,
) -> LoadedRun:
    """Rebuild a run from its `config.yaml` (plus overlays and overrides) and load a checkpoint's weights.

    This is the one way every command (evaluate, viz, translate, ...) reads a run. The tokenizer is the run's own
    `tokenizer.json`, checked against the digest its checkpoint records (`attnzoo.run.tokenizer_stamp`), and the
    model section of its config.yaml against the one the checkpoint records (`attnzoo.run.model_stamp`: a
    checkpoint of another run is refused).
    `with_data=False` (translate, generate; viz of one input to a classifier) builds the model from the run
    directory alone (a classifier's only with `classifiers`): the DataModule is not built and no data file is read,
    so a run directory can be copied elsewhere and used there.
    """
    from .build import build
    from .checkpoint_io import read_checkpoint
    from .model_stamp import check_model
    from .tokenizer_stamp import check_saved_tokenizer, check_tokenizer, saved_tokenizer

    run_dir = Path(run_dir)
    ckpt = run_checkpoint(run_dir, checkpoint)
    try:
        cfg = load([run_dir / "config.yaml", *configs], overrides, run=True)
        fitted = _within_cores(cfg, run_dir / "config.yaml")
        if fitted:
            cfg = load([run_dir / "config.yaml", *configs], [*overrides, *fitted], run=True)
    except ConfigError as err:  # an image folder that is not here is refused as the config is read
        raise ConfigError(f"{err}{_gone_data_hint(_saved_data(run_dir))}") from None
    preset = {**added_options(cfg), **_saved_labels(cfg, run_dir), **_saved_stats(cfg, run_dir),
              **saved_tokenizer(cfg, run_dir)}  # fmt: skip
    if with_data:
        preset |= _scored_alone(cfg, preset)
    try:
        saved = read_checkpoint(ckpt)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    checked = check_saved_tokenizer(run_dir, ckpt, saved)  # before anything is built from it
    check_model(run_dir, ckpt, saved, _saved_section(run_dir, "model"))  # config.yaml's, not the overrides'
    if with_data:
        try:
            data, task, cfg = build(cfg, preset=preset, init=False)  # the run's own weights, not model.init_from's
        except ConfigError as err:
            data = cfg.section("data")
            blocked = _not_alone(cfg, preset) if data.get("kind") in SCORED_ALONE else None
            given = {k for k in DATA_FILES if cfg.typed(k)}  # the user's own files: the error names a missing one
            raise ConfigError(f"{err}{_gone_data_hint(data, blocked, given)}") from None
        tokenizer = data.tokenizer
    else:
        from .inference import build_without_data

        data, (task, tokenizer, cfg) = None, build_without_data(cfg, run_dir, classifiers=classifiers)
    if tokenizer is not None and not checked:  # a fixed tokenizer (bytes), or a file the run did not copy
        check_tokenizer(tokenizer, run_dir, ckpt, saved)
    try:
        task.load_state_dict(saved["state_dict"])
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines()[1:] if line.strip()] or [str(err)]
        shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
        given = [*map(str, configs), *(o for o in overrides if o.startswith("model."))]  # what can change the model
        what = f"{run_dir}/config.yaml" + (f" with {', '.join(given)}" if given else "")
        hint = ": these change the model; leave out what the checkpoint was not trained with" if given else ""
        raise ConfigError(f"checkpoint {str(ckpt)!r} does not fit the model of {what}{hint} ({shown})") from None
    _attention_here(task)
    return LoadedRun(run_dir, ckpt, cfg, data, task, tokenizer)


def _within_cores(cfg: Config, config: Path) -> list[str]:
    """Overrides bringing the run's `data.num_workers` and `trainer.num_threads` (set in its `config` for the machine
    it trained on, or by whoever made a run directory from elsewhere) within the cores this process may use, each
    said in the log; [] when they are within them or were given here (an overlay, the command line). Neither
    changes what is computed."""
    from .cluster import usable_cores

    cores = usable_cores()
    fitted = []
    for key in ("data.num_workers", "trainer.num_threads"):
        section, name = key.split(".")
        value = cfg.section(section).get(name)
        if isinstance(value, int) and value > cores and cfg.where(key) == str(config):
            log.info("%s: %d (set in %s) is more than the %d core(s) here: %d", key, value, cfg.where(key), cores,
                     cores)  # fmt: skip
            fitted.append(f"{key}={cores}")
    return fitted


def _attention_here(task: Any) -> None:
    """A run trained with flash-attn, read on a machine without CUDA (a run copied to a laptop): its attention runs
    on `auto` here, the same attention on a kernel this machine has (logged; the run's config.yaml is not changed)."""
    import torch

    from ..attention import Attention

    if torch.cuda.is_available():
        return
    moved = [m for m in task.modules() if isinstance(m, Attention) and m.backend == "flash"]
    for module in moved:
        module.backend = "auto"
    if moved:
        log.warning(
            "model.attention.backend 'flash' runs on CUDA only, and this machine has none: the run's %d attention "
            "layers run on 'auto' here (the same attention)", len(moved),
        )  # fmt: skip


def _saved_data(run_dir: Path) -> dict[str, Any]:
    """The data section of a run's config.yaml as written ({} where it cannot be read)."""
    return _saved_section(run_dir, "data")


def _saved_section(run_dir: Path, name: str) -> dict[str, Any]:
    """The section `name` of a run's config.yaml as written ({} where it cannot be read)."""
    try:
        section = OmegaConf.to_container(read_yaml(run_dir / "config.yaml", run=True), resolve=True).get(name)
    except (ConfigError, OSError, ValueError, AttributeError):
        return {}
    return section if isinstance(section, dict) else {}


def _gone_data_hint(data: dict[str, Any], blocked: str | None = None, given: set[str] = frozenset()) -> str:
    """What to do when the run's data files (the data section `data`'s, less the keys in `given`: the command line's)
    are not here (a run directory from elsewhere, or data moved since): score a file of one's own with the run alone
    (`_scored_alone`), or say why it cannot be (`blocked`, `_not_alone`'s); draw one input without data (viz); ""
    when they are all here."""
    gone = [str(data[k[5:]]) for k in DATA_FILES if k not in given and gone_files(data.get(k[5:]))]
    if not gone:
        return ""
    ways = ["or put the data back where config.yaml names it"]
    if data.get("kind") in SCORED_ALONE:
        ways.insert(0, f"other data cannot be scored with this run alone: {blocked}" if blocked
                    else "`evaluate <run> data.test=<file>` scores a file of yours with the run alone")  # fmt: skip
    if data.get("kind") in VIZ_ALONE:
        ways.insert(-1, f"`viz <run> {VIZ_ALONE[data['kind']]}` draws one input without them")
    if isinstance(data.get("root"), str) and "data.root" not in given:  # an image or audio folder
        ways.insert(0, "`evaluate <run> data.root=<folder>` scores the folder where it is now, or another (and "
                       "`viz <run> data.root=<folder>` draws its examples)")  # fmt: skip
    shown = ", ".join(map(repr, gone))
    return f". The run's data {shown} is not here (a run from elsewhere, or the data moved since): {'; '.join(ways)}"


# data kinds whose missing train/val files `_scored_alone` replaces with data.test: the classes and ids come from the
# run's files, and nothing is held out of train or compared with it (the LM and MLM data keep text that train holds
# when the three splits are one file)
SCORED_ALONE = ("text", "text_image", "translation", "lm", "mlm")
# what viz draws of a run without its data, by data kind (`attnzoo.viz`)
VIZ_ALONE = {"image": "--input <image>", "audio": "--input <clip>", "text": '--text "<text>"',
             "translation": '--text "<sentence>"'}  # fmt: skip


def _scored_alone(cfg: Config, preset: dict[str, str]) -> dict[str, Any]:
    """{"data.train": data.test, ...} when the run's train file is not on this machine (a run directory from
    elsewhere, or data moved since) and `data.test` is: the data module reads data.test in place of the missing
    train and val files. Nothing is taken from them then: the classes are the run's labels.json and the ids its
    tokenizer.json (`preset`), which the run must have saved (a learned one always is; `saved_tokenizer`)."""
    from ..data import DATAMODULES

    data: dict[str, Any] = cfg.section("data")
    test, kind = data.get("test"), data.get("kind")
    if kind not in SCORED_ALONE or not isinstance(test, str) or not Path(test).exists():
        return {}
    gone = [k for k in ("train", "val") if isinstance(data.get(k), str) and not Path(data[k]).exists()]
    # another column (key) named on the command line is data.test's: the run's own files keep theirs
    layout = [f"data.{k}" for k in data if k.endswith(("_column", "_key")) and cfg.typed(f"data.{k}")]
    if layout:
        gone = [k for k in ("train", "val") if isinstance(data.get(k), str) and data[k] != test]
    takes = inspect.signature(DATAMODULES[kind]).parameters
    labels = [key for key in ("data.labels", "data.classes") if key[5:] in takes]
    if "train" not in gone or _not_alone(cfg, preset):
        return {}
    # the LM and MLM data compare val and test with train, which would remove every test paragraph: they read the
    # test file as all three splits (their val too, held out of it or the run's own), told so (`test_only`)
    alone = {"data.val": test, "data.test_only": True} if "test_only" in takes else {}
    own = [*(["the classes (labels.json)"] if labels else []),
           *(["the token ids (tokenizer.json)"] if "data.tokenizer" in preset else [])]  # fmt: skip
    why = f"{', '.join(layout)} given for data.test" if layout else f"{'are' if len(gone) > 1 else 'is'} not here"
    log.info("data: %s (data.%s) %s: data.test %s is read in its place%s", ", ".join(data[k] for k in gone),
             " and data.".join(gone), why, test, f"; {' and '.join(own)} are the run's own" if own else "")  # fmt: skip
    return {**{f"data.{k}": test for k in gone}, **alone}


def _not_alone(cfg: Config, preset: dict[str, str]) -> str | None:
    """Why the run cannot be scored on other data without its train files, or None: the ids its tokenizer gives must
    not be learned from them (its tokenizer.json, a tokenizer file named, bytes) and its classes must be its own
    labels.json."""
    from ..data import DATAMODULES
    from ..data.tokenizers.subword import KINDS
    from ..data.tokenizers.tokenize import TOKENIZERS

    data: dict[str, Any] = cfg.section("data")
    takes = inspect.signature(DATAMODULES[data["kind"]]).parameters
    default = takes["tokenizer"].default if "tokenizer" in takes else None
    tokenizer = data.get("tokenizer", default)
    fixed = tokenizer in TOKENIZERS or (isinstance(tokenizer, str) and tokenizer not in (*KINDS, "auto")
                                        and Path(tokenizer).is_file())  # fmt: skip
    if "tokenizer" in takes and "data.tokenizer" not in preset and not fixed:
        return (
            f"it keeps no tokenizer.json (its data.tokenizer {tokenizer!r} is learned from, or named beside, the train "
            "file): give data.tokenizer=<the tokenizer file it was trained with>"
        )
    if any(
        key[5:] in takes and key not in preset and data.get(key[5:]) is None for key in ("data.labels", "data.classes")
    ):
        return "it keeps no labels.json (its classes in the order its head learned them)"
    return None


def _saved_labels(cfg: Config, run_dir: Path) -> dict[str, str]:
    """{"data.labels": the run's `labels.json`} (its class names in training order; `data.classes` for the
    text-image data), unless the config sets it: the data read now may hold other classes, or the same ones in
    another order."""
    return _saved_file(cfg, run_dir, "labels", "labels.json") or _saved_file(cfg, run_dir, "classes", "labels.json")


def _saved_stats(cfg: Config, run_dir: Path) -> dict[str, str]:
    """{"data.stats_file": the run's `audio_stats.json`}, unless the config sets it: the features are normalized with
    the statistics the model was trained with (the model keeps them too), not with those of the data read now."""
    return _saved_file(cfg, run_dir, "stats_file", "audio_stats.json")


def _saved_file(cfg: Config, run_dir: Path, key: str, name: str) -> dict[str, str]:
    """{"data.<key>": the run's file `name`} when the run saved it, the config leaves `key` unset and the run's data
    kind takes it."""
    from ..data import DATAMODULES

    saved = run_dir / name
    data: dict[str, Any] = cfg.section("data")
    module = DATAMODULES.get(data.get("kind"))
    if saved.is_file() and data.get(key) is None and module is not None:
        if key in inspect.signature(module).parameters:
            return {f"data.{key}": str(saved)}
    return {}
