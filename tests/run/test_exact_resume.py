"""Exact resume for the sequence recipes, audio and text-image (images: tests/run/test_reliability.py): a run
stopped mid-epoch and resumed with `--resume` logs the train/loss of every step equal, to the bit in fp32, to the
run that was never stopped (issue 25: the order of the batches follows (run seed + epoch) alone, length bucketing
included, and the random state goes on)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.config import load
from attnzoo.run import fit
from attnzoo.run.signals import SELF_SIGNAL_ENV, Interrupted
from tests.helpers import TINY_TRAINER, smoke_overrides

ROOT = Path(__file__).resolve().parents[2]
AT = 5  # the signal arrives during global step 5: in the second epoch, after 1 of its 4 batches
# per recipe: what keeps it a few seconds; dropout stays on where the recipe has it, so the random state matters
RECIPES = {
    "text_cls": ["data.batch_size=16", "model.dim=16", "model.drop_rate=0.1"],
    "translation": ["data.batch_size=16", "data.num_train=128"],
    "lm": ["data.batch_size=4", "data.block_size=16", "task.sample_tokens=1"],
    # masks drawn anew every batch: the resumed run must draw the uninterrupted run's
    "mlm": ["data.batch_size=8", "model.dim=16"],
    # audio: mixup and time shifts on, so the augmentation's random state matters too
    "ast": ["data.batch_size=4", "data.mixup_alpha=0.4", "data.time_shift_ms=50", "model.embed_dim=16"],
    "text_image": ["data.batch_size=16", "data.num_train=64", "data.num_val=16"],
}
SLOW = {"text_image"}  # rendering its scenes takes the longest


def _cut(path: Path, overrides: list[str], tmp_path: Path, monkeypatch, at: int = AT) -> Path:
    """The run of `path` with `overrides` stopped by a SIGTERM it sends itself during global step `at`: its folder."""
    monkeypatch.setenv(SELF_SIGNAL_ENV, f"SIGTERM@{at}")
    with pytest.raises(Interrupted):
        fit(load([path], [*overrides, f"run.dir={tmp_path / 'cut'}"]))
    monkeypatch.delenv(SELF_SIGNAL_ENV)
    (run_dir,) = (tmp_path / "cut" / path.stem).iterdir()
    return run_dir


def _losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), f"train steps logged twice: {steps}"
    return {int(r["step"]): float(r["train/loss"]) for r in rows}


@pytest.mark.parametrize(
    "recipe", [pytest.param(r, marks=pytest.mark.slow) if r in SLOW else r for r in sorted(RECIPES)]
)
def test_a_run_resumed_mid_epoch_logs_the_uninterrupted_losses_to_the_bit(recipe, tmp_path, monkeypatch):
    path = ROOT / "recipes" / f"{recipe}.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES[recipe]]
    reference = _losses(fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"])))
    assert sorted(reference) == list(range(8))

    run_dir = _cut(path, overrides, tmp_path, monkeypatch)
    assert sorted(_losses(run_dir)) == list(range(AT + 1))

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    resumed = _losses(run_dir)
    assert resumed == reference  # every step, bit for bit


def test_a_signal_inside_a_gradient_accumulation_window_stops_at_its_optimizer_step(tmp_path, monkeypatch):
    """The stop came after the window's first batch: its gradient was accumulated but never stepped, and the
    resumed run skipped that batch, so the weights differed from the uninterrupted run's."""
    path = ROOT / "recipes" / "text_cls.yaml"
    overrides = [
        *smoke_overrides(load([path])),
        *TINY_TRAINER,
        *RECIPES["text_cls"],
        "trainer.accumulate_grad_batches=2",
        "trainer.limit_train_batches=6",  # 3 optimizer steps an epoch
    ]
    reference = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))
    run_dir = _cut(path, overrides, tmp_path, monkeypatch, at=3)  # in the first batch of the second epoch
    stopped = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert stopped["global_step"] == 4  # after the window's optimizer step, mid-epoch
    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    want = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    got = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_run_cut_by_max_steps_mid_epoch_resumes_with_a_larger_budget_as_the_uninterrupted_run(tmp_path):
    """Lightning ends the epoch at a max_steps (or max_time) stop: a resume started the next epoch, skipping as
    many of its batches as the cut one had done, and the rest of the cut epoch and its validation were lost."""
    path = ROOT / "recipes" / "text_cls.yaml"
    constant = ["task.scheduler={kind: constant}"]  # an lr that does not follow the budget
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES["text_cls"], *constant]
    reference = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))
    cut = fit(load([path], [*overrides, f"trainer.max_steps={AT}", f"run.dir={tmp_path / 'cut'}"]))
    assert sorted(_losses(cut)) == list(range(AT))
    fit(load([cut / "config.yaml"], ["trainer.max_steps=-1"]), resume=cut)
    assert _losses(cut) == _losses(reference)
    with open(cut / "metrics.csv", newline="") as f:  # both epochs validated, the cut one too
        assert sorted({r["epoch"] for r in csv.DictReader(f) if r.get("val/loss")}) == ["0", "1"]


