"""Options that used to fail late (at the first sample after an epoch, at the first step, in every run of an ablation)
stop when the config is checked, naming the key, the value and what would be valid; a run that fails after training
started keeps its directory."""

import json
import logging
import sys
from pathlib import Path

import lightning as L
import pytest

from attnzoo.ablate import main as ablate_main
from attnzoo.config import ConfigError, load
from attnzoo.fit import main as fit_main
from attnzoo.run import fit

ROOT = Path(__file__).resolve().parent.parent
LM, TRANSLATION, VIT = (str(ROOT / "recipes" / f"{r}.yaml") for r in ("lm", "translation", "vit"))

# (recipe, overrides, parts of the error: the key, the value, what is valid)
LATE = {
    "top_p above 1": (LM, ["task.top_p=1.5"], ["task.top_p", "1.5", "(0, 1]", "task.top_p=1.5"]),
    "top_k 0": (LM, ["task.top_k=0"], ["task.top_k", "(0)", "int >= 1", "null"]),
    "top_k not an int": (LM, ["task.top_k=2.5"], ["task.top_k", "2.5"]),
    "negative temperature": (LM, ["task.temperature=-1"], ["task.temperature", "-1", ">= 0"]),
    "no sample tokens": (LM, ["task.sample_tokens=0"], ["task.sample_tokens", "(0)", ">= 1"]),
    "beam size 0": (TRANSLATION, ["task.beam_size=0"], ["task.beam_size", "(0)", ">= 1"]),
    "no new tokens": (TRANSLATION, ["task.max_new_tokens=0"], ["task.max_new_tokens", "(0)", ">= 1"]),
    "label smoothing 1": (TRANSLATION, ["task.label_smoothing=1.0"], ["task.label_smoothing", "1.0", "[0, 1)"]),
    "sinks on sdpa with dropout": (
        LM,
        ["model.attention.kind=sinks", "model.attention.backend=sdpa", "model.attention.attn_drop=0.1"],
        ["model.attention", "'sinks'", "'sdpa'", "attn_drop 0.1", "'eager' or 'blocked'"],
    ),
    "linformer in a decoder-only LM": (
        LM,
        ["model.attention.kind=linformer"],
        ["model.attention", "'linformer'", "decoder", "'mha'"],
    ),
    "linformer in a translation decoder": (
        TRANSLATION,
        ["model.decoder_attention.kind=linformer"],
        ["model.decoder_attention", "'linformer'", "decoder"],
    ),
    "random blocks in a decoder": (
        LM,
        ["model.attention.pattern={kind: random_blocks, num_random: 1, block: 4}"],
        ["model.attention.pattern", "'random_blocks'", "cannot be made causal", "sliding_window"],
    ),
    "bigbird in a translation decoder": (
        TRANSLATION,
        ["model.decoder_attention={kind: mha, pattern: {kind: bigbird, window: 2, num_random: 1, block: 4}}"],
        ["model.decoder_attention.pattern", "'bigbird'", "cannot be made causal"],
    ),
    "linformer with a pattern": (
        VIT,
        ["model.attention.kind=linformer", "model.attention.pattern=causal"],
        ["model.attention", "'linformer'", "cannot use a pattern"],
    ),
    "talking heads on sdpa": (
        VIT,
        ["model.attention.kind=talking_heads", "model.attention.backend=sdpa"],
        ["model.attention", "'talking_heads'", "'sdpa'", "'auto' or 'eager'"],
    ),
    "a baseline for data that has none": (
        LM,
        ["run.baseline=true"],
        ["run.baseline", "true", "data.kind 'lm'", "['audio', 'image',", "run.baseline=false"],
    ),
    "flex with attention dropout": (
        VIT,
        ["model.attention.backend=flex", "model.attention.attn_drop=0.1"],
        ["model.attention", "'flex'", "attn_drop 0.1", "'blocked'"],
    ),
    "sigmoid on sdpa": (
        VIT,
        ["model.attention.kind=sigmoid", "model.attention.backend=sdpa"],
        ["model.attention", "'sigmoid'", "'sdpa'", "'eager', 'blocked', 'flex'"],
    ),
}


