"""ViT: timm checkpoints load and give timm's logits; fine-tuning adaptations; every attention config builds."""

import logging

import pytest
import timm
import torch

from attnzoo.attention.backends import BACKENDS, Request
from attnzoo.models import MODELS, ViT, vit
from attnzoo.models.vit import timm_to_attnzoo


@pytest.fixture(scope="module")
def timm_checkpoint(tmp_path_factory):
    """A randomly initialized timm vit_tiny_patch16_224 saved to a file (no download)."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    path = tmp_path_factory.mktemp("timm") / "vit_tiny.pth"
    torch.save(model.state_dict(), path)
    return model, path


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_timm_checkpoint_gives_timm_logits(timm_checkpoint, backend):
    theirs, path = timm_checkpoint
    ours = vit(pretrained=str(path), attention={"backend": backend}).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(image=x), theirs(x), atol=1e-4, rtol=0)


def test_checkpoint_wrapped_in_a_training_dict_loads(tmp_path):
    kwargs = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3)
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs).eval()
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"state_dict": theirs.state_dict(), "epoch": 3}, wrapped)
    ours = vit(pretrained=str(wrapped), **kwargs).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


def test_fine_tuning_adapts_size_channels_and_head(timm_checkpoint, caplog):
    theirs, path = timm_checkpoint
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        ours = vit(pretrained=str(path), img_size=64, in_chans=1, num_classes=7)
    assert "pos_embed resampled" in caplog.text and "input channels" in caplog.text and "head" in caplog.text
    assert ours.pos_embed.shape == (1, 1 + 16, 192) and ours(torch.randn(2, 1, 64, 64)).shape == (2, 7)
    torch.testing.assert_close(ours.cls_token, theirs.cls_token)
    torch.testing.assert_close(ours.encoder.blocks[3].attn.qkv.weight, theirs.blocks[3].attn.qkv.weight)
    # the class token's position is kept; patch positions are resampled from the 14x14 grid
    torch.testing.assert_close(ours.pos_embed[:, 0], theirs.pos_embed[:, 0])


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path):
    other = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2)
    path = tmp_path / "other.pth"
    torch.save(other.state_dict(), path)
    with pytest.raises(ValueError, match=r"does not fit this ViT.*missing.*encoder\.blocks\.\d+"):
        vit(pretrained=str(path))
    with pytest.raises(ValueError, match="does not exist"):
        vit(pretrained=str(tmp_path / "none.pth"))


def test_key_mapping_round_trips_timm_names():
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, img_size=32, patch_size=8)
    ours = ViT(depth=2, img_size=32, patch_size=8)
    assert set(timm_to_attnzoo(theirs.state_dict())) == set(ours.state_dict())


@pytest.mark.parametrize("global_pool", ["token", "avg"])
def test_timm_parity_for_both_poolings(global_pool, tmp_path):
    kwargs = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, global_pool=global_pool)
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, **kwargs).eval()
    path = tmp_path / "small.pth"
    torch.save(theirs.state_dict(), path)
    ours = vit(pretrained=str(path), num_classes=5, **kwargs).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


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
