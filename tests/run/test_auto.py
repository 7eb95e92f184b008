"""Defaults chosen from the data (`auto`): resolved when a run is built, logged, written into config.yaml; a learned
tokenizer saved with the run and reused by every command that loads it."""

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image
from scipy.io import wavfile

from attnzoo.config import ConfigError, load
from attnzoo.data.modules import defaults
from attnzoo.run import build, fit, load_run

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
QUICK = [
    "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.precision=32-true",
    "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0", "trainer.max_steps=2", "run.baseline=false",
]  # fmt: skip


def _autos(tree) -> list:
    """Keys set to auto, but the attention backend's (an option of its own: chosen per call)."""
    if isinstance(tree, dict):
        found = [k for key, value in tree.items() for k in ([key] if value == "auto" else _autos(value))]
        return [k for k in found if k != "backend"]
    return []


def _digits(root: Path, n: int = 6) -> list[str]:
    rng = np.random.default_rng(0)
    for split in ("train", "val", "test"):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(root / split / label / f"{i}.png")
    return ["data.dataset=folder", f"data.root={root}"]


def test_an_image_folder_gets_its_size_augmentation_patches_and_budget_in_config_yaml(tmp_path):
    cfg = load([RECIPES / "vit.yaml"], [*QUICK, *_digits(tmp_path / "images"), f"run.dir={tmp_path}"])
    saved = OmegaConf.to_container(OmegaConf.load(fit(cfg) / "config.yaml"))
    assert saved["data"]["img_size"] == 8 and saved["data"]["augment"] is True and saved["data"]["crop_scale"] == 0.8
    assert saved["data"]["trivial_augment"] is False and saved["data"]["mixup_alpha"] == 0.0
    assert saved["model"]["patch_size"] == 1 and saved["model"]["img_size"] == 8  # 8x8 images: an 8x8 grid
    assert saved["model"]["drop_path_rate"] == 0.1 and saved["task"]["objective"]["label_smoothing"] == 0.1
    assert saved["trainer"]["max_epochs"] == 200  # 12 images: 1 step an epoch, so the ceiling
    assert saved["trainer"]["precision"] == "32-true" and not _autos(saved)


def test_the_embedded_digits_keep_the_recipe_settings():
    cfg = build(load([RECIPES / "vit.yaml"], QUICK)).cfg
    model, data = cfg.section("model"), cfg.section("data")
    assert (model["patch_size"], model["drop_path_rate"], cfg.section("trainer")["max_epochs"]) == (7, 0.0, 10)
    assert data["augment"] is False and data["img_size"] == 28 and not _autos(OmegaConf.to_container(cfg.tree))


def test_audio_files_get_16_khz_and_their_own_learning_rate(tmp_path):
    rng = np.random.default_rng(0)
    for label in ("low", "high"):
        (tmp_path / label).mkdir()
        for i in range(4):
            wave = 0.3 * np.sin(2 * np.pi * (300 if label == "low" else 2000) * np.arange(8000) / 8000)
            wave = (wave + 0.01 * rng.random(8000)).astype(np.float32)
            wavfile.write(tmp_path / label / f"s{i}_nohash_0.wav", 8000, wave)
    cfg = load([RECIPES / "ast.yaml"], [*QUICK, "data.source=folder", f"data.root={tmp_path}", "data.val_fraction=0.3"])
    cfg = build(cfg).cfg
    data, model = cfg.section("data"), cfg.section("model")
    assert (data["sample_rate"], data["n_mels"], data["mixup_alpha"], data["time_shift_ms"]) == (16000, 32, 0.0, 0.0)
    assert (model["fstride"], model["tstride"], model["n_mels"], model["sample_rate"]) == (16, 6, 32, 16000)
    assert model["drop_path_rate"] == 0.1 and model["feature_norm"] == "level"
    assert model["spec_augment"] == {"freq_mask": 4, "time_mask": 10, "num_masks": 2, "stretch": 0.1}  # 32 x 98
    assert cfg.section("task")["optimizer"]["lr"] == 2e-3
    synthetic = load([RECIPES / "ast.yaml"], [*QUICK, "data.synthetic.per_class={train: 4, val: 2, test: 2}"])
    synthetic = build(synthetic).cfg
    assert synthetic.section("task")["optimizer"]["lr"] == 1e-3 and synthetic.section("data")["sample_rate"] == 8000
    assert synthetic.section("model")["feature_norm"] == "dataset"


def test_auto_for_a_key_the_data_does_not_choose_is_a_config_error():
    with pytest.raises(ConfigError, match=r"model.depth: 'auto' is not a valid int .*chosen by the data only"):
        load([RECIPES / "vit.yaml"], ["model.depth=auto"])


def _texts(root: Path, words: dict[str, list[str]], n: int = 24) -> list[str]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for split in ("train", "val", "test"):
        rows = ["text,label"] + [
            f"{' '.join(rng.choice(words[label], 4))},{label}" for label in words for _ in range(n)
        ]  # fmt: skip
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
        files.append(f"data.{split}={root / f'{split}.csv'}")
    return files


