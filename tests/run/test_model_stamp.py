"""Every checkpoint records the model section it was trained with, and a command refuses to load it into a run whose
config.yaml has another model: a checkpoint of another run with the same tokenizer loaded silently before."""

from pathlib import Path

import pytest
import torch
import yaml

from attnzoo.config import ConfigError, load
from attnzoo.generate import main as generate_main
from attnzoo.run import build, fit, load_run
from attnzoo.run.checkpoint_io import read_checkpoint
from attnzoo.run.model_stamp import MODEL_KEY
from tests.helpers import TINY_TRAINER, smoke_overrides

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "recipes" / "lm.yaml"
VARIANT = [  # the same data and tokenizer: ALiBi, 2 key/value heads, a causal window of 4
    "model.position=none",
    "model.attention.bias=alibi",
    "model.attention.num_kv_heads=2",
    "model.attention.pattern={kind: sliding_window, window: 4, causal: true}",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """(a plain LM run, a run of another attention on the same data), both with the bytes tokenizer."""
    path = tmp_path_factory.mktemp("stamped")
    tiny = [*smoke_overrides(load([LM])), *TINY_TRAINER, "data.tokenizer=bytes", f"run.dir={path}"]
    plain = fit(load([LM], [*tiny, "run.name=plain"]))
    variant = fit(load([LM], [*tiny, *VARIANT, "run.name=variant"]))
    return plain, variant


def test_checkpoints_record_the_model_section_of_config_yaml(runs):
    for run in runs:
        saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
        for name in ("best", "last"):
            assert read_checkpoint(run / "checkpoints" / f"{name}.ckpt")[MODEL_KEY] == saved


def test_a_checkpoint_of_another_run_with_the_same_tokenizer_is_refused(runs, capsys):
    # the plain run's attention computed with the variant's weights (its 2 key/value heads repeated to 4), silently
    plain, variant = runs
    foreign = variant / "checkpoints" / "best.ckpt"
    for with_data in (True, False):
        with pytest.raises(ConfigError) as err:
            load_run(plain, str(foreign), with_data=with_data)
        said = str(err.value)
        assert f"checkpoint {str(foreign)!r} was trained with another model config than {plain / 'config.yaml'}" in said
        assert "model.attention.bias ('alibi' in the checkpoint, '<not set>' in config.yaml)" in said
        assert "model.attention.num_kv_heads (2 in the checkpoint, '<not set>' in config.yaml)" in said
        assert "Give the run directory the checkpoint belongs to" in said
    args = [str(plain), "--checkpoint", str(foreign), "--prompt", "The", "--max-new-tokens", "2"]
    assert generate_main(args) == 2
    assert "was trained with another model config" in capsys.readouterr().err


def test_a_runs_own_checkpoints_load_with_overrides_that_change_the_model(runs):
    # the check compares with config.yaml as the run wrote it: evaluate and viz may try another attention
    plain, variant = runs
    for name in ("best", "last"):
        load_run(variant, name, with_data=False)
    window = "model.attention.pattern={kind: sliding_window, window: 8, causal: true}"
    assert (
        load_run(variant, "best", overrides=[window], with_data=False).cfg.section("model")["attention"]["pattern"][
            "window"
        ]
        == 8
    )


def test_a_checkpoint_without_the_record_loads_as_before(runs, tmp_path):
    plain, _ = runs
    checkpoint = read_checkpoint(plain / "checkpoints" / "best.ckpt")
    del checkpoint[MODEL_KEY]  # a checkpoint written before checkpoints recorded their model
    older = tmp_path / "older.ckpt"
    torch.save(checkpoint, older)
    load_run(plain, str(older), with_data=False)


def test_a_stamped_run_resumes_and_starts_another_with_a_changed_attention(runs, tmp_path):
    plain, variant = runs
    assert fit(load([plain / "config.yaml"], ["trainer.max_epochs=3"]), resume=plain) == plain
    load_run(plain, "last", with_data=False)  # its checkpoints after the resume are its own still
    tiny = [*smoke_overrides(load([LM]), started=True), *TINY_TRAINER, "data.tokenizer=bytes", f"run.dir={tmp_path}"]
    window = "model.attention.pattern={kind: sliding_window, window: 8, causal: true}"
    _, task, cfg = build(load([LM], [*tiny, f"model.init_from={variant}", window]))
    assert cfg.section("model")["attention"]["pattern"]["window"] == 8
    assert cfg.section("model")["attention"]["num_kv_heads"] == 2  # the start's architecture
