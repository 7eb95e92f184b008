"""Recipe config: load YAML, apply overlays and `key=value` overrides, validate.

A config has the sections `seed`, `data` (kind + DataModule arguments), `model` (kind + builder arguments,
with `attention:` for `attnzoo.attention.factory.attention_builder`), `task` (kind + LightningModule arguments:
objective, optimizer, scheduler), `trainer` (`lightning.Trainer` arguments + `TRAINER_EXTRAS`), `run`
(`RUN_OPTIONS`) and `smoke` (overrides for the test suite's quick run of a recipe).

Every key is checked against the signature of what it configures before anything is built; errors name
the key, where it was set (file or command line), the valid choices and the closest one.

A value `auto` asks the data for it: the DataModule resolves its own `auto` options when it reads the data, and
proposes values for the keys of other sections it lists in `AUTO_KEYS` (e.g. `model.patch_size` from the image
size, or `trainer.max_epochs` from the number of training examples) through `auto_values()`; `attnzoo.run.build`
applies and logs each choice in the run's resolved config (config.yaml). (`trainer.precision: auto` is chosen for
the machine.) A `Config` is read-only: the run's resolved config is a new one (`attnzoo.run.build.resolve`).
"""

from __future__ import annotations

import inspect
import logging
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .util.names import suggest

log = logging.getLogger("attnzoo")
SECTIONS = ("seed", "data", "model", "task", "trainer", "run", "smoke")
# attnzoo options in the `trainer:` section (not lightning.Trainer arguments)
TRAINER_EXTRAS: dict[str, Any] = {
    "grad_checkpointing": bool | dict,  # true, or {enabled, every, attention_only} (attnzoo.run.switches)
    "compile": bool,
    "num_threads": int | None,
}
# attnzoo options in the `model:` section of every model kind (not builder arguments; attnzoo.run.start)
MODEL_EXTRAS: dict[str, Any] = {
    "init_from": str | None,  # start from these weights: an attnzoo run directory or .ckpt, or a pretrained model
    "timm_name": str | None,  # the timm architecture of a timm ViT file in init_from (it tells the head count)
}
# older model keys read as their replacement: {(model kind, key): (new key, note for the log)}
RENAMED_MODEL_KEYS = {
    ("vit", "pretrained"): ("init_from", "and model.timm_name=<timm architecture> when its width is not a classic one"),
}
# what a run directory holds besides its config.yaml once training started (`attnzoo.run.train`)
TRAINED_FILES = ("checkpoints", "metrics.csv", "summary.json")
# lightning.Trainer arguments that attnzoo sets itself
TRAINER_RESERVED = ("logger", "callbacks", "default_root_dir", "plugins", "profiler", "model_registry")
RUN_OPTIONS: dict[str, Any] = {
    "dir": str,  # runs are written to <dir>/<name>/<timestamp>
    "name": str,
    "monitor": str | None,  # metric that picks the best checkpoint; default val/<the objective's monitor>
    "mode": typing.Literal["max", "min"] | None,
    "save_every_n_steps": int | None,  # also checkpoint (last.ckpt) every n optimizer steps
    "test": bool,  # run the test split on the best checkpoint after fitting
    # stop when the monitored metric has not improved for `patience` validations (trainer.max_epochs stays the
    # ceiling): true, false/null, or {patience, min_delta}
    "early_stopping": bool | dict | None,
    "baseline": bool,  # also fit a scikit-learn baseline on the same splits (attnzoo.run.baseline)
}
COMMAND_LINE = "the command line"


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names the key and where it was set."""


def named_error(section: str, text: str, where: str) -> ConfigError:
    """A builder's ValueError `text` as a ConfigError naming `section` when the message does not already: "model
    (kind 'vit'): ...", `where` being what goes in the parentheses."""
    named = text.startswith((f"{section}.", f"{section}:", f"{section} "))
    return ConfigError(text if named else f"{section} ({where}): {text}")


