"""`python -m attnzoo.ablate --config recipes/<recipe>.yaml --grid configs/ablations/<grid>.yaml [key=value ...]`

Runs every variant of a grid (see `attnzoo.ablation.grid`) as its own `python -m attnzoo.fit` process, so a crash or
an out-of-memory run ends only that run (recorded as failed, with its error); the others go on. Every run's
config is validated before the first one starts. Runs go one after another, `--jobs` at a time, or one per
GPU when there are several (`--gpus`). The ablation directory (`--out`) holds:

    ablation.json             the plan: command, configs, overrides, variants
    runs/<variant id>/        one fit run dir (config.yaml, checkpoints/, metrics.csv, summary.json) plus
                              ablate.json (status, error, wall time, command) and stdout.log / stderr.log
    report.csv  report.md  metric.png  metric_vs_throughput.png  runs.csv

A run is finished when its summary.json exists and its ablate.json says "ok"; started again, an ablation
runs only the missing runs (and failed ones, unless --skip-failed). Unfinished run dirs are cleared first.

Exit status: 0 when every run is ok, 1 when some failed (the others are reported), 2 for a config error (nothing
runs), 130 / 143 when Ctrl-C / SIGTERM stopped it: the runs in progress are stopped and recorded as interrupted,
queued ones are not started, the report of the finished ones is written (a second Ctrl-C kills the runs in
progress at once).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .ablation.grid import load_grid
from .ablation.runner import AblationInterrupted, ablate, failed_runs, gpu_slots, plan, status
from .config import ConfigError
from .run import show_log


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo ablate", description="Run a grid of variants of a recipe; one report.")
    p.add_argument("--config", action="append", default=[], help="a recipe YAML; repeat to overlay more files")
    p.add_argument("--grid", required=True, help="a grid file (configs/ablations/*.yaml)")
    p.add_argument("--out", help="the ablation directory (default: runs/ablate/<recipe>-<grid>)")
    p.add_argument("--seeds", type=int, nargs="+", help="run these seeds instead of the grid's")
    p.add_argument("--jobs", type=int, default=0, help="runs at a time (default: one per GPU group, else 1)")
    p.add_argument("--gpus", default="auto", help="auto (one run per GPU when there are several), none, or 0,1,...")
    p.add_argument("--gpus-per-run", type=int, default=1, help="GPUs each run sees (with trainer.devices=N for DDP)")
    p.add_argument("--skip-failed", action="store_true", help="do not run again the runs that failed before")
    p.add_argument("--dry-run", action="store_true", help="validate every run's config and list the runs")
    p.add_argument("--report-only", action="store_true", help="write the report from the runs already done")
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run, e.g. trainer.max_epochs=3")
    args = p.parse_intermixed_args(argv)
    show_log()
    if not args.config:
        p.error("--config is required")
    out = Path(args.out or f"runs/ablate/{Path(args.config[0]).stem}-{Path(args.grid).stem}")
    command_line = "python -m attnzoo.ablate " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        if args.report_only:
            from .ablation.report import write_report

            print(write_report(out), file=sys.stderr)
            return 0
        if args.dry_run:
            grid = load_grid(args.grid)
            if args.seeds:
                grid.seeds = args.seeds
            for run in plan(args.config, grid, args.overrides, out):
                print(f"{run.variant.id}  [{status(run)}]  {' '.join(run.overrides)}")
            return 0
        slots = gpu_slots(args.gpus, args.gpus_per_run)
        if args.jobs:
            slots = [slots[i % len(slots)] for i in range(args.jobs)] if slots != [{}] else [{}] * args.jobs
        ablate(args.config, args.grid, out, args.overrides, slots=slots, skip_failed=args.skip_failed,
               seeds=args.seeds, command_line=command_line)  # fmt: skip
    except ConfigError as err:
        print(f"attnzoo ablate: error: {err}", file=sys.stderr)
        return 2
    except AblationInterrupted as err:
        print(f"attnzoo ablate: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:  # before any run started (while planning)
        print("attnzoo ablate: interrupted before any run started", file=sys.stderr)
        return 130
    failed = failed_runs(out)
    if failed:
        total = len(json.loads((out / "ablation.json").read_text())["variants"])
        print(f"attnzoo ablate: {len(failed)} of {total} runs failed: {failed}; errors and the report of the "
              f"others in {out / 'report.md'}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"attnzoo ablate: report in {out / 'report.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
