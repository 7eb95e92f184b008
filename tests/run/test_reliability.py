"""Interruption by a real signal and resume, atomic checkpoint writes, non-finite loss detection."""

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from attnzoo.config import load
from attnzoo.run import fit
from attnzoo.run.reliability import SELF_SIGNAL_ENV, AtomicCheckpointIO, NonFiniteLossError

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"
# a tiny deterministic CPU run: 2 epochs of 4 batches, augmentation on (so random state matters on resume)
TINY = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.precision=32-true",
    "trainer.num_threads=1",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "model.embed_dim=16",
    "model.depth=1",
    "model.num_heads=2",
    "model.patch_size=7",
    "model.mlp_ratio=1.0",
    "data.batch_size=8",
    "data.augment=true",
    "run.test=false",
]


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
