"""Building a run from its config, top to bottom: resolve `auto` values -> data -> model -> task -> Trainer.

`build` sets up the data first (seeded), then resolves the config ONCE (`resolve`, the only code that writes
config values): `trainer.precision: auto` for this machine, what the data proposes for `auto` keys
(`DataModule.auto_values()`, only the keys it declares in `AUTO_KEYS`), and what the model and task take from the
data (`DataModule.model_inputs()`: num_classes, vocab_size, ...). The resolved config is read-only, validated, and
is what the run saves as config.yaml; the network and the task are built from it.
"""

from __future__ import annotations

import difflib
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import OmegaConf

from ..config import (
    TRAINER_EXTRAS,
    Config,
    ConfigError,
    auto_keys,
    is_run_config,
    named_error,
    parameters,
    validate,
)
from ..tasks.stopping import early_stopping_options
from ..util.names import metric_mode
from .paths import PATH_KEYS
from .start import NORMALIZED_AS, another_start
from .switches import apply_grad_checkpointing, compile_net, resolve_precision

log = logging.getLogger("attnzoo")


class Built(NamedTuple):
    """A built run: the DataModule (set up), the LightningModule with its network, and the resolved config."""

    data: Any
    task: Any
    cfg: Config


LEFT_OUT = object()  # a preset value: the key is left out of the data options and the resolved config
# model inputs the data gives as a default that a config's value keeps (`_filled`): the AST's position table is
# learned for `target_frames` and interpolated to clips of other lengths (a run trained on 1 s scores 2 s clips)
CONFIG_KEEPS = ("target_frames",)
# model inputs that only say how the data is scored (translation BLEU's tokenization): the data's value is taken over a
# config's (`evaluate <run> data.bleu_tokenize=13a` scores a run with another BLEU, its weights untouched)
DATA_WINS = ("bleu_tokenize",)


def build(
    cfg: Config, *, preset: Mapping[str, Any] | None = None, init: bool = True, unrecorded: Sequence[str] = ()
) -> Built:
    """Build the run `cfg` describes; `preset` ({dotted `data.*` key: value, or `LEFT_OUT`}) replaces data options
    before the data is read (a loaded run's saved label vocabulary or tokenizer) and is recorded in the resolved
    config, but for the keys in `unrecorded`, which keep their configured value there (a resumed run reads the
    run's own copy of its tokenizer file, and its config.yaml keeps naming the file it was given). Keys that size
    only the embedded data are left out when the data section reads files (`embedded_only_keys`).

    With `model.init_from` (and `init`) the network starts from that checkpoint's weights (`attnzoo.run.start`):
    it is read before the data, what it needs (its tokenizer, a converted model's architecture) goes into the
    resolved config, and the network records what was loaded as `net.started_from` (for the run summary).
    `init=False` builds the same network without reading the checkpoint (a finished run loads its own weights).

    Bad values the config's signatures cannot catch (a missing data folder, ...) raise ConfigError here,
    before any training.
    """
    import lightning as L

    L.seed_everything(cfg.tree.get("seed", 0), workers=True, verbose=False)
    trainer_cfg = cfg.section("trainer")
    if trainer_cfg.get("num_threads"):  # intra-op threads of each process (torch.set_num_threads)
        import torch

        torch.set_num_threads(trainer_cfg["num_threads"])
    from .start import apply_start, finetune_budget, fixed_options, read_start

    start = read_start(cfg) if init else None
    started = _absolute_start(cfg, start.preset) if start else {}
    start_data = {k: v for k, v in started.items() if k.startswith("data.")}
    preset = {**embedded_only_keys(cfg), **(start.preset if start else {}), **start_data, **(preset or {})}
    chosen = {
        **absolute_paths(cfg.section("data")),
        **{k: v for k, v in preset.items() if k not in unrecorded},
        **_auto_precision(cfg),
        **{k: v for k, v in started.items() if k not in start_data},  # model.init_from
    }
    if init and start is None:  # a new or resumed run (a finished one loaded, init=False, built already once)
        check_before_data(cfg, preset)
    section = "data"
    try:
        data = build_data(cfg, preset)
        if init and "data.img_size" not in preset:  # a size the config set, not a start's weights
            data.check_given_size()
        fixed = fixed_options(start, data.model_inputs(), cfg) | finetune_budget(start, data, cfg)
        _normalized_as(data, fixed, cfg)
        cfg = resolve(cfg, data, chosen, fixed)
        section = "model"
        net = build_net(cfg)
        if start is not None:
            net.started_from = apply_start(start, net, data, cfg)
        apply_grad_checkpointing(net, trainer_cfg.get("grad_checkpointing"))
        if trainer_cfg.get("compile"):
            compile_net(net)
        section = "task"
        task = build_task(cfg, net)
    except ConfigError:
        raise
    except ValueError as err:  # a builder's own check; name the section when the message does not
        text = str(err)
        if section == "data":  # the data's messages name their own keys
            raise ConfigError(text) from err
        if section == "model":  # a size the data gave (img_size from data.image_size): say where it came from
            inputs, options = data.model_inputs(), cfg.section("data")
            given = [k for k, v in inputs.items() if v is not None and re.search(rf"\b{k}\b", text)]
            for key in [k for k in given if f"model.{k}" not in cfg.origins]:  # not one the model section sets
                same = [k for k, v in options.items() if v == inputs[key] and not isinstance(v, bool)]
                source = difflib.get_close_matches(key, same, n=1, cutoff=0.0)  # image_size for img_size
                text += f"; model.{key} ({inputs[key]}) comes from the data"
                text += f" (data.{source[0]})" if source else ""
        raise named_error(section, text, f"kind {cfg.section(section).get('kind')!r}") from err
    return Built(data, task, cfg)


