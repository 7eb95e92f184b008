"""The ViT recipe from a timm ViT file: `model.timm_name` names the architecture where the tensors do not tell the head
count, only together with `model.init_from`, and never reaches the model builder; the older `model.pretrained` is
read as `model.init_from` with a deprecation warning."""

import logging
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

from attnzoo.config import ConfigError, load
from attnzoo.run import build
from tests.helpers import smoke_overrides

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "vit.yaml"
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu", "run.baseline=false"]
MEDIUM = "vit_medium_patch16_gap_256"  # width 512, 8 heads: not a width the head count is inferred from


def _save(path: Path, name: str, **kw) -> torch.nn.Module:
    """A random timm ViT (class token, 2x2 patch grid, one block) saved to `path`."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, img_size=32, depth=1, num_classes=4, **kw).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    if path.suffix == ".safetensors":
        save_file(model.state_dict(), path)
    else:
        torch.save(model.state_dict(), path)
    return model


def _overrides(*extra: str) -> list[str]:
    smoke = [o for o in smoke_overrides(load([RECIPE])) if not o.startswith("model.depth")]
    return [*smoke, *PINNED, *extra]


def test_timm_name_tells_the_head_count_the_tensors_do_not(tmp_path, caplog):
    file = tmp_path / "medium.safetensors"
    theirs = _save(file, MEDIUM, class_token=True, global_pool="token")
    with pytest.raises(
        ConfigError, match=r"model.init_from: .*cannot tell the timm ViT of width 512.*model.timm_name="
    ):
        build(load([RECIPE], _overrides(f"model.init_from={file}")))
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data, task, cfg = build(load([RECIPE], _overrides(f"model.init_from={file}", f"model.timm_name={MEDIUM}")))
    net = task.net
    assert cfg.section("model")["timm_name"] == MEDIUM  # kept in the run's config, not passed to the builder
    assert cfg.section("model")["num_heads"] == 8 and net.encoder.blocks[0].attn.num_heads == 8
    torch.testing.assert_close(net.encoder.blocks[0].attn.qkv.weight, theirs.blocks[0].attn.qkv.weight)
    torch.testing.assert_close(net.pos_embed, theirs.pos_embed)
    assert f"{MEDIUM} (timm) {file}" in net.started_from["source"]


def test_another_head_count_than_the_one_guessed_from_the_width_is_said(tmp_path, caplog):
    # vit_tiny's width tells 3 heads only by convention: model.num_heads=4 replaced it without a word
    file = tmp_path / "tiny.pth"
    _save(file, "vit_tiny_patch16_224")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, _ = build(load([RECIPE], _overrides(f"model.init_from={file}", "model.num_heads=4")))
    assert task.net.encoder.blocks[0].attn.num_heads == 4
    assert "model.num_heads: 4 (set in the command line" in caplog.text and "in place of the 3 heads" in caplog.text


def test_timm_name_is_refused_without_init_from_or_when_it_does_not_fit(tmp_path):
    with pytest.raises(ConfigError, match=r"model.timm_name: 'vit_tiny_patch16_224' \(set in the command line.*"
                                          r"set model.init_from=<file> too"):  # fmt: skip
        load([RECIPE], ["model.timm_name=vit_tiny_patch16_224"])
    file = tmp_path / "tiny.pth"
    _save(file, "vit_tiny_patch16_224")
    with pytest.raises(ConfigError, match=r"model.timm_name: .*tiny.pth does not hold a vit_small_patch16_224: .*"
                                          r"width 192.*model.timm_name set in the command line"):  # fmt: skip
        build(load([RECIPE], _overrides(f"model.init_from={file}", "model.timm_name=vit_small_patch16_224")))
    with pytest.raises(ConfigError, match=r"model.timm_name: timm_name 'resnet50' is not a supported timm ViT"):
        build(load([RECIPE], _overrides(f"model.init_from={file}", "model.timm_name=resnet50")))


def test_a_start_given_by_a_relative_path_is_recorded_by_its_absolute_one(tmp_path, monkeypatch):
    # init_from.json and the summary held "path": "tiny.pth" and a source relative to where the run was started
    _save(tmp_path / "tiny.pth", "vit_tiny_patch16_224")
    monkeypatch.chdir(tmp_path)
    _, task, _ = build(load([RECIPE], _overrides("model.init_from=tiny.pth")))
    assert task.net.started_from["path"] == str(tmp_path / "tiny.pth")
    assert task.net.started_from["source"].endswith(f" {tmp_path / 'tiny.pth'}")


def test_the_older_model_pretrained_key_starts_from_the_file_with_a_deprecation_warning(tmp_path, caplog):
    file = tmp_path / "tiny.pth"
    theirs = _save(file, "vit_tiny_patch16_224")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        cfg = load([RECIPE], _overrides(f"model.pretrained={file}"))
    assert "model.pretrained (set in the command line" in caplog.text
    assert "is deprecated: use model.init_from=<file> (and model.timm_name=" in caplog.text
    assert cfg.section("model")["init_from"] == str(file) and "pretrained" not in cfg.section("model")
    assert cfg.where("model.init_from").startswith("the command line ('model.pretrained=")
    _, task, _ = build(cfg)
    torch.testing.assert_close(task.net.encoder.blocks[0].attn.qkv.weight, theirs.blocks[0].attn.qkv.weight)
    assert task.net.started_from["path"] == str(file)
    with pytest.raises(ConfigError, match=r"model.pretrained \(set in the command line.*\) and model.init_from .*"
                                          r"keep model.init_from only"):  # fmt: skip
        load([RECIPE], [f"model.pretrained={file}", f"model.init_from={file}"])
    with pytest.raises(ConfigError, match=r"model.pretrained"):  # only the ViT builder had the key
        load([ROOT / "recipes" / "text_cls.yaml"], [f"model.pretrained={file}"])
