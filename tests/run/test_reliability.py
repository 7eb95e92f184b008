"""Interruption by a real signal and resume, atomic checkpoint writes, non-finite loss detection."""

import csv
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from attnzoo.config import ConfigError, load
from attnzoo.run import fit
from attnzoo.run.checkpoint_io import AtomicCheckpointIO
from attnzoo.run.nan_guard import NonFiniteLossError
from attnzoo.run.signals import SELF_SIGNAL_ENV
from tests.helpers import ROOT, VIT
from tests.helpers import TINY_RUN as TINY


def _losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), f"train steps logged twice: {steps}"
    return {int(r["step"]): float(r["train/loss"]) for r in rows}


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.slow)])
def test_a_signal_saves_exits_cleanly_and_the_resumed_run_has_the_uninterrupted_loss_curve(sig, tmp_path):
    at = 5  # mid way through the second epoch
    reference = _losses(fit(load([VIT], [*TINY, f"run.dir={tmp_path / 'ref'}"])))
    assert sorted(reference) == list(range(8))

    env = {**os.environ, "PYTHONPATH": str(ROOT), SELF_SIGNAL_ENV: f"{sig}@{at}", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "attnzoo.fit", "--config", str(VIT), *TINY, f"run.dir={tmp_path / 'cut'}"]
    stopped = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert stopped.returncode == 128 + signal.Signals[sig], stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr and "--resume" in stopped.stderr, stopped.stderr[-3000:]
    (run_dir,) = (tmp_path / "cut" / "vit").iterdir()
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == at + 1  # the batch during which the signal arrived finished and was saved
    assert not list((run_dir / "checkpoints").glob("*.tmp"))
    assert not (run_dir / ".lock").exists()  # released on the way out

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    resumed = _losses(run_dir)
    assert sorted(resumed) == sorted(reference)  # no step lost or repeated
    assert resumed == pytest.approx(reference, rel=1e-6, abs=1e-7), (resumed, reference)


class _FailingSave(Exception):
    pass