def build_data(cfg: Config, preset: Mapping[str, Any] | None = None) -> Any:
    """The DataModule of `data:` (set up, so `model_inputs()` is ready); `preset` as in `build` (by default, the
    keys that size only the embedded data are left out when the data section reads files)."""
    data = data_module(cfg, preset)
    data.given = _given(cfg, data, set(auto_keys(cfg)))  # what setup's choices follow (a patch size set)
    data.setup("fit")
    return data


def data_module(cfg: Config, preset: Mapping[str, Any] | None = None) -> Any:
    """The DataModule of `data:`, constructed (its own checks of its options run) and not set up: no file is read."""
    from ..data import DATAMODULES

    if preset is None:
        preset = embedded_only_keys(cfg)
    opts = cfg.section("data")
    for key, value in (preset or {}).items():
        key = key.split(".", 1)[1]
        if value is LEFT_OUT:
            opts.pop(key, None)
        else:
            opts[key] = value
    return DATAMODULES[opts.pop("kind")](**opts)


def check_before_data(cfg: Config, preset: Mapping[str, Any] | None = None) -> None:
    """What can be refused of a config before its data is read (ConfigError): the DataModule's own checks of its
    options (a data.root that does not exist), a `data.tokenizer` that is no tokenizer, and the model builder's
    (`check_net_before_data`). `build` runs it first; `ablate` runs it for every variant before the first run."""
    from ..config import AUTO
    from ..data.tokenizers.factory import check_tokenizer_spec

    try:
        data_module(cfg, preset)  # `preset` as `build` gives it: a resumed run's own copy of its tokenizer file
        spec = (preset or {}).get("data.tokenizer", cfg.section("data").get("tokenizer"))
        if isinstance(spec, str) and spec != AUTO:
            check_tokenizer_spec(spec)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(str(err)) from err
    check_net_before_data(cfg)


# ------------------------------------------------------------------------------------------------ resolving


CHOSEN_BY_DATA = "the run, chosen from the data (auto, logged)"  # where a resolved config says a proposal was set


