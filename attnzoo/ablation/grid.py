"""Ablation grids: a YAML file of axes (dotted config keys -> values) and seeds, expanded into variants.

A grid file:

```yaml
recipes: [vit, ast]            # recipes the tests validate this grid against (default: every recipe)
metric: test/acc               # the metric reported (default: the recipe's monitored metric, test split if run)
mode: max                      # whether higher (max) or lower (min) is better (default: from the metric's name)
seeds: [0, 1]                  # each variant runs once per seed (default: the recipe's seed)
fixed:                         # overrides for every run (e.g. fewer epochs)
  trainer.max_epochs: 3
axes:                          # every combination of these runs
  model.attention.kind: [mha, talking_heads]
  model.attention.pattern:     # a mapping names each value (the label in variant ids)
    full: none
    window4: {kind: sliding_window, window: 4}
  position:                    # a name without a dot: each value is a set of overrides applied together
    learned: {model.pos_embed: learned}
    rope_2d: {model.pos_embed: none, model.attention.rotary: rope_2d}
```

A value that is a mapping replaces the recipe's mapping at that key (it is not merged into it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config import ConfigError, escaped, read_yaml
from ..util.names import suggest

GRID_KEYS = ("recipes", "metric", "mode", "seeds", "fixed", "axes")
MAX_ID = 120  # longest variant id (a directory name); longer ids are cut and get a hash suffix
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=,-]+")


@dataclass(frozen=True)
class Variant:
    """One run of a grid: `values` (axis label -> value label) and the overrides that make it."""

    id: str  # e.g. "bias=alibi,pattern=full,seed=1": readable and filesystem-safe
    name: str  # the id without the seed: runs of one variant over seeds share it
    values: dict[str, str]
    seed: int
    overrides: tuple[str, ...]


@dataclass
class Grid:
    path: Path
    axes: dict[str, dict[str, Any]]  # config key -> {value label: value}
    labels: dict[str, str]  # config key -> axis label
    seeds: list[int] | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    metric: str | None = None
    mode: str | None = None
    recipes: list[str] | None = None

    def keys(self) -> set[str]:
        """Every config key an axis sets."""
        return {k for axis, values in self.axes.items() for k in (set_keys(values) if is_named(axis) else [axis])}

    def variants(self, default_seed: int = 0) -> list[Variant]:
        """Every combination of the axes, times the seeds, in grid order (the last axis varies fastest)."""
        keys = list(self.axes)
        out = []
        for combo in itertools.product(*(self.axes[k].items() for k in keys)):
            values = {self.labels[k]: label for k, (label, _) in zip(keys, combo, strict=True)}
            name = ",".join(f"{a}={v}" for a, v in values.items())
            overrides = [o for k, (_, value) in zip(keys, combo, strict=True) for o in override(k, value)]
            for seed in self.seeds if self.seeds is not None else [default_seed]:
                full = f"{name},seed={seed}" if name else f"seed={seed}"
                out.append(Variant(safe_id(full), safe_id(name or "base"), values, seed, (*overrides, f"seed={seed}")))
        ids = [v.id for v in out]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:  # they would share a run directory (labels that differ in characters a directory name drops)
            raise _fail(self.path, f"variants {twice} would share an id: give the values labels that differ")
        return out

    def fixed_overrides(self) -> list[str]:
        return [o for key, value in self.fixed.items() for o in override(key, value)]


def is_named(axis: str) -> bool:
    """An axis whose name is not a dotted config key: its values are sets of overrides."""
    return "." not in axis


def inside(key: str, outer: str) -> bool:
    """Whether dotted `key` is `outer` or a key within it (which an override of `outer` replaces)."""
    return key == outer or key.startswith(outer + ".")


def set_keys(values: dict[str, Any]) -> list[str]:
    return sorted({k for overrides in values.values() for k in overrides})


def override(key: str, value: Any) -> list[str]:
    """`key=value` dotlist items setting `key` to `value`; a mapping replaces (not merges into) what was there.

    A named axis (`is_named`) gives a set of overrides `{dotted key: value}` as `value`.
    """
    if is_named(key):
        return [o for k, v in value.items() for o in override(k, v)]
    item = f"{key}={json.dumps(escaped(value))}"  # the grid's values resolved: a `${` of one is text, kept so
    return [f"{key}=null", item] if isinstance(value, Mapping) else [item]


def safe_id(text: str) -> str:
    """`text` with characters other than letters, digits and `._+=,-` replaced, cut to MAX_ID with a hash."""
    safe = _UNSAFE.sub("_", text).strip("_") or "_"
    if len(safe) > MAX_ID:
        safe = f"{safe[: MAX_ID - 9]}~{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return safe


def value_label(value: Any) -> str:
    """A short readable label: scalars as written, a mapping as its kind plus its arguments."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        parts = [str(value.get("kind", ""))] + [f"{k}{value_label(v)}" for k, v in value.items() if k != "kind"]
        return "-".join(p for p in parts if p)
    if isinstance(value, list | tuple):
        return "-".join(value_label(v) for v in value)
    return str(value)


