"""A text classifier started from attnzoo's own masked-language-model run (recipes/mlm.yaml): the encoder and the
tokenizer come from the MLM run, the classifier head starts new, and the log names what was loaded, new and dropped."""

import csv
import json
import logging
import random
import shutil

import pytest
import torch

from attnzoo.config import ConfigError, load
from attnzoo.models import MaskedLM
from attnzoo.run import build, fit
from attnzoo.run.checkpoint_io import read_checkpoint
from tests.helpers import QUICK, ROOT

TEXT = ROOT / "recipes" / "text_cls.yaml"
MLM = ROOT / "recipes" / "mlm.yaml"
WORDS = "red green blue cat dog fish one two three four sun moon star tree leaf rock".split()
# the encoder options of the MLM run (a classifier started from it takes them from the run's config.yaml)
ENCODER = ["model.dim=16", "model.depth=1", "model.num_heads=2", "model.mlp_ratio=1.0"]
COMMON = [*QUICK, "trainer.num_threads=1", "trainer.max_epochs=1", "trainer.num_sanity_val_steps=0",
          "trainer.log_every_n_steps=1", "data.batch_size=16", *ENCODER]  # fmt: skip


def _texts(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["text", "label"])
        for i in range(n):
            out.writerow([" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))), "ab"[i % 2]])
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return _texts(folder / "train.csv", 96, seed=1), _texts(folder / "val.csv", 16, seed=2)


@pytest.fixture(scope="module")
def mlm_run(files, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    train, _ = files  # the classifier's own train split, its labels not read
    return fit(load([MLM], [*COMMON, "data.vocab_size=60", f"data.train={train}", f"run.dir={runs}"]))


def test_the_classifier_loads_the_encoder_and_tokenizer_and_starts_a_new_head(mlm_run, files, tmp_path, caplog):
    train, val = files
    overrides = [*COMMON, f"data.train={train}", f"data.val={val}", f"run.dir={tmp_path}", "run.baseline=false",
                 f"model.init_from={mlm_run}"]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        run = fit(load([TEXT], overrides))
    saved = read_checkpoint(mlm_run / "checkpoints" / "best.ckpt")["state_dict"]
    mlm_head = sorted(k.removeprefix("net.") for k in saved if k.startswith("net.mlm_head."))
    assert mlm_head and "mlm_head.weight" not in mlm_head  # tied: the head reads the embedding table
    summary = json.loads((run / "summary.json").read_text())
    started = summary["init_from"]
    assert started["path"] == str(mlm_run) and started["new"] == ["head.weight", "head.bias"]
    assert sorted(started["dropped"]) == mlm_head
    encoder = [k for k in saved if k.startswith("net.") and not k.startswith("net.mlm_head.")]
    assert started["loaded"] == len(encoder) > 0
    assert f"{len(encoder)} tensors loaded; 2 new (head.weight, head.bias); {len(mlm_head)} dropped (" in caplog.text
    config = load([run / "config.yaml"])
    assert config.section("data")["tokenizer"] == str(mlm_run / "tokenizer.json")  # the ids the embedding learned
    assert (run / "tokenizer.json").read_text() == (mlm_run / "tokenizer.json").read_text()
    assert config.section("task")["optimizer"]["lr"] == 3e-3  # an attnzoo run's small model: the recipe's own rate
    # nothing learned: not "subwords learned from the train split" (the MLM run's tokenizer lowercases on its own)
    assert (
        f"data.lowercase: auto -> False (not used: data.tokenizer '{mlm_run / 'tokenizer.json'}' is not" in caplog.text
    )


def test_the_loaded_encoder_is_the_mlm_runs_to_the_bit(mlm_run, files):
    train, val = files
    overrides = [*COMMON, f"data.train={train}", f"data.val={val}", "run.baseline=false", f"model.init_from={mlm_run}"]
    _, task, _ = build(load([TEXT], overrides))
    saved = read_checkpoint(mlm_run / "checkpoints" / "best.ckpt")["state_dict"]
    own = task.net.state_dict()
    for key, value in own.items():
        if not key.startswith("head."):
            torch.testing.assert_close(value, saved[f"net.{key}"], rtol=0, atol=0, msg=key)
    assert not any(k.startswith("mlm_head.") for k in own)


def test_a_vocabulary_size_typed_for_a_start_with_its_own_tokenizer_is_said_to_be_unused(mlm_run, files, caplog):
    # data.vocab_size=500 was dropped without a word, and config.yaml kept 500 beside the run's 2,000-token tokenizer
    import logging

    train, val = files
    overrides = [*COMMON, f"data.train={train}", f"data.val={val}", "run.baseline=false", f"model.init_from={mlm_run}",
                 "data.vocab_size=500"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        build(load([TEXT], overrides))
    assert "data.vocab_size (set in the command line" in caplog.text and "is not used: the tokenizer is" in caplog.text


def test_a_classifier_of_another_width_names_the_mlm_runs_config(mlm_run, files):
    train, val = files
    overrides = [*COMMON, f"data.train={train}", f"data.val={val}", f"model.init_from={mlm_run}", "model.dim=32"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    assert "'embed.weight' is [" in str(err.value) and "model.dim (16 there, 32 here)" in str(err.value)
    assert "model.pooling" not in str(err.value)  # "(None there, 'mean' here)": the classifier's own, not a difference


def test_an_mlm_run_starts_no_other_model_kind(mlm_run):
    with pytest.raises(ConfigError, match=r"is a 'mlm' model, and this run builds model.kind 'lm'"):
        build(load([ROOT / "recipes" / "lm.yaml"], [*QUICK, f"model.init_from={mlm_run}"]))


def test_a_text_run_refuses_an_lm_start_and_names_both_kinds_it_starts_from(tmp_path):
    lm_run = fit(load([ROOT / "recipes" / "lm.yaml"], [*QUICK, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    with pytest.raises(ConfigError, match=r"is a 'lm' model.*start from a checkpoint of a 'text' or 'mlm' model"):
        build(load([TEXT], [*QUICK, f"model.init_from={lm_run}"]))


def test_a_run_whose_tokenizer_json_was_replaced_is_refused_as_a_start(mlm_run, files, tmp_path):
    """Another run's tokenizer.json (fewer tokens than the embedding has rows) was loaded with the weights: a log
    line about unused rows was all, and every id meant another token."""
    train, val = files
    copy = tmp_path / "copy"
    shutil.copytree(mlm_run, copy)
    other = fit(load([MLM], [*COMMON, "data.vocab_size=30", f"data.train={val}", f"run.dir={tmp_path / 'o'}"]))
    shutil.copy(other / "tokenizer.json", copy / "tokenizer.json")
    overrides = [*COMMON, f"data.train={train}", f"data.val={val}", f"model.init_from={copy}"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    assert str(err.value).startswith("model.init_from (set in the command line")
    assert f"is not the one '{copy / 'checkpoints' / 'best.ckpt'}' was trained with" in str(err.value)
    assert "Put the run's own tokenizer.json back" in str(err.value)


@pytest.fixture(scope="module")
def rope_run(files, tmp_path_factory):
    """An MLM run of another architecture than the text recipe's: rotary positions, no position table, no dropout."""
    runs = tmp_path_factory.mktemp("rope_runs")
    train, _ = files
    arch = ["model.position=none", "model.attention.rotary=rope", "model.drop_rate=0.0", "data.mask_rate=0.3",
            "data.max_len=64"]  # fmt: skip
    return fit(load([MLM], [*COMMON, *arch, "data.vocab_size=60", f"data.train={train}", f"run.dir={runs}"]))


def test_the_classifier_takes_the_runs_architecture_and_keeps_its_own_training_choices(rope_run, files, caplog):
    train, val = files
    common = [o for o in COMMON if o not in ENCODER]  # the recipe's model section, as a user leaves it
    overrides = [*common, f"data.train={train}", f"data.val={val}", "run.baseline=false", f"model.init_from={rope_run}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = build(load([TEXT], overrides))
    model = cfg.section("model")
    assert (model["dim"], model["depth"], model["num_heads"], model["mlp_ratio"]) == (16, 1, 2, 1.0)
    assert model["position"] == "none" and model["attention"]["rotary"] == "rope"  # no tensor tells these two
    assert model["drop_rate"] == 0.4 and model["pooling"] == "mean"  # the text recipe's choices for files
    assert cfg.section("task")["objective"]["label_smoothing"] == 0.1
    assert cfg.section("data")["max_len"] == 512  # rotary positions hold any length: the run's 64 cuts nothing
    assert "model.dim: 64 (set in" in caplog.text and "-> 16 (model.init_from)" in caplog.text
    saved = read_checkpoint(rope_run / "checkpoints" / "best.ckpt")["state_dict"]
    vocab = saved["net.embed.weight"].shape[0]
    mlm = MaskedLM(vocab_size=vocab, dim=16, depth=1, num_heads=2, mlp_ratio=1.0, position="none",
                   attention={"rotary": "rope"})  # fmt: skip
    mlm.load_state_dict({k.removeprefix("net."): v for k, v in saved.items() if k.startswith("net.")})
    tokens = torch.randint(4, vocab, (2, 9))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, 6:] = True
    task.net.eval(), mlm.eval()
    with torch.no_grad():  # the encoder computes what it computed in the MLM run: rotary positions, none added
        torch.testing.assert_close(task.net.features(tokens, padding), mlm.features(tokens, padding))


def test_the_pretrained_text_grids_alibi_variants_differ_from_a_rotary_start(rope_run, files):
    # from a run with rotary positions, "alibi" and "alibi_only" built the same model (rotary kept, ALiBi added)
    from attnzoo.ablation.grid import load_grid

    train, val = files
    common = [o for o in COMMON if o not in ENCODER]
    base = [*common, f"data.train={train}", f"data.val={val}", "run.baseline=false", f"model.init_from={rope_run}"]
    grid = load_grid(ROOT / "configs" / "ablations" / "pretrained_text.yaml")
    rotary = {}
    for variant in grid.variants():
        if variant.seed == 0 and variant.values["attention"] in ("alibi", "alibi_only"):
            _, task, cfg = build(load([TEXT], [*base, *variant.overrides]))
            attention = cfg.section("model")["attention"]
            assert attention["bias"] == "alibi"
            rotary[variant.values["attention"]] = attention.get("rotary")
            only = variant.values["attention"] == "alibi_only"
            assert (task.net.encoder.blocks[0].attn.rotary is None) == only
            # the start's record said "bias 'alibi' added" alone for both: the rotary positions dropped were not named
            said = task.net.started_from["attention"]
            assert ("rotary 'rope' of the checkpoint removed from every attention layer; it changes the function" in
                    said) == only, said  # fmt: skip
    assert rotary["alibi"] == "rope" and rotary["alibi_only"] in (None, "none")


def test_a_command_line_architecture_key_wins_over_the_runs(rope_run, files):
    train, val = files
    common = [o for o in COMMON if o not in ENCODER]
    overrides = [*common, f"data.train={train}", f"data.val={val}", f"model.init_from={rope_run}",
                 "model.position=sinusoidal"]  # fmt: skip
    _, _, cfg = build(load([TEXT], overrides))
    assert cfg.section("model")["position"] == "sinusoidal" and cfg.section("model")["dim"] == 16


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ([], {"kind": "sliding_window", "window": 4}),  # the run's pattern
        (["model.attention.pattern={kind: causal}"], {"kind": "causal"}),  # the command line's
    ],
)
def test_the_runs_attention_entries_give_way_to_the_command_line_only(typed, expected):
    from attnzoo.run.start import _attention

    cfg = load([TEXT], typed)
    theirs = {"kind": "mha", "rotary": "rope", "pattern": {"kind": "sliding_window", "window": 4}}
    merged = _attention(cfg, "model.attention", cfg.section("model")["attention"], theirs)
    assert merged["pattern"] == expected and merged["rotary"] == "rope" and merged["backend"] == "auto"
