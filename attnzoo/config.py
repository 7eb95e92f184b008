"""Recipe config: load YAML, apply overlays and `key=value` overrides, validate, build the objects.

A config has the sections `seed`, `data` (kind + DataModule arguments), `model` (kind + builder arguments,
with `attention:` for `attnzoo.attention.factory.attention_layer`), `task` (kind + LightningModule arguments:
objective, optimizer, scheduler), `trainer` (`lightning.Trainer` arguments + `TRAINER_EXTRAS`), `run`
(`RUN_OPTIONS`) and `smoke` (overrides for the test suite's quick run of a recipe).

Every key is checked against the signature of what it configures before anything is built; errors name
the key, where it was set (file or command line), the valid choices and the closest one.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .attention.specs import suggest

SECTIONS = ("seed", "data", "model", "task", "trainer", "run", "smoke")
# attnzoo options in the `trainer:` section (not lightning.Trainer arguments)
TRAINER_EXTRAS: dict[str, Any] = {
    "grad_checkpointing": bool | dict,  # true, or {enabled, every, attention_only} (attnzoo.run.switches)
    "compile": bool,
    "num_threads": int | None,
}
# lightning.Trainer arguments that attnzoo sets itself
TRAINER_RESERVED = ("logger", "callbacks", "default_root_dir", "plugins", "profiler", "model_registry")
RUN_OPTIONS: dict[str, Any] = {
    "dir": str,  # runs are written to <dir>/<name>/<timestamp>
    "name": str,
    "monitor": str | None,  # metric that picks the best checkpoint; default val/<the objective's monitor>
    "mode": typing.Literal["max", "min"] | None,
    "save_every_n_steps": int | None,  # also checkpoint (last.ckpt) every n optimizer steps
    "test": bool,  # run the test split on the best checkpoint after fitting
}
COMMAND_LINE = "the command line"


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names the key and where it was set."""


