"""Which data split a run's test pass scores: the test split, or the validation split when the data has no test
examples (text given only train and val files, the embedded MNIST subset, an audio folder whose split leaves no
test clip). Decided before training, logged, and recorded in `summary.json` as `"test": {"split": ...}`."""

from __future__ import annotations

import logging
from typing import Any

from ..config import ConfigError

log = logging.getLogger("attnzoo")


def split_size(data: Any, split: str) -> int | None:
    """Examples in `split` of a set-up DataModule: 0 when it has none, None when its loader cannot say."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        loader = getattr(data, f"{split}_dataloader")()
    except (ValueError, MisconfigurationException, NotImplementedError):  # attnzoo's data raise ValueError
        return 0
    try:
        return len(loader.dataset)
    except TypeError:  # an iterable dataset
        return None


def test_split(data: Any) -> str:
    """ "test" when the data has test examples, else "val" (logged); ConfigError when it has neither."""
    if split_size(data, "test") != 0:
        return "test"
    if split_size(data, "val") == 0:
        raise ConfigError("run.test: the data has neither test nor validation examples; set run.test=false")
    log.warning(
        "run.test: the data has no test examples; the test pass scores the validation split (summary.json: "
        "test.split = val)"
    )
    return "val"
