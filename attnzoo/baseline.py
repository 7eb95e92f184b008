"""`python -m attnzoo.baseline --config recipes/<recipe>.yaml [key=value ...]` or `... baseline --run-dir <run>`

Fits the recipe's classical baseline on its data's splits (pixels, TF-IDF or log-mel statistics, then logistic
regression, or a translation memory for translation; `attnzoo.run.baseline`) without training anything, and prints
its metrics. With `--run-dir` it reads the run's `config.yaml` and adds the result to its `summary.json` (as
`run.baseline: true` would have).
`--json FILE` also writes the result as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import ConfigError, load
from .fit import check_rank_format, parser
from .util.files import write_json
from .util.imports import allow_imports


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("attnzoo baseline", "A scikit-learn baseline on a recipe's data splits.")
    p.add_argument("--run-dir", type=Path, help="a run directory: use its config.yaml, add the result to summary.json")
    p.add_argument("--json", type=Path, help="also write the result to this JSON file")
    args = p.parse_intermixed_args(argv)
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo baseline: error: {err}", file=sys.stderr)
        return 2
    from .run import show_log

    show_log()
    allow_imports(args.allow_imports)
    try:
        configs = list(args.config)
        if args.run_dir is not None:
            if not (args.run_dir / "config.yaml").is_file():
                from .util.files import runs_in

                raise ConfigError(
                    f"--run-dir: {str(args.run_dir)!r} is not a run directory (no config.yaml){runs_in(args.run_dir)}"
                )
            configs = [args.run_dir / "config.yaml", *configs]
        cfg = load(configs, args.overrides, run=args.run_dir is not None)
        if args.print_config:
            print(cfg.to_yaml(), end="")
            return 0
        from .run.baseline import fit_baseline
        from .run.build import build_data, embedded_only_keys
        from .run.rundir import added_options

        try:  # a run made before an option was added is read with the value it ran with
            preset = {**embedded_only_keys(cfg), **(added_options(cfg) if args.run_dir is not None else {})}
            data = build_data(cfg, preset)
            result = fit_baseline(data, num_threads=cfg.section("trainer").get("num_threads"))
        except ValueError as err:
            raise ConfigError(str(err)) from err
    except ConfigError as err:
        print(f"attnzoo baseline: error: {err}", file=sys.stderr)
        return 2
    chosen = f"C={result['C']:g}, " if "C" in result else ""  # logistic regression's; a translation memory has none
    print(f"{result['features']} + {result['model']} ({chosen}{result['train_examples']} train examples)")
    for key, value in result.items():
        if "/" in key:
            print(f"{key:20s} {value:.4f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.run_dir is not None:
        from .run.rundir import read_summary

        path, summary = args.run_dir / "summary.json", read_summary(args.run_dir)
        if not summary and path.exists():
            print(f"attnzoo baseline: {path} held no run summary (not a JSON object); it is replaced", file=sys.stderr)
        write_json(path, {**summary, "baseline": result})  # a new file renamed over the old: no link followed
        print(f"attnzoo baseline: added to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