def resolve(
    cfg: Config,
    data: Any,
    chosen: Mapping[str, Any] = {},  # noqa: B006 (read only)
    fixed: Mapping[str, Any] = {},  # noqa: B006 (read only)
) -> Config:
    """The run's resolved config: `cfg` with `chosen` ({dotted key: value}: preset data options, the machine's
    precision), the data's proposals for `auto` keys, `fixed` (values pretrained weights need, over the data's
    proposals: `attnzoo.run.start`), and the model and task arguments `data.model_inputs()` gives. Validated and
    read-only; `cfg` stays as it was."""
    from ..models import MODELS
    from ..tasks import TASKS

    proposed = _proposals(cfg, data, fixed)
    values = {**chosen, **proposed, **fixed}
    inputs = data.model_inputs()
    tree = OmegaConf.to_container(cfg.tree, resolve=True)
    for key, value in values.items():
        _set(tree, key, value)
    origins = {**cfg.origins, **dict.fromkeys([k for k in proposed if k not in fixed], CHOSEN_BY_DATA)}
    for section, table in (("model", MODELS), ("task", TASKS)):
        fn = table[tree[section]["kind"]]
        for key, value in _filled(cfg, section, tree[section], fn, inputs).items():
            _set(tree, f"{section}.{key}", value)
    resolved = Config.of_values(tree, origins)
    validate(resolved)  # the chosen values, checked as if the config had set them
    return resolved


