"""`attnzoo.fit` end to end: every recipe's smoke run, resume after a kill, DDP equals one process, evaluate."""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.config import load
from attnzoo.run import build, fit
from tests.helpers import QUICK, ROOT, SMOKE_STEPS, TINY, VIT, smoke_overrides

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def smoke_run(recipe: Path, tmp_path: Path, extra: tuple[str, ...] = ()) -> Path:
    cfg = load([recipe])
    cfg = load([recipe], [*smoke_overrides(cfg), *QUICK, *SMOKE_STEPS, f"run.dir={tmp_path}", *extra])
    return fit(cfg)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_runs_a_smoke_run(recipe, tmp_path):
    run_dir = smoke_run(recipe, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2 and summary["parameters"] > 0
    assert summary["attention_backends"], "no attention module reported the backend it ran on"
    assert summary["train_samples_per_second"] > 0 and summary["peak_rss_bytes"] > 0
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "config.yaml").is_file()
    assert any(r.get("train/loss") for r in _rows(run_dir))
    saved = load([run_dir / "config.yaml"])
    assert build(saved).cfg.to_yaml() == saved.to_yaml()  # the saved config is resolved: it reproduces the run


GPU = ("trainer.accelerator=gpu", "trainer.devices=1", "trainer.precision=auto")


@pytest.mark.cuda
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_trains_on_a_gpu(recipe, tmp_path):
    # as a user with a GPU runs a recipe: trainer.accelerator=gpu, precision auto, attention backend auto
    run_dir = smoke_run(recipe, tmp_path, GPU)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2 and summary["attention_backends"]
    precision = load([run_dir / "config.yaml"]).section("trainer")["precision"]
    assert precision == ("bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed")
    losses = [float(r["train/loss"]) for r in _rows(run_dir) if r.get("train/loss")]
    assert losses and all(math.isfinite(x) for x in losses)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)  # no code runs
    assert ckpt["state_dict"] and ckpt["global_step"] == 2


@pytest.mark.cuda
@pytest.mark.parametrize("recipe", ["vit", "text_cls"])
def test_compiled_recipes_train_on_a_gpu_with_flex(recipe, tmp_path):
    # trainer.compile on a GPU with BigBird through flex: a window, global tokens and random blocks, whose lookup
    # tensors are first asked for while Dynamo traces the net
    pattern = "model.attention.pattern={kind: bigbird, window: 4, global_tokens: [0], num_random: 1, block: 8}"
    extra = (*GPU, "trainer.compile=true", pattern, "model.attention.backend=flex")
    run_dir = smoke_run(ROOT / "recipes" / f"{recipe}.yaml", tmp_path, extra)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2 and list(summary["attention_backends"]) == ["flex"]
    losses = [float(r["train/loss"]) for r in _rows(run_dir) if r.get("train/loss")]
    assert losses and all(math.isfinite(x) for x in losses)


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


