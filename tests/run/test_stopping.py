"""Early stopping on validation, and summary.json saying when and why training stopped."""

import json
import re
from pathlib import Path

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit
from attnzoo.run.signals import SELF_SIGNAL_ENV, Interrupted

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"
TINY = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.precision=32-true",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=2",
    "trainer.num_sanity_val_steps=0",
    "model.embed_dim=16",
    "model.depth=1",
    "model.num_heads=2",
    "model.mlp_ratio=1.0",
    "data.batch_size=16",
    "run.test=false",
]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_early_stopping_stops_when_val_does_not_improve_and_the_summary_says_why(tmp_path):
    # learning rate 0: the validation loss is the same every epoch, so it never improves after the first
    cfg = load(
        [VIT],
        [*TINY, "task.optimizer.lr=0.0", "run.monitor=val/loss", "run.mode=min", "trainer.max_epochs=10",
         "run.early_stopping={patience: 2}", f"run.dir={tmp_path}"],
    )  # fmt: skip
    summary = _summary(fit(cfg))
    assert summary["stopped"]["reason"] == "early_stopping"
    assert summary["stopped"]["epoch"] == 3 and summary["epochs"] == 3  # epoch 0 sets the best, 1 and 2 wait
    assert "val/loss" in summary["stopped"]["message"]
    assert summary["best_epoch"] == 0 and summary["finished"] is True


def test_a_run_that_stopped_early_is_resumed_with_more_patience_or_told_it_stops_again(tmp_path, caplog):
    # --resume <run> trainer.max_epochs=45 trained one epoch and stopped again (its patience was spent), saying
    # nothing; raising run.early_stopping.patience was refused as a change of what defines the run (and Lightning
    # restored the saved patience anyway)
    import logging

    stopping = ["task.optimizer.lr=0.0", "run.monitor=val/loss", "run.mode=min", "run.early_stopping={patience: 2}"]
    run = fit(load([VIT], [*TINY, *stopping, "trainer.max_epochs=10", f"run.dir={tmp_path}"]))
    assert _summary(run)["stopped"]["epoch"] == 3
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        fit(load([run / "config.yaml"], ["trainer.max_epochs=20"]), resume=run)
    assert "resume: the run stopped early (" in caplog.text and "raise run.early_stopping.patience" in caplog.text
    assert _summary(run)["stopped"]["epoch"] == 4  # one validation more, not improving: stopped again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        fit(load([run / "config.yaml"], ["trainer.max_epochs=20", "run.early_stopping.patience=5"]), resume=run)
    assert "stopped early" not in caplog.text
    summary = _summary(run)
    assert summary["stopped"]["reason"] == "early_stopping" and summary["stopped"]["epoch"] == 6  # waits 3 - 5
    fit(load([run / "config.yaml"], ["trainer.max_epochs=8", "run.early_stopping=false"]), resume=run)
    assert _summary(run)["stopped"] == {"reason": "budget", "epoch": 8, "message": "trainer.max_epochs (8) reached"}


def test_without_early_stopping_the_epoch_budget_ends_training(tmp_path):
    cfg = load([VIT], [*TINY, "task.optimizer.lr=0.0", "trainer.max_epochs=2", f"run.dir={tmp_path}"])
    summary = _summary(fit(cfg))
    assert summary["stopped"] == {"reason": "budget", "epoch": 2, "message": "trainer.max_epochs (2) reached"}


def test_a_patient_early_stopping_leaves_the_budget_as_the_ceiling(tmp_path):
    stopping = "run.early_stopping={patience: 5, min_delta: 0.0}"
    cfg = load([VIT], [*TINY, "trainer.max_epochs=2", stopping, f"run.dir={tmp_path}"])
    assert _summary(fit(cfg))["stopped"]["reason"] == "budget"


