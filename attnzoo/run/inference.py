"""A sequence run's model built from its run directory alone, for `translate` and `generate`.

What the model needs from the data (vocabulary size, padding / bos / eos ids, context length) comes from the run's
`tokenizer.json` (or the fixed bytes tokenizer) and its `config.yaml`; no DataModule is built and no data file is
read, so the training files may have moved or gone.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError
from ..data.modules.base import DataModule

# the data option that is the model's context length, per sequence data kind
CONTEXT_LENGTH = {"translation": "max_len", "lm": "block_size"}


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


def build_without_data(cfg: Config, run_dir: Path) -> tuple[Any, Any, Config]:
    """(task with an untrained network, tokenizer, resolved config) of the sequence run in `run_dir`."""
    from ..data.tokenizers.subword import run_tokenizer
    from .build import build_net, build_task, resolve

    kind = cfg.section("data")["kind"]
    if kind not in CONTEXT_LENGTH:  # before its tokenizer is looked for: a classifier's may be a word list
        raise ConfigError(
            f"{run_dir} is a {kind!r} run: translate and generate read {sorted(CONTEXT_LENGTH)} runs; for this one "
            "use python -m attnzoo.evaluate (its metrics) or python -m attnzoo.viz (its attention)"
        )
    spec = cfg.section("data").get("tokenizer", "bpe")
    try:
        tok = run_tokenizer(run_dir, spec)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    threads = cfg.section("trainer").get("num_threads")
    if threads:
        import torch

        torch.set_num_threads(threads)
    section = "model"
    try:
        cfg = resolve(cfg, SavedData(run_context(cfg, tok)))
        net = build_net(cfg)
        section = "task"
        task = build_task(cfg, net)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(f"{section} (kind {cfg.section(section).get('kind')!r}): {err}") from err
    return task, tok, cfg