class Config:
    """A merged config tree (read-only) and, for each dotted key, where it was last set (a file path or the command
    line)."""

    def __init__(self, tree: DictConfig, origins: dict[str, str]) -> None:
        OmegaConf.set_readonly(tree, True)
        self.tree, self.origins = tree, origins

    @classmethod
    def of_values(cls, tree: dict[str, Any], origins: dict[str, str]) -> Config:
        """A Config of plain, resolved data (`OmegaConf.to_container(..., resolve=True)`): every string stays the
        text it is, one holding `${` included (`escaped`), where `OmegaConf.create` would take it for an
        interpolation to resolve (`${oc.env:NAME}` reading this machine's environment)."""
        return cls(OmegaConf.create(escaped(tree)), origins)

    def where(self, key: str) -> str:
        """Where `key` (or the closest enclosing key) was set."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found:
                return found
        return "defaults"

    def typed(self, key: str) -> bool:
        """Whether `key` (or the closest enclosing key) was set on the command line."""
        return self.where(key).startswith(COMMAND_LINE)

    def section(self, name: str) -> dict[str, Any]:
        value = self.tree.get(name)
        if value is None:
            return {}
        if not isinstance(value, DictConfig):
            raise ConfigError(f"{name}: expected a mapping, got {value!r} ({self.where(name)})")
        return OmegaConf.to_container(value, resolve=True)

    def to_yaml(self) -> str:
        """The config resolved, as YAML that reads back to the same values: a `${` of a value (a prompt's text) is
        written escaped, or reading it would take it for an interpolation."""
        return OmegaConf.to_yaml(Config.of_values(OmegaConf.to_container(self.tree, resolve=True), {}).tree)


# a `${` that OmegaConf reads as an interpolation: after an even number of backslashes (each pair one literal `\\`);
# after an odd number it is a literal `${`
LIVE_INTERPOLATION = re.compile(r"(?<!\\)(?:\\\\)*\$\{")


def escaped(node: Any) -> Any:
    """`node` (plain data) with its strings written as OmegaConf reads them back to the same text: the k backslashes
    before a `${` doubled and one more added (a literal `${`: `\\${`; a literal `\\${`: three backslashes), so that
    no value becomes an interpolation. Other backslashes read as themselves."""
    if isinstance(node, dict):
        return {key: escaped(value) for key, value in node.items()}
    if isinstance(node, list):
        return [escaped(value) for value in node]
    if not isinstance(node, str):
        return node
    return re.sub(r"(\\*)\$\{", lambda m: "\\" * (2 * len(m.group(1)) + 1) + "${", node)


def dotted_leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of the leaves of plain nested mappings (an empty mapping below the top is a leaf)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(dotted_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out if out or not prefix else {prefix: {}}
    return {prefix: node}


def _flatten(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, DictConfig):
        keys = []
        for k in node.keys():
            full = f"{prefix}.{k}" if prefix else str(k)
            keys += [full, *_flatten(node._get_node(k), full)]
        return keys
    return []


def load(
    configs: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    given_in: Mapping[str, str] | None = None,
    run: bool = False,
) -> Config:
    """Merge `configs` in order (later wins), then the dotlist `overrides` (`key=value`); validate.

    Args:
        given_in: where an override item comes from when it is not the command line (item -> e.g. "grid g.yaml,
            fixed"), for messages.
        run: the first of `configs` is a run's own config.yaml (a resumed or evaluated run's): read as data, with
            no interpolation (`read_yaml`).
    """
    if not configs:
        raise ConfigError("no config given: pass --config recipes/<recipe>.yaml")
    merged, origins = OmegaConf.create({}), {}
    for index, path in enumerate(configs):
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} " + ("is a directory" if path.is_dir() else "does not exist"))
        layer = read_yaml(path, run=run and index == 0)
        if not path.read_bytes().strip():
            raise ConfigError(f"config file {str(path)!r} is empty")
        if not isinstance(layer, DictConfig):
            raise ConfigError(f"{path}: expected a mapping of sections {list(SECTIONS)}")
        origins.update(dict.fromkeys(_flatten(layer), str(path)))
        merged = OmegaConf.merge(merged, layer)
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override {item!r}: expected key=value (e.g. trainer.max_epochs=3)")
        try:
            layer = OmegaConf.from_dotlist([item])
        except OmegaConfBaseException as err:
            raise ConfigError(f"override {item!r}: {err}") from err
        except yaml.YAMLError as err:  # a value that is not YAML: `{kind:global}`
            raise ConfigError(
                f"override {item!r}: the value is not YAML ({' '.join(str(err).split())}); a mapping is written "
                "key={kind: sliding_window, window: 4}, a space after each colon"
            ) from err
        origins.update(dict.fromkeys(_flatten(layer), f"{(given_in or {}).get(item, COMMAND_LINE)} ({item!r})"))
        try:
            merged = OmegaConf.merge(merged, layer)
        except OmegaConfBaseException as err:
            raise ConfigError(f"override {item!r}: {err}") from err
    try:
        cfg = Config(*_renamed(merged, origins))
        validate(cfg)
    except OmegaConfBaseException as err:  # a `${...}` that does not resolve: read when a section is first used
        key = getattr(err, "full_key", None) or ""
        where = f" (set in {origins[key]})" if key in origins else ""
        text = str(getattr(err, "msg", None) or err).splitlines()[0]  # OmegaConf's own lines after it name the key
        raise ConfigError(f"{key or 'config'}: {text}{where}") from None
    return cfg


def _renamed(tree: DictConfig, origins: dict[str, str]) -> tuple[DictConfig, dict[str, str]]:
    """`tree` with the older model keys of `RENAMED_MODEL_KEYS` moved to their new names (a deprecation warning each;
    ConfigError when both are set)."""
    model = tree.get("model")
    if not isinstance(model, DictConfig):
        return tree, origins
    for (kind, old), (new, note) in RENAMED_MODEL_KEYS.items():
        if model.get("kind") != kind or old not in model:
            continue
        where = origins.get(f"model.{old}", "defaults")
        if model.get(new) is not None and model.get(old) is not None:
            raise ConfigError(
                f"model.{old} (set in {where}) and model.{new} (set in {origins.get(f'model.{new}', 'defaults')}) "
                f"both name the weights to start from: model.{old} is deprecated, keep model.{new} only"
            )
        value = model.get(old)
        log.warning("model.%s (set in %s) is deprecated: use model.%s=<file> (%s)", old, where, new, note)
        if value is not None:
            tree = OmegaConf.merge(tree, {"model": {new: escaped(value)}})
            origins = {k: v for k, v in origins.items() if k != f"model.{new}"}
        tree.model.pop(old)
        origins = {(f"model.{new}" if k == f"model.{old}" else k): v for k, v in origins.items()}
    return tree, origins


def is_run_config(path: Path) -> bool:
    """Whether `path` is a run's own config.yaml (its folder holds what training wrote)."""
    return path.name == "config.yaml" and any((path.parent / name).exists() for name in TRAINED_FILES)


def read_yaml(path: str | Path, *, run: bool = False) -> Any:
    """The YAML file at `path` as an OmegaConf object; a syntax error is one line naming the file, line and column.
    A run's own config.yaml must hold no interpolation (`refuse_interpolations`): one read as a run's (`run`: resume,
    evaluate, a start), or one beside what training writes (`is_run_config`), whatever the folder holds besides."""
    import yaml

    path = Path(path)
    try:
        tree = OmegaConf.load(path)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or "invalid YAML"
        if err.context and err.problem and err.context_mark is not None:
            problem += f" ({err.context} at line {err.context_mark.line + 1})"
        what = "YAML syntax error"
        if isinstance(err, yaml.constructor.ConstructorError) and "python/" in str(problem):
            # `!!python/object/apply:os.system [...]`: a tag that would construct Python objects (run code)
            what, problem = "refused", f"{problem}: a tag that builds Python objects (code) is never read from a config"
        if mark is None:
            raise ConfigError(f"{path}: {what}: {problem}") from None
        lines = path.read_text(errors="replace").splitlines()
        text = f": {lines[mark.line].strip()!r}" if mark.line < len(lines) and lines[mark.line].strip() else ""
        raise ConfigError(f"{path}, line {mark.line + 1}, column {mark.column + 1}: {what}: {problem}{text}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {err.start}: {err.reason})") from None
    except (yaml.YAMLError, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(f"{path}: cannot read: {type(err).__name__}: {str(err).splitlines()[0]}") from None
    if run or is_run_config(path):
        refuse_interpolations(tree, path)
    return tree


def refuse_interpolations(node: Any, path: Path, prefix: str = "") -> None:
    """ConfigError at the first `${...}` in a run's config.yaml. A run writes its config resolved, so it holds none;
    one from a run directory made elsewhere would be resolved here, where `${oc.env:NAME}` reads this machine's
    environment into the run's reports."""
    from omegaconf import ListConfig

    if not isinstance(node, DictConfig | ListConfig):
        return
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        full = f"{prefix}[{key}]" if isinstance(node, ListConfig) else f"{prefix}.{key}" if prefix else str(key)
        child = node._get_node(key)
        raw = child._value()
        if OmegaConf.is_interpolation(node, key) and LIVE_INTERPOLATION.search(str(raw)):  # not only literal `${`
            raise ConfigError(
                f"{path}: {full}: {raw!r} is an interpolation, which a run's config.yaml never holds: a run writes "
                "its values resolved. attnzoo does not resolve it in a run's config, where ${oc.env:...} would read "
                "this machine's environment; write the value itself (a config of your own beside "
                f"{' / '.join(TRAINED_FILES)}: name it other than config.yaml)"
            )
        refuse_interpolations(child, path, full)


# ---------------------------------------------------------------------------------------------- validation


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        names = [_describe(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " | ".join(dict.fromkeys(names))  # Literal[...] | Literal[...] | None reads "choice", not thrice
    if typing.get_origin(annotation) is typing.Literal:
        return "choice"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether a plain YAML value fits `annotation` (unknown annotations accept anything)."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(type_ok(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if annotation is None or annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    base = origin or annotation
    if base in (list, tuple, Sequence) or base is typing.Sequence:
        if not isinstance(value, list | tuple):
            return False
        item = args[0] if args and (base is not tuple or len(args) == 2 and args[1] is Ellipsis) else Any
        return all(type_ok(v, item) for v in value)
    if base in (dict, Mapping) or base is typing.Mapping:
        return isinstance(value, dict)
    if isinstance(base, type) and base.__module__ == "pathlib":
        return isinstance(value, str)
    return True  # objects (modules, callables, ...) the config cannot express: not checked here


def parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """Keyword parameters of `fn` (a class or function) with annotations evaluated where possible."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError):
        sig = inspect.signature(fn)
    return {
        k: p
        for k, p in sig.parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and k not in ("self", "cls")
    }


# keys a user may try for their files on a data kind that reads them from other keys (the image and audio folders)
FILE_KEYS = ("train", "val", "test", "path", "dir", "folder", "files", "data", "images", "clips", "wavs")


def check_options(
    cfg: Config,
    section: str,
    options: Mapping[str, Any],
    schema: Mapping[str, Any],
    what: str = "",
    files_hint: str | None = None,
) -> None:
    """Each key of `options` is in `schema` (name -> annotation) and its value fits the annotation; `files_hint` says
    how the data kind reads files, for an unknown key that looks like a file's (`FILE_KEYS`)."""
    valid = sorted(schema)
    for key, value in options.items():
        full = f"{section}.{key}"
        if key not in schema:
            hint = suggest(full, [f"{section}.{v}" for v in valid])
            if files_hint and key.lower() in FILE_KEYS:
                hint = f"; {files_hint}"
            raise ConfigError(f"{full}: unknown key{what} (set in {cfg.where(full)}); valid: {valid}{hint}")
        if not type_ok(value, schema[key]):
            raise ConfigError(
                f"{full}: {value!r} is not a valid {_describe(schema[key])} (set in {cfg.where(full)})"
                + _choices(schema[key])
                + (
                    " ('auto' is chosen by the data only for its AUTO_KEYS, see attnzoo/data/modules/defaults.py)"
                    if value == AUTO
                    else ""
                )  # fmt: skip
                + _bool_hint(full, value, schema[key])
            )


def _bool_hint(full: str, value: Any, annotation: Any) -> str:
    """Why a str (or list of str) holds booleans: YAML 1.1 reads unquoted yes/no/true/false/on/off as them, and which
    of these words was written is lost, so the words are not turned back but asked to be quoted."""

    def as_str(v: Any) -> Any:
        return str(v) if isinstance(v, bool) else [as_str(x) for x in v] if isinstance(v, list | tuple) else v

    def has_bool(v: Any) -> bool:
        return isinstance(v, bool) or isinstance(v, list | tuple) and any(has_bool(x) for x in v)

    if not has_bool(value) or not type_ok(as_str(value), annotation):
        return ""
    example = "['yes','no']" if isinstance(value, list | tuple) else "'yes'" if value else "'no'"
    return (
        "; its True/False were read from unquoted yes/no/true/false/on/off (booleans in YAML 1.1): quote the words, "
        f'e.g. "{full}={example}" on the command line (the outer quotes are for the shell) or '
        f"{full.rsplit('.', 1)[-1]}: {example.replace(',', ', ')} in a YAML file"
    )


def _choices(annotation: Any) -> str:
    literals = [a for a in typing.get_args(annotation) if typing.get_origin(a) is typing.Literal] or (
        [annotation] if typing.get_origin(annotation) is typing.Literal else []
    )
    values = [v for lit in literals for v in typing.get_args(lit)]
    return f"; valid: {values}" if values else ""


def check_kind(cfg: Config, section: str, table: Mapping[str, Any]) -> Any:
    """The registered object named by `<section>.kind`."""
    opts = cfg.section(section)
    kind = opts.get("kind")
    where = cfg.where(f"{section}.kind")
    if kind is None:
        raise ConfigError(f"{section}.kind is missing ({cfg.where(section)}); valid: {sorted(table)}")
    if not isinstance(kind, str):  # a list or mapping cannot be looked up (TypeError), a number names nothing
        raise ConfigError(f"{section}.kind: expected a name of {sorted(table)}, got {kind!r} (set in {where})")
    if kind not in table:
        valid = sorted(table)
        raise ConfigError(f"{section}.kind: unknown {kind!r} (set in {where}); valid: {valid}{suggest(kind, valid)}")
    return table[kind]


def _schema(fn: Callable[..., Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    return {k: p.annotation for k, p in parameters(fn).items() if k not in drop}


def validate(cfg: Config) -> None:
    """Check every section and key before anything is built; raise ConfigError naming the first problem."""
    import lightning as L

    from .data import DATAMODULES
    from .layers.encoder import checkpointing_options
    from .models import MODELS
    from .tasks import TASKS
    from .tasks.stopping import EARLY_STOPPING, early_stopping_options

    for key in cfg.tree.keys():
        if key not in SECTIONS:
            raise ConfigError(
                f"{key}: unknown section (set in {cfg.where(str(key))}); valid: {list(SECTIONS)}"
                f"{suggest(str(key), list(SECTIONS))}"
            )
    seed = cfg.tree.get("seed", 0)
    if not type_ok(seed, int) or not 0 <= seed < 2**32:  # numpy's generators take no other
        raise ConfigError(f"seed: {seed!r} is not an int from 0 to 2**32 - 1 (set in {cfg.where('seed')})")
    check_kind(cfg, "data", DATAMODULES)
    auto = set(auto_keys(cfg))  # chosen by the data when the run is built (attnzoo.run.build.resolve)
    for section, table, drop in (
        ("data", DATAMODULES, ()),
        ("model", MODELS, ()),
        ("task", TASKS, ("net",)),
    ):
        target = check_kind(cfg, section, table)
        options = {k: v for k, v in cfg.section(section).items() if k != "kind" and f"{section}.{k}" not in auto}
        schema = {**_schema(target, drop), **(MODEL_EXTRAS if section == "model" else {})}
        files = getattr(target, "FILES_HINT", None)
        check_options(cfg, section, options, schema, f" for {section}.kind {cfg.section(section)['kind']!r}", files)
    timm_name = cfg.section("model").get("timm_name")
    if timm_name is not None and not cfg.section("model").get("init_from"):
        raise ConfigError(
            f"model.timm_name: {timm_name!r} (set in {cfg.where('model.timm_name')}) names the architecture of a timm "
            "ViT checkpoint, and no model.init_from names one: set model.init_from=<file> too, or drop model.timm_name"
        )
    check_model_sizes(cfg, MODELS[cfg.section("model")["kind"]])
    _check_parts(cfg, auto)
    _check_kind_values(cfg, auto)
    trainer_schema = {**_schema(L.Trainer.__init__, TRAINER_RESERVED), **TRAINER_EXTRAS}
    trainer = {k: v for k, v in cfg.section("trainer").items() if f"trainer.{k}" not in auto}
    if trainer.get("precision") == "auto":  # resolved for the machine when the run starts (attnzoo.run.switches)
        trainer.pop("precision")
    try:
        check_options(cfg, "trainer", trainer, trainer_schema)
    except ConfigError as err:
        if not str(err).startswith("trainer.precision:"):
            raise
        raise ConfigError(f"{err}, or 'auto' (bf16-mixed where the hardware is fast at it, else 32-true)") from None
    threads = trainer.get("num_threads")
    if threads is not None and threads < 1:  # 0 was ignored (every core used), a negative one a torch RuntimeError
        raise ConfigError(
            f"trainer.num_threads: {threads} (set in {cfg.where('trainer.num_threads')}): a number of threads >= 1, "
            "or null for torch's default"
        )
    check_budget(cfg, trainer)
    check_processes(cfg, trainer)
    if "grad_checkpointing" in trainer:
        try:
            checkpointing_options(trainer["grad_checkpointing"])
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('trainer.grad_checkpointing')})") from err
    check_options(cfg, "run", cfg.section("run"), RUN_OPTIONS)
    stopping = cfg.section("run").get("early_stopping")
    if stopping is not None:
        if isinstance(stopping, dict) and "run.early_stopping.patience" in auto:  # chosen by the data, checked then
            stopping = {**stopping, "patience": EARLY_STOPPING["patience"]}
        try:
            early_stopping_options(stopping)
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('run.early_stopping')})") from err
    smoke = cfg.section("smoke")
    for key in smoke:
        if str(key).split(".")[0] not in SECTIONS:
            raise ConfigError(f"smoke.{key}: expected a dotted config key (set in {cfg.where('smoke')})")


def validate_model(cfg: Config) -> None:
    """The options of the model section of `cfg` alone, checked as `validate` checks them (the kind, each option's
    type, the sizes and widths): a run's config.yaml read for its weights (`attnzoo.pretrained.run_dir`), whose
    data may not be here. Its attention specs are checked where they are taken over (`attnzoo.run.start`)."""
    from .models import MODELS

    builder = check_kind(cfg, "model", MODELS)
    model = cfg.section("model")
    options = {k: v for k, v in model.items() if k != "kind"}
    check_options(cfg, "model", options, {**_schema(builder), **MODEL_EXTRAS}, f" for model.kind {model['kind']!r}")
    check_model_sizes(cfg, builder)


AUTO = "auto"


def auto_keys(cfg: Config) -> list[str]:
    """Dotted keys of the model, task, trainer and run sections set to `auto` that the data chooses (the
    DataModule's `AUTO_KEYS`; other `auto` values, such as `trainer.precision` or an attention backend, are
    options of their own)."""
    from .data import DATAMODULES

    allowed = DATAMODULES[cfg.section("data")["kind"]].AUTO_KEYS
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}")
        elif node == AUTO:
            found.append(prefix)

    for section in ("model", "task", "trainer", "run"):
        walk(cfg.section(section), section)
    return [k for k in found if k in allowed]


def _check_parts(cfg: Config, auto: set[str] = frozenset()) -> None:
    """Attention, objective, scheduler and optimizer specs: kinds, argument names, and the values that can be
    checked without the data (the model's own context fills in the rest when it is built)."""
    from .attention.factory import attention_builder
    from .attention.specs import check_spec, no_spec
    from .tasks.objectives import OBJECTIVES
    from .tasks.optim import SCHEDULES, check_optimizer

    model, task = cfg.section("model"), cfg.section("task")
    for key in auto:  # chosen by the data when the run is built: checked then
        section, *path = key.split(".")
        node = {"model": model, "task": task}.get(section)
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    for key, value in model.items():  # `attention`, and e.g. text_image's `image_attention`, `cross_attention`
        if str(key).endswith("attention") and isinstance(value, dict):
            try:
                attention_builder(value, what=f"model.{key}")
            except ValueError as err:
                raise ConfigError(f"{err} (set in {cfg.where(f'model.{key}')})") from err
    for key, table in (("objective", OBJECTIVES), ("scheduler", SCHEDULES)):
        if key in task:
            try:
                check_spec(task[key], table, f"task.{key}")
            except ValueError as err:
                raise ConfigError(f"{err} (set in {cfg.where(f'task.{key}')})") from err
    if "objective" in task and no_spec(task["objective"]):  # {kind: null} too: the task needs one
        raise ConfigError(
            f"task.objective: {task['objective']!r} (set in {cfg.where('task.objective')}) is not an objective; "
            f"valid: {sorted(OBJECTIVES)}, e.g. {{kind: multiclass, label_smoothing: 0.1}}"
        )
    if "optimizer" in task:
        optimizer = task["optimizer"]
        if not isinstance(optimizer, dict) or not optimizer:
            raise ConfigError(
                f"task.optimizer: {optimizer!r} (set in {cfg.where('task.optimizer')}) is not an optimizer; give a "
                "mapping such as {kind: adamw, lr: 0.001, weight_decay: 0.05} (any timm optimizer and its options), "
                "or leave the key out for that default"
            )
        try:
            check_optimizer(optimizer)
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('task.optimizer')})") from err