def test_a_max_time_stop_is_named_as_such_not_as_the_epoch_budget():
    from datetime import timedelta
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import Timer

    from attnzoo.run.metrics import stop_reason

    trainer = SimpleNamespace(  # after a stop mid-epoch, Lightning counts the cut epoch as done
        callbacks=[Timer(duration=timedelta(seconds=0))], current_epoch=2, max_epochs=2, max_steps=-1, global_step=9
    )
    assert stop_reason(trainer) == {"reason": "budget", "epoch": 2, "message": "trainer.max_time (0 s) reached"}


@pytest.mark.parametrize(("bucket", "workers"), [(False, 0), (False, 2), (True, 2)])
def test_a_resume_skips_the_trained_batches_of_this_epoch_only_whole_epochs_with_or_without_workers(
    bucket, workers, tmp_path, monkeypatch, caplog
):
    """Whole epochs (no limit_train_batches), so the epoch's length counts. Workers fetch ahead as soon as Lightning
    makes the epoch's iterator, before the skip was installed: the resumed run trained the epoch's first batches
    again and cut the next epoch short. Without workers the skip's new iterator must not shorten the epoch."""
    path = ROOT / "recipes" / "text_cls.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES["text_cls"], "trainer.limit_train_batches=1.0"]
    overrides += [f"data.num_workers={workers}", f"data.bucket={str(bucket).lower()}"]
    reference = _losses(fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"])))
    assert sorted(reference) == list(range(32))  # 256 texts in batches of 16, 2 epochs
    run_dir = _cut(path, overrides, tmp_path, monkeypatch)
    with caplog.at_level("WARNING", logger="attnzoo"):
        fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _losses(run_dir) == reference  # text draws nothing in the workers: exact
    warned = f"data.num_workers={workers}: the loader workers start new random streams" in caplog.text
    assert warned == (workers > 0)


def test_a_run_with_loader_workers_resumed_after_a_validation_stays_exact(tmp_path, monkeypatch, caplog):
    """The validation loader keeps its workers between validations, and making its iterator drew a seed from the
    global random stream once: the resumed run drew it again at its first validation, which shifted dropout from
    there on (1e-3 in the final weights, no word). The warning about workers' random streams is said for any resume."""
    path = ROOT / "recipes" / "text_cls.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES["text_cls"], "data.num_workers=2"]
    overrides += ["trainer.max_epochs=3"]
    ref = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))
    reference = _losses(ref)
    assert sorted(reference) == list(range(12))
    run_dir = _cut(path, overrides, tmp_path, monkeypatch)  # in the second epoch: after the first validation
    with caplog.at_level("WARNING", logger="attnzoo"):
        fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _losses(run_dir) == reference
    mine, theirs = (
        torch.load(r / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for r in (run_dir, ref)
    )
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert "data.num_workers=2: the loader workers start new random streams" in caplog.text


_KILLED = """
import os, sys
import lightning as L
from attnzoo.config import load
from attnzoo.run import fit

class Kill(L.Callback):  # dies like a killed process: no cleanup, no flush
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == {at}:
            os._exit(9)

fit(load([sys.argv[1]], sys.argv[2:]), extra_callbacks=[Kill()])
"""


@pytest.mark.parametrize("recipe", ["translation", pytest.param("lm", marks=pytest.mark.slow)])
def test_a_run_killed_after_a_step_checkpoint_resumes_with_the_uninterrupted_losses(recipe, tmp_path):
    """kill -9 in the first epoch: the resume starts from the `run.save_every_n_steps` checkpoint of step 3, one
    batch before the end of that epoch, and relogs steps 3 and 4 as the uninterrupted run logged them."""
    path = ROOT / "recipes" / f"{recipe}.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES[recipe], "run.save_every_n_steps=3"]
    reference = _losses(fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"])))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", _KILLED.format(at=4), str(path), *overrides, f"run.dir={tmp_path / 'cut'}"]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == 9, killed.stderr[-3000:]
    (run_dir,) = (tmp_path / "cut" / recipe).iterdir()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 3

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _losses(run_dir) == reference


@pytest.mark.parametrize("recipe", ["text_cls", pytest.param("mlm", marks=pytest.mark.slow)])
def test_a_ddp_run_resumed_mid_epoch_goes_on_from_each_processs_own_random_state(recipe, tmp_path):
    """Every process went on from process 0's saved random state: the processes' streams part after the first
    batch (batches of other lengths draw dropout and masks of other sizes), so from the resume on, process 1
    dropped other units and masked other tokens than in the uninterrupted run, and the averaged steps differed."""
    path = ROOT / "recipes" / f"{recipe}.yaml"
    per_process = {"text_cls": "data.batch_size=8", "mlm": "data.batch_size=4"}[recipe]  # the 1-process batch, halved
    ddp = ["trainer.devices=2", "trainer.strategy=ddp", per_process]
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES[recipe], *ddp, "run.baseline=false"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    fit_cmd = [sys.executable, "-m", "attnzoo.fit"]

    def run(args: list[str], signal: bool = False) -> subprocess.CompletedProcess:
        cut = {SELF_SIGNAL_ENV: f"SIGTERM@{AT}"} if signal else {}
        return subprocess.run([*fit_cmd, *args], env={**env, **cut}, cwd=ROOT, capture_output=True, text=True,
                              timeout=600)  # fmt: skip

    done = run(["--config", str(path), *overrides, "--run-dir", str(tmp_path / "ref")])
    assert done.returncode == 0, done.stderr[-3000:]
    reference = _losses(tmp_path / "ref")
    assert sorted(reference) == list(range(8))
    stopped = run(["--config", str(path), *overrides, "--run-dir", str(tmp_path / "cut")], signal=True)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    resumed = run(["--resume", str(tmp_path / "cut")])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _losses(tmp_path / "cut") == reference  # every step, bit for bit
    assert _same_weights(tmp_path / "ref" / "checkpoints" / "last.ckpt", tmp_path / "cut" / "checkpoints" / "last.ckpt")


TESTED = ["run.test=true", "trainer.limit_test_batches=1", "run.baseline=false"]  # the test row compared too


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def _same_weights(a: Path, b: Path) -> bool:
    want, got = _weights(a), _weights(b)
    return want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize(
    ("recipe", "at", "extra"),
    [
        ("text_cls", 3, []),
        ("text_cls", 7, []),
        ("mlm", 3, []),
        ("text_cls", 3, ["trainer.min_epochs=2"]),
        ("text_cls", 1, ["trainer.val_check_interval=0.5"]),  # step 1: a validation mid-epoch follows
    ],
)
def test_a_signal_in_an_epochs_last_batch_stops_after_its_validation_and_resumes_as_the_uninterrupted_run(
    recipe, at, extra, tmp_path, monkeypatch
):
    """Saved at the end of the epoch's last batch (step 3 of 4; step 7: the run's last), the checkpoint was one
    Lightning resumes from at the next epoch: that epoch's validation never ran, so its metrics row was missing, its
    best.ckpt was never considered, and the resumed run tested another checkpoint (and drew other dropout and masks).
    With trainer.min_epochs not reached, Lightning trains on after a stop is asked for: the run stops as the next
    epoch starts, after the epoch's checkpoints. A validation mid-epoch (val_check_interval) was skipped alike."""
    path = ROOT / "recipes" / f"{recipe}.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES[recipe], *TESTED, *extra]
    reference = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))
    run_dir = _cut(path, overrides, tmp_path, monkeypatch, at=at)
    validated = [r["step"] for r in _rows(run_dir) if r.get("val/loss")]
    assert validated[-1] == str(at)  # the validation after the batch of the signal ran before the stop

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _rows(run_dir) == _rows(reference)  # every row: train, val and the test of the same best checkpoint
    for name in ("best.ckpt", "last.ckpt"):
        assert _same_weights(run_dir / "checkpoints" / name, reference / "checkpoints" / name), name


