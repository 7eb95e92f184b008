"""The model of a run: recorded in every checkpoint, and checked when a command loads the run.

A checkpoint's weights compute what they were trained to compute only in the model they were trained in. `ModelStamp`
writes the run's resolved `model` section (plain data, as config.yaml holds it) into each checkpoint under
`MODEL_KEY`, and `check_model` refuses a checkpoint whose section differs from the run's config.yaml in what its
weights depend on (`attnzoo.run.start.architecture`: not the dropout rates, training choices or attention
backends): `--checkpoint FILE` of another run with the same tokenizer loaded into this run's model, another
attention computing with its weights (key/value heads regrouped on load, `attnzoo.attention.kv_heads`), and no
error. The section compared is config.yaml's as written, not the command's overrides of it: `evaluate` and `viz`
may score the run's weights in another attention on purpose. Checkpoints written before the stamp existed are not
checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L

from ..config import ConfigError, dotted_leaves

MODEL_KEY = "attnzoo_model"
SHOWN = 6  # differing keys named in an error


class ModelStamp(L.Callback):
    """Writes the run's resolved model section (`model`, as config.yaml records it) into every checkpoint."""

    def __init__(self, model: Mapping[str, Any]) -> None:
        self.model = dict(model)

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[MODEL_KEY] = self.model


def model_differences(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> list[str]:
    """The dotted keys (`model.attention.bias`, ...) whose values differ between two model sections in what the
    weights depend on, each with both values: `theirs` the checkpoint's, `mine` the run's config.yaml's."""
    from ..models import MODELS
    from .start import architecture

    kind = theirs.get("kind")
    if kind != mine.get("kind"):
        return [f"model.kind ({kind!r} in the checkpoint, {mine.get('kind')!r} in config.yaml)"]
    if kind not in MODELS:  # nothing to build either way: load_run names the kind
        return []
    before, after = (dotted_leaves(architecture(section, kind), "model") for section in (theirs, mine))
    gone = "<not set>"
    return [
        f"{key} ({before.get(key, gone)!r} in the checkpoint, {after.get(key, gone)!r} in config.yaml)"
        for key in sorted(set(before) | set(after))
        if before.get(key, gone) != after.get(key, gone)
    ]


def check_model(run_dir: Path, ckpt: Path, checkpoint: Mapping[str, Any], model: Mapping[str, Any]) -> None:
    """ConfigError unless the checkpoint was trained with `model` (the run's config.yaml's model section) in what
    its weights depend on; a checkpoint that records no model section (an older run's) passes."""
    stamp = checkpoint.get(MODEL_KEY)
    if not isinstance(stamp, Mapping):
        return
    differ = model_differences(stamp, model)
    if not differ:
        return
    shown = "; ".join(differ[:SHOWN]) + (f"; and {len(differ) - SHOWN} more" if len(differ) > SHOWN else "")
    raise ConfigError(
        f"checkpoint {str(ckpt)!r} was trained with another model config than {run_dir / 'config.yaml'} ({shown}): "
        f"its weights would compute something else in this run's model. Give the run directory the checkpoint "
        f"belongs to (with --checkpoint best, last or the file), or a checkpoint of {run_dir}; if the model section "
        "of this config.yaml was edited since the run trained, put it back as it was"
    )