def _check_kind_values(cfg: Config, auto: set[str] = frozenset()) -> None:
    """What the data, model or task kind refuses that its signature cannot say, through the class's
    `check_config(options)` (a decoder's attention kind, a task's sampling ranges): a ValueError naming the key."""
    from .data import DATAMODULES
    from .models import MODELS
    from .tasks import TASKS

    kind = cfg.section("data")["kind"]
    if cfg.section("run").get("baseline") and not DATAMODULES[kind].has_baseline():
        valid = sorted(k for k, v in DATAMODULES.items() if v.has_baseline())
        raise ConfigError(
            f"run.baseline: true (set in {cfg.where('run.baseline')}), but data.kind {kind!r} has no classical "
            f"baseline (data kinds with one: {valid}); set run.baseline=false"
        )
    _check_patch_grid(cfg, auto)
    for section, table in (("data", DATAMODULES), ("model", MODELS), ("task", TASKS)):
        opts = cfg.section(section)
        check = getattr(table[opts["kind"]], "check_config", None)
        if check is None:
            continue
        given = {k: v for k, v in opts.items() if k not in ("kind", *MODEL_EXTRAS) and f"{section}.{k}" not in auto}
        if section == "data" and cfg.section("model").get("init_from") and given.get("tokenizer", AUTO) == AUTO:
            given["tokenizer"] = "model.init_from's"  # the start's tokenizer replaces `auto` when the run is built
        try:
            check(given)
        except ValueError as err:
            key = str(err).split(" ", 1)[0].rstrip(":")  # the kind's message starts with the key
            raise ConfigError(f"{err} (set in {cfg.where(key)})") from err