def test_a_learned_tokenizer_is_saved_with_the_run_and_reused_when_the_run_is_loaded(tmp_path):
    words = {"sport": ["Goalkeeper", "matches", "teamwork", "scoring"], "food": ["Breadcrumbs", "soups", "salted"]}
    files = _texts(tmp_path / "data", words)
    overrides = [*QUICK, *files, "data.vocab_size=60", "data.batch_size=8", f"run.dir={tmp_path}"]
    cfg = load([RECIPES / "text_cls.yaml"], overrides)
    run_dir = fit(cfg)
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.data.tokenizer == "unigram" and saved.data.lowercase is True  # chosen from the data, recorded
    assert saved.model.pooling == "mean" and saved.model.drop_rate == 0.4
    assert saved.task.objective.label_smoothing == 0.1  # the recipe says auto: the choice for files is recorded
    assert (run_dir / "tokenizer.json").is_file()
    assert json.loads((run_dir / "labels.json").read_text())["tokenizer"]["kind"] == "unigram"

    trained = load_run(run_dir, "last").data.tokenizer
    # the train file changes: learned again, the vocabulary would differ; the run keeps its own
    _texts(tmp_path / "data", {"sport": ["zebra", "quantum", "yodel"], "food": ["vortex", "jumble"]})
    run = load_run(run_dir, "last")
    assert run.cfg.section("data")["tokenizer"] == str(run_dir / "tokenizer.json")
    assert run.data.tokenizer.vocab_size == trained.vocab_size == saved.model.vocab_size
    text = "goalkeeper soups teamwork"
    assert run.data.tokenizer.encode(text) == trained.encode(text)


@pytest.mark.parametrize(
    "size, tokens, expected",
    [(28, 64, 4), (28, 16, 7), (8, 64, 1), (8, 16, 2), (224, 196, 16), (32, 64, 4), (30, 64, 5)],
)
def test_patch_size_gives_the_finest_grid_within_the_token_budget(size, tokens, expected):
    assert defaults.patch_size(size, tokens) == expected


def test_the_epoch_budget_aims_at_a_step_count_within_bounds():
    assert defaults.epoch_budget(1000, 64, steps=2000, low=10, high=200)[0] == 125  # 16 steps an epoch
    assert defaults.epoch_budget(50000, 64, steps=2000, low=10, high=200)[0] == 10
    assert defaults.epoch_budget(10, 64, steps=2000, low=10, high=200)[0] == 200
    # a loader that drops its last partial batch: 90 examples in batches of 64 are 1 step an epoch, not 2
    epochs, why = defaults.epoch_budget(90, 64, steps=100, low=10, high=200, drop_last=True)
    assert epochs == 100 and "1 steps an epoch" in why
    assert defaults.epoch_budget(1461, 64, steps=2000, low=10, high=100, drop_last=True)[0] == 91  # 22 steps, not 23
    assert defaults.epoch_budget(10, 64, steps=2000, low=10, high=200, drop_last=True)[0] == 200  # one partial batch


def test_a_patience_proposed_from_the_datas_budget_follows_a_budget_the_config_sets(caplog):
    # text-image files: patience auto -> 34 (a third of the 100-epoch budget) with trainer.max_epochs=300 set, so
    # early stopping waited far less than a third; a share taken from a floored proposal (10 of 10 epochs) would
    # have turned early stopping off
    import logging
    from types import SimpleNamespace

    from attnzoo.data.modules.text_image import TextImageDataModule
    from attnzoo.run.build import _proposals

    recipe = ROOT / "recipes" / "text_image.yaml"
    files = SimpleNamespace(files={"train": "train.jsonl"})
    for theirs in (100, 10):  # the data's own budget: large, and at the floor of 10 epochs
        proposed = dict([("trainer.max_epochs", (theirs, "data")),
                         ("run.early_stopping.patience", defaults.text_image_patience(theirs))])  # fmt: skip
        data = SimpleNamespace(auto_values=lambda p=proposed: dict(p), AUTO_KEYS=tuple(proposed),
                               patience_for=lambda e: TextImageDataModule.patience_for(files, e))  # fmt: skip
        with caplog.at_level(logging.INFO, logger="attnzoo"):
            taken = _proposals(load([recipe], ["trainer.max_epochs=300"]), data)
        assert taken == {"run.early_stopping.patience": 100}  # a third of 300
        assert _proposals(load([recipe], ["trainer.max_epochs=12"]), data) == {"run.early_stopping.patience": 10}
        assert _proposals(load([recipe]), data) == {"trainer.max_epochs": theirs, "run.early_stopping.patience":
                                                    max(10, -(-theirs // 3))}  # fmt: skip
    assert "a third of the 300-epoch budget trainer.max_epochs sets (at least 10)" in caplog.text
    embedded = SimpleNamespace(files={"train": None})
    assert TextImageDataModule.patience_for(embedded, 30)[0] == 30  # the embedded scenes: the whole budget


def test_the_auto_epoch_budget_counts_steps_over_every_ddp_process(tmp_path):
    # two processes of batch 8 were given the epochs of one process of batch 8: half the steps the log promised
    from attnzoo.run.cluster import planned_processes

    for split, n in (("train", 401), ("val", 40)):
        rows = ["text,label", *(f"word{i % 7} thing {i},{i % 2}" for i in range(n))]
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n")
    files = [f"data.train={tmp_path / 'train.csv'}", f"data.val={tmp_path / 'val.csv'}", "run.baseline=false"]

    def epochs(*extra):
        _, _, cfg = build(load([RECIPES / "text_cls.yaml"], [*files, *extra]))
        return cfg.section("trainer")["max_epochs"]

    two = epochs("data.batch_size=8", "trainer.devices=2", "trainer.strategy=ddp")
    assert two == epochs("data.batch_size=16") != epochs("data.batch_size=8")
    assert planned_processes({"devices": [0, 1], "num_nodes": 2}) == 4
    assert planned_processes({"devices": "auto", "accelerator": "cpu"}) == 1
    assert planned_processes({"devices": -1, "accelerator": "cpu"}) == 1
