"""The tokenizer of a run: recorded in every checkpoint as a digest, and checked when a command loads the run.

A model's weights are only meaningful with the tokenizer they were trained with. `fit` saves a learned tokenizer as
`<run dir>/tokenizer.json` (`attnzoo.data.tokenizers.subword.save_run_tokenizer`) and `TokenizerStamp` writes its
digest (`...subword.tokenizer_digest`) into each checkpoint under `STAMP_KEY`. A command that loads the run uses
that file, never a tokenizer learned again from the training files (which may have changed or moved), and
`check_tokenizer` refuses a tokenizer whose digest differs from the checkpoint's (another run's tokenizer.json).
Checkpoints written before the stamp existed are checked against the digest in the data's record (`translation.json`,
`lm.json`), when it has one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import lightning as L

from ..config import Config, ConfigError
from ..util.files import read_json_object

log = logging.getLogger("attnzoo")
STAMP_KEY = "attnzoo_tokenizer_sha256"
RECORDS = ("translation.json", "lm.json")  # the sequence DataModules' records, which hold the digest too


class TokenizerStamp(L.Callback):
    """Writes the digest of the DataModule's tokenizer (if it has one) into every checkpoint."""

    def __init__(self) -> None:
        self._digest: str | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        tok = trainer.datamodule.tokenizer
        if tok is None:
            return
        if self._digest is None:
            from ..data.tokenizers.subword import tokenizer_digest

            self._digest = tokenizer_digest(tok)
        checkpoint[STAMP_KEY] = self._digest


def saved_tokenizer(cfg: Config, run_dir: Path) -> dict[str, str]:
    """{"data.tokenizer": the run's `tokenizer.json`} when it has one (a learned subword tokenizer, or a copy of the
    user's file); a learned kind without it is an error: learning it again from data read now could give other ids
    than the weights were trained with."""
    from ..data.tokenizers.subword import KINDS, TOKENIZER_FILE

    spec = cfg.section("data").get("tokenizer")
    saved = run_dir / TOKENIZER_FILE
    if not isinstance(spec, str) or spec in ("bytes", "listops", "auto"):
        return {}
    if saved.is_file():
        return {"data.tokenizer": str(saved)}
    if spec in KINDS:
        raise ConfigError(
            f"{run_dir}: no {TOKENIZER_FILE}. The run's data.tokenizer is {spec!r}, learned from its training data "
            f"when it was trained, and its weights need exactly that tokenizer: copy the run's own {TOKENIZER_FILE} "
            "back into the run directory (attnzoo does not learn it again: the training data may have changed)"
        )
    return {}


def expected_digest(run_dir: Path, checkpoint: dict[str, Any]) -> tuple[str | None, str]:
    """(digest, where it was found): the checkpoint's stamp, else the data record's `tokenizer.sha256`."""
    stamp = checkpoint.get(STAMP_KEY)
    if isinstance(stamp, str):
        return stamp, "the checkpoint"
    for name in RECORDS:
        try:  # unreadable, no JSON object, or nested too deep for the parser: no digest there
            record = read_json_object(run_dir / name)
        except ValueError:
            continue
        tokenizer = record.get("tokenizer")
        digest = tokenizer.get("sha256") if isinstance(tokenizer, dict) else None
        if isinstance(digest, str):
            return digest, str(run_dir / name)
    return None, ""


def check_tokenizer(tok: Any, run_dir: Path, ckpt: Path, checkpoint: dict[str, Any], *, hint: str = "") -> None:
    """ConfigError unless `tok` is the tokenizer the checkpoint was trained with (when the run recorded which);
    `hint` says what to do (default: put the run's own tokenizer.json back)."""
    from ..data.tokenizers.subword import TOKENIZER_FILE, tokenizer_digest

    inside = any(Path(f(ckpt)).is_relative_to(f(run_dir)) for f in (os.path.abspath, os.path.realpath))  # links
    if not hint and not inside:  # --checkpoint FILE of another run
        hint = (
            f"the checkpoint is not one of {run_dir}'s own; if it comes from another run, give that run's directory "
            f"(with its tokenizer.json), or a checkpoint of this run"
        )
    hint = hint or f"{run_dir / TOKENIZER_FILE} was replaced (another run's?). Put the run's own tokenizer.json back"
    want, where = expected_digest(run_dir, checkpoint)
    if want is None:
        log.warning("%s records no tokenizer digest (an older run): the tokenizer could not be checked", ckpt)
        return
    got = tokenizer_digest(tok)
    if got != want:
        name = getattr(tok, "name", TOKENIZER_FILE)
        raise ConfigError(
            f"the tokenizer {name!r} is not the one {str(ckpt)!r} was trained with (sha256 {got[:12]}... here, "
            f"{want[:12]}... recorded in {where}): " + hint
        )


def check_saved_tokenizer(run_dir: Path, ckpt: Path, checkpoint: dict[str, Any]) -> bool:
    """`check_tokenizer` on the run's `tokenizer.json`, if it has one (returns whether it had)."""
    from ..data.tokenizers.subword import TOKENIZER_FILE, SubwordTokenizer

    path = run_dir / TOKENIZER_FILE
    if not path.is_file():
        return False
    try:
        tok = SubwordTokenizer.load(path)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    check_tokenizer(tok, run_dir, ckpt, checkpoint)
    return True
