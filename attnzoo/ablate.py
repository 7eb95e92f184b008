"""`python -m attnzoo.ablate --config recipes/<recipe>.yaml --grid configs/ablations/<grid>.yaml [key=value ...]`

Runs every variant of a grid (see `attnzoo.ablation.grid`) as its own `python -m attnzoo.fit` process, so a crash or
an out-of-memory run ends only that run (recorded as failed, with its error); the others go on. Every run's
config is validated before the first one starts. Where the runs go (`--launcher`):

- `local` (default): on this machine, one after another, `--jobs` at a time, or one per GPU when there are several
  (`--gpus`).
- `slurm`: one SLURM batch job per run (`attnzoo.ablation.slurm`); the job scripts are written to `<out>/slurm/`,
  `ablate` submits them and waits for them (`--no-wait`: submit and return; the same command later waits for the
  jobs still queued, submitting none twice).
- `ray`: one Ray Tune trial per run, each with a bundle of `--cpus-per-run` CPUs and `--gpus-per-run` GPUs
  (`attnzoo.ablation.ray_tune`; `pip install "attnzoo[ray]"`), on a Ray instance started here or a cluster
  (`--ray-address`).

Every launcher runs each run with the same routine (`attnzoo.ablation.job.run_one`), so they fill the same run
directories, resume the same way and write the same report. The ablation directory (`--out`) holds:

    ablation.json             the plan: command, configs, overrides, variants
    runs/<variant id>/        one fit run dir (config.yaml, checkpoints/, metrics.csv, summary.json) plus
                              ablate.json (status, error, wall time, command) and stdout.log / stderr.log
    report.csv  report.md  metric.png  metric_vs_throughput.png  runs.csv
    slurm/  ray/              the job scripts and logs (slurm), Ray Tune's files (ray)

A run is finished when its summary.json exists and its ablate.json says "ok"; started again, an ablation
runs only the missing runs (and failed ones, unless --skip-failed). Unfinished run dirs are cleared first.

Exit status: 0 when every run is ok (or, with --no-wait, every job was submitted), 1 when some failed (the others
are reported), 2 for a config error (nothing runs), 130 / 143 when Ctrl-C / SIGTERM stopped it: the runs in
progress are stopped and recorded as interrupted (SLURM jobs cancelled), queued ones are not started, the report
of the finished ones is written (a second Ctrl-C kills the runs in progress at once).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .config import ConfigError
from .fit import check_rank_format
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

if TYPE_CHECKING:
    from .ablation.runner import Launcher


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo ablate", description="Run a grid of variants of a recipe; one report.")
    p.add_argument("--config", action="append", default=[], help="a recipe YAML; repeat to overlay more files")
    p.add_argument("--grid", required=True, help="a grid file (configs/ablations/*.yaml)")
    p.add_argument("--out", help="the ablation directory (default: runs/ablate/<recipe>-<grid>)")
    p.add_argument("--seeds", nargs="+", metavar="SEED", help="run these seeds instead of the grid's")
    p.add_argument("--launcher", choices=["local", "slurm", "ray"], default="local",
                   help="where the runs go: this machine, one SLURM job each, or one Ray Tune trial each")  # fmt: skip
    p.add_argument("--jobs", type=int, default=0,
                   help="runs at a time (local default: one per GPU group, else 1; ray: as many as fit)")  # fmt: skip
    p.add_argument("--gpus", default="auto", help="local: auto (a run per GPU when there are several), none, or 0,1,..")
    p.add_argument("--gpus-per-run", type=int,
                   help="GPUs each run gets (with trainer.devices=N for DDP); default local 1, slurm 0, ray 1 when "
                   "the Ray cluster has GPUs, else 0")  # fmt: skip
    p.add_argument("--cpus-per-run", type=int, help="slurm, ray: CPUs each run gets (default 1)")
    p.add_argument("--ray-address", help="ray: a running Ray cluster (auto, ray://host:10001); default: start one here")
    p.add_argument("--ray-cpus", type=int, help="ray: CPUs of the Ray instance started here (default: every core)")
    p.add_argument("--slurm-partition", help="slurm: #SBATCH --partition")
    p.add_argument("--slurm-time", help="slurm: #SBATCH --time, the limit of each run (e.g. 2:00:00)")
    p.add_argument("--slurm-option", action="append", default=[], metavar="KEY[=VALUE]",
                   help="slurm: one more #SBATCH --KEY=VALUE line; repeat (account=proj, qos=high)")  # fmt: skip
    p.add_argument("--no-wait", action="store_true", help="slurm: submit the jobs and return")
    p.add_argument("--skip-failed", action="store_true", help="do not run again the runs that failed before")
    p.add_argument("--dry-run", action="store_true", help="validate every run's config and list the runs")
    p.add_argument("--report-only", action="store_true", help="write the report from the runs already done")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run, e.g. trainer.max_epochs=3")
    args = p.parse_intermixed_args(argv)
    if args.seeds:  # "--seeds 0 1 key=value": the words after the numbers are overrides, not seeds
        words, args.seeds = args.seeds, []
        while words and words[0].lstrip("-").isdigit():
            args.seeds.append(int(words.pop(0)))
        if not args.seeds:
            p.error(f"argument --seeds: expected seed numbers, got {words[0]!r}")
        twice = sorted({s for s in args.seeds if args.seeds.count(s) > 1})
        if twice:  # the runs of one variant would share a directory
            p.error(f"argument --seeds: {', '.join(map(str, twice))} given twice; each seed runs once per variant")
        if any(s < 0 for s in args.seeds):
            p.error(f"argument --seeds: {[s for s in args.seeds if s < 0]}: seeds are numbers >= 0")
        args.overrides = [*args.overrides, *words]  # in command-line order: those before --seeds come first
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo ablate: error: {err}", file=sys.stderr)
        return 2
    from .ablation.grid import load_grid
    from .ablation.runner import (
        AblationInterrupted,
        ablate,
        check_reported,
        check_starts,
        failed_runs,
        plan,
        reported_runs,
        status,
        variant_records,
    )
    from .run import show_log

    show_log()
    allow_imports(args.allow_imports)
    if not args.config:
        p.error("--config is required")
    out = Path(args.out or f"runs/ablate/{Path(args.config[0]).stem}-{Path(args.grid).stem}")
    command_line = "python -m attnzoo.ablate " + shlex.join(argv if argv is not None else sys.argv[1:])  # pasteable
    try:
        if args.report_only:
            from .ablation.report import write_report

            if Path(args.grid).is_file():  # a corrected grid's metric: and mode: (left out: the defaults) count
                grid = load_grid(args.grid)
                if args.seeds:  # the seeds asked for
                    grid.seeds = args.seeds
                    runs = plan(args.config, grid, args.overrides, out)
                else:  # every seed that ran in the ablation (a run's own report covers its command's seeds)
                    runs = reported_runs(args.config, grid, args.overrides, out)
                check_reported(runs)
                variants = variant_records(runs)
                print(write_report(out, grid.metric, grid.mode, variants), file=sys.stderr)
            elif args.seeds:
                p.error(f"--report-only --seeds: the grid {args.grid} is not here to plan those seeds from")
            else:  # the grid moved since: the metric and runs the ablation stored
                print(write_report(out), file=sys.stderr)
            return 0
        launcher = _launcher(args)
        if args.dry_run:
            grid = load_grid(args.grid)
            if args.seeds:
                grid.seeds = args.seeds
            runs = plan(args.config, grid, args.overrides, out)
            states = {run.variant.id: status(run) for run in runs}
            check_starts(args.config, [run for run in runs if states[run.variant.id] != "ok"])
            for run in runs:
                print(f"{run.variant.id}  [{states[run.variant.id]}]  {' '.join(run.overrides)}")
            if args.launcher == "slurm":
                paths = launcher.write_scripts(args.config, out, runs)
                print(f"attnzoo ablate: {len(paths)} job scripts in {out / 'slurm'}, none submitted", file=sys.stderr)
            return 0
        ablate(args.config, args.grid, out, args.overrides, launcher=launcher, skip_failed=args.skip_failed,
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
    if args.no_wait:
        print("attnzoo ablate: the same command waits for the jobs and writes the report (nothing is submitted "
              "twice); --report-only writes it from the runs done so far", file=sys.stderr)  # fmt: skip
        return 0
    failed = failed_runs(out)
    if failed:
        total = len(json.loads((out / "ablation.json").read_text())["variants"])
        print(f"attnzoo ablate: {len(failed)} of {total} runs failed: {failed}; errors and the report of the "
              f"others in {out / 'report.md'}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"attnzoo ablate: report in {out / 'report.md'}", file=sys.stderr)
    return 0


def _launcher(args: argparse.Namespace) -> Launcher:
    """The launcher the options ask for; options of another launcher are an error, not ignored."""
    other = {
        "local": {"--cpus-per-run": args.cpus_per_run},
        "slurm": {"--jobs": args.jobs, "--gpus": args.gpus != "auto"},
        "ray": {"--gpus": args.gpus != "auto"},
    }[args.launcher]
    other |= {k: v for k, v in (("--ray-address", args.ray_address), ("--ray-cpus", args.ray_cpus))
              if args.launcher != "ray"}  # fmt: skip
    other |= {k: v for k, v in (("--slurm-partition", args.slurm_partition), ("--slurm-time", args.slurm_time),
                                ("--slurm-option", args.slurm_option), ("--no-wait", args.no_wait))
              if args.launcher != "slurm"}  # fmt: skip
    given = [k for k, v in other.items() if v]
    if given:
        raise ConfigError(f"{given} do not apply to --launcher {args.launcher}")
    from .ablation.runner import Runner, gpu_slots

    if args.launcher == "slurm":
        from .ablation.slurm import SlurmLauncher

        return SlurmLauncher(partition=args.slurm_partition, time=args.slurm_time, options=args.slurm_option,
                             cpus_per_run=_given(args.cpus_per_run, 1), gpus_per_run=_given(args.gpus_per_run, 0),
                             wait=not args.no_wait)  # fmt: skip
    if args.launcher == "ray":
        from .ablation.ray_tune import RayLauncher

        return RayLauncher(address=args.ray_address, num_cpus=args.ray_cpus, cpus_per_run=_given(args.cpus_per_run, 1),
                           gpus_per_run=args.gpus_per_run, max_concurrent=args.jobs)  # fmt: skip
    slots = gpu_slots(args.gpus, _given(args.gpus_per_run, 1))
    if args.jobs:
        slots = [slots[i % len(slots)] for i in range(args.jobs)] if slots != [{}] else [{}] * args.jobs
    return Runner(args.config, slots)


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


if __name__ == "__main__":
    sys.exit(main())
