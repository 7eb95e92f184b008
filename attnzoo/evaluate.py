"""`python -m attnzoo.evaluate <run dir> [--checkpoint best|last|FILE] [--split test|val] [key=value ...]`

Test metrics of a saved checkpoint: rebuilds data, model and task from the run's `config.yaml` (plus any `--config`
overlays and overrides, e.g. another data folder), runs the split, prints the metrics and writes them to
`<run dir>/evaluate-<checkpoint>.json` (`-val` added for `--split val`, and a digest for other data than the run's or
for overrides that change what is scored, such as another model: `report_name`). The report records the data it scored
and the overlays and overrides given; when the run directory cannot be written, the metrics are printed and the
command says so and exits 1. A translation or LM run's examples go into that report (and the log); the run's own
examples.txt / examples.json stay as training left them, and nothing is written elsewhere. Data with no test
examples is scored on its validation split, as `fit` does (the report's `split` says which, and the command says
so). Ctrl+C or SIGTERM stops it at once, writes nothing and exits 128 + the signal's number (130 / 143), as `fit`
does during its test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import ConfigError
from .fit import check_rank_format
from .util.imports import ALLOW_IMPORTS_HELP, allow_imports

log = logging.getLogger("attnzoo")

DATA_KEYS = ("train", "val", "test", "root", "csv")  # where the data section says the examples are


def report_name(
    run_dir: Path, checkpoint: str, asked: str, data: dict[str, Any], configs: Sequence[str], overrides: Sequence[str]
) -> str:
    """`evaluate-<checkpoint>.json` (`-val` added for `--split val`) for the run as trained. Anything else scored adds
    8 hex digits of a digest of what makes it other: `data` (the `DATA_KEYS` evaluated) when they are not the run's,
    the overrides that change what is scored (`scored_overrides`: data.listops.max_len=80,
    model.attention.bias=alibi, trainer.limit_test_batches=2, ...) and any overlay. So each dataset and each variant
    of the model keeps its own report, and evaluating the same one again replaces it."""
    from .config import load
    from .run.paths import same_path

    own_cfg = load([run_dir / "config.yaml"], run=True)
    own = own_cfg.section("data")
    moved = not all(own.get(k) == data.get(k) or same_path(f"data.{k}", own.get(k), data.get(k)) for k in DATA_KEYS)
    other = scored_overrides(
        own_cfg.tree, load([run_dir / "config.yaml", *configs], overrides, run=True).tree, overrides
    )
    name = f"evaluate-{checkpoint}{'-val' if asked == 'val' else ''}"
    if moved or other or configs:
        given = {
            "data": data if moved else None,
            "overrides": other,
            "configs": [str(Path(c).resolve()) for c in configs],
        }
        name += "-" + hashlib.sha256(json.dumps(given, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}.json"


# the trainer keys evaluate passes on to its Trainer that change the metrics (it adds enable_progress_bar); the other
# trainer keys (the budget, devices, threads, compile, ...) are not applied or only change how fast it computes
TRAINER_SCORED = ("accelerator", "precision", "limit_test_batches", "limit_val_batches")
# keys evaluate does not apply (fit's options and the training schedule), each with any key under it
NOT_SCORED = ("run", "smoke", "task.optimizer", "task.scheduler")
_GONE = object()  # a key the config does not have


def scored_overrides(own: Any, given: Any, overrides: Sequence[str]) -> list[str]:
    """The `overrides` (sorted) that change what evaluate scores: any key it applies (model.*, task.*, data.* other
    than the `DATA_KEYS`, which `report_name` compares as paths, seed, the `TRAINER_SCORED` keys) set to another
    value in `given` (the config tree evaluated) than in `own` (the run's config.yaml's)."""
    from omegaconf import OmegaConf

    other = []
    for item in overrides:
        key = item.partition("=")[0].strip()
        inert = key.startswith("trainer.") and key.split(".")[1] not in TRAINER_SCORED
        if inert or any(key == k or key.startswith(f"{k}.") for k in NOT_SCORED):
            continue
        if key.startswith("data.") and key[5:] in DATA_KEYS:
            continue
        before, after = (OmegaConf.select(tree, key, default=_GONE) for tree in (own, given))
        plain = [OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for v in (before, after)]
        if after is _GONE or plain[0] != plain[1]:  # gone: an older key read as its replacement (RENAMED_MODEL_KEYS)
            other.append(item)
    return sorted(other)


def checkpoint_name(run_dir: Path, file: Path) -> str:
    """A checkpoint file's part of the report name: its stem for a file of the run's own `checkpoints/`, else the
    stem and 8 hex digits of its path (another run's best.ckpt must not replace this run's evaluate-best.json)."""
    file = file.resolve()
    if file.parent == (run_dir / "checkpoints").resolve():
        return file.stem
    return f"{file.stem}-{hashlib.sha256(str(file).encode()).hexdigest()[:8]}"


def _count(loader: Any) -> int | None:
    """How many examples a split's loader reads (None for a dataset without a length)."""
    try:
        return len(loader.dataset)
    except TypeError:
        return None


