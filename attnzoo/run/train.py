"""Training a run: `fit(cfg)` builds it, trains, tests the best checkpoint and writes `summary.json`.

A SLURM job that was requeued (`SLURM_RESTART_COUNT` set) and finds a run in its directory continues it: from
its `last.ckpt` (as `--resume` does), or not at all when it finished, or from the start when it stopped before its
first checkpoint. The job id names the directory (`attnzoo.run.rundir.new_run_dir`), so the batch script's same
command line finds it.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import TRAINED_FILES, Config, ConfigError
from ..data.formats.folders import note_run_dir
from ..util.files import RUN_CONFIG_HEADER, write_text, written_by_a_run
from .build import build, make_trainer
from .cluster import check_rank_variables, is_rank_zero, slurm_job, slurm_restarts
from .lock import RunLock
from .paths import DATA_FILES_RECORD, record_data_files, scored_on_train
from .rundir import (
    DATA_FILES,
    RESUMES_FILE,
    RUN_DIR_ENV,
    added_options,
    claim_new_run_dir,
    new_run_dir,
    read_resumes,
    read_summary,
    record_resume,
    resume_changes,
    resume_target,
)
from .signals import Interrupted
from .splits import test_split
from .start import keep_start, recorded_start

log = logging.getLogger("attnzoo")
# what a run directory holds once a run has started in it (an ablation's fresh run dir holds only its own logs)
RUN_FILES = ("config.yaml", *TRAINED_FILES)
# the files a run writes besides: in a folder that holds no run (`--run-dir`), a user's own file of such a name stays
ARTIFACT_FILES = ("labels.json", "tokenizer.json", "audio_stats.json", "lm.json", "mlm.json", "translation.json",
                  "init_from.json", "resumes.json", "examples.txt", "examples.json", DATA_FILES_RECORD)  # fmt: skip


def fit(
    cfg: Config,
    *,
    resume: str | Path | None = None,
    run_dir: str | Path | None = None,
    extra_callbacks: Sequence[Any] = (),
) -> Path:
    """Train `cfg`; returns the run directory (`run_dir` if given, else a new one under `run.dir`).

    Args:
        resume: a run directory (continues from its `last.ckpt`) or a checkpoint file inside one. The config
            may differ from the run's `config.yaml` only in `attnzoo.run.rundir.RESUME_MAY_CHANGE`.
        run_dir: write the run here instead of `<run.dir>/<run.name>/<timestamp>` (a directory that holds no run,
            unless this is a requeued SLURM job continuing its run).
        extra_callbacks: Lightning callbacks added to the run's own.
    """
    trainer_cfg = cfg.section("trainer")
    try:  # before anything is written: a stale RANK would make this process skip writing the run
        check_rank_variables(num_nodes=trainer_cfg.get("num_nodes", 1), devices=trainer_cfg.get("devices", 1))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    ckpt_path, what, claimed = None, "run directory", False
    if resume is not None:
        run_dir, ckpt_path = resume_target(resume)
    elif run_dir is not None:
        run_dir = Path(run_dir)
    else:
        run_dir, claimed = claim_new_run_dir(cfg) if is_rank_zero() else (new_run_dir(cfg), False)
        what = f"run directory (run.dir={cfg.section('run').get('dir', 'runs')})"
    created = claimed or not run_dir.exists()  # ours to remove if the run never trains in it
    note_run_dir(run_dir)  # made inside the data folder (data.root=.): not read as data
    lock = RunLock(run_dir, what=what) if is_rank_zero() else None  # DDP workers work under rank 0's lock
    try:
        if lock is not None:
            lock.acquire()
        held = [name for name in RUN_FILES if (run_dir / name).exists()] if ckpt_path is None else []
        if held == ["config.yaml"] and not slurm_restarts() and not written_by_a_run(run_dir / "config.yaml"):
            raise ConfigError(
                f"{run_dir} holds a config.yaml that no attnzoo run wrote (a file of yours?): a run would write its "
                "own there; give fit another --run-dir (or a new folder)"
            )
        theirs = [name for name in ARTIFACT_FILES if (run_dir / name).exists()] if not (held or ckpt_path) else []
        if theirs and lock is not None:
            raise ConfigError(
                f"{run_dir} holds no run but files a run writes ({', '.join(theirs)}): they would be replaced; give "
                "fit another --run-dir (or a new folder)"
            )
        if (
            "config.yaml" in held
            and lock is not None
            and not slurm_restarts()
            and not any((run_dir / "checkpoints").glob("*.ckpt"))
            and read_summary(run_dir).get("finished") is not True
            and written_by_a_run(run_dir / "config.yaml")
        ):
            # a run that stopped before its first checkpoint (killed while it set up, out of memory, a NaN loss at its
            # first steps): nothing to continue (--resume says so and sends the user here), so it starts again in its
            # own directory
            log.warning("%s holds a run that stopped before its first checkpoint (%s): nothing to continue; starting "
                        "it again there (its metrics.csv and summary.json begin anew)",
                        run_dir, ", ".join(held))  # fmt: skip
            for name in ("metrics.csv", "summary.json"):  # the rows of the attempt would stay above the new run's
                (run_dir / name).unlink(missing_ok=True)
            held = []
        if held and slurm_restarts():
            ckpt_path, finished = _after_requeue(run_dir, clear=lock is not None)
            if finished:
                return run_dir
        elif held and lock is not None:
            job = slurm_job()
            raise ConfigError(
                f"{run_dir} already holds a run ({', '.join(held)}); continue it with --resume "
                f"{shlex.quote(str(run_dir))}, or write the new run elsewhere"
                + (f" (each run of SLURM job {job} needs its own run.name or --run-dir)" if job is not None else "")
            )
        return _fit(cfg, run_dir, ckpt_path, extra_callbacks)
    finally:
        if lock is not None:
            # refused ("in use"), a directory we did not claim is another process's: never ours to remove
            ours = claimed or lock.held
            lock.release()
            if ours and created and run_dir.is_dir() and not any((run_dir / name).exists() for name in TRAINED_FILES):
                shutil.rmtree(run_dir, ignore_errors=True)  # stopped before training: leave no run that never ran


# what a resumed run that trains no step keeps from the summary.json before it
KEPT_UNTRAINED = ("metrics", "train_samples_per_second", "train_seconds", "data_wait_share", "stopped", "best_epoch")


def _build_resumed(cfg: Config, run_dir: Path, *, started: bool) -> Any:
    """`build` of a run resumed from its own config.yaml: a tokenizer file is read from the run's own copy (checked
    against the checkpoint's digest after the build), so the run goes on after the file it was given, or the folder
    it started from, moved; the resolved config keeps the configured `data.tokenizer`, as config.yaml holds it. For
    a run that recorded its start (`model.init_from`; `started`) the checkpoint is not read again: its architecture
    and tokenizer are in config.yaml, its weights in the checkpoint resumed from. Options added since the run was made
    take the value it ran with (`added_options`)."""
    from ..data.tokenizers.subword import KINDS
    from .tokenizer_stamp import saved_tokenizer

    spec = cfg.section("data").get("tokenizer")  # a kind learned from the data is learned again, and checked
    preset = {
        **added_options(cfg),
        **(saved_tokenizer(cfg, run_dir) if isinstance(spec, str) and spec not in KINDS else {}),
    }
    return build(cfg, preset=preset or None, init=not started, unrecorded=("data.tokenizer",))


def _record_failure(
    trainer: Any, summary: Any, run_dir: Path, err: BaseException, *, trained: dict[str, Any] | None = None
) -> None:
    """A run that failed after training started keeps its directory, with a summary.json saying why (fit removes a
    new run directory only when training never started in it).

    Args:
        trained: the summary of a run whose training finished and whose test pass failed: kept in the record (what
            training measured is still true), whose `stopped` says the error came in the test (`"phase": "test"`).
    """
    if not trainer.is_global_zero or (trained is None and not summary.started):
        return  # `trained`: training finished, so the run is kept whatever this process itself trained
    stopped = {"reason": "error", "epoch": trainer.current_epoch, "step": trainer.global_step}
    if trained is not None:
        stopped["phase"] = "test"
    stopped["message"] = f"{type(err).__name__}: {err}"
    record = {**(trained or {"run_dir": str(run_dir)}), "finished": False, "stopped": stopped}
    try:
        write_text(run_dir / "summary.json", json.dumps(record, indent=2) + "\n")
    except OSError as write_err:  # the error that stopped training is the one to report
        log.warning("could not record the failure in %s: %s", run_dir / "summary.json", write_err)


def _after_requeue(run_dir: Path, *, clear: bool) -> tuple[Path | None, bool]:
    """(checkpoint to continue from, finished) for the run a requeued SLURM job finds in its directory; `clear`
    (global rank 0) removes what a run that stopped before its first checkpoint wrote, which starts again."""
    job, restarts = slurm_job(), slurm_restarts()
    finished = read_summary(run_dir).get("finished") is True
    speak = log.info if is_rank_zero() else log.debug
    if finished:
        speak(
            "SLURM job %s started again (restart %d): its run in %s finished; nothing to train", job, restarts, run_dir
        )
        return None, True
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        _, ckpt = resume_target(run_dir)
        speak("SLURM job %s started again (restart %d): continuing its run in %s", job, restarts, run_dir)
        return ckpt, False
    if clear:
        log.warning(
            "SLURM job %s started again (restart %d): its run in %s stopped before its first checkpoint; training it "
            "again from the start",
            job,
            restarts,
            run_dir,
        )
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        for name in ("metrics.csv", "summary.json", RESUMES_FILE):
            (run_dir / name).unlink(missing_ok=True)
    return None, False


def _check_unchanged_data(cfg: Config, run_dir: Path) -> None:
    """ConfigError naming each data file or folder of a resume that changed since the run recorded it."""
    from .paths import changed_data

    changed = changed_data(run_dir, cfg.section("data"))
    if changed:
        raise ConfigError(
            f"--resume: the run's data changed since it was trained: {'; '.join(changed)}. A resume trains on the "
            "data the run started with (the same batches, splits and test examples): put the data back as it was, "
            f"or start a new run on it with --config {run_dir / 'config.yaml'}"
        )


def _moved_data_hint(cfg: Config, run_dir: Path) -> str:
    """For a resume whose data files are not where config.yaml names them: how to give their place now."""
    from .paths import gone

    data = cfg.section("data")
    moved = [k for k in DATA_FILES if not cfg.typed(k) and gone(data.get(k.removeprefix("data.")))]
    if not moved:
        return ""
    given = " ".join(f"{k}=<where it is now>" for k in moved)
    return (
        f". The run's data ({', '.join(moved)}) is not where its config.yaml names it: if it "
        f"moved, `--resume {run_dir} {given}` goes on (the file is known again by the size and content the run "
        f"recorded in {DATA_FILES_RECORD})"
    )


def _stopped(summary: dict[str, Any]) -> dict[str, Any]:
    """The `stopped` record of a run's summary ({} when it has none)."""
    return summary.get("stopped") if isinstance(summary.get("stopped"), dict) else {}