def test_a_signal_before_the_validation_that_stops_early_stops_before_the_test(tmp_path, monkeypatch):
    """The validation after the signal ended training (early stopping): training is done, the test is what is
    left, and --resume runs it, training nothing more."""
    import json

    path = ROOT / "recipes" / "text_cls.yaml"
    early = ["trainer.max_epochs=4", "run.early_stopping={patience: 1, min_delta: 100.0}"]  # stops after epoch 1
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES["text_cls"], *TESTED, *early]
    reference = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))
    assert json.loads((reference / "summary.json").read_text())["stopped"]["reason"] == "early_stopping"
    monkeypatch.setenv(SELF_SIGNAL_ENV, "SIGTERM@7")  # the last batch of epoch 1
    with pytest.raises(Interrupted) as stop:
        fit(load([path], [*overrides, f"run.dir={tmp_path / 'cut'}"]))
    monkeypatch.delenv(SELF_SIGNAL_ENV)
    assert stop.value.phase == "test"
    (run_dir,) = (tmp_path / "cut" / "text_cls").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["stopped"]["phase"] == "test"

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _rows(run_dir) == _rows(reference)
    assert _same_weights(run_dir / "checkpoints" / "last.ckpt", reference / "checkpoints" / "last.ckpt")


_KILLED_IN_VALIDATION = """
import os, sys
import lightning as L
from attnzoo.config import load
from attnzoo.run import fit

class Kill(L.Callback):  # dies like a killed process in the first validation
    def on_validation_batch_start(self, trainer, *args):
        if not trainer.sanity_checking:
            os._exit(9)

fit(load([sys.argv[1]], sys.argv[2:]), extra_callbacks=[Kill()])
"""