# the split a data kind holds out of a train file given alone first, when it holds out both: given that split's file
# instead, it holds the other out where the run held out the first
FIRST_HELD_OUT = {"lm": "test", "translation": "test", "mlm": "val"}


def _check_held_out_split(run_dir: Path, split: str, configs: Sequence[str], overrides: Sequence[str]) -> None:
    """ConfigError for scoring a split the run held out of its train file with the other split's file given in its
    place (`--split val data.test=...` for LM and translation runs, `--split test data.val=...` for MLM runs): the
    data would then hold the scored split out where the run held out the other one, and report that as this one."""
    from omegaconf import OmegaConf

    from .config import load, read_yaml

    given = {o.partition("=")[0].strip() for o in overrides}
    for overlay in configs:  # an overlay's data keys are given too (load_run says what is wrong with one)
        tree = read_yaml(overlay) if Path(overlay).is_file() else None
        data = tree.get("data") if OmegaConf.is_dict(tree) else None
        given |= {f"data.{key}" for key in (data.keys() if OmegaConf.is_dict(data) else ())}
    if not (run_dir / "config.yaml").is_file() or f"data.{split}" in given:
        return  # not a run (load_run says so), or the split scored is a file of the user's
    own = load([run_dir / "config.yaml"], run=True).section("data")
    first = FIRST_HELD_OUT.get(own.get("kind"))
    if first is None or first == split or f"data.{first}" not in given:
        return
    if own.get("train") and not own.get("val") and not own.get("test"):
        raise ConfigError(
            f"--split {split} with data.{first}: {run_dir} held its val and test splits out of its train file, and "
            f"with a {first} file given the {split} split held out would be another (the run's {first} part among "
            f"it). Leave out data.{first} to score the run's own {split} split, or give data.{split}=<file> to score "
            "a file of your own"
        )


def evaluate(run_dir: Path, checkpoint: str, split: str, configs: Sequence[str], overrides: Sequence[str]) -> dict:
    import lightning as L
    import torch

    from .config import load
    from .run import load_run
    from .run.signals import StopAtOnce
    from .run.splits import split_size
    from .util.files import write_json

    _check_held_out_split(run_dir, split, configs, overrides)
    run = load_run(run_dir, checkpoint, configs, overrides)
    from .run.paths import changed_data

    changed = changed_data(Path(run_dir), run.cfg.section("data"))
    if changed:  # a split held out of a folder or file by the run's rule is drawn again from what is there now
        log.warning(
            "evaluate: the run's data changed since it was trained (%s): a val or test part held out of it by the "
            "run's rule is held out of the data as it is now, and may hold examples the run trained on",
            "; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else ""),
        )  # fmt: skip
    asked = split
    keep = (*TRAINER_SCORED, "enable_progress_bar")
    trainer_cfg = {k: v for k, v in run.cfg.section("trainer").items() if k in keep}
    if trainer_cfg.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():  # copied off its GPU
        log.warning("trainer.accelerator %r: this machine has no GPU: scored on the CPU", trainer_cfg["accelerator"])
        trainer_cfg["accelerator"] = "cpu"
    stop = StopAtOnce(checkpoint=run.checkpoint, phase="evaluate", validation=True)
    trainer = L.Trainer(**trainer_cfg, devices=1, logger=False, callbacks=[stop])
    sizes = {s: split_size(run.data, s) for s in ("test", "val")}
    if sizes["val"] == 0 and (split == "val" or sizes["test"] == 0):  # nothing to score: not a report of no metrics
        data = run.cfg.section("data")
        where = ", ".join(f"data.{k}={v}" for k, v in data.items() if k in DATA_KEYS and v)
        what = "the val split" if split == "val" else "neither the test nor the val split"  # ... has (no) examples
        hint = ""
        root = data.get("root")
        if run.data_kind in ("audio", "image") and isinstance(root, str):
            from .data.formats.folders import split_folders

            hint = f"; put the files to score in {root}/{split}/<class>/"
            if not split_folders(Path(root)):
                hint += (" (a folder without split folders is split into train/val/test by the run's rule, which may"
                         " leave a few files none)")  # fmt: skip
        raise ConfigError(
            f"evaluate: {what} of {where or 'the data'} has {'no ' if split == 'val' else ''}examples{hint}"
        )
    if split == "val":
        results = trainer.validate(run.task, datamodule=run.data, verbose=False)
    elif sizes["test"] != 0:
        results = trainer.test(run.task, datamodule=run.data, verbose=False)
    else:  # no test examples: the test pass scores the validation split, as fit's does (test/* metrics); main says
        # so in evaluate's words (not fit's run.test warning, `attnzoo.run.splits.test_split`)
        split = "val"
        results = trainer.test(run.task, dataloaders=run.data.val_dataloader(), verbose=False)
    hint = _whole_folder_hint(run, split, asked)
    loader = run.data.val_dataloader() if split == "val" else run.data.test_dataloader()  # to count its examples
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    data = run.cfg.section("data")
    shown = {k: data[k] for k in DATA_KEYS if data.get(k) is not None}
    # a test file read in place of train/val files not here (`attnzoo.run.rundir`): those stay the run's own
    own = load([run_dir / "config.yaml"], run=True).section("data")
    test = shown.get("test")
    stood_in = [
        k for k in ("train", "val") if test is not None and shown.get(k) == test and own.get(k) not in (None, test)
    ]
    report = {
        "checkpoint": str(run.checkpoint),
        "split": split,
        "split_examples": _count(loader),  # the split's size (trainer.limit_*_batches may score fewer)
        "data": shown | {k: own[k] for k in stood_in},
        "configs": [str(c) for c in configs],
        "overrides": list(overrides),
        "metrics": metrics,
    }
    if hint:
        report["hint"] = hint
    if changed:
        report["data_changed"] = changed
    if stood_in:
        report["read_in_place"] = (
            f"data.test was also read in place of data.{' and data.'.join(stood_in)} (the classes and token ids are "
            "the run's own); the run was trained on the files above"
        )
    ran = (trainer.num_val_batches if asked == "val" else trainer.num_test_batches) or []
    if ran and isinstance(ran[0], int) and ran[0] < len(loader):  # trainer.limit_*_batches cut the split
        key = f"trainer.limit_{'val' if asked == 'val' else 'test'}_batches"
        report["scored_batches"] = ran[0]
        report["limited"] = (
            f"{key}={run.cfg.section('trainer').get(key.split('.')[1])} (set in {run.cfg.where(key)}) scored "
            f"{ran[0]} of the split's {len(loader)} batches: the metrics are of part of it; {key}=1.0 scores it whole"
        )
    if getattr(run.task, "examples", None):  # a sequence task's examples (also logged); the run's own files stay
        report["examples"] = run.task.examples
    name = checkpoint if checkpoint in ("best", "last") else checkpoint_name(run_dir, Path(run.checkpoint))
    path = run_dir / report_name(run_dir, name, asked, report["data"], configs, overrides)
    try:
        write_json(path, report)  # a new file renamed over the old: a link there is replaced, not written through
    except OSError as err:  # a read-only run directory (a shared copy), a full disk: the metrics still count
        report["not_written"] = f"{path}: {err.strerror or err}"
    report["path"] = str(path)
    return report


