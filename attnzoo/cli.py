"""`attnzoo <command> ...`: the console script; each command is also `python -m attnzoo.<command>`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "fit": "train a recipe",
    "evaluate": "test metrics of a saved checkpoint",
    "baseline": "pixels / TF-IDF / log-mel statistics + logistic regression on a recipe's data",
    "ablate": "run a grid of attention variants and write one report",
    "bench": "speed and memory benchmarks",
    "viz": "attention maps of a trained run (cross-attention maps for text-image runs, alignment for translation)",
    "translate": "translate sentences with a trained translation run (greedy or beam search)",
    "generate": "continue a prompt with a trained language-model run (sampling or greedy)",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: attnzoo <command> [args]\n\ncommands:")
        for name, what in COMMANDS.items():
            print(f"  {name:10s} {what}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"attnzoo: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"attnzoo.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"attnzoo.{name}":
            raise
        print(f"attnzoo: command {name!r} is not available in this version", file=sys.stderr)
        return 2
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
