"""`fit --resume` of a checkpoint whose training state is not what attnzoo fit writes (a copied or downloaded run's
last.ckpt) stops before training, naming the file and the key, with the run's files as they were
(`attnzoo.run.resume_check`); a checkpoint of an older attnzoo, without the keys it did not write yet, resumes."""

import shutil
from pathlib import Path

import pytest
import torch

from attnzoo.config import load
from attnzoo.fit import main
from attnzoo.run import fit
from tests.helpers import ROOT, TINY_TRAINER, smoke_overrides

LM = ROOT / "recipes" / "lm.yaml"
MONITORED = "ModelCheckpoint{'monitor': 'val/ppl'"  # the start of the best checkpoint's state key


def _callback(ckpt: dict, start: str) -> dict:
    (key,) = [k for k in ckpt["callbacks"] if k.startswith(start)]
    return ckpt["callbacks"][key]


def _no_score(ckpt: dict) -> None:
    _callback(ckpt, MONITORED).update(best_model_path="checkpoints/best.ckpt", best_model_score=None)


# each: what is written into last.ckpt, what the error names; before, each stopped as the comment says
CASES = {
    "examples": (lambda c: c.update(attnzoo_examples=[1]), "its attnzoo_examples is [1]"),  # TypeError in the task
    "loops": (lambda c: c.update(loops="x"), "its loops is 'x'"),  # TypeError in Lightning's fit loop
    "progress": (  # a TypeError in Lightning's loop once it counted
        lambda c: c["loops"]["fit_loop"]["epoch_progress"]["current"].update(completed="1"),
        "loops.fit_loop['epoch_progress']['current']['completed'] is '1'",
    ),
    "optimizer": (lambda c: c.update(optimizer_states=["x"]), "its optimizer_states[0] is 'x'"),  # AttributeError
    "schedule": (lambda c: c.update(lr_schedulers=[{"last_epoch": "x"}]), "its lr_schedulers[0] is"),  # KeyError
    "weights_only": (lambda c: c.pop("lr_schedulers"), "it holds no lr_schedulers"),  # Lightning's KeyError
    "rng": (  # TypeError in ResumeDataPosition.on_train_start
        lambda c: c["callbacks"].update(ResumeDataPosition={"rng": {"numpy": [1, 2]}, "rng_ranks": "x"}),
        "its callbacks['ResumeDataPosition'] holds rng_ranks 'x'",
    ),
    "rng_size": (  # torch's RuntimeError as training started
        lambda c: c["callbacks"]["ResumeDataPosition"]["rng"].update(torch=torch.zeros(3, dtype=torch.uint8)),
        "holds an rng that the generators do not take",
    ),
    "best_score": (
        _no_score,
        "without its score (best_model_score None)",
    ),  # float(None) in the summary, after training
    "metrics_rows": (  # a TypeError cutting metrics.csv
        lambda c: _callback(c, "MetricsCheckpointSync").update(rows="x"),
        "its callbacks['MetricsCheckpointSync'] holds rows 'x'",
    ),
    "epoch": (lambda c: c.update(epoch="abc"), "its epoch is 'abc'"),  # "invalid literal for int()", no file named
    "global_step": (lambda c: c.update(global_step="abc"), "its global_step is 'abc'"),  # the same
}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A finished 1-epoch LM run (a sequence task: the checkpoint holds its examples)."""
    overrides = [*smoke_overrides(load([LM])), *TINY_TRAINER, "data.batch_size=4", "data.block_size=16"]
    root = tmp_path_factory.mktemp("lm")
    return fit(load([LM], [*overrides, "task.sample_tokens=1", "trainer.max_epochs=1", f"run.dir={root}"]))


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_checkpoint_attnzoo_fit_never_writes_stops_the_resume_naming_it_before_anything_is_written(
    case, lm_run, tmp_path, capsys
):
    edit, named = CASES[case]
    run_dir = shutil.copytree(lm_run, tmp_path / "run")
    last = run_dir / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, last)
    before = _files(run_dir)
    code, err = main(["--resume", str(run_dir), "trainer.max_epochs=2"]), capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"--resume: checkpoint {str(last)!r}" in err and named in err, err
    assert _files(run_dir) == before  # nothing written, nothing lost


def test_a_checkpoint_without_the_keys_older_attnzoo_did_not_write_resumes(lm_run, tmp_path, capsys):
    run_dir = shutil.copytree(lm_run, tmp_path / "run")
    last = run_dir / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    for key in ("attnzoo_examples", "attnzoo_tokenizer_sha256"):
        ckpt.pop(key, None)
    ckpt["callbacks"].pop("ResumeDataPosition")
    ckpt["callbacks"].pop("RunSummary")
    _callback(ckpt, MONITORED).pop("floor_tie")
    torch.save(ckpt, last)
    code, err = main(["--resume", str(run_dir), "trainer.max_epochs=2"]), capsys.readouterr().err
    assert code == 0, err
    assert torch.load(last, weights_only=True)["epoch"] == 1


@pytest.mark.parametrize("kind", ["adamw", "muon", "kron", "adafactor"])
def test_the_state_an_optimizer_keeps_per_parameter_is_its_own(kind):
    # timm's kron keeps lists of tensors per parameter, muon a flag, adafactor without lr a group lr None
    import timm.optim

    from attnzoo.run.resume_check import _optimizers_error

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = timm.optim.create_optimizer_v2(net, opt=kind, lr=None if kind == "adafactor" else 1e-3)
    net(torch.randn(3, 4)).pow(2).sum().backward()
    optimizer.step()
    assert _optimizers_error([optimizer.state_dict()]) is None
