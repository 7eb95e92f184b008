"""`python -m attnzoo.bench <suite> [--quick] [--repeats N] [--out DIR]` (or `attnzoo bench ...`)

Speed and memory benchmarks. Each suite (`attnzoo.benchmarks.<suite>`) measures its variants side by side in
one run and writes `<out>/<suite>.json` and `.md` (default: `benchmarks/results`), with the hardware, threads
and torch version recorded beside the numbers.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from .benchmarks.harness import OUT_ENV, load_suite, suites


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnzoo bench", description="Speed and memory benchmarks.")
    parser.add_argument("suite", help=f"one of {suites()}")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="results directory (default: benchmarks/results)")
    args = parser.parse_args(argv)
    if args.out:
        os.environ[OUT_ENV] = args.out
    torch.manual_seed(0)
    rows = load_suite(args.suite).run(args)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