def test_a_signal_leaves_an_unfinished_summary_saying_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv(SELF_SIGNAL_ENV, "SIGTERM@3")
    cfg = load([VIT], [*TINY, "trainer.max_epochs=5", f"run.dir={tmp_path}"])
    with pytest.raises(Interrupted):
        fit(cfg)
    (run_dir,) = (tmp_path / "vit").iterdir()
    summary = _summary(run_dir)
    assert summary["finished"] is False
    assert summary["stopped"]["reason"] == "signal" and summary["stopped"]["step"] == 4
    assert "SIGTERM" in summary["stopped"]["message"]


@pytest.mark.parametrize(
    "value, expected",
    [("{patience: 0}", "patience: expected an int >= 1"), ("{patiense: 3}", "unknown keys ['patiense']"),
     ("{min_delta: -1}", "min_delta: expected a number >= 0"), ("3", "3 is not a valid bool | dict")],
)  # fmt: skip
def test_bad_early_stopping_options_are_config_errors_before_training(value, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load([VIT], [f"run.early_stopping={value}"])


def _stops(floor, scores, patience=2):
    """The index of the validation at which early stopping (mode max) stops, or None."""
    import torch

    from attnzoo.run.callbacks import RunEarlyStopping

    stopping = RunEarlyStopping(monitor="val/bleu", mode="max", patience=patience, floor=floor)
    for i, score in enumerate(scores):
        if stopping._evaluate_stopping_criteria(torch.tensor(float(score)))[0]:
            return i
    return None


def test_patience_waits_for_a_score_that_has_never_left_its_floor():
    # BLEU is exactly 0 until a hypothesis shares a 4-gram with its reference: a translation run on 300 pairs
    # stopped at epoch 11 while chrF rose, and tested its epoch-0 weights
    assert _stops(None, [0, 0, 0, 0, 0]) == 2  # Lightning's own: two validations without improvement
    assert _stops(0.0, [0, 0, 0, 0, 0, 0, 0]) is None
    assert _stops(0.0, [0, 0, 0, 3.5, 3.5, 3.5]) == 5  # counts from the first other value
    assert _stops(0.0, [0, 2.0, 0, 0]) == 3  # a fall back to the floor after it moved counts as usual


def test_a_translation_run_stops_early_with_bleus_floor(tmp_path):
    from attnzoo.run import build
    from attnzoo.run.build import make_trainer
    from attnzoo.run.callbacks import RunEarlyStopping

    recipe = ROOT / "recipes" / "translation.yaml"
    cfg = load([recipe], ["trainer.precision=32-true", "model.encoder_depth=1", "model.decoder_depth=1"])
    _, task, cfg = build(cfg)
    trainer, _ = make_trainer(cfg, tmp_path, task)
    (stopping,) = [c for c in trainer.callbacks if isinstance(c, RunEarlyStopping)]
    assert stopping.monitor == "val/bleu" and stopping.floor == 0.0
    assert [c.floor for c in trainer.callbacks if getattr(c, "filename", None) == "best"] == [0.0]
    cfg = load([recipe], ["trainer.precision=32-true", "model.encoder_depth=1", "run.monitor=val/chrf"])
    _, task, cfg = build(cfg)
    trainer, _ = make_trainer(cfg, tmp_path, task)
    (stopping,) = [c for c in trainer.callbacks if isinstance(c, RunEarlyStopping)]
    assert stopping.floor is None  # another metric than the task's own: Lightning's rule


def _best_epoch(tmp_path, bleu, loss, floor):
    """The epoch whose weights best.ckpt holds after validations scoring `bleu` and `loss`, and the callback."""
    import lightning as L
    import torch

    from attnzoo.run.checkpoint_io import RunCheckpoint
    from attnzoo.run.metrics import RunSummary

    class Scored(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, _):
            return (self.w - batch).pow(2).mean()

        def validation_step(self, batch, _):
            epoch = self.current_epoch
            self.log_dict({"val/bleu": float(bleu[epoch]), "val/loss": float(loss[epoch])})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    best = RunCheckpoint(dirpath=tmp_path, filename="best", monitor="val/bleu", mode="max", floor=floor,
                         enable_version_counter=False)  # fmt: skip
    summary = RunSummary(monitor="val/bleu", mode="max", floor=floor)
    trainer = L.Trainer(max_epochs=len(bleu), callbacks=[best, summary], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")  # fmt: skip
    data = torch.utils.data.DataLoader(torch.ones(2, 1), batch_size=2)
    trainer.fit(Scored(), data, data)
    epoch = torch.load(tmp_path / "best.ckpt", weights_only=False)["epoch"]
    assert summary.best[0] == epoch  # summary.json's best_epoch is the epoch best.ckpt holds
    return epoch, best


def test_while_bleu_stays_0_the_best_checkpoint_is_the_one_of_lowest_val_loss(tmp_path):
    # a translation run whose val/bleu never left 0 kept the epoch-0 weights as best.ckpt (Lightning replaces it on
    # a strict improvement only): it was tested, and translate and evaluate used it, while the later weights
    # translated far better (chrF 17 against 2)
    assert _best_epoch(tmp_path / "a", [0, 0, 0, 0], [3.0, 2.0, 1.0, 1.5], floor=0.0)[0] == 2
    assert _best_epoch(tmp_path / "b", [0, 0, 0, 0], [3.0, 2.0, 1.0, 1.5], floor=None)[0] == 0  # Lightning's rule
    epoch, best = _best_epoch(tmp_path / "c", [0, 0, 2.0, 0, 1.0], [3.0, 2.0, 2.5, 1.0, 0.5], floor=0.0)
    assert epoch == 2 and best.best_model_score == 2.0  # a score off the floor beats any loss at the floor
    resumed = type(best)(dirpath=tmp_path / "a", filename="best", monitor="val/bleu", mode="max", floor=0.0)
    _, first = _best_epoch(tmp_path / "a2", [0, 0, 0], [3.0, 1.0, 2.0], floor=0.0)
    resumed.load_state_dict(first.state_dict())
    assert resumed.floor_tie == first.floor_tie == 1.0  # a resumed run compares with the loss of its best


def test_early_stoppings_state_keeps_lightnings_key_so_earlier_runs_resume_it():
    # RunEarlyStopping filed its state as "RunEarlyStopping{...}": a run saved before it resumed with its patience
    # count and best score reset, and Lightning warned of a callback state it could not place
    from lightning.pytorch.callbacks import EarlyStopping

    from attnzoo.run.callbacks import RunEarlyStopping

    ours = RunEarlyStopping(monitor="val/acc", mode="max", patience=3, floor=0.0)
    assert ours.state_key == EarlyStopping(monitor="val/acc", mode="max", patience=3).state_key


@pytest.mark.parametrize(("monitor", "mode"), [("val/loss", "min"), ("val/acc", "max"), ("val/f1", "max")])
def test_a_monitor_other_than_the_tasks_is_followed_in_its_own_direction(monitor, mode, tmp_path, caplog):
    # run.monitor=val/loss kept the task's mode, "max": best.ckpt and early stopping followed the highest val loss
    import logging

    from attnzoo.run import build
    from attnzoo.run.build import make_trainer

    _, task, cfg = build(load([VIT], [*TINY, f"run.monitor={monitor}", "run.early_stopping=true"]))
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        trainer, _ = make_trainer(cfg, tmp_path, task)
    stopping = [c for c in trainer.callbacks if type(c).__name__ == "RunEarlyStopping"]
    assert trainer.checkpoint_callback.mode == stopping[0].mode == mode
    assert ("run.mode: min (run.monitor val/loss: lower is better" in caplog.text) == (monitor == "val/loss")
    _, task, cfg = build(load([VIT], [*TINY, f"run.monitor={monitor}", "run.mode=max"]))
    assert make_trainer(cfg, tmp_path / "b", task)[0].checkpoint_callback.mode == "max"  # as the config says
