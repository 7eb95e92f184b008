"""`python -m attnzoo.translate <run dir> --text TEXT [--text TEXT ...] [--file FILE] [--beam K] [--checkpoint ...]`

Translations of sentences by a trained translation run (data kind `translation`): the run is rebuilt with
`attnzoo.run.load_run` (its own saved `tokenizer.json`), each sentence encoded as the run's sources are, and
decoded greedily (`--beam 1`) or with beam search (`--beam K`, default the run's `task.beam_size`). One
translation per line on stdout. Language-model runs continue a prompt with `python -m attnzoo.generate`.

Notation: B sentences, S source tokens.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .attention.specs import ALLOW_IMPORTS_HELP, allow_imports
from .config import ConfigError
from .run import load_run, show_log

Tensor = torch.Tensor


def source_batch(data: Any, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
    """(src [B, S], src_padding_mask [B, S]) of `texts`, encoded by the run's DataModule and right-padded."""
    ids = [data.encode_source(text) for text in texts]
    for text, row in zip(texts, ids, strict=True):
        if not row:
            raise ConfigError(f"--text: {text[:80]!r} has no tokens under the run's tokenizer")
    pad = data.tokenizer.pad_id
    src = torch.full((len(ids), max(map(len, ids))), pad, dtype=torch.long)  # [B, S]
    for i, row in enumerate(ids):
        src[i, : len(row)] = torch.tensor(row)
    lengths = torch.tensor([len(row) for row in ids])
    return src, torch.arange(src.shape[1])[None, :] >= lengths[:, None]


def check_kind(run: Any, kind: str, command: str) -> None:
    if run.data_kind != kind:
        other = {"translation": "translate", "lm": "generate"}.get(run.data_kind)
        hint = f"; use python -m attnzoo.{other}" if other else ""
        raise ConfigError(f"{command}: {run.run_dir} is a {run.data_kind!r} run, not a {kind!r} one{hint}")


def translate(
    run_dir: Path,
    texts: Sequence[str],
    *,
    beam: int | None = None,
    checkpoint: str = "best",
    overrides: Sequence[str] = (),
) -> list[str]:
    """Translations of `texts` by the run in `run_dir` (beam None: the run's `task.beam_size`)."""
    if not texts:
        raise ConfigError("translate: give at least one sentence (--text or --file)")
    run = load_run(run_dir, checkpoint, overrides=overrides)
    check_kind(run, "translation", "translate")
    task = run.task.eval()
    beam = task.beam_size if beam is None else beam
    if beam < 1:
        raise ConfigError(f"--beam ({beam}) must be >= 1")
    src, mask = source_batch(run.data, texts)
    ids = task.translate(src, mask, beam_size=beam)  # [B, T]
    return [run.data.decode(row) for row in ids]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo translate", description="Translate sentences with a trained run.")
    p.add_argument("run_dir", type=Path, help="a translation run directory written by attnzoo fit")
    p.add_argument("--text", action="append", default=[], help="a sentence to translate (repeatable)")
    p.add_argument("--file", type=Path, help="a UTF-8 file of sentences, one per line")
    p.add_argument("--beam", type=int, default=None, help="beam size (1: greedy; default: the run's task.beam_size)")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides of the run's config")
    args = p.parse_intermixed_args(argv)
    allow_imports(args.allow_imports)
    show_log()
    texts = list(args.text)
    try:
        if args.file is not None:
            if not args.file.is_file():
                raise ConfigError(f"--file: no file at {str(args.file)!r}")
            texts += [line for line in args.file.read_text(encoding="utf-8").splitlines() if line.strip()]
        out = translate(args.run_dir, texts, beam=args.beam, checkpoint=args.checkpoint, overrides=args.overrides)
    except ConfigError as err:
        print(f"attnzoo translate: error: {err}", file=sys.stderr)
        return 2
    for line in out:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