def test_a_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(4)}, path)
    real_save = torch.save

    def crash_midway(obj, f, *args, **kwargs):  # writes part of the file, then the process "dies"
        f.write(b"PK\x03\x04 partial")
        raise _FailingSave

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(_FailingSave):
        io.save_checkpoint({"step": 2, "w": torch.zeros(4)}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert io.load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind
    io.save_checkpoint({"step": 3}, path)
    assert io.load_checkpoint(path)["step"] == 3


class _PoisonAt(L.Callback):
    """Makes the weights NaN before the batch of global step `at`."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_start(self, trainer, module, batch, idx):
        if trainer.global_step == self.at:
            with torch.no_grad():
                next(module.parameters()).fill_(float("nan"))


def test_a_non_finite_loss_stops_at_its_step_with_advice_and_keeps_the_best_checkpoint(tmp_path):
    overrides = [*TINY, f"run.dir={tmp_path}", "trainer.max_epochs=3"]
    with pytest.raises(NonFiniteLossError) as caught:
        fit(load([VIT], overrides), extra_callbacks=[_PoisonAt(at=6)])
    message = str(caught.value)
    for part in ("global step 6", "epoch 1, batch 2", "image [8, 1, 28, 28]", "lr", "bf16", "gradient_clip_val"):
        assert part in message, message
    (run_dir,) = (tmp_path / "vit").iterdir()
    best = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=False)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert best["global_step"] == last["global_step"] == 4  # saved after epoch 0's validation, never after
    assert all(torch.isfinite(v).all() for v in best["state_dict"].values() if v.is_floating_point())
    assert max(_losses(run_dir)) == 5  # step 6 was never logged


# ------------------------------------------------------------------------------------------ metrics.csv history


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# best.ckpt is the first epoch's (monitor the step, lowest wins): the best epoch is never the last
BEST_FIRST = [
    "run.monitor=step",
    "run.mode=min",
    "run.early_stopping=null",  # early stopping cannot watch the step
    "run.test=true",
    "trainer.limit_test_batches=1",
]


def test_a_finished_run_extended_by_a_step_takes_it_at_the_learning_rate_its_new_plan_gives(tmp_path, caplog):
    # the optimizer's learning rate restored from a finished run was its cosine's end, 0: the first step of an
    # extension changed nothing (the scheduler, planned again over the new budget, only set it after that step)
    import logging

    run_dir = fit(load([VIT], [*TINY, "trainer.max_steps=4", "trainer.max_epochs=null", f"run.dir={tmp_path}"]))
    before = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert before["optimizer_states"][0]["param_groups"][0]["lr"] == 0.0  # the cosine's end
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        fit(load([run_dir / "config.yaml"], ["trainer.max_steps=5"]), resume=run_dir)
    after = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    moved = [k for k, v in before["state_dict"].items() if not torch.equal(v, after["state_dict"][k])]
    assert after["global_step"] == 5 and moved  # the extra step trained
    assert "the learning-rate schedule is planned over the budget" in caplog.text


def test_a_resumed_checkpoint_that_names_files_elsewhere_deletes_none_of_them(tmp_path):
    # a checkpoint's ModelCheckpoint record named local://~/Documents as its best: Lightning deleted it (recursively,
    # through fsspec) when the resumed run saved a newer checkpoint
    run_dir = fit(load([VIT], [*TINY, "trainer.max_steps=4", "trainer.max_epochs=null", f"run.dir={tmp_path / 'r'}"]))
    victim = tmp_path / "Documents"
    victim.mkdir()
    (victim / "thesis.txt").write_text("years of work")
    (tmp_path / "other.ckpt").write_text("not this run's")
    last = run_dir / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    for key, state in ckpt["callbacks"].items():
        if key.startswith("ModelCheckpoint"):
            bad = {f"local://{victim}": torch.tensor(9.0), str(tmp_path / "other.ckpt"): torch.tensor(8.0)}
            state.update(
                dirpath="/elsewhere/checkpoints",
                best_model_path=f"local://{victim}",
                best_k_models=bad,
                kth_best_model_path=str(tmp_path / "other.ckpt"),
                last_model_path=f"local://{victim}",
            )
    torch.save(ckpt, last)
    fit(load([run_dir / "config.yaml"], ["trainer.max_steps=8"]), resume=run_dir)
    assert (victim / "thesis.txt").read_text() == "years of work" and (tmp_path / "other.ckpt").is_file()
    assert torch.load(last, weights_only=True)["global_step"] == 8


def test_a_resumed_checkpoint_names_no_file_of_its_folder_but_its_own(tmp_path):
    # a record naming "important.ckpt" was read as that name in the run's checkpoints folder (a link to the user's
    # scratch disk, say): Lightning deleted it, a folder recursively, when the resumed run saved a newer checkpoint
    run_dir = fit(load([VIT], [*TINY, "trainer.max_steps=4", "trainer.max_epochs=null", f"run.dir={tmp_path / 'r'}"]))
    precious = run_dir / "checkpoints" / "important.ckpt"
    precious.mkdir()
    (precious / "weights.pt").write_text("a week of training")
    last = run_dir / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    for key, state in ckpt["callbacks"].items():
        if key.startswith("ModelCheckpoint"):
            named = {"important.ckpt": torch.tensor(9.0)}
            state.update(best_model_path="important.ckpt", best_k_models=named, kth_best_model_path="important.ckpt")
    torch.save(ckpt, last)
    fit(load([run_dir / "config.yaml"], ["trainer.max_steps=8"]), resume=run_dir)
    assert (precious / "weights.pt").read_text() == "a week of training"
    assert torch.load(last, weights_only=True)["global_step"] == 8


def test_a_replaced_checkpoint_that_is_a_folder_is_left_as_it_is(tmp_path, caplog):
    io = AtomicCheckpointIO()
    (tmp_path / "best.ckpt").mkdir()
    (tmp_path / "best.ckpt" / "kept").write_text("x")
    (tmp_path / "last.ckpt").write_text("old")
    with caplog.at_level("WARNING", logger="attnzoo"):
        io.remove_checkpoint(tmp_path / "best.ckpt")
        io.remove_checkpoint(tmp_path / "last.ckpt")
    assert (tmp_path / "best.ckpt" / "kept").is_file() and not (tmp_path / "last.ckpt").exists()
    assert "best.ckpt is not a file, so it was left as it is" in caplog.text


def test_metrics_csv_keeps_every_row_when_the_best_epoch_is_not_the_last_and_when_a_finished_run_is_extended(tmp_path):
    run_dir = fit(load([VIT], [*TINY, *BEST_FIRST, "trainer.max_epochs=3", f"run.dir={tmp_path}"]))
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(12))  # testing best.ckpt cut none
    assert [r["epoch"] for r in rows if r["val/acc"]] == ["0", "1", "2"]
    (test,) = [r for r in rows if r["test/acc"]]
    assert float(test["test/checkpoint_step"]) == 4 == _summary(run_dir)["test"]["checkpoint_step"]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 12

    fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=4"]), resume=run_dir)
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(16))  # continued from step 12
    assert [r["epoch"] for r in rows if r["val/acc"]] == ["0", "1", "2", "3"]
    tests = [r for r in rows if r["test/acc"]]
    assert len(tests) == 2 and all(float(r["test/checkpoint_step"]) == 4 for r in tests)  # one row per test pass
    summary = _summary(run_dir)
    assert summary["global_step"] == 16
    (resumed,) = summary["resumes"]
    assert resumed["step"] == 12 and resumed["changed"] == {"trainer.max_epochs": [3, 4]}
    assert summary["test"]["split"] == "val"  # the embedded MNIST subset has no test split
    assert not (run_dir / ".lock").exists()


@pytest.mark.parametrize("how", ["moved", pytest.param("copied", marks=pytest.mark.slow)])
def test_a_moved_or_copied_run_resumes_with_its_best_checkpoint_record(how, tmp_path):
    """Lightning drops ModelCheckpoint's best score when its directory changed: a moved run took its next
    validation as the best (overwriting best.ckpt), and a copied finished run stopped on the missing score."""
    import shutil

    run_dir = fit(load([VIT], [*TINY, *BEST_FIRST, "trainer.max_epochs=2", f"run.dir={tmp_path / 'a'}"]))
    there = tmp_path / "b" / "run"
    there.parent.mkdir()
    (shutil.move if how == "moved" else shutil.copytree)(run_dir, there)
    fit(load([there / "config.yaml"], ["trainer.max_epochs=2"] if how == "copied" else []), resume=there)
    fit(load([there / "config.yaml"], ["trainer.max_epochs=3"]), resume=there)
    summary = _summary(there)
    assert summary["test"]["checkpoint_step"] == 4  # still the first epoch's
    assert torch.load(there / "checkpoints" / "best.ckpt", weights_only=False)["global_step"] == 4


def test_a_resume_refuses_a_changed_model_data_or_seed_naming_each_key(tmp_path):
    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    saved = (run_dir / "config.yaml").read_text()
    changed = ["model.num_heads=1", "data.batch_size=4", "seed=3", "task.optimizer.lr=0.1"]
    with pytest.raises(ConfigError) as err:
        fit(load([run_dir / "config.yaml"], changed), resume=run_dir)
    for part in (
        "model.num_heads: 2 -> 1",
        "data.batch_size: 8 -> 4",
        "seed: 0 -> 3",
        "task.optimizer.lr: 0.003 -> 0.1",
    ):
        assert part in str(err.value), str(err.value)
    assert f"--config {run_dir / 'config.yaml'}" in str(err.value)
    assert (run_dir / "config.yaml").read_text() == saved  # nothing rewritten
    assert not (run_dir / "resumes.json").exists() and not (run_dir / ".lock").exists()
    with pytest.raises(ConfigError, match=r"trainer.precision: '32-true' -> 'bf16-mixed'"):
        fit(load([run_dir / "config.yaml"], ["trainer.precision=bf16-mixed"]), resume=run_dir)


# ----------------------------------------------------------------------------------------------------- the lock

_HOLD = """
import sys, time
from attnzoo.run.lock import RunLock
RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_a_run_directory_in_use_is_refused_and_a_killed_holders_lock_is_taken_over(tmp_path, caplog):
    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run_dir)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"is in use by process {holder.pid} on "):
            fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
        with pytest.raises(ConfigError, match="is in use by process"):  # not a new run into it either
            fit(load([VIT], [*TINY, "trainer.max_epochs=1"]), run_dir=run_dir)
    finally:
        holder.kill()  # SIGKILL: no cleanup; its record stays in .lock
        holder.wait()
    assert str(holder.pid) in (run_dir / ".lock").read_text()
    with caplog.at_level("WARNING", logger="attnzoo"):
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert f"taking over the lock of process {holder.pid}" in caplog.text
    assert _summary(run_dir)["global_step"] == 8 and not (run_dir / ".lock").exists()