def _whole_folder_hint(run: Any, split: str, asked: str) -> str | None:
    """For an image or audio folder without split folders scored on its val part in place of a test split: that
    only the files the run's rule holds out were scored, and how to score every one (put them under test/)."""
    root = run.cfg.section("data").get("root")
    if split == asked or run.data_kind not in ("audio", "image") or not isinstance(root, str):
        return None
    from .data.formats.folders import split_folders

    if split_folders(Path(root)):
        return None
    return (f"{root} has no split folders: only the part the run's rule holds out for val was scored; to score every "
            f"file, put the class folders under {Path(root) / 'test'}/ and give data.root={root}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnzoo evaluate", description="Metrics of a saved checkpoint.")
    p.add_argument("run_dir", type=Path, help="a run directory written by attnzoo fit")
    p.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint file (default: best)")
    p.add_argument("--split", choices=("test", "val"), default="test")
    p.add_argument("--config", action="append", default=[], help="overlays on the run's config")
    p.add_argument("--allow-imports", action="store_true", help=ALLOW_IMPORTS_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. data.root=/other/images")
    args = p.parse_intermixed_args(argv)
    try:
        check_rank_format()  # before Lightning is imported: it reads the rank variables then
    except ConfigError as err:
        print(f"attnzoo evaluate: error: {err}", file=sys.stderr)
        return 2
    from .generation import NonFiniteScores
    from .run import show_log
    from .run.signals import Interrupted
    from .tasks.preflight import SetupError

    show_log()
    allow_imports(args.allow_imports)
    try:
        report = evaluate(args.run_dir, args.checkpoint, args.split, args.config, args.overrides)
    except (ConfigError, SetupError) as err:  # SetupError: the task's check before the pass (no metric written)
        print(f"attnzoo evaluate: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteScores as err:  # a translation run's decoding of the split
        print(f"attnzoo evaluate: error: {err}", file=sys.stderr)
        return 1
    except Interrupted as err:  # during the pass: its metrics would be those of part of the split
        print(f"attnzoo evaluate: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:  # before the pass (loading the run, its data)
        print("attnzoo evaluate: interrupted before the evaluation started; nothing written", file=sys.stderr)
        return 130
    size = f", of {report['split_examples']} examples," if report["split_examples"] is not None else ""
    why = "the data has no test examples: " if report["split"] != args.split else ""  # test/* metrics of val
    scored = f"{why}the {report['split']} split{size} scored with {report['checkpoint']}"
    print(f"attnzoo evaluate: {scored}", file=sys.stderr)
    if "hint" in report:
        print(f"attnzoo evaluate: {report['hint']}", file=sys.stderr)
    if "limited" in report:
        print(f"attnzoo evaluate: warning: {report['limited']}", file=sys.stderr)
    for key, value in sorted(report["metrics"].items()):
        print(f"{key:20s} {value:.4f}")
    if "not_written" in report:
        print(f"attnzoo evaluate: error: could not write the report {report['not_written']}", file=sys.stderr)
        return 1
    print(f"attnzoo evaluate: report written to {report['path']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