def test_resume_after_a_kill_mid_epoch_continues_steps_without_losing_or_repeating_rows(tmp_path):
    overrides = [
        *QUICK,
        *TINY,
        "data.batch_size=16",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=5",
        "trainer.limit_val_batches=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.log_every_n_steps=1",
        "run.save_every_n_steps=3",
        "run.test=false",
        f"run.dir={tmp_path}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED.format(at=8), str(VIT), *overrides], env=env, capture_output=True, text=True
    )
    assert killed.returncode == 9, killed.stderr[-3000:]
    (run_dir,) = [p for p in (tmp_path / "vit").iterdir()]
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 6  # the step-6 checkpoint, mid way through the second epoch

    fit(load([run_dir / "config.yaml"]), resume=run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 10 and summary["epochs"] == 2
    rows = _rows(run_dir)
    train_steps = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert sorted(train_steps) == train_steps and len(set(train_steps)) == len(train_steps) == 10, train_steps
    assert [r["epoch"] for r in rows if r.get("val/acc")] == ["0", "1"]  # one validation row per epoch


_TRAIN_AND_SAVE = """
import sys, torch
from attnzoo.config import load
from attnzoo.run import fit
import lightning as L

class Save(L.Callback):
    def on_train_start(self, trainer, module):
        self.init = {k: v.detach().clone() for k, v in module.net.state_dict().items()}

    def on_train_end(self, trainer, module):
        if trainer.is_global_zero:
            final = {k: v.detach().clone() for k, v in module.net.state_dict().items()}
            torch.save({"init": self.init, "final": final}, sys.argv[1])

fit(load([sys.argv[2]], sys.argv[3:]), extra_callbacks=[Save()])
"""


def test_ddp_two_processes_equal_one_process_with_the_double_batch(tmp_path):
    # the data module shuffles as Lightning's DistributedSampler does: the first batch of 1 process with 2b
    # samples holds exactly the samples of the first batches (b each) of 2 processes
    base = [
        *QUICK[:2],
        *TINY,
        "trainer.accelerator=cpu",
        "trainer.precision=32-true",  # `auto` is bf16-mixed on some CPUs, where the two runs differ by rounding
        "trainer.max_steps=1",
        "trainer.log_every_n_steps=1",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "task.optimizer={kind: sgd, lr: 0.5, weight_decay: 0.0}",
        "task.scheduler=null",
        "run.test=false",
        f"run.dir={tmp_path}",
    ]
    runs = {
        "ddp": ["trainer.devices=2", "trainer.strategy=ddp", "data.batch_size=4"],
        "single": ["trainer.devices=1", "data.batch_size=8"],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    script = tmp_path / "train_and_save.py"  # a file: Lightning's DDP launcher re-runs the command per process
    script.write_text(_TRAIN_AND_SAVE)
    weights = {}
    for name, extra in runs.items():
        out = tmp_path / f"{name}.pt"
        done = subprocess.run(
            [sys.executable, str(script), str(out), str(VIT), *base, *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        weights[name] = torch.load(out)
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("vit/*/summary.json")]
    assert sorted(s["world_size"] for s in summaries) == [1, 2]
    single, ddp = weights["single"], weights["ddp"]
    for key, value in single["init"].items():
        torch.testing.assert_close(ddp["init"][key], value, atol=0, rtol=0, msg=key)  # same start
    moved = max((single["final"][k] - single["init"][k]).abs().max().item() for k in single["init"])
    assert moved > 1e-3, "the optimizer step did not change the weights; the comparison would be vacuous"
    for key, value in single["final"].items():
        torch.testing.assert_close(ddp["final"][key], value, atol=1e-6, rtol=0, msg=key)
    # the step's train/loss is the whole batch's in both (under DDP it was process 0's half of it)
    losses = {}
    for summary in tmp_path.glob("vit/*/summary.json"):
        with open(summary.parent / "metrics.csv", newline="") as f:
            rows = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
        losses[json.loads(summary.read_text())["world_size"]] = rows
    assert len(losses[1]) == len(losses[2]) == 1
    assert losses[2][0] == pytest.approx(losses[1][0], abs=1e-5)


def test_a_train_split_smaller_than_a_batch_per_process_still_trains_under_ddp(tmp_path):
    """100 texts in batches of 64 train one step on one process; on 2 the drop of a last partial batch was decided
    on the whole split (100 > 64), so each process's 50 were dropped: 0 steps, and the summary said finished."""
    command = [sys.executable, "-m", "attnzoo.fit", "--config", str(ROOT / "recipes" / "text_cls.yaml"), *QUICK[:2],
               "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", "trainer.max_epochs=1",
               "trainer.precision=32-true", "model.depth=1", "data.listops.num_train=100", "data.listops.num_val=16",
               "data.listops.num_test=16", "run.baseline=false", f"run.dir={tmp_path}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = [json.loads(p.read_text()) for p in tmp_path.glob("text_cls/*/summary.json")]
    assert summary["world_size"] == 2 and summary["global_step"] == 1
    assert "checkpoint_step" in summary["test"] and "self.log('test/checkpoint_step'" not in done.stderr  # reduced


def test_evaluate_reports_the_test_metrics_of_a_checkpoint(tmp_path, capsys):
    from attnzoo.evaluate import main as evaluate

    overrides = [*QUICK, *TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=3", f"run.dir={tmp_path}"]
    overrides += ["trainer.limit_val_batches=2"]
    overrides += [
        "trainer.num_sanity_val_steps=0",
        "run.test=true",
        "data.batch_size=16",
        "trainer.limit_test_batches=3",
    ]
    run_dir = fit(load([VIT], overrides))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert evaluate([str(run_dir), "--checkpoint", "best", "trainer.limit_test_batches=3"]) == 0
    report = json.loads((run_dir / "evaluate-best.json").read_text())
    assert report["metrics"]["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-6)
    assert "test/acc" in capsys.readouterr().out
    # the split's size is said (an image folder without test/ is scored on its val fraction, which users took for all)
    assert report["split"] == "val" and report["split_examples"] == 500  # the embedded digits: no test split
    assert evaluate([str(run_dir), "--checkpoint", "nope"]) == 2
    other = tmp_path / "other" / "checkpoints" / "best.ckpt"  # another run's best: a report of its own
    other.parent.mkdir(parents=True)
    shutil.copyfile(run_dir / "checkpoints" / "best.ckpt", other)
    assert evaluate([str(run_dir), "--checkpoint", str(other), "trainer.limit_test_batches=3"]) == 0
    (named,) = [p.name for p in run_dir.glob("evaluate-best-*.json")]
    assert json.loads((run_dir / "evaluate-best.json").read_text()) == report and named != "evaluate-best.json"


def test_evaluate_takes_the_class_names_a_run_saved(tmp_path):
    """A run's labels.json fixes the class order at evaluation, whatever labels the evaluated data has."""
    from attnzoo.run.rundir import _saved_labels

    (tmp_path / "labels.json").write_text(json.dumps({"class_names": ["neg", "pos"]}))
    cfg = load([ROOT / "recipes" / "text_cls.yaml"])
    assert _saved_labels(cfg, tmp_path) == {"data.labels": str(tmp_path / "labels.json")}
    cfg = load([ROOT / "recipes" / "text_cls.yaml"], ["data.labels=[a,b]"])
    assert _saved_labels(cfg, tmp_path) == {}  # the config's own choice wins
    cfg = load([VIT])
    assert _saved_labels(cfg, tmp_path) == {"data.labels": str(tmp_path / "labels.json")}  # image folders too
    cfg = load([ROOT / "recipes" / "ast.yaml"])
    assert _saved_labels(cfg, tmp_path) == {"data.labels": str(tmp_path / "labels.json")}  # and audio


def test_summary_reports_the_backends_training_ran_on():
    """Validation and test may run attention elsewhere (inference-only kernels); the summary names training's."""
    from types import SimpleNamespace

    from attnzoo.attention import Attention
    from attnzoo.run.metrics import RunSummary

    net = torch.nn.Sequential(Attention(16, 2), Attention(16, 2))
    trainer = SimpleNamespace(
        world_size=1,
        global_step=1,
        current_epoch=0,
        precision="32-true",
        max_steps=1,
        max_epochs=None,
        interrupted=False,
        early_stopping_callbacks=[],
    )
    summary = RunSummary()
    for layer in net:
        layer.backend_used = "sdpa"
    summary.on_train_batch_start(trainer, net, {}, 0)
    summary.on_train_batch_end(trainer, net, None, {"label": torch.zeros(4)}, 0)
    for layer in net:
        layer.backend_used = "flex"  # e.g. a test pass on an inference-only backend
    assert summary.report(trainer, net)["attention_backends"] == {"sdpa": 2}
