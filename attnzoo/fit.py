"""`python -m attnzoo.fit --config recipes/<recipe>.yaml [--config overlay.yaml ...] [key=value ...]`

Builds data -> model -> task -> Trainer from the config and trains. Each run gets a directory
`<run.dir>/<run.name>/<timestamp>/` holding `config.yaml` (resolved, with derived values), `checkpoints/`
(`last.ckpt`, `best.ckpt`), `metrics.csv`, `summary.json`, and what the DataModule's `save_artifacts(run_dir)`
writes, if it has one (the class names, `labels.json`).

Resume a stopped run with `--resume <run dir or .ckpt>`: it reuses the run's `config.yaml` (or the
`--config` files given), its directory, and continues from `last.ckpt` (or the given checkpoint). A resume may
change the training budget and logging (`attnzoo.run.rundir.RESUME_MAY_CHANGE`, recorded in `resumes.json` and
`summary.json`), nothing that defines the model or data. One process at a time uses a run directory (`.lock`).

On several machines (torchrun, or SLURM's srun) every process runs this command; global rank 0 names the run
directory and writes into it. In a SLURM job the directory is `<run.dir>/<run.name>/slurm-<job id>/`; SIGUSR1
(`#SBATCH --signal=SIGUSR1@90`) saves `last.ckpt`, stops and requeues the job, and the same command, started again by
SLURM, continues the run there.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import ConfigError, load
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

# rank variables Lightning reads when it is imported: a value that is not a number stops that import with a bare
# ValueError, so they are checked before (`attnzoo.run.cluster.check_rank_variables` checks them against the launcher)
IMPORT_TIME_RANKS = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE", "SLURM_PROCID")


def check_rank_format() -> None:
    """ConfigError naming a rank variable of the environment that is not a whole number >= 0."""
    for name in IMPORT_TIME_RANKS:
        value = os.environ.get(name)
        if value is not None and not (value.strip().isdigit() and (name != "WORLD_SIZE" or int(value) > 0)):
            raise ConfigError(
                f"the environment variable {name}={value!r} is not a "
                + ("process count (a whole number >= 1)" if name == "WORLD_SIZE" else "rank (a whole number >= 0)")
                + f"; launchers (torchrun, srun, Lightning) set it. A leftover of another job or shell? Unset it (e.g. "
                f"`env -u {name} ...`)"
            )


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", action="append", default=[], help="a recipe YAML; repeat to overlay more files")
    p.add_argument("--print-config", action="store_true", help="print the merged config and exit")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.max_epochs=3")
    return p


# --print-config's header: the recipes and overrides merged, before the data and a start decide what they decide
PRINTED_CONFIG = (
    "# the config files and overrides merged; `auto` values are chosen when the run starts (logged, and recorded in\n"
    "# the run's config.yaml)\n"
)
PRINTED_START = (
    "# model.init_from: the run takes the checkpoint's architecture (model.dim, depth, heads, positions, ...) and\n"
    "# tokenizer, not the values below (logged, and recorded in the run's config.yaml)\n"
)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("attnzoo fit", "Train a recipe.")
    p.add_argument("--resume", help="a run directory (continues from its last.ckpt) or a checkpoint file")
    p.add_argument("--run-dir", help="write the run into this directory instead of <run.dir>/<run.name>/<time>")
    args = p.parse_intermixed_args(argv)
    try:
        check_rank_format()
    except ConfigError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 2
    from .run import fit, is_rank_zero, resume_target, show_log

    show_log()
    allow_imports(args.allow_imports)
    try:
        if args.resume and args.run_dir:
            raise ConfigError("--run-dir and --resume exclude each other (a resumed run keeps its directory)")
        configs = args.config
        if args.resume and not configs:
            configs = [resume_target(args.resume)[0] / "config.yaml"]
        cfg = load(configs, args.overrides, run=bool(args.resume and not args.config))
    except ConfigError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(PRINTED_CONFIG + (PRINTED_START if cfg.section("model").get("init_from") else ""), end="")
        print(cfg.to_yaml(), end="")
        return 0
    from .generation import NonFiniteScores
    from .run.nan_guard import NonFiniteLossError
    from .run.signals import Interrupted, StoppedAtOnce

    try:
        run_dir = fit(cfg, resume=args.resume, run_dir=args.run_dir)
    except ConfigError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 2
    except StoppedAtOnce as err:
        if is_rank_zero():  # every DDP process stops alike; one says so
            print(f"attnzoo fit: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:  # before training started (during data setup)
        print("attnzoo fit: interrupted; checkpoints already written are kept", file=sys.stderr)
        return 130
    except Interrupted as err:
        run_dir = Path(err.checkpoint).parent.parent
        if is_rank_zero():  # every DDP process stops alike; one says so
            after = (
                f": started again, the same command continues {run_dir}"
                if err.requeued
                else f"; continue with --resume {shlex.quote(str(run_dir))}"
            )
            print(f"attnzoo fit: {err}{after}", file=sys.stderr)
        return err.exit_code
    except NonFiniteLossError as err:
        print(f"attnzoo fit: error: {err}", file=sys.stderr)
        return 1
    except NonFiniteScores as err:  # decoding the val or test split (translation), or an LM's sample
        print(f"attnzoo fit: error: while decoding: {err}; the checkpoints already written are kept", file=sys.stderr)
        return 1
    except OSError as err:  # a full disk, a quota, a directory made read-only while training
        where = f" {err.filename}" if err.filename else ""
        print(
            f"attnzoo fit: error: could not write{where}: {err.strerror or err}; what was written before (checkpoints, "
            "metrics.csv) is kept: free space and continue with --resume <run dir>",
            file=sys.stderr,
        )
        return 1
    if is_rank_zero():
        from .run.baseline import comparison

        line = comparison(json.loads((run_dir / "summary.json").read_text()))
        if line:
            print(f"attnzoo: {line}", file=sys.stderr)
        print(f"attnzoo: done; summary in {run_dir / 'summary.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
