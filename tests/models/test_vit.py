"""ViT: timm's key names map onto it; every backend trains it; every attention config builds. (timm checkpoints:
tests/pretrained/test_vit.py.)"""

import pytest
import timm
import torch

from attnzoo.attention.backends import BACKENDS, Request
from attnzoo.models import MODELS, ViT, vit
from attnzoo.models.vit import timm_to_attnzoo


def test_key_mapping_round_trips_timm_names():
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, img_size=32, patch_size=8)
    ours = ViT(depth=2, img_size=32, patch_size=8)
    assert set(timm_to_attnzoo(theirs.state_dict())) == set(ours.state_dict())


TRAINS_HERE = [  # backends that train a padded dense call on this machine (GPU-only ones are tested on CUDA)
    b for b in sorted(BACKENDS) if BACKENDS[b].supports(Request("cpu", True, False, None, None, False, 17, 17)) is None
]


@pytest.mark.parametrize("backend", TRAINS_HERE)
def test_every_backend_trains_the_vit_and_reports_itself(backend):
    model = vit(
        img_size=28,
        patch_size=7,
        in_chans=1,
        num_classes=10,
        embed_dim=32,
        depth=2,
        num_heads=4,
        attention={"backend": backend},
    )
    ref = vit(
        img_size=28,
        patch_size=7,
        in_chans=1,
        num_classes=10,
        embed_dim=32,
        depth=2,
        num_heads=4,
        attention={"backend": "eager"},
    )
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 1, 28, 28)
    out, expected = model(x), ref(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    out.sum().backward()
    expected.sum().backward()
    for (name, a), b in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
    assert {m.backend_used for m in model.modules() if hasattr(m, "backend_used")} == {backend}


def test_grad_checkpointing_gives_identical_gradients():
    model = vit(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=32, depth=2, num_heads=4)
    x = torch.randn(4, 1, 28, 28)
    model(x).square().sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.set_grad_checkpointing(True)
    model(x).square().sum().backward()
    for a, b in zip(model.parameters(), ref, strict=True):
        torch.testing.assert_close(a.grad, b, atol=1e-6, rtol=1e-5)


def test_attention_parts_receive_the_patch_grid(monkeypatch):
    monkeypatch.setenv("ATTNZOO_ALLOW_IMPORTS", "1")  # a user's own class, named by import path: opted in
    seen = {}

    class Probe(torch.nn.Module):  # a bias class given by import path; records its context
        def __init__(self, *, num_heads, grid_size, num_prefix_tokens):
            super().__init__()
            seen.update(grid_size=grid_size, num_prefix_tokens=num_prefix_tokens)

    import sys

    sys.modules[__name__].Probe = Probe
    try:
        vit(img_size=32, patch_size=8, attention={"bias": f"{__name__}.Probe"})  # built, never called
    finally:
        del sys.modules[__name__].Probe
    assert seen == {"grid_size": (4, 4), "num_prefix_tokens": 1}


def test_vit_is_registered_and_rejects_bad_shapes():
    assert MODELS["vit"] is vit
    with pytest.raises(ValueError, match="multiple of patch_size"):
        ViT(img_size=30, patch_size=7)
    with pytest.raises(ValueError, match="class_token"):
        ViT(class_token=False)


def test_proj_drop_rate_reaches_the_attention_projection_as_in_timm():
    ours = ViT(img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2, proj_drop_rate=0.25)
    theirs = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2, proj_drop_rate=0.25
    )
    for mine, timms in zip(ours.encoder.blocks, theirs.blocks, strict=True):
        assert mine.attn.proj_drop.p == timms.attn.proj_drop.p == 0.25
        assert mine.mlp.drop2.p == timms.mlp.drop2.p == 0.25
    # the attention config still wins over the model default
    assert ViT(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, proj_drop_rate=0.25,
               attention={"proj_drop": 0.0}).encoder.blocks[0].attn.proj_drop.p == 0.0  # fmt: skip


def test_conv_stem_keeps_the_patch_grid_and_trains():
    from attnzoo.models.vit import ViT

    net = ViT(img_size=32, patch_size=8, in_chans=3, num_classes=4, embed_dim=32, depth=1, num_heads=2, stem="conv")
    assert net.grid_size == (4, 4)
    out = net(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 4) and torch.isfinite(out).all()
    out.square().sum().backward()
    stem = net.patch_embed.proj
    assert isinstance(stem, torch.nn.Sequential) and all(p.grad is not None for p in stem.parameters())
    with pytest.raises(ValueError, match=r"stem 'convs' is not one of \('patch', 'conv'\)"):
        ViT(img_size=32, patch_size=8, stem="convs")
    with pytest.raises(ValueError, match=r"a conv stem needs a patch_size >= 2 \(model.patch_size\), got 1"):
        ViT(img_size=36, patch_size=1, stem="conv")