@pytest.mark.parametrize(
    ("extra", "saved"),
    [(["run.save_every_n_steps=2"], 2), (["run.save_every_n_steps=1", "trainer.val_check_interval=0.5"], 1)],
)
def test_a_run_killed_in_a_validation_resumes_from_a_step_checkpoint_that_runs_it(extra, saved, tmp_path):
    """`run.save_every_n_steps=2`, 4 batches an epoch: the step-4 save came at the end of the epoch's last batch,
    and a run killed during the validation after it resumed at the next epoch, that validation never run. So did a
    save in a batch a validation mid-epoch follows (val_check_interval 0.5: after the 2nd batch)."""
    path = ROOT / "recipes" / "text_cls.yaml"
    overrides = [*smoke_overrides(load([path])), *TINY_TRAINER, *RECIPES["text_cls"], "run.baseline=false", *extra]
    reference = fit(load([path], [*overrides, f"run.dir={tmp_path / 'ref'}"]))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", _KILLED_IN_VALIDATION, str(path), *overrides, f"run.dir={tmp_path / 'cut'}"]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == 9, killed.stderr[-3000:]
    (run_dir,) = (tmp_path / "cut" / "text_cls").iterdir()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == saved

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    assert _rows(run_dir) == _rows(reference)
    assert _same_weights(run_dir / "checkpoints" / "best.ckpt", reference / "checkpoints" / "best.ckpt")