def _check_patch_grid(cfg: Config, auto: set[str]) -> None:
    """A ViT's model.patch_size must divide the side of the images the data gives (data.img_size, or the embedded
    digits'), where the config says both: the model refused it when built, after an ablation's first runs."""
    from .data import DATAMODULES

    model, data = cfg.section("model"), cfg.section("data")
    started = model.get("init_from")  # the checkpoint's patch and image size may replace these
    if model["kind"] != "vit" or "model.patch_size" in auto or started:
        return
    patch, side = model.get("patch_size"), DATAMODULES[data["kind"]].image_side(data)
    if side is not None and type_ok(patch, int) and patch >= 1 and side % patch:
        fits = [p for p in range(1, side + 1) if side % p == 0 and side // p >= 2]
        where = f"set in {cfg.where('data.img_size')}" if data.get("img_size") is not None else "the embedded digits'"
        raise ConfigError(
            f"model.patch_size ({patch}, set in {cfg.where('model.patch_size')}) does not divide the images' side, "
            f"{side} px ({where}): a ViT cuts them into whole patches; patch sizes that divide {side}: {fits}"
        )


# model keys that are a width split evenly over `num_heads` attention heads (not e.g. an MLP's hidden size)
WIDTH_KEYS = ("dim", "embed_dim", "width", "d_model", "text_dim", "image_dim")
# model sizes that must be positive, and suffixes of dropout probabilities (in [0, 1))
POSITIVE_KEYS = ("patch_size", "img_size", "fstride", "tstride", "n_mels", "max_len", "mlp_ratio")
DEPTH_KEYS = ("depth", "encoder_depth", "decoder_depth")  # layer counts: at least one layer
RATE_SUFFIXES = ("drop_rate", "drop_path_rate", "_drop")


def check_model_sizes(cfg: Config, builder: Callable[..., Any]) -> None:
    """`model.num_heads` >= 1 and every width (`WIDTH_KEYS`: `embed_dim`, `dim`, ...) a positive multiple of it;
    values the config leaves out are the builder's defaults. Errors name both keys and where each was set."""
    given = cfg.section("model")
    defaults = {k: p.default for k, p in parameters(builder).items() if p.default is not inspect.Parameter.empty}
    sizes = {**defaults, **given}

    def where(key: str) -> str:
        return f"set in {cfg.where(f'model.{key}')}" if key in given else f"the default of model.kind {given['kind']!r}"

    for key, value in sizes.items():
        if key in POSITIVE_KEYS and type_ok(value, float) and value <= 0:
            raise ConfigError(f"model.{key}: {value} ({where(key)}) must be > 0")
        if str(key).endswith(RATE_SUFFIXES) and type_ok(value, float) and not 0 <= value < 1:
            raise ConfigError(f"model.{key}: {value} ({where(key)}) is a probability: give a value in [0, 1)")
    heads = sizes.get("num_heads")
    if type_ok(heads, int) and heads < 1:
        raise ConfigError(f"model.num_heads: {heads} ({where('num_heads')}) must be >= 1")
    for key in DEPTH_KEYS:
        if type_ok(sizes.get(key), int) and sizes[key] < 1:
            raise ConfigError(f"model.{key}: {sizes[key]} ({where(key)}) must be >= 1 (a layer count)")
    started = bool(given.get("init_from"))  # the checkpoint's head count replaces the recipe's when the run is built
    for key, value in sizes.items():  # grouped-query heads: each key/value head serves num_heads / num_kv_heads
        grouped = key.endswith("attention") and isinstance(value, Mapping) and not started
        kv = value.get("num_kv_heads") if grouped else None
        if type_ok(kv, int) and type_ok(heads, int) and kv >= 1 and heads % kv:
            fits = [k for k in range(1, heads + 1) if heads % k == 0]
            raise ConfigError(
                f"model.{key}.num_kv_heads ({kv}, set in {cfg.where(f'model.{key}.num_kv_heads')}) does not divide "
                f"model.num_heads ({heads}, {where('num_heads')}); valid: {fits}"
            )
    for key, width in sizes.items():
        if key not in WIDTH_KEYS or not type_ok(width, int):
            continue
        if width < 1:
            raise ConfigError(f"model.{key}: {width} ({where(key)}) must be >= 1")
        if type_ok(heads, int) and width % heads:
            fits = [h for h in range(1, min(width, 64) + 1) if width % h == 0]
            raise ConfigError(
                f"model.{key} ({width}, {where(key)}) is not divisible by model.num_heads ({heads}, "
                f"{where('num_heads')}): each head takes {key} / num_heads channels; num_heads that divide "
                f"{width}: {fits}"
            )


def check_processes(cfg: Config, trainer: Mapping[str, Any]) -> None:
    """`trainer.accelerator` and `trainer.devices` as Lightning reads them (an accelerator's name; a count, -1,
    "auto", or device indices) and a strategy whose processes attnzoo can start: spawned processes must pickle the
    task, which holds closures (schedules)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    accelerator = trainer.get("accelerator", "auto")
    names = ["auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())]  # as lightning.Trainer takes
    if not isinstance(accelerator, str) or accelerator not in names:  # else Lightning's ValueError, or a TypeError
        hint = suggest(accelerator, names) if isinstance(accelerator, str) else ""
        raise ConfigError(
            f"trainer.accelerator: {accelerator!r} (set in {cfg.where('trainer.accelerator')}) is not an "
            f"accelerator's name; valid: {names}{hint}"
        )
    devices = trainer.get("devices", "auto")
    text = str(devices).replace(" ", "")
    ok = (
        devices == "auto"
        or (type_ok(devices, int) and (devices >= 1 or devices == -1))
        or (isinstance(devices, list) and devices and all(type_ok(d, int) and d >= 0 for d in devices))
        or (isinstance(devices, str) and re.fullmatch(r"-1|[0-9]+|[0-9]+(,[0-9]+)*,?", text) is not None)
    )
    if not ok:
        raise ConfigError(
            f"trainer.devices: {devices!r} (set in {cfg.where('trainer.devices')}) is not a device count; valid: a "
            "number of devices (e.g. 2), -1 for all, 'auto', or a list of device indices (e.g. [0, 1])"
        )
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and "spawn" in strategy:
        raise ConfigError(
            f"trainer.strategy: {strategy!r} (set in {cfg.where('trainer.strategy')}) starts its processes by "
            "pickling the task, which attnzoo's tasks do not support; use 'ddp' (each process runs the command again)"
        )
    if isinstance(strategy, str) and ("fork" in strategy or "notebook" in strategy):
        raise ConfigError(
            f"trainer.strategy: {strategy!r} (set in {cfg.where('trainer.strategy')}) forks its processes from this "
            "one after the run is built, and the run's record (checkpoints, summary) stays in the parent; use 'ddp' "
            "(each process runs the command again)"
        )


def check_budget(cfg: Config, trainer: Mapping[str, Any]) -> None:
    """A training budget that trains something: `max_epochs` / `max_steps` >= 1 (or -1 for no limit) and a
    non-zero `limit_train_batches`."""
    for key in ("max_epochs", "max_steps"):
        value = trainer.get(key)
        if type_ok(value, int) and (value == 0 or value < -1):
            raise ConfigError(
                f"trainer.{key}: {value} (set in {cfg.where(f'trainer.{key}')}) trains nothing; give a number >= 1 "
                "(or -1 for no limit)"
            )
    for key in ("accumulate_grad_batches", "check_val_every_n_epoch", "log_every_n_steps"):
        value = trainer.get(key)
        if type_ok(value, int) and value < 1:
            raise ConfigError(f"trainer.{key}: {value} (set in {cfg.where(f'trainer.{key}')}) must be >= 1")
    every = cfg.section("run").get("save_every_n_steps")
    if type_ok(every, int) and every < 0:
        raise ConfigError(
            f"run.save_every_n_steps: {every} (set in {cfg.where('run.save_every_n_steps')}) must be >= 1 "
            "(0 or null: checkpoints at epoch ends only)"
        )
    task = cfg.section("task")
    scheduler = task["scheduler"] if "scheduler" in task else "cosine"  # every task's default
    kind = scheduler.get("kind") if isinstance(scheduler, Mapping) else scheduler
    unbounded = trainer.get("max_epochs") == -1 and trainer.get("max_steps", -1) == -1
    if unbounded and kind not in (None, "none", False):
        raise ConfigError(
            f"trainer.max_epochs: -1 (no limit, set in {cfg.where('trainer.max_epochs')}) gives the learning-rate "
            f"schedule task.scheduler ({scheduler!r}, set in {cfg.where('task.scheduler')}) no length to follow; "
            "set trainer.max_steps too, or task.scheduler=null (a constant rate)"
        )
    batch = cfg.section("data").get("batch_size")
    if type_ok(batch, int) and batch < 1:
        raise ConfigError(f"data.batch_size: {batch} (set in {cfg.where('data.batch_size')}) must be >= 1")
    clip = trainer.get("gradient_clip_val")
    if type_ok(clip, float) and clip < 0:
        raise ConfigError(
            f"trainer.gradient_clip_val: {clip} (set in {cfg.where('trainer.gradient_clip_val')}) must be >= 0 "
            "(a negative bound would flip the gradients); null for no clipping"
        )
    limit = trainer.get("limit_train_batches")
    if type_ok(limit, float) and limit <= 0:
        raise ConfigError(
            f"trainer.limit_train_batches: {limit} (set in {cfg.where('trainer.limit_train_batches')}) trains "
            "nothing; give a batch count >= 1 or a fraction in (0, 1]"
        )