def test_a_new_run_is_not_written_into_a_directory_that_holds_one(tmp_path):
    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    rows = (run_dir / "metrics.csv").read_text()
    with pytest.raises(ConfigError, match=rf"already holds a run .*--resume {run_dir}"):
        fit(load([VIT], [*TINY, "trainer.max_epochs=1"]), run_dir=run_dir)
    assert (run_dir / "metrics.csv").read_text() == rows


# ------------------------------------------------------------------------------------ resume and checkpoint errors


def _fit_main(args: list[str], capsys) -> tuple[int, str]:
    from attnzoo.fit import main

    code = main(args)
    return code, capsys.readouterr().err


def test_resuming_a_run_killed_before_its_first_checkpoint_says_how_to_start_it_again(tmp_path, capsys):
    run_dir = tmp_path / "vit" / "killed"
    run_dir.mkdir(parents=True)
    from attnzoo.util.files import RUN_CONFIG_HEADER

    (run_dir / "config.yaml").write_text(RUN_CONFIG_HEADER + load([VIT], TINY).to_yaml())  # what fit writes first
    code, err = _fit_main(["--resume", str(run_dir)], capsys)
    assert code == 2 and "stopped before its first checkpoint" in err, err
    assert f"--config {run_dir / 'config.yaml'} --run-dir {run_dir}" in err and "Traceback" not in err  # not a new dir
    # started again in the same directory: before, that was refused as a directory that "already holds a run"
    overrides = ["trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1"]
    code, err = _fit_main(["--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir), *overrides], capsys)
    assert code == 0, err
    assert _summary(run_dir)["finished"] and (run_dir / "checkpoints" / "last.ckpt").is_file()
    # one that wrote metrics.csv and a summary of its failure before its first checkpoint (a NaN loss, out of
    # memory): --resume sent the user to start it again, which said it "already holds a run" and sent them back
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "summary.json").write_text(json.dumps({"finished": False, "stopped": {"reason": "failed"}}))
    (run_dir / "metrics.csv").write_text("epoch,step,train/loss\n0,0,123456.0\n")
    code, err = _fit_main(["--resume", str(run_dir)], capsys)
    assert code == 2 and "stopped before its first checkpoint" in err, err
    code, err = _fit_main(["--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir), *overrides], capsys)
    assert code == 0, err
    assert _summary(run_dir)["finished"] and "123456.0" not in (run_dir / "metrics.csv").read_text()
    # a finished run is never started over
    code, err = _fit_main(["--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir), *overrides], capsys)
    assert code == 2 and "already holds a run" in err, err


def test_a_run_dir_of_the_users_own_files_is_refused_not_written_over(tmp_path, capsys, monkeypatch):
    # --run-dir of an experiment folder holding the user's own config.yaml (or labels.json) wrote the run's over it
    mine = tmp_path / "experiment"
    mine.mkdir()
    for name in ("config.yaml", "labels.json"):
        (mine / name).write_text("# my own\n")
        code, err = _fit_main(["--config", str(VIT), *TINY, "--run-dir", str(mine)], capsys)
        assert code == 2 and str(mine) in err and (mine / name).read_text() == "# my own\n", err
        assert "no attnzoo run wrote" in err if name == "config.yaml" else "holds no run but files a run writes" in err
        (mine / name).unlink()
    # run.dir=~/runs: Lightning's loggers expand "~" themselves, so the run was split between ./~ and the home
    from attnzoo.run import new_run_dir

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert new_run_dir(load([VIT], ["run.dir=~/runs"])).is_relative_to(tmp_path / "home" / "runs")


@pytest.mark.parametrize(
    "content", [b"", b"not a checkpoint at all", b"PK\x03\x04" + b"\x00" * 40], ids=["empty", "garbage", "bad_zip"]
)
def test_a_garbage_or_empty_checkpoint_is_named_on_resume_and_evaluate(content, tmp_path, capsys):
    from attnzoo.evaluate import main as evaluate
    from attnzoo.run import build

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    cfg = load([VIT], TINY)
    cfg = build(cfg).cfg  # with what the data gives (num_classes, ...), as the config.yaml fit writes
    (run_dir / "config.yaml").write_text(cfg.to_yaml())
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(content)
    code, err = _fit_main(["--resume", str(run_dir)], capsys)
    assert code == 2 and f"{str(run_dir / 'checkpoints' / 'last.ckpt')!r} is not a checkpoint" in err, err
    assert "mmap" not in err and "Traceback" not in err
    assert evaluate([str(run_dir), "--checkpoint", "last"]) == 2
    assert "last.ckpt' is not a checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["file", "/dev/null", "/proc/attnzoo", "/sys/attnzoo"])
def test_a_run_dir_that_cannot_hold_runs_is_refused_before_anything_is_built(where, tmp_path, capsys):
    if where == "file":
        where = str(tmp_path / "a_file")
        Path(where).write_text("x")
    code, err = _fit_main(["--config", str(VIT), *TINY, f"run.dir={where}"], capsys)
    assert code == 2 and f"run directory (run.dir={where})" in err and "cannot be created" in err, err


def test_ctrl_c_before_training_starts_exits_130_without_a_traceback(tmp_path, capsys, monkeypatch):
    import attnzoo.run.train as train

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "build", interrupted)
    code, err = _fit_main(["--config", str(VIT), *TINY, f"run.dir={tmp_path}"], capsys)
    assert code == 130 and "interrupted" in err
    assert not list((tmp_path / "vit").iterdir())  # the new run dir held nothing: removed, lock released


# ------------------------------------------------------------------------------------------- data without a test split

TEXT = ROOT / "recipes" / "text_cls.yaml"
TINY_TEXT = [*TINY[:10], "model.dim=16", "model.depth=1", "model.num_heads=2", "data.batch_size=4", "run.test=true"]


def test_text_given_only_train_and_val_files_is_tested_on_val_and_says_so(tmp_path, caplog):
    for split, n in (("train", 24), ("val", 8)):
        lines = [
            "text,label",
            *(f"{'good' if i % 2 else 'bad'} film number {i},{'pos' if i % 2 else 'neg'}" for i in range(n)),
        ]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    files = [f"data.train={tmp_path / 'train.csv'}", f"data.val={tmp_path / 'val.csv'}", f"run.dir={tmp_path}"]
    with caplog.at_level("WARNING", logger="attnzoo"):
        run_dir = fit(load([TEXT], [*TINY_TEXT, "trainer.max_epochs=1", *files]))
    test = _summary(run_dir)["test"]
    assert test["split"] == "val" and 0.0 <= test["test/acc"] <= 1.0 and "test/loss" in test
    assert "the test pass scores the validation split" in caplog.text


def test_an_audio_folder_whose_split_leaves_no_test_clip_tests_on_val(tmp_path):
    from attnzoo.run.splits import test_split
    from tests.helpers.audio import small, speech_commands

    speech_commands(tmp_path)
    (tmp_path / "testing_list.txt").write_text("")
    data = small(source="folder", root=str(tmp_path))
    data.setup()
    assert len(data.datasets["test"]) == 0 and len(data.datasets["val"]) == 3
    assert test_split(data) == "val"  # not a silent test pass over no clips
    (tmp_path / "validation_list.txt").write_text("")
    empty = small(source="folder", root=str(tmp_path))
    empty.setup()
    with pytest.raises(ConfigError, match="neither test nor validation examples; set run.test=false"):
        test_split(empty)


def test_image_text_pairs_given_only_train_and_val_files_test_on_val(tmp_path):
    from attnzoo.data.embedded.scenes import SceneGenerator, write_jsonl
    from attnzoo.data.modules.text_image import TextImageDataModule
    from attnzoo.run.splits import test_split

    gen = SceneGenerator(task="vqa", seed=0)
    paths = {}
    for split in ("train", "val"):
        examples = gen.examples(8, split=split)
        paths[split] = write_jsonl(tmp_path, examples, gen.images(examples, image_size=16, split=split), name=split)
    data = TextImageDataModule(train=str(paths["train"]), val=str(paths["val"]), image_size=16, classes=gen.class_names)
    data.setup()
    assert test_split(data) == "val"


@pytest.mark.parametrize(
    "override, match",
    [
        ("trainer.val_check_interval=1000", r"before training started: `val_check_interval` \(1000\) must be less"),
        ("run.monitor=val/accuracy", r"run.monitor: 'val/accuracy' .* valid: \[.*'val/acc'.*did you mean 'val/acc'"),
    ],
)
def test_what_only_the_built_run_can_check_stops_before_training_naming_the_section(override, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        fit(load([VIT], [*TINY, override, f"run.dir={tmp_path}"]))
    assert not list((tmp_path / "vit").iterdir())  # nothing trained, no run dir left


@pytest.mark.parametrize(
    "content",
    [pytest.param(b"\x00\x01garbage,,\n\xff\xfe", marks=pytest.mark.slow), b"loss;acc\n1;2\n"],
    ids=["binary", "not_ours"],
)
def test_a_damaged_metrics_csv_stops_a_resume_naming_it_before_training(content, tmp_path):
    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    (run_dir / "metrics.csv").write_bytes(content)
    with pytest.raises(ConfigError, match=r"metrics.csv is not a metrics history written by attnzoo .*move it away"):
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert (run_dir / "metrics.csv").read_bytes() == content and not (run_dir / ".lock").exists()
    (run_dir / "metrics.csv").unlink()  # moved away: the resume goes on, logging from the checkpoint's step
    fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert [int(r["step"]) for r in _rows(run_dir) if r["train/loss"]] == [4, 5, 6, 7]


_TWO_CTRL_C = """
import os, signal, sys
import lightning as L
import attnzoo.run.callbacks as run_callbacks
from attnzoo.fit import main

class TwoCtrlC(L.Callback):  # an impatient user: Ctrl+C, then Ctrl+C again before the batch ends
    def on_train_batch_start(self, trainer, module, batch, i):
        if trainer.global_step == 5:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

own = run_callbacks.callbacks
run_callbacks.callbacks = lambda checkpoint, **kw: [*own(checkpoint, **kw), TwoCtrlC()]
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # ~15 s; a signal's save and exact resume run by default (the SIGTERM test above; Ctrl-C: -m slow)
def test_a_second_ctrl_c_stops_at_once_exits_130_and_the_run_resumes_from_its_last_checkpoint(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", _TWO_CTRL_C, "--config", str(VIT), *TINY, f"run.dir={tmp_path}"]
    stopped = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr and "second Ctrl+C" in stopped.stderr, stopped.stderr[-3000:]
    (run_dir,) = (tmp_path / "vit").iterdir()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4  # epoch 0's
    assert not (run_dir / ".lock").exists() and not list((run_dir / "checkpoints").glob("*.tmp"))
    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert sorted(_losses(run_dir)) == list(range(8))  # rows after the checkpoint dropped, logged again once


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.slow)])
def test_a_signal_during_the_test_beam_search_exits_non_zero_and_resume_finishes_the_test(sig, tmp_path):
    from tests.helpers import smoke_overrides

    recipe = ROOT / "recipes" / "translation.yaml"
    steps = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
    steps += ["trainer.limit_test_batches=1", "trainer.num_sanity_val_steps=0", "run.test=true"]
    quick = [t for t in TINY if t.startswith("trainer.") and "batches" not in t and "epochs" not in t]
    overrides = [*smoke_overrides(load([recipe])), *quick, *steps, f"run.dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), SELF_SIGNAL_ENV: f"{sig}@test", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "attnzoo.fit", "--config", str(recipe), *overrides]
    stopped = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert stopped.returncode == 128 + signal.Signals[sig], stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    (run_dir,) = (tmp_path / "translation").iterdir()
    assert f"attnzoo fit: {sig} received during the test" in stopped.stderr
    assert f"continue with --resume {run_dir}" in stopped.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is False and summary["stopped"]["phase"] == "test" and "test" not in summary
    assert not (run_dir / ".lock").exists()

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True and "test/bleu" in summary["test"] and summary["global_step"] == 2
    assert summary["stopped"]["reason"] == "budget" and summary["metrics"]  # not the signal during the test


def test_resuming_a_finished_run_trains_nothing_and_keeps_what_its_training_measured(tmp_path):
    # the summary's metrics became {} and its throughput None (a SLURM requeue of a finished job takes this path)
    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    first = _summary(run_dir)
    assert first["metrics"] and first["train_seconds"] > 0
    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    again = _summary(run_dir)
    assert again["global_step"] == first["global_step"]
    for key in ("metrics", "train_samples_per_second", "train_seconds", "data_wait_share", "stopped", "best_epoch"):
        assert again[key] == first[key], key


@pytest.mark.parametrize("command", ["evaluate", "viz", "resume", "baseline"])
def test_no_command_writes_through_a_link_in_a_run_directory(command, tmp_path, capsys):
    """A run directory from someone else with `evaluate-best.json -> ~/.bashrc` (or a linked viz/, .lock or
    summary.json) had evaluate, viz and --resume write over the file the link named."""
    from attnzoo.baseline import main as baseline_main
    from attnzoo.evaluate import main as evaluate_main
    from attnzoo.fit import main as fit_main
    from attnzoo.viz import main as viz_main

    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path / 'runs'}"]))
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    name = {"evaluate": "evaluate-best.json", "viz": "viz", "resume": "summary.json", "baseline": "summary.json"}
    target = run_dir / name[command]
    if target.is_file():
        target.unlink()
    (tmp_path / "elsewhere").mkdir()
    if command == "viz":
        target.symlink_to(tmp_path / "elsewhere")
    else:
        target.symlink_to(victim)
    run = {
        "evaluate": lambda: evaluate_main([str(run_dir)]),
        "viz": lambda: viz_main([str(run_dir), "--index", "0"]),
        "resume": lambda: fit_main(["--resume", str(run_dir), "trainer.max_epochs=2"]),
        "baseline": lambda: baseline_main(["--run-dir", str(run_dir)]),
    }[command]
    if command in ("evaluate", "baseline"):  # a report written whole: the link is replaced, not written through
        assert run() == 0
        assert not target.is_symlink() and json.loads(target.read_text())
    else:  # drawings and a training run write in place: refused, naming the link
        assert run() == 2
        err = capsys.readouterr().err
        assert "holds 1 symbolic link(s)" in err and f"{name[command]} -> " in err
    assert victim.read_text() == "mine\n" and not any((tmp_path / "elsewhere").iterdir())


def test_resuming_after_the_training_file_changed_says_so_not_to_remove_a_key(tmp_path):
    # "model.vocab_size: 165 (set in <run>/config.yaml) contradicts the data ...; remove it or change the data
    # section": neither is possible on a resume
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    lines = ["text,label", *(f"{words[i % 12]} {words[(i * 5) % 12]} {i},{'a' if i % 2 else 'b'}" for i in range(40))]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    files = [f"data.train={tmp_path / 'train.csv'}", "data.tokenizer=unigram", "data.vocab_size=500", "run.test=false",
             "run.baseline=false"]  # fmt: skip
    run_dir = fit(load([TEXT], [*TINY_TEXT, "trainer.max_epochs=1", *files, f"run.dir={tmp_path / 'runs'}"]))
    more = [f"{w}x{i} quux{i} {w}zz,a" for i, w in enumerate(words * 3)]  # new words: a larger vocabulary learned
    (tmp_path / "train.csv").write_text("\n".join([*lines, *more]) + "\n")
    saved = (run_dir / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=r"the run's data changed since it was trained: data\.train: .*train\.csv"):
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)  # named before it is read
    (run_dir / "data_files.json").unlink()  # a run that recorded no fingerprint: the vocabulary learned again tells
    with pytest.raises(ConfigError) as err:
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    text = str(err.value)
    assert "this is not the data the run was trained on, or it changed since" in text and "remove it" not in text
    assert (run_dir / "config.yaml").read_text() == saved


def test_a_run_resumes_from_its_data_files_where_they_moved_and_not_from_other_files(tmp_path, caplog):
    # "--resume: the config differs ... data.train ... Resume without these changes (e.g. data.train=<old path>)":
    # data moved (a renamed project or scratch folder) could not be given where it is now, and the hint named a path
    # that was gone
    import shutil

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    lines = ["text,label", *(f"{words[i % 12]} {words[(i * 5) % 12]} {i},{'a' if i % 2 else 'b'}" for i in range(40))]
    (tmp_path / "old").mkdir()
    for name in ("train", "val"):
        (tmp_path / "old" / f"{name}.csv").write_text("\n".join(lines) + "\n")
    files = [f"data.{n}={tmp_path / 'old' / f'{n}.csv'}" for n in ("train", "val")]
    run_dir = fit(load([TEXT], [*TINY_TEXT, "trainer.max_epochs=1", *files, "run.test=false", "run.baseline=false",
                                f"run.dir={tmp_path / 'runs'}"]))  # fmt: skip
    assert (run_dir / "data_files.json").is_file()
    shutil.move(tmp_path / "old", tmp_path / "new")
    moved = [f"data.{n}={tmp_path / 'new' / f'{n}.csv'}" for n in ("train", "val")]
    (tmp_path / "other.csv").write_text("\n".join([*lines[:-1], "omega omega 99,a"]) + "\n")  # the same size
    assert (tmp_path / "other.csv").stat().st_size == (tmp_path / "new" / "train.csv").stat().st_size
    with pytest.raises(ConfigError) as err:  # another file is not the moved one
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2", f"data.train={tmp_path / 'other.csv'}",
                                             moved[1]]), resume=run_dir)  # fmt: skip
    assert "data.train is not where it was any more: put it back there, or give it where it is now" in str(err.value)
    assert f"data.train={tmp_path / 'old'}" not in str(err.value)  # no hint to a path that is gone
    # said of the file given: it is there, and it is not the run's (the hint asked for what had been done)
    assert (
        f"{tmp_path / 'other.csv'} (data.train) is not the data the run trained on: the same size, other content."
        in str(err.value)
    )
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2", *moved]), resume=run_dir)
    assert _summary(run_dir)["epochs"] == 2 and f"resume: data.train moved: {tmp_path / 'old'}" in caplog.text
    assert str(tmp_path / "new" / "train.csv") in (run_dir / "config.yaml").read_text()  # and recorded where it is


def test_a_checkpoints_folder_linked_to_other_storage_is_not_refused(tmp_path, capsys):
    # checkpoints -> /scratch/... is a usual setup on clusters; checkpoint files are replaced, never written through
    import shutil

    from attnzoo.evaluate import main as evaluate_main

    run_dir = fit(load([VIT], [*TINY, "trainer.max_epochs=1", f"run.dir={tmp_path / 'runs'}"]))
    shutil.move(run_dir / "checkpoints", tmp_path / "scratch")
    (run_dir / "checkpoints").symlink_to(tmp_path / "scratch")
    assert evaluate_main([str(run_dir), "trainer.limit_test_batches=1", "trainer.limit_val_batches=1"]) == 0
    fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert (run_dir / "checkpoints").is_symlink() and _summary(run_dir)["global_step"] > 0


def test_a_file_written_whole_never_writes_through_a_link_beside_it(tmp_path):
    # its temporary file had a fixed name (.summary.json.tmp): a link planted there was written through
    from attnzoo.util.files import write_json

    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "run").mkdir()
    for name in ("summary.json", ".summary.json.tmp"):
        (tmp_path / "run" / name).symlink_to(victim)
    write_json(tmp_path / "run" / "summary.json", {"a": 1})
    assert victim.read_text() == "mine\n" and json.loads((tmp_path / "run" / "summary.json").read_text()) == {"a": 1}
    assert not (tmp_path / "run" / "summary.json").is_symlink()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".summary.json.tmp", "summary.json"]


def test_an_ablation_directory_whose_runs_folder_is_a_link_is_not_refused(tmp_path):
    from attnzoo.run.lock import RunLock

    (tmp_path / "scratch").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "runs").symlink_to(tmp_path / "scratch")
    with RunLock(tmp_path / "out", what="ablation directory", links=("runs",)):
        pass
    (tmp_path / "out" / "report.md").symlink_to(tmp_path / "scratch" / "x")
    with pytest.raises(ConfigError, match=r"ablation directory .* holds 1 symbolic link\(s\): report.md ->"):
        RunLock(tmp_path / "out", what="ablation directory", links=("runs",)).acquire()


class _ExitAt(L.Callback):
    """Lightning's answer to a KeyboardInterrupt (sys.exit(1)), raised in `hook`."""

    def __init__(self, hook: str) -> None:
        setattr(self, hook, self._exit)

    def _exit(self, *args, **kwargs) -> None:
        raise SystemExit(1)


@pytest.mark.parametrize(("hook", "says"), [("setup", "before training started"), ("on_train_batch_start", "second")])
def test_a_ctrl_c_before_training_is_not_called_a_second_one_with_a_resume_to_nowhere(hook, says, tmp_path):
    # before training Lightning's own handler answers the first Ctrl+C with sys.exit(1): the message said "a second
    # Ctrl+C ... continue with --resume DIR", for a directory removed since (nothing was trained)
    from attnzoo.run.signals import StoppedAtOnce

    with pytest.raises(StoppedAtOnce) as err:
        fit(load([VIT], [*TINY, f"run.dir={tmp_path}"]), extra_callbacks=[_ExitAt(hook)])
    assert says in str(err.value) and ("--resume" in str(err.value)) == (says == "second")


def test_a_resume_refuses_data_changed_since_the_run_started_before_reading_it(tmp_path):
    # a file edited, or a clip added to an audio folder, went on without a word: the splits, batches and test
    # examples were no longer the run's (metrics.csv mixed test rows of two test sets)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    lines = ["text,label", *(f"{words[i % 12]} {words[(i * 5) % 12]} {i},{'a' if i % 2 else 'b'}" for i in range(40))]
    for name in ("train", "val"):
        (tmp_path / f"{name}.csv").write_text("\n".join(lines) + "\n")
    files = [f"data.{n}={tmp_path / f'{n}.csv'}" for n in ("train", "val")]
    run_dir = fit(load([TEXT], [*TINY_TEXT, "trainer.max_epochs=1", *files, "run.test=false", "run.baseline=false",
                                f"run.dir={tmp_path / 'runs'}"]))  # fmt: skip
    (tmp_path / "val.csv").write_text("\n".join([*lines, "omega 1,a"]) + "\n")
    before = (run_dir / "metrics.csv").read_text()
    with pytest.raises(ConfigError) as err:
        fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    size = len("\n".join(lines) + "\n")
    assert f"the run's data changed since it was trained: data.val: {tmp_path / 'val.csv'} ({size} bytes then, " in (
        str(err.value)
    )
    assert "put the data back as it was" in str(err.value) and (run_dir / "metrics.csv").read_text() == before
    (tmp_path / "val.csv").write_text("\n".join(lines) + "\n")  # back as it was: the resume goes on
    fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert _summary(run_dir)["epochs"] == 2


def test_a_data_folder_is_fingerprinted_by_the_data_files_it_lists(tmp_path, monkeypatch):
    from attnzoo.run.paths import changed_data, moved_data, record_data_files

    root = tmp_path / "clips"
    for cls in ("dog", "cat"):
        (root / cls).mkdir(parents=True)
        (root / cls / "a.wav").write_bytes(b"x" * 10)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_data_files({"root": str(root)}, run_dir)
    # what is not data: hidden files, a log, caches, and runs and ablations written inside the folder
    (root / ".DS_Store").write_bytes(b"y")
    (root / "train.log").write_text("epoch 1\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.png").write_bytes(b"z")
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "r1" / "config.yaml").write_text("seed: 0\n")
    (root / "runs" / "r1" / "attention.png").write_bytes(b"png")
    (root / "abl" / "x").mkdir(parents=True)  # an ablation's folder: its report and its runs' records
    (root / "abl" / "ablation.json").write_text("{}")
    (root / "abl" / "report.png").write_bytes(b"png")
    (root / "abl" / "x" / "ablate.json").write_text("{}")
    (root / "dog" / "a.wav").write_bytes(b"x" * 12)  # edited in place: not seen (no file is read or stat'ed)
    assert changed_data(run_dir, {"root": str(root)}) == []
    (root / "dog" / "b.wav").write_bytes(b"x" * 7)
    assert changed_data(run_dir, {"root": str(root)}) == [f"data.root: {root} (2 data files then, 3 now)"]
    monkeypatch.chdir(tmp_path)  # the folder given relative to the current one is the same folder
    assert changed_data(run_dir, {"root": "clips"}) == [f"data.root: {root} (2 data files then, 3 now)"]
    (root / "dog" / "b.wav").unlink()
    assert changed_data(run_dir, {"root": str(root)}) == []
    (root / "dog" / "a.wav").rename(root / "cat" / "b.wav")  # a clip of another class now
    assert changed_data(run_dir, {"root": str(root)}) == [f"data.root: {root} (2 data files, as then, renamed or "
                                                          "moved between its folders)"]  # fmt: skip
    (root / "cat" / "b.wav").rename(root / "dog" / "a.wav")
    root.rename(tmp_path / "moved")  # a moved folder is known again, as a moved file is
    assert moved_data(run_dir, "data.root", str(root), str(tmp_path / "moved"))


def test_a_folder_of_texts_is_fingerprinted_by_its_text_files_and_their_sizes(tmp_path):
    # a language model's data.train folder was not recorded: a text added since was trained on at resume, silently,
    # and the folder moved elsewhere could not be given where it is now
    from attnzoo.run.paths import changed_data, moved_data, record_data_files

    texts = tmp_path / "corpus"
    (texts / "part").mkdir(parents=True)
    (texts / "a.txt").write_text("one text\n")
    (texts / "part" / "b.txt").write_text("another\n")
    (texts / "notes.md").write_text("not read\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_data_files({"train": str(texts)}, run_dir)
    (texts / "notes.md").write_text("still not read\n")
    assert changed_data(run_dir, {"train": str(texts)}) == []
    (texts / "c.txt").write_text("a third\n")
    assert changed_data(run_dir, {"train": str(texts)}) == [f"data.train: {texts} (2 data files then, 3 now)"]
    (texts / "c.txt").unlink()
    (texts / "a.txt").write_text("one text, longer now\n")
    assert changed_data(run_dir, {"train": str(texts)}) == [f"data.train: {texts} (2 text files, as then, edited or "
                                                            "renamed)"]  # fmt: skip
    (texts / "a.txt").write_text("one text\n")
    texts.rename(tmp_path / "moved")
    assert moved_data(run_dir, "data.train", str(texts), str(tmp_path / "moved"))


def test_a_test_file_that_is_the_train_file_is_warned_about_before_training(tmp_path, caplog):
    # data.test=train.csv (a copy-paste slip) scored test/acc on the training texts, without a word
    from attnzoo.run.paths import scored_on_train

    lines = ["text,label"] + [f"{w} film number {i},{w}" for i, w in enumerate(["good", "bad"] * 10)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "val.csv").write_text("\n".join(lines[:5]) + "\n")
    train = str(tmp_path / "train.csv")
    given = [f"data.train={train}", f"data.val={tmp_path / 'val.csv'}", f"data.test={train}", "model.dim=16",
             "model.depth=1", "trainer.max_epochs=1", "run.baseline=false"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        fit(load([ROOT / "recipes" / "text_cls.yaml"], given), run_dir=tmp_path / "run")
    assert "data.test is the train file: its metrics are scored on examples the model trains on" in caplog.text
    assert "data.val is" not in caplog.text
    relative = {"kind": "translation", "train": train, "val": train, "test": str(tmp_path / ".." / tmp_path.name /
                "train.csv")}  # fmt: skip
    assert scored_on_train(relative) == ["test"]  # translation says it of val itself
    assert scored_on_train({"kind": "text", "train": train, "val": train}) == ["val"]


def test_a_run_made_before_the_stratified_split_is_loaded_and_resumed_with_the_split_it_trained_on(tmp_path):
    # the val part held out of train became stratified: an earlier run (its config.yaml has no data.stratify),
    # resumed or evaluated, got another val part, holding examples it had trained on
    from attnzoo.data.modules.base import held_out
    from attnzoo.run import load_run

    texts = [f"{w} film number {i}" for i, w in enumerate(["good", "bad", "fine"] * 20)]
    labels = [t.split()[0] for t in texts]
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{t},{t.split()[0]}\n" for t in texts))
    given = [f"data.train={tmp_path / 'train.csv'}", "model.dim=16", "model.depth=1", "trainer.max_epochs=1",
             "run.baseline=false", "run.test=false"]  # fmt: skip
    run = fit(load([ROOT / "recipes" / "text_cls.yaml"], given), run_dir=tmp_path / "run")
    config = (run / "config.yaml").read_text()
    assert "stratify: true" in config
    stratified = [texts[i] for i in held_out(labels, 0.1, 0)[1]]
    assert sorted(load_run(run).data.texts["val"]) == sorted(stratified)
    (run / "config.yaml").write_text(config.replace("  stratify: true\n", ""))  # as runs made before wrote it
    drawn = [texts[i] for i in held_out(labels, 0.1, 0, stratify=False)[1]]
    assert sorted(drawn) != sorted(stratified)
    assert sorted(load_run(run).data.texts["val"]) == sorted(drawn)
    # a run trained on the split drawn as then, resumed: the same split (its tokenizer, learned from its train part,
    # is the one its checkpoint records), and no "changed" option
    old = fit(load([ROOT / "recipes" / "text_cls.yaml"], [*given, "data.stratify=false"]), run_dir=tmp_path / "old")
    config = (old / "config.yaml").read_text()
    assert "  stratify: false\n" in config
    (old / "config.yaml").write_text(config.replace("  stratify: false\n", ""))
    fit(load([old / "config.yaml"], ["trainer.max_epochs=2"]), resume=old)
    assert _summary(old)["epochs"] == 2 and "stratify: false" in (old / "config.yaml").read_text()


def test_progress_is_logged_where_stderr_is_no_terminal(tmp_path, monkeypatch, caplog):
    # piped to a file (nohup, a SLURM log) Lightning's bar wrote one line, its final state: hours of steps showed
    # nothing, and no val metric came out before the end
    import attnzoo.run.callbacks as run_callbacks

    monkeypatch.setattr(run_callbacks, "LOG_EVERY_S", 0.0)  # a line after every batch
    overrides = [*TINY, "trainer.enable_progress_bar=true", "trainer.max_epochs=2", f"run.dir={tmp_path}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        fit(load([VIT], overrides))  # pytest's captured stderr is no terminal
    line = r"epoch 0: batch 1/4, step 1, train/loss \d+\.\d{4}, \d+\.\d\d s a batch, the epoch ends in ~\d+ s"
    assert re.search(line, caplog.text) and "epoch 1: batch 4/4, step 8" in caplog.text, caplog.text
    assert re.search(r"epoch 1, step 8: val/acc \d\.\d{4}, val/acc5 \d\.\d{4}, val/f1", caplog.text), caplog.text


def test_commands_a_message_gives_for_a_run_dir_with_a_space_paste_as_one_argument(tmp_path, capsys):
    import shlex

    from attnzoo.util.files import RUN_CONFIG_HEADER

    run_dir = tmp_path / "my runs" / "killed"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(RUN_CONFIG_HEADER + load([VIT], TINY).to_yaml())
    code, err = _fit_main(["--resume", str(run_dir)], capsys)
    assert code == 2 and f"--run-dir {shlex.quote(str(run_dir))}" in err and "'" in err.split("--run-dir")[1], err


def test_a_sigterm_during_the_sanity_check_stops_with_143_not_0(tmp_path):
    """Before training, Lightning's own SIGTERM handler raises a SystemExit of code None: fit ended with status 0
    (one step trained if it came in the last sanity batch), no checkpoint and nothing said."""
    from attnzoo.run.signals import StoppedAtOnce

    class TermInSanityCheck(L.Callback):
        def on_validation_batch_start(self, trainer, *args):
            if trainer.sanity_checking:
                os.kill(os.getpid(), signal.SIGTERM)

    cfg = load([VIT], [*TINY, "trainer.num_sanity_val_steps=1", f"run.dir={tmp_path}"])
    with pytest.raises(StoppedAtOnce) as err:
        fit(cfg, extra_callbacks=[TermInSanityCheck()])
    assert err.value.exit_code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM before training started" in str(err.value)


def test_a_ctrl_c_while_the_baseline_fits_keeps_the_summary_of_training(tmp_path, monkeypatch):
    """The baseline runs after training and the test; summary.json was written after it, so a Ctrl+C there lost
    what training measured (a --resume then wrote empty metrics)."""
    import attnzoo.run.baseline as baseline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(baseline, "bounded_baseline", interrupted)
    cfg = load(
        [VIT], [*TINY, "run.baseline=true", "run.test=true", "trainer.limit_test_batches=1", f"run.dir={tmp_path}"]
    )
    with pytest.raises(KeyboardInterrupt):
        fit(cfg)
    (summary_file,) = tmp_path.glob("vit/*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["finished"] and summary["metrics"] and "test" in summary and "baseline" not in summary


def test_scores_that_decoding_cannot_choose_from_stop_fit_with_one_line(tmp_path, capsys, monkeypatch):
    # a half-precision overflow in the val split's decoding ended fit with a NonFiniteScores traceback
    from attnzoo.fit import main
    from attnzoo.generation import NonFiniteScores, steps
    from attnzoo.tasks.sequence import Seq2SeqTask
    from tests.helpers import ROOT, smoke_overrides

    trained, step, scores = [], Seq2SeqTask.training_step, steps.Steps.__call__

    def training_step(self, *args, **kwargs):
        trained.append(1)
        return step(self, *args, **kwargs)

    def overflowed(self, tokens):  # the check before training decodes as it should; the val split's does not
        if trained:
            raise NonFiniteScores(steps.NON_FINITE)
        return scores(self, tokens)

    monkeypatch.setattr(Seq2SeqTask, "training_step", training_step)
    monkeypatch.setattr(steps.Steps, "__call__", overflowed)
    recipe = ROOT / "recipes" / "translation.yaml"
    overrides = [*smoke_overrides(load([recipe])), f"run.dir={tmp_path}", "trainer.precision=32-true"]
    assert main(["--config", str(recipe), *overrides]) == 1
    err = capsys.readouterr().err
    assert "attnzoo fit: error: while decoding: the model's next-token scores are NaN or infinite" in err
    assert "Traceback" not in err
