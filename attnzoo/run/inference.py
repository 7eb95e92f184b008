"""A run's model built from its run directory alone: a sequence run's for `translate` and `generate`, a
classifier's for `viz` of one input.

What the model needs from the data (vocabulary size, padding / bos / eos ids, context length) comes from the run's
`tokenizer.json` (or the fixed bytes tokenizer) and its `config.yaml` (a classifier's records its classes, sizes and
features); no DataModule is built and no data file is read, so the training files may have moved or gone.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError
from ..data.modules.base import DataModule

# the data option that is the model's context length, per sequence data kind
CONTEXT_LENGTH = {"translation": "max_len", "lm": "block_size"}
# classifier data kinds whose model is built from the run directory alone, to read one input at a time (viz
# --input / --text): their config.yaml records every model input the data gave (classes, vocabulary, sizes)
CLASSIFIERS = ("image", "audio", "text")


def context_length(cfg: Config) -> int:
    """The most tokens the model of a sequence run reads (`data.max_len`, or the LM's `data.block_size`)."""
    from ..data import DATAMODULES

    data = cfg.section("data")
    kind = data["kind"]
    if kind not in CONTEXT_LENGTH:
        raise ConfigError(f"data.kind {kind!r}: only {sorted(CONTEXT_LENGTH)} runs load without their data")
    key = CONTEXT_LENGTH[kind]
    return data.get(key, inspect.signature(DATAMODULES[kind]).parameters[key].default)


def run_context(cfg: Config, tok: Any) -> dict[str, Any]:
    """The model inputs a sequence DataModule would give, from the tokenizer and the data options."""
    return {
        "vocab_size": tok.vocab_size,
        "pad_id": tok.pad_id,
        "bos_id": tok.bos_id,
        "eos_id": tok.eos_id,
        "max_len": context_length(cfg),
    }


class SavedData(DataModule):
    """Stands in for a sequence run's DataModule when its model is built without the data: it gives what the model
    needs from the run's tokenizer and config, and reads no file."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        super().__init__()
        self.inputs = inputs

    def model_inputs(self) -> dict[str, Any]:
        return dict(self.inputs)


def build_without_data(cfg: Config, run_dir: Path, *, classifiers: bool = False) -> tuple[Any, Any, Config]:
    """(task with an untrained network, tokenizer, resolved config) of the sequence run in `run_dir` (translate,
    generate), or with `classifiers` also of a classifier (`CLASSIFIERS`: viz of one input), whose config.yaml holds
    every model input its data gave."""
    from ..data.tokenizers.subword import run_tokenizer
    from .build import build_net, build_task, resolve

    kind = cfg.section("data")["kind"]
    if kind not in CONTEXT_LENGTH and not (classifiers and kind in CLASSIFIERS):  # before a tokenizer is looked for
        raise ConfigError(
            f"{run_dir} is a {kind!r} run: translate and generate read {sorted(CONTEXT_LENGTH)} runs; for this one "
            "use python -m attnzoo.evaluate (its metrics) or python -m attnzoo.viz (its attention)"
        )
    spec = cfg.section("data").get("tokenizer", "bpe")
    try:
        tok = run_tokenizer(run_dir, spec) if kind in CONTEXT_LENGTH else _classifier_tokenizer(cfg, run_dir)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    threads = cfg.section("trainer").get("num_threads")
    if threads:
        import torch

        torch.set_num_threads(threads)
    section = "model"
    try:
        if kind in CONTEXT_LENGTH:
            cfg = resolve(cfg, SavedData(run_context(cfg, tok)))
        net = build_net(cfg)  # a classifier's config.yaml was resolved when it was trained: classes, sizes, ...
        section = "task"
        task = build_task(cfg, net)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # TypeError: a config.yaml without the model inputs (not a run's own)
        raise ConfigError(f"{section} (kind {cfg.section(section).get('kind')!r}) of {run_dir}: {err}") from err
    return task, tok, cfg


def _classifier_tokenizer(cfg: Config, run_dir: Path) -> Any:
    """The text classifier's tokenizer as its data module made it (its saved `tokenizer.json`, or the fixed one its
    config names); None for the other classifiers."""
    from ..data.tokenizers.factory import make_tokenizer
    from ..data.tokenizers.subword import TOKENIZER_FILE

    if cfg.section("data")["kind"] != "text":
        return None
    saved = run_dir / TOKENIZER_FILE
    return make_tokenizer(str(saved) if saved.is_file() else cfg.section("data").get("tokenizer"))