def _set(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted `key` of the plain `tree` to `value` (`LEFT_OUT`: remove it): the one place a run's config
    values are written."""
    *path, last = key.split(".")
    for part in path:
        node = tree.get(part)
        tree = tree.setdefault(part, {}) if node is None else node
    if value is LEFT_OUT:
        tree.pop(last, None)
    else:
        tree[last] = value


def embedded_only_keys(cfg: Config) -> dict[str, Any]:
    """{key: LEFT_OUT} for the `data:` keys that configure only the embedded data when the data section reads files
    instead (`attnzoo.data.modules.defaults.EMBEDDED_ONLY`): logged when a config file set them (a recipe sizes its
    embedded data), an error when the command line did. The run's config.yaml is written without them."""
    from ..config import COMMAND_LINE
    from ..data.modules.defaults import embedded_only

    opts = cfg.section("data")
    keys, files = embedded_only(opts.get("kind"), opts)
    left_out = {}
    for key in keys:
        full = f"data.{key}"
        typed = [w for k, w in cfg.origins.items() if k == full or k.startswith(f"{full}.")]
        typed = [w for w in typed if w.startswith(COMMAND_LINE)]
        if typed:
            raise ConfigError(
                f"{full} (set in {typed[0]}) configures the embedded data, but {files} is given; remove it"
            )
        shown = "" if isinstance(opts[key], dict) else f" {opts[key]!r}"
        log.info("%s%s (set in %s) left out: it configures the embedded data, and %s is given", full, shown,
                 cfg.where(full), files)  # fmt: skip
        left_out[full] = LEFT_OUT
    return left_out


def absolute_paths(data: Mapping[str, Any]) -> dict[str, Any]:
    """{"data.<key>": absolute path} for the relative paths of `PATH_KEYS` in the data section `data` that exist
    from the working directory (a split's list of paths too); a path that does not exist stays as typed (the data
    names it)."""

    def absolute(value: Any, key: str) -> Any:
        if isinstance(value, list):  # several files (an LM's text files); `labels` as a list is class names
            return [absolute(v, key) for v in value] if key in ("train", "val", "test") else value
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            return value
        if key == "tokenizer" and Path(value).suffix != ".json":
            return value
        return str(Path(value).resolve()) if Path(value).exists() else value

    out = {}
    for key in PATH_KEYS:
        if key in data and (value := absolute(data[key], key)) != data[key]:
            out[f"data.{key}"] = value
    return out


def _absolute_start(cfg: Config, start_preset: Mapping[str, Any]) -> dict[str, Any]:
    """`model.init_from` and the data paths the start sets (its tokenizer file) as absolute paths, where they are
    relative: the run's config.yaml then starts the same run from any working directory."""
    out = absolute_paths({k.removeprefix("data."): v for k, v in start_preset.items() if k.startswith("data.")})
    given = cfg.section("model").get("init_from")
    if isinstance(given, str) and given and not Path(given).is_absolute() and Path(given).exists():
        out["model.init_from"] = str(Path(given).resolve())
    return out


def absolute_config_paths(cfg: Config) -> dict[str, Any]:
    """{dotted key: absolute path} for the relative data paths and `model.init_from` of `cfg` that exist from the
    working directory: what the run's config.yaml records for them (`ablate` plans with them)."""
    return absolute_paths(cfg.section("data")) | _absolute_start(cfg, {})


def _auto_precision(cfg: Config) -> dict[str, Any]:
    """`trainer.precision: auto` -> {"trainer.precision": the value for this machine}, logged."""
    trainer_cfg = cfg.section("trainer")
    if trainer_cfg.get("precision") != "auto":
        return {}
    value, why = resolve_precision("auto", trainer_cfg.get("accelerator", "auto"))
    log.info("trainer.precision: auto -> %s (%s)", value, why)
    return {"trainer.precision": value}


def _given(cfg: Config, data: Any, wanted: set[str]) -> dict[str, Any]:
    """{key: value} of the DataModule's `AUTO_KEYS` that the config sets, not to `auto` (`wanted`)."""
    return {k: v for k in data.AUTO_KEYS if k not in wanted and (v := OmegaConf.select(cfg.tree, k)) is not None}


def _proposals(cfg: Config, data: Any, fixed: Mapping[str, Any] = {}) -> dict[str, Any]:  # noqa: B006 (read only)
    """What the data proposes and the config takes: its own `data.*` choices and a value for each key the config
    sets to `auto` among its `AUTO_KEYS`, each logged; keys in `fixed` (what pretrained weights need) are neither
    taken nor logged. A key it does not declare is a bug in the DataModule."""
    from .cluster import planned_processes

    wanted = set(auto_keys(cfg)) - set(fixed)
    data.processes = planned_processes(cfg.section("trainer"))  # the epoch budgets count steps over all of them
    data.given = _given(cfg, data, wanted) | dict(fixed)
    proposed = data.auto_values()
    undeclared = sorted(k for k in proposed if not k.startswith("data.") and k not in data.AUTO_KEYS)
    if undeclared:
        raise TypeError(f"{type(data).__name__}.auto_values() proposes {undeclared}, which are not in its AUTO_KEYS")
    taken = {}
    patience, epochs = "run.early_stopping.patience", "trainer.max_epochs"
    # the budget a start fixes (fine-tuning pretrained weights), else the config's
    budget = fixed.get(epochs, cfg.section("trainer").get("max_epochs"))
    if patience in wanted and epochs in proposed and epochs not in wanted and isinstance(budget, int) and budget > 0:
        # a patience the data proposes from its own epoch budget follows the budget the config sets instead
        proposed[patience] = data.patience_for(budget) or proposed[patience]
    for key, (value, why) in proposed.items():
        if (key.startswith("data.") and key not in fixed) or key in wanted:
            log.info("%s: auto -> %s (%s)", key, value, why)
            taken[key] = value
    missing = sorted(wanted - set(proposed))
    if missing:
        raise ConfigError(f"{missing}: 'auto', but the data chose no value for them here; set values")
    return taken


def _normalized_as(data: Any, fixed: Mapping[str, Any], cfg: Config) -> None:
    """Tell the data the feature statistics a start fixed (`NORMALIZED_AS`: a checkpoint's; on a resume, those its
    config.yaml records), so that what it records (audio_stats.json) is what the model normalizes with."""
    model = cfg.section("model")
    if not model.get("init_from"):
        return
    values = [fixed.get(f"model.{key}", model.get(key)) for key in NORMALIZED_AS]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        data.normalized_as(float(values[0]), float(values[1]), "model.init_from")


def _filled(
    cfg: Config, section: str, opts: Mapping[str, Any], fn: Callable[..., Any], inputs: Mapping[str, Any]
) -> dict[str, Any]:
    """The `inputs` that `fn` (the section's builder) accepts, to add to `section`; a config value that contradicts
    the data raises, except in a run started from a checkpoint a `vocab_size` above the tokenizer's (the spare rows
    of its embedding). The checkpoint's feature statistics (`NORMALIZED_AS`) are the data's already (`_normalized_as`).
    """
    accepted = parameters(fn)
    filled = {}
    for key, value in inputs.items():
        if key not in accepted or value is None:
            continue
        differs = key in opts and opts[key] != value
        if differs and key in DATA_WINS:
            if cfg.typed(f"{section}.{key}"):
                log.warning("%s.%s: %r (set in %s) gives way to the data's %r: set data.%s instead", section, key,
                            opts[key], cfg.where(f"{section}.{key}"), value, key)  # fmt: skip
        elif differs:
            spare = key == "vocab_size" and opts.get("init_from") and isinstance(opts[key], int) and opts[key] > value
            if spare:  # embedding rows the tokenizer never gives: a pretrained table padded past it (run.start)
                continue
            if key in CONFIG_KEEPS:
                log.info("%s.%s: %r (set in %s); the data gives %r, which the model adapts to", section, key,
                         opts[key], cfg.where(f"{section}.{key}"), value)  # fmt: skip
                continue
            where = Path(cfg.where(f"{section}.{key}"))
            if another_start(cfg, f"{section}.{key}"):
                log.info("%s.%s: %r (%s, another start's) gives way to %r", section, key, opts[key], where, value)
                filled[key] = value
                continue
            data_opts = cfg.section("data")  # `translate <run> data.max_len=1000`: no data read, an option typed
            sets = {key, *SET_BY.get(key, ())}  # the data options that give this model input
            typed = [k for k in cfg.origins if k[:5] == "data." and k[5:] in sets and cfg.typed(k)]
            if is_run_config(where) and typed:
                given = ", ".join(f"{k}={data_opts[k[5:]]!r}" for k in typed)
                raise ConfigError(
                    f"{section}.{key}: the run's {where} records {opts[key]!r}, and {given} (the command line) makes "
                    f"it {value!r}: the trained model's {section}.{key} is fixed; leave {', '.join(typed)} out"
                )
            if is_run_config(where):
                raise ConfigError(
                    f"{section}.{key}: the run's {where} records {opts[key]!r}, and the data read now gives "
                    f"{value!r}: this is not the data the run was trained on, or it changed since (a resumed or "
                    "evaluated run reads its data again, and learns a tokenizer from it again unless it has a file). "
                    "To resume or evaluate the run, give it the data it was trained on; for a new run from its "
                    f"config, remove {section}.{key} from a copy of it (the data then sets it)"
                )
            raise ConfigError(
                f"{section}.{key}: {opts[key]!r} (set in {where}) contradicts the data, which gives {value!r}; "
                "remove it or change the data section"
            )
        filled[key] = value
    return filled


# ------------------------------------------------------------------------------------------------ building


# the model inputs a DataModule gives (`model_inputs()`): each replaces a config's value once the data is read
DATA_GIVEN = (
    "num_classes", "vocab_size", "pad_id", "bos_id", "eos_id", "max_len", "img_size", "in_chans", "multilabel",
    "sample_rate", "n_mels", "win_ms", "hop_ms", "features", "target_frames", "feature_mean", "feature_std",
    "bleu_tokenize",
)  # fmt: skip
STAND_INS = {"num_classes": 2, "vocab_size": 256}  # what a builder requires and only the data gives, meanwhile
SET_BY = {"max_len": ("block_size",), "img_size": ("image_size",)}  # data options of other names for model inputs


def check_net_before_data(cfg: Config) -> None:
    """A builder's own check of the model section (`model.image_depth: 0` beside `model.fusion: both`), made before
    the data is read: the network is built on the meta device (no memory, no weights) from the config's values, the
    builder's defaults standing in for what the data gives or chooses (`DATA_GIVEN`, `auto`). Only a ValueError
    that names a key the config sets, and none of those stand-ins, is raised (worded as `build` words it, a
    ConfigError): the same error would come once every image or clip had been decoded. Anything else (a check that
    names a size the data gives, an op the meta device lacks) is left to the build after the data."""
    import torch

    from ..config import AUTO, MODEL_EXTRAS
    from ..models import MODELS

    model = cfg.section("model")
    builder = MODELS[model["kind"]]
    takes = parameters(builder)
    given = {k: v for k, v in model.items() if k in takes and k not in MODEL_EXTRAS and k not in DATA_GIVEN}
    given = {k: v for k, v in given.items() if v != AUTO}
    stand_ins = {k: v for k, v in STAND_INS.items() if k in takes}
    try:
        with torch.device("meta"):
            builder(**given, **stand_ins)
    except ValueError as err:
        text = str(err)
        named = [k for k in takes if re.search(rf"\b{re.escape(k)}\b", text)]
        if named and all(k in given for k in named):
            raise named_error("model", text, f"kind {model['kind']!r}") from err
        log.debug("model: not checked before the data (%s): the build after it does", err)
    except Exception as err:  # noqa: BLE001 - a required input, an op of the meta device: the real build says
        log.debug("model: not checked before the data (%s): the build after it does", err)


def build_net(cfg: Config) -> Any:
    """The network of the resolved config's `model:` section."""
    from ..config import MODEL_EXTRAS
    from ..models import MODELS

    opts = {k: v for k, v in cfg.section("model").items() if k not in MODEL_EXTRAS}
    return MODELS[opts.pop("kind")](**opts)


def build_task(cfg: Config, net: Any) -> Any:
    """The LightningModule of the resolved config's `task:` section, around `net`."""
    from ..tasks import TASKS

    opts = cfg.section("task")
    return TASKS[opts.pop("kind")](net=net, **opts)


def check_monitor(cfg: Config, task: Any) -> str:
    """`run.monitor` (default `val/<the objective's monitor>`); ConfigError when the task never logs it."""
    from ..util.names import suggest

    monitor = cfg.section("run").get("monitor") or f"val/{task.monitor}"
    logged = getattr(task, "logged_metrics", None)
    if callable(logged):
        known = [*logged(), "epoch", "step"]
        if monitor not in known:
            raise ConfigError(
                f"run.monitor: {monitor!r} (set in {cfg.where('run.monitor')}) is not a metric this run logs; "
                f"valid: {known}{suggest(monitor, known)}"
            )
    return monitor


def make_trainer(cfg: Config, run_dir: Path, task: Any, extra_callbacks: Sequence[Any] = ()) -> tuple[Any, Any]:
    """(Trainer, RunSummary callback) writing into `run_dir`.

    `best.ckpt` follows `run.monitor`; with `run.early_stopping` training stops when it has not improved for
    `patience` validations, `trainer.max_epochs` being the ceiling.
    """
    import lightning as L
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from . import callbacks as run_callbacks
    from .checkpoint_io import AtomicCheckpointIO, RunCheckpoint
    from .cluster import slurm_job
    from .metrics import MetricsCheckpointSync, RunCSVLogger, RunSummary
    from .stalled import LearningCheck, augmentation_off

    run = cfg.section("run")
    monitor = check_monitor(cfg, task)
    mode = run.get("mode") or task.monitor_mode
    if not run.get("mode") and monitor != f"val/{task.monitor}":  # another metric: its own direction, not the task's
        mode = metric_mode(monitor)
        log.info("run.mode: %s (run.monitor %s: %s is better; set run.mode to say otherwise)", mode, monitor,
                 "lower" if mode == "min" else "higher")  # fmt: skip
    ckpt_dir = run_dir / "checkpoints"
    logger = RunCSVLogger(str(run_dir))
    # the score of a model that has learned nothing the metric measures yet (BLEU 0): early stopping waits for it to
    # move, and the best checkpoint (and the summary's best epoch) follows the val loss meanwhile
    floor = getattr(task, "monitor_floor", None) if monitor == f"val/{task.monitor}" else None
    summary = RunSummary(monitor=monitor, mode=mode, floor=floor)
    callbacks = [
        RunCheckpoint(
            dirpath=ckpt_dir, filename="best", monitor=monitor, mode=mode, enable_version_counter=False, floor=floor
        ),  # fmt: skip
        # last.ckpt after every epoch, improved or not (Lightning's save_last follows the best checkpoint's saves)
        RunCheckpoint(dirpath=ckpt_dir, filename="last", monitor=None, enable_version_counter=False),
        MetricsCheckpointSync(logger),
        summary,
        LearningCheck(augmentation=augmentation_off(cfg)),
        *run_callbacks.callbacks(ckpt_dir / "last.ckpt", model=cfg.section("model"), slurm_job=slurm_job()),
        *extra_callbacks,
    ]
    stopping = early_stopping_options(run.get("early_stopping"))
    if stopping is not None and monitor in ("epoch", "step"):  # counters, not metrics: nothing to wait for
        log.info("run.early_stopping: off, run.monitor is %r (a counter)", monitor)
        stopping = None
    if stopping is not None:
        log.info(
            "run.early_stopping: stop when %s (%s) has not improved by %g for %d validations; trainer.max_epochs %s "
            "is the ceiling",
            monitor, mode, stopping["min_delta"], stopping["patience"], cfg.section("trainer").get("max_epochs"),
        )  # fmt: skip
        # checked after each validation only: a run stopped mid-epoch (max_steps) has no val metric to check
        callbacks.append(
            run_callbacks.RunEarlyStopping(
                monitor=monitor, mode=mode, check_on_train_epoch_end=False, floor=floor, **stopping
            )
        )
    if run.get("save_every_n_steps"):
        callbacks.append(
            RunCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                every_n_train_steps=run["save_every_n_steps"],
                enable_version_counter=False,
            )
        )
    kwargs = {k: v for k, v in cfg.section("trainer").items() if k not in TRAINER_EXTRAS}
    # a terminal, or a notebook (whose bar is a widget); no stderr at all under pythonw
    terminal = getattr(sys.stderr, "isatty", lambda: False)() or "ipykernel" in sys.modules
    if kwargs.get("enable_progress_bar", True) and not terminal:  # a bar would show only its end there
        kwargs["enable_progress_bar"] = False
        callbacks.append(run_callbacks.LogProgress())
    plugins: list[Any] = [AtomicCheckpointIO()]
    if slurm_job() is not None:  # SIGUSR1 stops and requeues through GracefulStop, not Lightning's handler
        from lightning.fabric.plugins.environments import SLURMEnvironment

        plugins.append(SLURMEnvironment(auto_requeue=False))
    if hasattr(task, "examples_dir"):  # a sequence task's examples.txt / examples.json
        task.examples_dir = Path(run_dir)
    try:
        trainer = L.Trainer(
            **kwargs, logger=logger, callbacks=callbacks, plugins=plugins, default_root_dir=str(run_dir)
        )
    except (MisconfigurationException, ValueError, ImportError, RuntimeError) as err:  # devices=0, no GPU, ...
        shown = {k: kwargs[k] for k in ("accelerator", "devices", "strategy", "precision") if k in kwargs}
        raise ConfigError(f"trainer {shown}: {err}") from None
    return trainer, summary