def axis_labels(keys: Sequence[str]) -> dict[str, str]:
    """The shortest distinct suffix of each dotted key, skipping a last `kind` (`model.attention.bias.kind` -> bias)."""
    parts = {k: [p for p in k.split(".")] for k in keys}
    for k, p in parts.items():
        if len(p) > 1 and p[-1] == "kind":
            parts[k] = p[:-1]
    labels = {}
    for key, p in parts.items():
        for n in range(1, len(p) + 1):
            label = ".".join(p[-n:])
            if all(".".join(q[-n:]) != label for other, q in parts.items() if other != key):
                break
        labels[key] = safe_id(label)
    return labels


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(f"grid {path}: {message}")


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file (structure only; `ablate.plan` validates each run's config)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"grid file {str(path)!r} does not exist")
    try:
        raw = OmegaConf.to_container(read_yaml(path), resolve=True)
    except OmegaConfBaseException as err:
        raise _fail(path, f"cannot parse: {err}") from err
    if not raw:
        raise _fail(path, "is empty: a grid lists axes (e.g. axes: {model.attention.kind: [mha, talking_heads]})")
    if not isinstance(raw, dict):
        raise _fail(path, f"expected a mapping with keys {list(GRID_KEYS)}")
    sections = sorted(k for k in raw if k in ("model", "data", "task", "trainer", "run"))
    if sections and "axes" not in raw:
        raise _fail(path, f"looks like a recipe (it has the config sections {sections}), not a grid: give it with "
                          "--config, and with --grid a file of axes: (and seeds:, fixed:)")  # fmt: skip
    for key in raw:
        if key not in GRID_KEYS:
            raise _fail(path, f"unknown key {key!r}; valid: {list(GRID_KEYS)}{suggest(str(key), list(GRID_KEYS))}")
    axes_raw = raw.get("axes") or {}
    if not isinstance(axes_raw, dict):
        raise _fail(path, "axes: expected a mapping of dotted config keys to lists (or mappings) of values")
    if "seed" in axes_raw or "seed" in (raw.get("fixed") or {}):
        raise _fail(path, "set seeds with the `seeds:` list, not as an axis or fixed override")
    axes: dict[str, dict[str, Any]] = {}
    for key, values in axes_raw.items():
        if isinstance(values, dict):
            named = {safe_id(str(label)): v for label, v in values.items()}
        elif isinstance(values, list):
            named = {safe_id(value_label(v)): v for v in values}
        else:
            raise _fail(path, f"axes.{key}: expected a list of values or a mapping label -> value, got {values!r}")
        if not named or len(named) != len(values):
            pairs = values.items() if isinstance(values, dict) else [(value_label(v), v) for v in values]
            clash: dict[str, list[tuple[str, Any]]] = {}
            for label, value in pairs:
                clash.setdefault(safe_id(str(label)), []).append((str(label), value))
            why = ""
            for name, group in ((k, g) for k, g in clash.items() if len(g) > 1):
                if len({label for label, _ in group}) > 1:  # distinct as written, one once safe for a folder name
                    why += f"; {' and '.join(repr(label) for label, _ in group)} both become {name!r} in run names"
                elif not isinstance(values, dict):  # 1 and "1": one label for two values
                    why += (f"; the values {' and '.join(repr(v) for _, v in group)} are both labelled {name!r} (a "
                            "mapping label -> value names them apart)")  # fmt: skip
            raise _fail(path, f"axes.{key}: needs at least one value, each with a distinct label; got {values!r}{why}")
        # as the config reads them: 1, 1.0 and true are three values (Lightning's limit_train_batches: 1 batch, all)
        typed = {label: json.dumps(value, sort_keys=True, default=str) for label, value in named.items()}
        same = [(a, b) for i, (a, x) in enumerate(typed.items()) for b, y in list(typed.items())[i + 1 :] if x == y]
        if same:  # one config under two labels: the same run twice
            raise _fail(path, f"axes.{key}: {same[0][0]} and {same[0][1]} are the same value ({named[same[0][0]]!r}); "
                              "their runs would be one config twice (seeds: repeats a config)")  # fmt: skip
        if is_named(str(key)) and not (
            isinstance(values, dict)
            and all(isinstance(v, dict) and v and all("." in k for k in v) for v in named.values())
        ):
            raise _fail(
                path,
                f"axes.{key}: an axis named without a dot maps labels to sets of overrides "
                f"({{label: {{section.key: value, ...}}}}), got {values!r}",
            )
        axes[str(key)] = named
    seeds = raw.get("seeds")
    if seeds is not None and (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise _fail(path, f"seeds: expected a non-empty list of ints, got {seeds!r}")
    if seeds is not None and len(set(seeds)) != len(seeds):
        raise _fail(path, f"seeds: {seeds} repeats a seed")
    fixed = raw.get("fixed") or {}
    if not isinstance(fixed, dict) or not all("." in str(k) for k in fixed):
        raise _fail(
            path, f"fixed: expected a mapping of dotted config keys to values (trainer.max_epochs: 3), got {fixed!r}"
        )
    mode = raw.get("mode")
    if mode not in (None, "max", "min"):
        raise _fail(path, f"mode: {mode!r} is not 'max' or 'min'")
    recipes = raw.get("recipes")
    if recipes is not None and not (isinstance(recipes, list) and all(isinstance(r, str) for r in recipes)):
        raise _fail(path, f"recipes: expected a list of recipe names (e.g. [vit, ast]), got {recipes!r}")
    grid = Grid(path, axes, axis_labels(list(axes)), seeds, fixed, raw.get("metric"), mode, recipes)
    both = sorted(f"{f} (axis key {k})" for f in fixed for k in grid.keys() if inside(str(f), k))
    if both:
        raise _fail(path, f"fixed: {both} set again by the axes (an axis value replaces all of its key)")
    own = {axis: set_keys(values) if is_named(axis) else [axis] for axis, values in axes.items()}
    counts = [k for keys in own.values() for k in keys]
    twice = sorted({k for k in counts if counts.count(k) > 1})
    if twice:
        raise _fail(path, f"{twice} set by more than one axis")
    nested = sorted(  # keys of two axes, one inside the other (the values of one axis are alternatives)
        (a, b) for x in own for y in own if x != y for a in own[x] for b in own[y] if a != b and inside(a, b)
    )
    for axis, values in axes.items():  # within one set of overrides: a key before the key it is inside
        sets = values.values() if is_named(axis) else []
        nested += [(a, b) for one in sets for i, a in enumerate(one) for b in list(one)[i + 1 :] if inside(a, b)]
    if nested:
        a, b = nested[0]
        raise _fail(
            path,
            f"axis keys {a} and {b} overlap: a value of {b} replaces {a} whole; vary them together in one axis "
            f"({b}: {{label: {{...}}}}) or in a named axis of override sets (the outer key first)",
        )
    return grid