class Config:
    """A merged config and, for each dotted key, where it was last set (a file path or the command line)."""

    def __init__(self, data: DictConfig, origins: dict[str, str]) -> None:
        self.data, self.origins = data, origins

    def where(self, key: str) -> str:
        """Where `key` (or the closest enclosing key) was set."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found:
                return found
        return "defaults"

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, DictConfig):
            raise ConfigError(f"{name}: expected a mapping, got {value!r} ({self.where(name)})")
        return OmegaConf.to_container(value, resolve=True)

    def to_yaml(self) -> str:
        return OmegaConf.to_yaml(self.data, resolve=True)


def _flatten(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, DictConfig):
        keys = []
        for k in node.keys():
            full = f"{prefix}.{k}" if prefix else str(k)
            keys += [full, *_flatten(node._get_node(k), full)]
        return keys
    return []


def load(configs: Sequence[str | Path], overrides: Sequence[str] = ()) -> Config:
    """Merge `configs` in order (later wins), then the dotlist `overrides` (`key=value`); validate."""
    if not configs:
        raise ConfigError("no config given: pass --config recipes/<recipe>.yaml")
    merged, origins = OmegaConf.create({}), {}
    for path in configs:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            layer = OmegaConf.load(path)
        except (OmegaConfBaseException, ValueError) as err:  # yaml errors derive from ValueError
            raise ConfigError(f"{path}: cannot parse: {err}") from err
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
        origins.update(dict.fromkeys(_flatten(layer), f"{COMMAND_LINE} ({item!r})"))
        try:
            merged = OmegaConf.merge(merged, layer)
        except OmegaConfBaseException as err:
            raise ConfigError(f"override {item!r}: {err}") from err
    cfg = Config(merged, origins)
    validate(cfg)
    return cfg


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


def check_options(
    cfg: Config, section: str, options: Mapping[str, Any], schema: Mapping[str, Any], what: str = ""
) -> None:
    """Each key of `options` is in `schema` (name -> annotation) and its value fits the annotation."""
    valid = sorted(schema)
    for key, value in options.items():
        full = f"{section}.{key}"
        if key not in schema:
            hint = suggest(full, [f"{section}.{v}" for v in valid])
            raise ConfigError(f"{full}: unknown key{what} (set in {cfg.where(full)}); valid: {valid}{hint}")
        if not type_ok(value, schema[key]):
            raise ConfigError(
                f"{full}: {value!r} is not a valid {_describe(schema[key])} (set in {cfg.where(full)})"
                + _choices(schema[key])
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
    from .models import MODELS
    from .tasks import TASKS

    for key in cfg.data.keys():
        if key not in SECTIONS:
            raise ConfigError(
                f"{key}: unknown section (set in {cfg.where(str(key))}); valid: {list(SECTIONS)}"
                f"{suggest(str(key), list(SECTIONS))}"
            )
    seed = cfg.data.get("seed", 0)
    if not type_ok(seed, int):
        raise ConfigError(f"seed: {seed!r} is not an int (set in {cfg.where('seed')})")
    for section, table, drop in (
        ("data", DATAMODULES, ()),
        ("model", MODELS, ()),
        ("task", TASKS, ("net",)),
    ):
        target = check_kind(cfg, section, table)
        options = {k: v for k, v in cfg.section(section).items() if k != "kind"}
        check_options(
            cfg, section, options, _schema(target, drop), f" for {section}.kind {cfg.section(section)['kind']!r}"
        )
    attention = cfg.section("model").get("attention")
    if attention is not None:
        from .attention.factory import attention_layer

        try:
            attention_layer(attention)
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('model.attention')})") from err
    optimizer = cfg.section("task").get("optimizer")
    if optimizer:
        from .tasks.optim import check_optimizer

        try:
            check_optimizer(optimizer)
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('task.optimizer')})") from err
    trainer_schema = {**_schema(L.Trainer.__init__, TRAINER_RESERVED), **TRAINER_EXTRAS}
    trainer = cfg.section("trainer")
    if trainer.get("precision") == "auto":  # resolved for the machine when the run starts (attnzoo.run.switches)
        trainer.pop("precision")
    try:
        check_options(cfg, "trainer", trainer, trainer_schema)
    except ConfigError as err:
        if not str(err).startswith("trainer.precision:"):
            raise
        raise ConfigError(f"{err}, or 'auto' (bf16-mixed where the hardware is fast at it, else 32-true)") from None
    if "grad_checkpointing" in trainer:
        try:
            checkpointing_options(trainer["grad_checkpointing"])
        except ValueError as err:
            raise ConfigError(f"{err} (set in {cfg.where('trainer.grad_checkpointing')})") from err
    check_options(cfg, "run", cfg.section("run"), RUN_OPTIONS)
    smoke = cfg.section("smoke")
    for key in smoke:
        if str(key).split(".")[0] not in SECTIONS:
            raise ConfigError(f"smoke.{key}: expected a dotted config key (set in {cfg.where('smoke')})")


CHECKPOINTING_KEYS = ("enabled", "every", "attention_only")


def checkpointing_options(value: Any, *, key: str = "trainer.grad_checkpointing") -> dict[str, Any]:
    """Normalize `true/false` or `{enabled, every, attention_only}` to keyword arguments of set_grad_checkpointing."""
    if isinstance(value, bool) or value is None:
        return {"enabled": bool(value), "every": 1, "attention_only": False}
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected true/false or a mapping with keys {list(CHECKPOINTING_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(CHECKPOINTING_KEYS))
    if unknown:
        raise ValueError(f"{key}: unknown keys {unknown}; valid: {list(CHECKPOINTING_KEYS)}")
    opts = {"enabled": value.get("enabled", True), "every": value.get("every", 1)}
    opts["attention_only"] = value.get("attention_only", False)
    if not isinstance(opts["enabled"], bool) or not isinstance(opts["attention_only"], bool):
        raise ValueError(f"{key}: enabled and attention_only must be true/false, got {value!r}")
    if isinstance(opts["every"], bool) or not isinstance(opts["every"], int) or opts["every"] < 1:
        raise ValueError(f"{key}.every: expected an int >= 1, got {opts['every']!r}")
    return opts


# ---------------------------------------------------------------------------------------------- building


def build_data(cfg: Config) -> Any:
    """The DataModule of `data:` (set up, so `model_context()` is ready)."""
    from .data import DATAMODULES

    opts = cfg.section("data")
    data = DATAMODULES[opts.pop("kind")](**opts)
    data.setup("fit")
    return data


def fill_context(cfg: Config, section: str, fn: Callable[..., Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """`section`'s options plus the context keys `fn` accepts; a config value that contradicts the data raises.

    The filled values are written back into `cfg`, so the run's resolved config records what was derived.
    """
    opts = cfg.section(section)
    accepted = parameters(fn)
    for key, value in context.items():
        if key not in accepted or value is None:
            continue
        if key in opts and opts[key] != value:
            raise ConfigError(
                f"{section}.{key}: {opts[key]!r} (set in {cfg.where(f'{section}.{key}')}) contradicts the data, "
                f"which gives {value!r}; remove it or change the data section"
            )
        opts[key] = value
        OmegaConf.update(cfg.data, f"{section}.{key}", value, force_add=True)
    return opts


def build_net(cfg: Config, context: Mapping[str, Any]) -> Any:
    from .models import MODELS

    builder = MODELS[cfg.section("model")["kind"]]
    opts = fill_context(cfg, "model", builder, context)
    opts.pop("kind")
    return builder(**opts)


def build_task(cfg: Config, net: Any, context: Mapping[str, Any]) -> Any:
    from .tasks import TASKS

    cls = TASKS[cfg.section("task")["kind"]]
    opts = fill_context(cfg, "task", cls, context)
    opts.pop("kind")
    return cls(net=net, **opts)


def smoke_overrides(cfg: Config) -> list[str]:
    """The recipe's `smoke:` mapping as `key=value` overrides."""
    return [f"{k}={json.dumps(v)}" for k, v in cfg.section("smoke").items()]