@pytest.mark.parametrize("case", sorted(LATE))
def test_late_options_stop_when_the_config_is_checked(case, capsys):
    recipe, overrides, parts = LATE[case]
    assert fit_main(["--config", recipe, "--print-config", *overrides]) == 2
    err = capsys.readouterr().err
    for part in [*parts, "set in"]:
        assert part in err, (part, err)


def test_attention_kinds_refuse_the_same_when_built_in_python():
    from attnzoo.attention.variants import LinformerAttention, SinkAttention
    from attnzoo.layers.decoder import make_decoder

    with pytest.raises(ValueError, match="'sinks' cannot train on backend 'sdpa' with attn_drop 0.1"):
        SinkAttention(16, 2, backend="sdpa", attn_drop=0.1)
    with pytest.raises(ValueError, match="'linformer' cannot use a pattern"):
        make_decoder(dim=16, depth=1, num_heads=2, attention={"kind": "linformer"}, layer_shape={"seq_len": 8})
    LinformerAttention(16, 2, seq_len=8)


def test_an_override_that_is_not_yaml_is_a_clear_error(capsys):
    assert fit_main(["--config", LM, "--print-config", "model.attention.pattern={kind:global,tokens:[0]}"]) == 2
    err = capsys.readouterr().err
    assert "override 'model.attention.pattern={kind:global,tokens:[0]}'" in err and "Traceback" not in err, err


def test_what_the_checks_allow_still_loads():
    # the neighbours of every refused value: each loads
    load([LM], ["task.top_p=1.0", "task.top_k=null", "task.temperature=0", "task.top_k=1"])
    load([LM], ["model.attention.kind=sinks", "model.attention.backend=sdpa"])  # no dropout: sdpa's CPU kernel runs
    load([LM], ["model.attention.kind=sinks", "model.attention.backend=eager", "model.attention.attn_drop=0.1"])
    load([TRANSLATION], ["model.attention.kind=linformer", "model.decoder_attention={kind: mha}"])  # encoder only
    load([VIT], ["model.attention.kind=linformer"])
    load([LM], ["model.attention.pattern={kind: sliding_window, window: 4}"])  # made causal by the decoder
    load([VIT], ["model.attention.pattern={kind: random_blocks, num_random: 1, block: 4}"])  # an encoder takes it


def test_the_baseline_command_on_data_without_one_is_a_clear_error(capsys):
    from attnzoo.baseline import main as baseline_main

    assert baseline_main(["--config", LM, "data.vocab_size=300"]) == 2
    assert "LMDataModule has no classical baseline" in capsys.readouterr().err


