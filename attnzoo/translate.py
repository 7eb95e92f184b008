"""`python -m attnzoo.translate <run dir> --text TEXT [--text TEXT ...] [--file FILE] [--beam K] [--batch-size N]
[--checkpoint ...]`

Translations of sentences by a trained translation run (data kind `translation`), from the run directory alone: the
model is built from its `config.yaml` and `tokenizer.json` (`attnzoo.run.load_run(..., with_data=False)`; the
training files are not read). Each sentence is stripped of surrounding whitespace, as training strips its pairs,
and encoded with the run's tokenizer (special-token strings such as "[EOS]" in it are plain text), then decoded
greedily (`--beam 1`) or with beam search (`--beam K`, default the run's `task.beam_size`). One translation per line
on stdout.

`--file` (`-`: standard input) is read as `fit` reads text (UTF-8, a byte-order mark dropped, lines ending at
"\\n" or "\\r\\n", or a lone "\\r" in a file without "\\n"; other bytes stop with the file and line) and translated
in batches of `--batch-size` lines, each printed as soon as it is done, with progress on stderr.
Output lines match input lines: a blank (or whitespace-only) line gives a blank line; a blank `--text` is refused.
A sentence longer than the model's `data.max_len` tokens is cut, and the command says so. Language-model runs
continue a prompt with `python -m attnzoo.generate`.

Notation: B sentences, S source tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

from .config import ConfigError
from .fit import check_rank_format
from .generation import NonFiniteScores
from .util.files import discard_stdout
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

Tensor = torch.Tensor
log = logging.getLogger("attnzoo")
SHOWN_CUTS = 5  # cut sentences named one by one; the rest are counted
PROGRESS_EVERY = 2.0  # seconds between progress lines on stderr


def source_batch(
    tok: Any, texts: Sequence[str], max_len: int, unknown: list[list[str]] | None = None
) -> tuple[Tensor, Tensor, list[int]]:
    """(src [B, S], src_padding_mask [B, S], lengths before cutting) of `texts`: user text stripped of surrounding
    whitespace as training strips its pairs (`attnzoo.data.formats.parallel_files`; a trailing space would be a
    token the model never saw), encoded with special-token strings as plain text, cut to `max_len` tokens and
    right-padded. With `unknown`, each text's pieces that became the unknown token are appended to it as a list."""
    from .data.tokenizers.subword import encode_user_text

    for text in texts:
        if not text.strip():  # stripped, it would have no tokens: say what was given rather than "no tokens"
            raise ConfigError(f"--text: {text!r} is {'only whitespace' if text else 'empty'}; give a sentence")
    texts = [text.strip() for text in texts]
    full = []
    for text in texts:
        pieces: list[str] = []
        full.append(encode_user_text(tok, text, pieces))
        if unknown is not None:
            unknown.append(pieces)
    for text, row in zip(texts, full, strict=True):
        if not row:
            raise ConfigError(f"--text: {text[:80]!r} has no tokens under the run's tokenizer")
    ids = [row[:max_len] for row in full]
    src = torch.full((len(ids), max(map(len, ids))), tok.pad_id, dtype=torch.long)  # [B, S]
    for i, row in enumerate(ids):
        src[i, : len(row)] = torch.tensor(row)
    lengths = torch.tensor([len(row) for row in ids])
    return src, torch.arange(src.shape[1])[None, :] >= lengths[:, None], [len(row) for row in full]


def check_kind(run: Any, kind: str, command: str) -> None:
    """ConfigError unless `run` (a loaded run, or a run directory: its config.yaml's kind, before any checkpoint is
    looked for) is of data kind `kind`, naming the command that reads it."""
    from .run.rundir import saved_kind

    run_dir, found = (Path(run), saved_kind(Path(run))) if isinstance(run, str | Path) else (run.run_dir, run.data_kind)
    if found is not None and found != kind:
        other = {"translation": "translate", "lm": "generate"}.get(found)
        elsewhere = "python -m attnzoo.evaluate (its metrics) or python -m attnzoo.viz (its attention)"
        hint = f"; use python -m attnzoo.{other}" if other else f"; for this one use {elsewhere}"
        raise ConfigError(f"{command}: {run_dir} is a {found!r} run, not a {kind!r} one{hint}")


