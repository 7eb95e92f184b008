"""`python -m attnzoo.generate <lm run dir> --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
[--top-p P] [--seed S] [--checkpoint best|last|FILE]`

Continues a prompt with a trained language-model run (data kind `lm`), over the KV cache: sampling with the
given temperature / top-k / top-p (defaults: the run's `task.temperature`, `task.top_k`, `task.top_p`), or
greedy with `--temperature 0`. Prints the prompt and its continuation. Translation runs use
`python -m attnzoo.translate`.

The model is built from the run directory alone (its `config.yaml` and `tokenizer.json`; the training files are not
read). Special-token strings such as "[EOS]" in the prompt are plain text. A `--max-new-tokens` beyond what the
model's context (`data.block_size`) leaves after the prompt is capped, and the command says so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .config import ConfigError
from .fit import check_rank_format
from .generation import NonFiniteScores
from .translate import check_kind
from .util.files import discard_stdout
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

log = logging.getLogger("attnzoo")
UNSET = object()


def generate(
    run_dir: Path,
    prompt: str,
    *,
    max_new_tokens: int = 64,
    temperature: float | None = None,
    top_k: int | None | object = UNSET,
    top_p: float | None | object = UNSET,
    seed: int = 0,
    checkpoint: str = "best",
    overrides: Sequence[str] = (),
) -> str:
    """The prompt and its continuation by the run in `run_dir`; options left out keep the run's task settings."""
    if max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens ({max_new_tokens}) must be >= 1")
    if not 0 <= seed < 2**64:  # torch.Generator's range ("Overflow when unpacking long long" past it)
        raise ConfigError(f"--seed ({seed}) must be an integer from 0 to 2**64 - 1")
    from .data.tokenizers.subword import decode_generated, encode_prompt, unknown_note
    from .run import load_run
    from .tasks.sequence import LanguageModelTask

    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    try:  # the task's own rules, before the run is loaded
        LanguageModelTask.check_config(
            {k: v for k, v in given.items() if v is not UNSET and v is not None},
            named={"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p"},
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None

    check_kind(run_dir, "lm", "generate")  # before its checkpoint is looked for
    run = load_run(run_dir, checkpoint, overrides=overrides, with_data=False)
    check_kind(run, "lm", "generate")
    task = run.task.eval()
    if temperature is not None:
        task.temperature = temperature
    if top_k is not UNSET:
        task.top_k = top_k
    if top_p is not UNSET:
        task.top_p = top_p
    tok = run.tokenizer
    unknown: list[str] = []
    ids = torch.tensor([encode_prompt(tok, prompt, unknown)])  # [1, P], bos first
    if unknown:
        log.warning("generate: --prompt holds %s, and the text printed leaves them out", unknown_note(unknown))
    room = task.room(ids.shape[1])
    if room < 1:
        raise ConfigError(
            f"--prompt has {ids.shape[1] - 1} tokens (and bos); the model reads at most {task.max_len} "
            "(data.block_size): shorten it"
        )
    if max_new_tokens > room:
        log.warning(
            "generate: --max-new-tokens %d capped to %d: the model reads at most %d tokens (data.block_size) and the "
            "prompt takes %d (bos included); the last new token is never read back, so prompt and new tokens "
            "come to %d + 1",
            max_new_tokens,
            room,
            task.max_len,
            ids.shape[1],
            task.max_len,
        )
    try:
        with torch.inference_mode():
            new = task.generate(ids, max_new_tokens=min(max_new_tokens, room), seed=seed)  # [1, T]
    except NonFiniteScores:  # the checkpoint's weights, not the options: main says it
        raise
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return decode_generated(tok, torch.cat([ids[0], new[0]]).tolist())


def _or_null(kind: type) -> Callable[[str], object]:
    """An argparse type: a `kind` value, or None for "null" / "none" (the option's cut turned off)."""

    def parse(text: str) -> object:
        return None if text.lower() in ("null", "none") else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its error ("invalid int value")
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo generate", description="Continue a prompt with a trained LM run.")
    p.add_argument("run_dir", type=Path, help="a language-model run directory written by attnzoo fit")
    p.add_argument("--prompt", default="", help="the text to continue (default: start a document)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=None, help="0: greedy (default: the run's task.temperature)")
    p.add_argument("--top-k", type=_or_null(int), default=UNSET,
                   help="keep the k most likely tokens; null: no cut (default: the run's)")  # fmt: skip
    p.add_argument("--top-p", type=_or_null(float), default=UNSET,
                   help="nucleus sampling; null: no cut (default: the run's)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides of the run's config")
    args = p.parse_intermixed_args(argv)
    allow_imports(args.allow_imports)
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo generate: error: {err}", file=sys.stderr)
        return 2
    from .run import show_log

    show_log()
    options = {k: v for k, v in (("top_k", args.top_k), ("top_p", args.top_p)) if v is not UNSET}
    try:
        text = generate(
            args.run_dir,
            args.prompt,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            checkpoint=args.checkpoint,
            overrides=args.overrides,
            **options,
        )
        print(text, flush=True)
    except ConfigError as err:
        print(f"attnzoo generate: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteScores as err:  # as fit, evaluate and translate say it
        print(f"attnzoo generate: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped reading (`| head`): it has what it wanted
        discard_stdout()
    except KeyboardInterrupt:
        print("attnzoo generate: interrupted; nothing generated", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