def _say_early_stop(before: dict[str, Any], changes: dict[str, list[Any]]) -> None:
    """Warn that a run which stopped early, resumed with the same `run.early_stopping`, stops again at its next
    validation that does not improve: its patience is spent (a larger trainer.max_epochs alone trains one epoch)."""
    stopped = _stopped(before)
    if stopped.get("reason") != "early_stopping" or any(k.startswith("run.early_stopping") for k in changes):
        return
    log.warning(
        "resume: the run stopped early (%s); with the same run.early_stopping it stops again at its next validation "
        "that does not improve. To train on, raise run.early_stopping.patience or set run.early_stopping=false",
        stopped.get("message") or f"epoch {stopped.get('epoch')}",
    )


def _fit(cfg: Config, run_dir: Path, ckpt_path: Path | None, extra_callbacks: Sequence[Any]) -> Path:
    # resumed from the run's own config.yaml (`fit --resume DIR`): the weights come from the checkpoint, the start's
    # choices are in config.yaml; with the command that started it (`--resume DIR --config recipe ...`), or for a run
    # that recorded no start, the start is read again as it was then
    if ckpt_path is not None:  # a changed data file or model.init_from named before the data is read again
        resume_changes(run_dir, cfg, given_only=True)
        _check_unchanged_data(cfg, run_dir)
    own_config = Path(cfg.where("model.init_from")).resolve() == (run_dir / "config.yaml").resolve()
    try:
        if ckpt_path is not None and own_config:
            recorded = recorded_start(run_dir)
            data, task, cfg = _build_resumed(cfg, run_dir, started=recorded is not None)
            if recorded is not None:
                task.net.started_from = recorded
        else:
            data, task, cfg = build(cfg)  # cfg: resolved (what the data chose, the machine's precision): config.yaml
    except ConfigError as err:
        raise ConfigError(f"{err}{_moved_data_hint(cfg, run_dir) if ckpt_path is not None else ''}") from None
    refused = getattr(task, "training_error", lambda: None)()
    if refused:  # before anything is written or trained: the test pass after training would fail on it
        raise ConfigError(refused)
    resumes = read_resumes(run_dir)
    resumed_step, before, changes = None, {}, {}
    if ckpt_path is not None:
        from .checkpoint_io import check_checkpoint_shapes, read_checkpoint
        from .metrics import check_history

        changes = resume_changes(run_dir, cfg)  # first: it names the changed keys a shape mismatch comes from
        check_history(run_dir / "metrics.csv")
        try:
            saved = read_checkpoint(ckpt_path, mmap=True)  # read once: the checks below all look into it
            step = resumed_step = check_checkpoint_shapes(ckpt_path, task, saved)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from err
        before = read_summary(run_dir)
        _say_early_stop(before, changes)
        tokenizer = data.tokenizer
        if tokenizer is not None:  # learned again from the training data: it must be the one the weights know
            from .tokenizer_stamp import check_tokenizer

            hint = "the training data it is learned from changed since; resume with the data the run was trained on"
            check_tokenizer(tokenizer, run_dir, ckpt_path, saved, hint=hint)
    tested_split = test_split(data) if cfg.section("run").get("test") else None  # decided before training
    reused = scored_on_train(cfg.section("data")) if ckpt_path is None else []  # `evaluate` may read one file
    for key in [k for k in reused if k == "val" or tested_split is not None]:  # a test the run makes
        log.warning("data.%s is the train file: its metrics are scored on examples the model trains on, so they say "
                    "nothing of new data; give data.%s a file of its own", key, key)  # fmt: skip
    if _stopped(before).get("phase") == "test" and not changes:  # training had finished: the test is left
        from .callbacks import TrainedAlready

        extra_callbacks = [*extra_callbacks, TrainedAlready()]
    trainer, summary = make_trainer(cfg, run_dir, task, extra_callbacks)
    if ckpt_path is not None:  # the training state, against this trainer's loops and callbacks, before any write
        from .resume_check import check_resume_state

        try:
            check_resume_state(ckpt_path, saved, trainer, task)
        except ValueError as err:
            raise ConfigError(f"--resume: {err}") from None
        del saved  # memory-mapped: not held while training replaces last.ckpt
        if is_rank_zero():
            resumes = record_resume(run_dir, ckpt_path, step, changes)
            shown = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())
            log.info("resume: from %s (step %d)%s", ckpt_path, step, f"; changed {shown}" if shown else "")
    if trainer.is_global_zero and is_rank_zero():
        write_text(run_dir / "config.yaml", RUN_CONFIG_HEADER + cfg.to_yaml())
        record_data_files(cfg.section("data"), run_dir)  # a data file moved later is known again on --resume
        data.save_artifacts(run_dir)  # what the data derived and a run must keep (label vocabulary, audio stats)
        if ckpt_path is None and getattr(task.net, "started_from", None) is not None:
            keep_start(task.net.started_from, run_dir)  # model.init_from: recorded once, when the run starts
        print(f"attnzoo: run directory {run_dir}", file=sys.stderr)
    os.environ[RUN_DIR_ENV] = str(run_dir)  # DDP workers started by Lightning inherit it
    started = time.perf_counter()
    try:
        trainer.fit(task, datamodule=data, ckpt_path=str(ckpt_path) if ckpt_path else None)
    except Interrupted as err:  # an unfinished run: the summary says where it stopped; --resume finishes it
        if trainer.is_global_zero:
            stopped = {"reason": "signal", "epoch": trainer.current_epoch, "step": err.step, "message": str(err)}
            record = {"run_dir": str(run_dir), "finished": False, "stopped": stopped}
            write_text(run_dir / "summary.json", json.dumps(record, indent=2) + "\n")
        raise
    except SystemExit as err:  # Lightning's answer to a KeyboardInterrupt (our second Ctrl+C) is sys.exit(1)
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        term = isinstance(err, SIGTERMException)  # before our handlers (the sanity check): exit code None, status 0
        if err.code != 1 and not term:
            raise
        from .signals import StoppedAtOnce

        signum = signal.SIGTERM if term else signal.SIGINT
        trained = any((run_dir / "checkpoints").glob("*.ckpt")) if term else summary.started  # something to resume
        raise StoppedAtOnce(run_dir, trained=trained, signum=signum) from None
    except ValueError as err:  # Lightning checks some arguments only when fit sets up (val_check_interval, ...)
        if summary.started or isinstance(err, ConfigError):
            _record_failure(trainer, summary, run_dir, err)
            raise
        raise ConfigError(f"before training started: {err}".replace("  ", " ")) from err
    except Exception as err:
        _record_failure(trainer, summary, run_dir, err)
        raise
    finally:
        os.environ.pop(RUN_DIR_ENV, None)
    training_seconds = time.perf_counter() - started
    if not trainer.is_global_zero and trainer.checkpoint_callback is not None:
        run_dir = Path(trainer.checkpoint_callback.dirpath).parent  # rank 0's (Lightning broadcasts its dirpath)
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "finished": True,
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }
    best = trainer.checkpoint_callback
    if best is not None:
        result["monitor"] = best.monitor  # what picks the best checkpoint (an ablation's metric: on the test split)
    if best is not None and best.best_model_path:
        result["best"] = {"path": best.best_model_path, best.monitor: float(best.best_model_score)}
    result.update(summary.report(trainer, task))
    if resumed_step is not None and trainer.global_step == resumed_step and before.get("metrics"):
        # nothing trained (a finished run resumed, a SLURM requeue, a stop during the test): what training measured
        # is the earlier process's, not the empty numbers of this one
        kept = [k for k in KEPT_UNTRAINED if k in before and (k != "stopped" or before.get("finished") is True)]
        result.update({key: before[key] for key in kept})  # a stop during the test is no reason training stopped
    started_from = getattr(task.net, "started_from", None)  # model.init_from: the checkpoint it started from
    if started_from is not None:
        result["init_from"] = {k: v for k, v in started_from.items() if v is not None}
    if tested_split is not None:
        tested = best.best_model_path if best is not None and best.best_model_path else None  # None: final weights
        try:
            if tested_split == "test":
                out = trainer.test(task, datamodule=data, ckpt_path=tested, verbose=False)
            else:
                out = trainer.test(task, dataloaders=data.val_dataloader(), ckpt_path=tested, verbose=False)
        except Interrupted as err:  # training finished, the test did not: --resume runs the test again
            if trainer.is_global_zero:
                stopped = {"reason": "signal", "phase": "test", "step": err.step, "message": str(err)}
                record = {**result, "finished": False, "stopped": stopped}
                write_text(run_dir / "summary.json", json.dumps(record, indent=2) + "\n")
            raise
        except Exception as err:  # recorded as an error in training is, with what training measured; --resume tests
            _record_failure(trainer, summary, run_dir, err, trained=result)
            raise
        scores = {k: float(v) for k, v in (out[0] if out else {}).items()}
        step = scores.pop("test/checkpoint_step", None)
        result["test"] = {**scores, "split": tested_split}
        result["test"]["checkpoint"] = tested or "final weights (no validation ran, so no best checkpoint)"
        if step is not None:
            result["test"]["checkpoint_step"] = int(step)
    if resumes:
        result["resumes"] = resumes
    if trainer.is_global_zero:  # before the baseline: a Ctrl+C or SIGTERM while it fits keeps what training measured
        write_text(run_dir / "summary.json", json.dumps(result, indent=2) + "\n")
    if cfg.section("run").get("baseline") and trainer.is_global_zero:
        from .baseline import bounded_baseline, budget_seconds

        threads = cfg.section("trainer").get("num_threads")
        result["baseline"] = bounded_baseline(data, num_threads=threads, budget_s=budget_seconds(training_seconds))
        write_text(run_dir / "summary.json", json.dumps(result, indent=2) + "\n")
    return run_dir