@pytest.mark.parametrize("patch, strides", [(8, [2, 2, 2]), (12, [2, 2, 3]), (28, [2, 2, 7]), (6, [2, 3]), (5, [5])])
def test_a_conv_stem_of_any_patch_size_reads_its_patch_of_the_grid(patch, strides):
    # a conv stem needed a power-of-2 patch: 96 px images (patch 12) and 224 px photos (patch 28) got none
    from attnzoo.models.vit import ViT, stem_strides

    assert stem_strides(patch) == strides
    side = 4 * patch
    net = ViT(img_size=side, patch_size=patch, in_chans=3, num_classes=2, embed_dim=32, depth=1, num_heads=2,
              stem="conv").eval()  # fmt: skip
    assert net.grid_size == (4, 4)
    image = torch.randn(1, 3, side, side, requires_grad=True)
    tokens = net.patch_embed(image)  # [1, 16, 32]
    assert tokens.shape == (1, 16, 32)
    tokens[0, 5].sum().backward()  # token 5 is patch (1, 1), pixels [patch, 2 * patch) of both sides
    seen = image.grad[0].abs().sum(0) > 0
    assert seen[patch : 2 * patch, patch : 2 * patch].all()  # every pixel of its patch
    reach = seen.nonzero()
    assert reach.min() > 0 and reach.max() < 3 * patch - 1  # and of its neighbours, at most the 3x3 convs' overlap


def test_auto_stem_is_conv_only_for_larger_images_with_a_patch_of_a_multiple_of_4():
    from attnzoo.data.modules import defaults

    def chosen(img_size):
        return defaults.image_model(embedded=False, img_size=img_size, num_train=3000, batch_size=64)

    assert chosen(64)["model.stem"][0] == "conv" and chosen(64)["model.patch_size"][0] == 8
    assert chosen(128)["model.stem"][0] == "conv"
    assert chosen(28)["model.stem"][0] == "patch"  # small images: the linear patch embedding
    assert chosen(48)["model.stem"] == (
        "patch",
        "patch 6 is not a multiple of 4, which two strided 3x3 convolutions need",
    )
    assert chosen(96)["model.stem"] == (  # patch 12: it was the linear map, which learned 96 px symbols far later
        "conv",
        "96x96 images: strided convolutions (2 x 2 x 3) down to the 12-pixel patch grid",
    )
    assert chosen(224)["model.stem"][0] == "conv" and chosen(224)["model.patch_size"][0] == 28
    embedded = defaults.image_model(embedded=True, img_size=28, num_train=1000, batch_size=64)
    assert embedded["model.stem"][0] == "patch"


@pytest.mark.parametrize(
    "given, patch, stem",
    [
        ([], 6, "patch"),  # 48 px: the 6-pixel patch of an 8x8 grid, which no strided convolutions reach
        (["model.patch_size=8"], 8, "conv"),  # the stem follows the patch set (it followed the auto 6: patch)
        (["data.img_size=64", "model.patch_size=2"], 2, "patch"),  # too small for convolutions (it had them: conv)
        (["data.img_size=96", "model.patch_size=16"], 16, "conv"),
    ],
)
def test_auto_stem_follows_the_patch_size_the_config_sets(tmp_path, given, patch, stem):
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from attnzoo.config import load
    from attnzoo.run import build

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(4):
            Image.fromarray(np.full((48, 48, 3), 60 * i, dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "vit.yaml"
    folder = ["data.dataset=folder", f"data.root={tmp_path}", "run.baseline=false", "model.depth=1"]
    _, task, cfg = build(load([recipe], [*folder, *given]))
    assert (cfg.section("model")["patch_size"], cfg.section("model")["stem"]) == (patch, stem)
    assert isinstance(task.net.patch_embed.proj, torch.nn.Conv2d) == (stem == "patch")  # conv: a stack of them


def test_a_side_set_without_a_patch_grid_of_4x4_is_refused_naming_sides_that_have_one():
    # data.img_size=31 with model.patch_size auto trained a ViT of one 31-pixel patch: a 1x1 grid, one token
    from attnzoo.data.modules import defaults

    with pytest.raises(
        ValueError, match=r"data.img_size 31: .* is 1x1\); use a side such as 30 or 32, or set model.patch"
    ):
        defaults.image_model(embedded=False, img_size=31, num_train=100, batch_size=8)
    given = defaults.image_model(embedded=False, img_size=31, num_train=100, batch_size=8, patch_size=31)
    assert "model.patch_size" not in given and given["model.stem"][0] == "patch"  # a patch set is the user's
    assert defaults.auto_patch_size(100) == 20 and defaults.auto_patch_size(7) == 1  # 5x5; a 7 px icon: 7x7