def test_ablate_dry_run_refuses_linformer_in_a_decoder(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("axes:\n  model.attention.kind: [mha, linformer]\n")
    argv = ["--config", LM, "--grid", str(grid), "--dry-run", "--out", str(tmp_path / "abl")]
    assert ablate_main(argv) == 2
    err = capsys.readouterr().err
    for part in ("variant", "linformer", "model.attention", "decoder"):
        assert part in err, (part, err)


SMOKE_LM = [
    "model.depth=1",
    "model.dim=32",
    "data.vocab_size=300",
    "data.block_size=16",
    "trainer.precision=32-true",
    "trainer.enable_progress_bar=false",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=1",
]


def test_a_prompt_longer_than_the_context_stops_before_training(tmp_path, capsys):
    prompt = " ".join(["the class"] * 20)  # far more than 16 tokens
    argv = ["--config", LM, *SMOKE_LM, f"run.dir={tmp_path}", f"task.prompt={json.dumps(prompt)}"]
    assert fit_main(argv) == 2
    err = capsys.readouterr().err
    for part in ("before training started", "task.prompt", "'the class the class", "at most 16", "num_examples=0"):
        assert part in err, (part, err)
    assert not list(tmp_path.rglob("metrics.csv")), "training started"
    assert not (tmp_path / "lm").exists() or not any((tmp_path / "lm").iterdir())  # a run that never ran is not kept


def test_a_prompt_the_tokenizer_cannot_encode_is_named_before_training(tmp_path, caplog):
    """The samples logged at validation left unknown characters of task.prompt out without a word (generate warns)."""
    argv = ["--config", LM, *SMOKE_LM, f"run.dir={tmp_path}", "task.prompt=☃ The", "trainer.limit_val_batches=1"]
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert fit_main(argv) == 0
    assert "task.prompt ('☃ The') holds '☃', which the run's tokenizer cannot encode" in caplog.text
    # the recipe's 48 sample tokens do not fit a context of 16 after the prompt: capped, and said so once
    assert caplog.text.count("task.sample_tokens (48) is capped to ") == 1, caplog.text
    assert "reads at most 16 tokens (data.block_size)" in caplog.text


VIT_TINY = [
    "trainer.enable_progress_bar=false",
    "trainer.precision=32-true",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=1",
    "model.embed_dim=16",
    "model.depth=1",
    "model.num_heads=2",
    "model.patch_size=7",
]


def test_flex_training_on_cpu_stops_before_the_first_step(tmp_path, capsys):
    argv = [
        "--config",
        VIT,
        *VIT_TINY,
        f"run.dir={tmp_path}",
        "model.attention.backend=flex",
        "trainer.accelerator=cpu",
    ]
    assert fit_main(argv) == 2
    err = capsys.readouterr().err
    for part in (
        "before training started",
        "attention backend 'flex'",
        "cannot train on cpu",
        "no backward",
        "'blocked'",
    ):
        assert part in err, (part, err)
    assert not list(tmp_path.rglob("metrics.csv")), "training started"


def test_flash_training_without_cuda_stops_before_the_first_step(tmp_path, capsys):
    argv = [
        "--config",
        VIT,
        *VIT_TINY,
        f"run.dir={tmp_path}",
        "model.attention.backend=flash",
        "trainer.accelerator=cpu",
    ]
    assert fit_main(argv) == 2
    err = capsys.readouterr().err
    for part in ("before training started", "attention backend 'flash'", "cannot train on cpu", "CUDA only"):
        assert part in err, (part, err)


class _FailAfter(L.Callback):
    """Raises `error` at the end of the first training batch (training has started)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        raise self.error


@pytest.mark.parametrize("error", [ValueError("bad value at step 1"), RuntimeError("kernel failed")])
def test_a_failure_after_training_started_keeps_the_run_directory(error, tmp_path):
    cfg = load([LM], [*SMOKE_LM, f"run.dir={tmp_path}"])
    with pytest.raises(type(error), match=str(error)):
        fit(cfg, extra_callbacks=[_FailAfter(error)])
    (run_dir,) = (tmp_path / "lm").iterdir()
    assert (run_dir / "config.yaml").is_file() and (run_dir / "tokenizer.json").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is False
    assert summary["stopped"]["reason"] == "error"
    assert str(error) in summary["stopped"]["message"]


class _FailInTest(L.Callback):
    def on_test_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        raise RuntimeError("kernel failed in the test")


def test_a_failure_in_the_test_pass_is_recorded_with_what_training_measured(tmp_path):
    # only a signal during the test was recorded: any other error left no summary.json at all
    cfg = load([LM], [*SMOKE_LM, "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", f"run.dir={tmp_path}"])
    with pytest.raises(RuntimeError, match="kernel failed in the test"):
        fit(cfg, extra_callbacks=[_FailInTest()])
    (run_dir,) = (tmp_path / "lm").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is False and "test" not in summary
    assert summary["stopped"]["reason"] == "error" and summary["stopped"]["phase"] == "test"
    assert summary["stopped"]["message"] == "RuntimeError: kernel failed in the test"
    assert summary["metrics"] and summary["global_step"] == 1  # training finished: what it measured is kept
    fit(load([run_dir / "config.yaml"]), resume=run_dir)  # trains nothing more, and runs the test again
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True and "test/ppl" in summary["test"] and summary["global_step"] == 1


def test_a_config_error_before_training_leaves_no_run(tmp_path):
    cfg = load([LM], [*SMOKE_LM, f"run.dir={tmp_path}"])
    with pytest.raises(ConfigError, match="before training started"):
        fit(cfg, extra_callbacks=[_FailBeforeTraining()])
    assert not (tmp_path / "lm").exists() or not any((tmp_path / "lm").iterdir())


class _FailBeforeTraining(L.Callback):
    def setup(self, trainer, module, stage):
        raise ValueError("refused in setup")


def test_a_model_size_the_data_gives_names_the_data_key_it_came_from():
    # "model (kind 'text_image'): img_size (50) must be divisible by patch_size (16)": the user set data.image_size
    from attnzoo.run import build

    recipe = str(ROOT / "recipes" / "text_image.yaml")
    with pytest.raises(ConfigError) as err:
        build(load([recipe], ["data.image_size=50", "data.batch_size=50"]))  # one key of that value is named
    assert "img_size (50) must be divisible by patch_size (16)" in str(err.value)
    assert "model.img_size (50) comes from the data (data.image_size)" in str(err.value)
    with pytest.raises(ConfigError) as err:  # set in the model section: nothing to point at
        build(load([recipe], ["data.image_size=50", "model.img_size=50"]))
    assert "comes from the data" not in str(err.value)


class _DataRead(Exception):
    pass


@pytest.mark.parametrize(
    ("recipe", "overrides", "parts"),
    [  # each came only after every image of the user's JSONL files was decoded (minutes for 20k photos)
        ("text_image", ["model.fusion=both", "model.image_depth=0"], ["image_depth (0) must be >= 1", "'film'"]),
        ("text_image", ["model.gated=true"], ["model (kind 'text_image'): ", "gated"]),
    ],
    ids=["image_depth", "gated_film"],
)
def test_a_model_option_the_builder_refuses_stops_before_the_data_is_read(
    recipe, overrides, parts, monkeypatch, capsys
):
    def read(*args, **kwargs):
        raise _DataRead

    monkeypatch.setattr(sys.modules["attnzoo.run.build"], "build_data", read)
    assert fit_main(["--config", str(ROOT / "recipes" / f"{recipe}.yaml"), *overrides]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in parts), err


def test_a_model_check_that_names_a_size_the_data_gives_waits_for_the_data(monkeypatch):
    # the image size comes from the data: the builder's default in its place would refuse patch_size 5 wrongly
    def read(*args, **kwargs):
        raise _DataRead

    monkeypatch.setattr(sys.modules["attnzoo.run.build"], "build_data", read)
    with pytest.raises(_DataRead):
        fit_main(["--config", VIT, "model.patch_size=7"])


def test_every_model_input_a_datamodule_gives_is_left_to_the_data_by_the_early_check():
    # check_net_before_data stands the builder's defaults in for DATA_GIVEN; a model input missing there would be
    # checked at the config's value, which the data then replaces
    import ast
    import inspect

    from attnzoo.models import MODELS
    from attnzoo.run.build import DATA_GIVEN

    names = {n for builder in MODELS.values() for n in inspect.signature(builder).parameters}
    given = set()
    for path in (ROOT / "attnzoo" / "data").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "model_inputs":
                strings = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                given |= strings & names
    assert {"num_classes", "img_size", "sample_rate", "feature_mean"} <= given  # the walk finds them
    assert given <= set(DATA_GIVEN), sorted(given - set(DATA_GIVEN))