class Translator:
    """A loaded translation run that translates batches of sentences and counts those it had to cut."""

    def __init__(self, run: Any, beam: int | None = None) -> None:
        check_kind(run, "translation", "translate")
        self.run, self.task, self.tok = run, run.task.eval(), run.tokenizer
        self.beam = self.task.beam_size if beam is None else beam
        if self.beam < 1:
            raise ConfigError(f"--beam ({self.beam}) must be >= 1")
        from .generation.beam import too_wide

        why = too_wide(self.beam, self.tok.vocab_size)
        if why:
            given = f"--beam ({self.beam})" if beam is not None else f"the run's task.beam_size ({self.beam}; --beam N)"
            raise ConfigError(f"{given} {why}")
        from .run.inference import context_length

        self.max_len = context_length(run.cfg)
        self.cut = 0
        self.unknown = 0  # sentences with characters the tokenizer never saw

    def __call__(self, texts: Sequence[str], where: Sequence[str] = ()) -> list[str]:
        """Translations of `texts` (`where` names each, e.g. "line 7", for the message about a cut sentence)."""
        from .data.tokenizers.subword import decode_generated, unknown_note

        unknown: list[list[str]] = []
        src, mask, lengths = source_batch(self.tok, texts, self.max_len, unknown)
        for i, (n, pieces) in enumerate(zip(lengths, unknown, strict=True)):
            name = where[i] if i < len(where) else repr(texts[i][:40])
            if pieces:
                self.unknown += 1
                if self.unknown <= SHOWN_CUTS:
                    log.warning(
                        "translate: %s holds %s%s",
                        name,
                        unknown_note(pieces),
                        "; further such sentences are only counted" if self.unknown == SHOWN_CUTS else "",
                    )
            if n > self.max_len:
                self.cut += 1
                if self.cut <= SHOWN_CUTS:
                    log.warning(
                        "translate: %s has %d tokens; cut to the model's %d (data.max_len)%s",
                        name,
                        n,
                        self.max_len,
                        "; further cut sentences are only counted" if self.cut == SHOWN_CUTS else "",
                    )
        with torch.inference_mode():
            ids = self.task.translate(src, mask, beam_size=self.beam)  # [B, T]; NonFiniteScores: main says it
        # one line per sentence: a line break the tokenizer may decode would break the alignment
        return [" ".join(decode_generated(self.tok, row.tolist()).splitlines()) for row in ids]


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
    from .run import load_run

    check_kind(run_dir, "translation", "translate")
    run = load_run(run_dir, checkpoint, overrides=overrides, with_data=False)
    return Translator(run, beam)(texts)


def read_lines(path: Path, name: str | None = None) -> Iterator[str]:
    """The lines of a text file as `fit` reads text: UTF-8, a byte-order mark dropped, lines ending at "\\n" or
    "\\r\\n", or a lone "\\r" in a file without "\\n" (`byte_lines`), line ends removed; a byte that is not UTF-8 (or
    a NUL: a binary file) raises ConfigError naming the file (`name`, else `path`) and line, a UTF-16 or UTF-32 file
    one saying so."""
    from .data.formats.parallel_files import byte_lines
    from .data.formats.text_files import recode_hint, wide_unicode

    path_shown = name or path
    with path.open("rb") as f:
        note = wide_unicode(f.read(4), "FILE" if str(path_shown) == "-" else Path(path_shown).name)
        if note is not None:  # not "a binary file": a NUL is in every other byte of UTF-16
            raise ConfigError(f"--file {path_shown}: {note}")
        f.seek(0)
        for n, raw in enumerate(byte_lines(f), start=1):  # a byte-order mark dropped
            if b"\0" in raw:
                raise ConfigError(f"--file {path_shown} line {n}: a NUL byte: this is a binary file, not UTF-8 text")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start : err.end].hex(" ")
                raise ConfigError(
                    f"--file {path_shown} line {n}, column {err.start + 1}: byte(s) {bad} are not UTF-8 "
                    f"({err.reason}); {recode_hint(raw, 'FILE' if str(path_shown) == '-' else Path(path_shown).name)}"
                ) from None


def count_lines(path: Path, name: str | None = None) -> int:
    """The number of lines of `path`, every line checked by `read_lines` (so a bad byte stops before any output)."""
    return sum(1 for _ in read_lines(path, name))


def translate_file(
    translator: Translator, path: Path, out: TextIO, *, batch_size: int = 32, total: int | None = None
) -> int:
    """Translate `path` line by line into `out` (a blank line stays blank), `batch_size` sentences at a time, with
    progress on stderr; returns the number of lines (`total`: that number, when `count_lines` gave it already)."""
    if batch_size < 1:
        raise ConfigError(f"--batch-size ({batch_size}) must be >= 1")
    total = count_lines(path) if total is None else total
    done, last = 0, time.monotonic()
    pending: list[tuple[int, str]] = []  # (line number, text) of the lines not printed yet, blank ones included

    def flush() -> None:
        nonlocal done, last
        full = [(n, text) for n, text in pending if text.strip()]
        hyps = iter(translator([t for _, t in full], [f"--file line {n}" for n, _ in full]) if full else [])
        for _, text in pending:
            out.write((next(hyps) if text.strip() else "") + "\n")
        out.flush()
        done += len(pending)
        pending.clear()
        if time.monotonic() - last >= PROGRESS_EVERY and done < total:
            print(f"attnzoo translate: {done} of {total} lines", file=sys.stderr, flush=True)
            last = time.monotonic()

    for n, text in enumerate(read_lines(path), start=1):
        pending.append((n, text))
        if sum(1 for _, t in pending if t.strip()) >= batch_size:
            flush()
    flush()
    cut = f"; {translator.cut} cut to {translator.max_len} tokens" if translator.cut else ""
    unknown = f"; {translator.unknown} with characters the tokenizer never saw" if translator.unknown else ""
    print(f"attnzoo translate: {total} lines translated{cut}{unknown}", file=sys.stderr, flush=True)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo translate", description="Translate sentences with a trained run.")
    p.add_argument("run_dir", type=Path, help="a translation run directory written by attnzoo fit")
    p.add_argument("--text", action="append", default=[], help="a sentence to translate (repeatable)")
    p.add_argument(
        "--file", type=Path, help="a UTF-8 file of sentences, one per line, or - for standard input (after --text)"
    )
    p.add_argument("--beam", type=int, default=None, help="beam size (1: greedy; default: the run's task.beam_size)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences of --file translated at a time")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides of the run's config")
    args = p.parse_intermixed_args(argv)
    allow_imports(args.allow_imports)
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo translate: error: {err}", file=sys.stderr)
        return 2
    from .run import show_log

    show_log()
    piped = None
    try:
        given = args.file
        stream = given is not None and (
            str(given) == "-" or given.exists() and not given.is_file() and not given.is_dir()
        )
        if stream:  # standard input or a pipe (/dev/stdin, <(cmd)), kept whole: its lines are checked first
            if str(given) == "-" and sys.stdin.isatty():
                raise ConfigError("--file -: standard input is a terminal; pipe the lines in, or give --file FILE")
            source = contextlib.nullcontext(sys.stdin.buffer) if str(given) == "-" else open(given, "rb")
            piped = tempfile.NamedTemporaryFile(prefix="attnzoo-translate-", suffix=".txt", delete=False)
            with piped, source as lines:
                shutil.copyfileobj(lines, piped)
            args.file = Path(piped.name)
        if args.file is not None and not args.file.is_file():
            what = "is a directory" if args.file.is_dir() else "does not exist"
            raise ConfigError(f"--file: {str(args.file)!r} {what}; give a text file of one sentence per line")
        if not args.text and args.file is None:
            raise ConfigError("translate: give at least one sentence (--text or --file)")
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size ({args.batch_size}) must be >= 1")
        shown = str(given) if piped is not None else None  # messages name standard input or a pipe as given
        total = count_lines(args.file, shown) if args.file is not None else 0
        if args.file is not None and not total and not args.text:
            raise ConfigError(f"--file {shown or args.file}: no line to translate (the input is empty)")
        from .run import load_run

        check_kind(args.run_dir, "translation", "translate")  # before its checkpoint is looked for
        run = load_run(args.run_dir, args.checkpoint, overrides=args.overrides, with_data=False)
        translator = Translator(run, args.beam)
        if args.text:
            for line in translator(args.text):
                print(line, flush=True)
        if args.file is not None:
            translate_file(translator, args.file, sys.stdout, batch_size=args.batch_size, total=total)
    except ConfigError as err:
        print(f"attnzoo translate: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteScores as err:  # the checkpoint's weights, not the command: as fit and evaluate say it
        print(f"attnzoo translate: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped reading (`| head`): it has what it wanted
        discard_stdout()
        return 0
    except KeyboardInterrupt:
        print("attnzoo translate: interrupted; the translations written so far are whole lines", file=sys.stderr)
        return 130
    finally:
        if piped is not None:
            Path(piped.name).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
