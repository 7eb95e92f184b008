"""ViT checkpoints -> attnzoo ViT: small random Hugging Face ViTs and timm ViTs saved to disk convert exactly (logits
and hidden states within 1e-5 in fp32); the timm architecture is named or inferred; other image sizes resample."""

import json
import logging

import pytest
import timm
import torch
import transformers
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed

from attnzoo import pretrained
from attnzoo.models import MODELS
from attnzoo.models.vit import timm_to_attnzoo
from attnzoo.pretrained import vit as vit_family
from attnzoo.pretrained.transfer import transfer


def _randomize(model):
    """Weights far from their initialization (LayerNorm scales and biases too): every tensor is checked."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_scale = p.dim() == 1 and ("norm" in name) and name.endswith("weight")
            p.normal_(1.0 if norm_scale else 0.0, 0.3)
    return model.eval()


def _build(c):
    model = MODELS[c.model_kind](**c.options)
    model.load_state_dict(c.state_dict)  # strict
    return model.eval()


def _hf_config(**kw):
    base = dict(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=3)
    return transformers.ViTConfig(**{**base, "intermediate_size": 96, **kw}, attn_implementation="eager")


@pytest.mark.parametrize(("qkv_bias", "names"), [(True, "on disk"), (False, "on disk"), (True, "in memory")])
def test_hf_image_classification_equals_hf(tmp_path, qkv_bias, names):
    hf = _randomize(transformers.ViTForImageClassification(_hf_config(num_labels=5, qkv_bias=qkv_bias)))
    hf.save_pretrained(tmp_path)  # the names hub checkpoints have (encoder.layer.N.attention.attention.query, ...)
    if names == "in memory":  # transformers 5's own module names (layers.N.attention.q_proj, ...)
        assert any(".layers.0.attention.q_proj." in k for k in hf.state_dict())
        save_file(hf.state_dict(), tmp_path / "model.safetensors")
    assert vit_family.matches(tmp_path)
    c = vit_family.convert(tmp_path)
    assert c.model_kind == "vit" and c.options["num_classes"] == 5 and c.options["norm_eps"] == 1e-12
    model = _build(c)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want_hidden, want = hf.vit(x).last_hidden_state, hf(x).logits
        got_hidden, got = model.forward_features(x), model(x)
    assert want.abs().max() > 1.0
    torch.testing.assert_close(got_hidden, want_hidden, atol=1e-5, rtol=0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_hf_vit_model_hidden_states_and_dropped_pooler(tmp_path, caplog):
    hf = _randomize(transformers.ViTModel(_hf_config(num_channels=1, layer_norm_eps=1e-6)))
    hf.save_pretrained(tmp_path)
    with caplog.at_level("INFO", logger="attnzoo"):
        c = vit_family.convert(tmp_path)
    assert "pooler.dense.weight" in caplog.text and c.options["num_classes"] == 0
    # named as dropped for the start's log and record too (summary.json said "none dropped")
    assert c.dropped == ("pooler.dense.bias", "pooler.dense.weight")
    model = _build(c)
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        out = hf(x)
        torch.testing.assert_close(model.forward_features(x), out.last_hidden_state, atol=1e-5, rtol=0)
        torch.testing.assert_close(model(x), out.last_hidden_state[:, 0], atol=1e-5, rtol=0)


def test_hf_wrong_tensor_names_file_and_tensor(tmp_path):
    hf = transformers.ViTForImageClassification(_hf_config(num_labels=5))
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'vit.encoder.layer.0.intermediate.dense.weight'"):
        vit_family.convert(tmp_path)
    with pytest.raises(ValueError, match="timm_name"):
        vit_family.convert(tmp_path, timm_name="vit_tiny_patch16_224")


def _timm(name="vit_tiny_patch16_224", **kw):
    kw = {"img_size": 32, "depth": 2, "num_classes": 10, **kw}
    return _randomize(timm.create_model(name, pretrained=False, **kw))


@pytest.mark.parametrize("fmt", ["safetensors", "pth"])
@pytest.mark.parametrize("timm_name", [None, "vit_tiny_patch16_224.augreg_in21k"])
def test_timm_file_equals_timm(tmp_path, fmt, timm_name):
    theirs = _timm()
    file = tmp_path / f"vit.{fmt}"
    if fmt == "safetensors":
        save_file(theirs.state_dict(), file)
    else:
        torch.save({"state_dict": theirs.state_dict(), "epoch": 3}, file)
    assert vit_family.matches(file)
    c = vit_family.convert(file, timm_name=timm_name)
    assert (c.options["img_size"], c.options["num_heads"], c.options["depth"], c.options["num_classes"]) == (
        32,
        3,
        2,
        10,
    )
    model = _build(c)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), theirs.forward_features(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(model(x), theirs(x), atol=1e-5, rtol=0)


def test_timm_small_avg_pool_hub_directory(tmp_path):
    theirs = _timm("vit_small_patch16_224", global_pool="avg", class_token=False)
    save_file(theirs.state_dict(), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_small_patch16_224", "num_classes": 10}))
    assert vit_family.matches(tmp_path)
    c = vit_family.convert(tmp_path)
    assert c.options["num_heads"] == 6 and c.options["global_pool"] == "avg" and c.source.startswith("vit_small")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(_build(c)(x), theirs(x), atol=1e-5, rtol=0)
    assert c.data == {}  # no pretrained_cfg: the data's normalization
    stats = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}  # a hub directory's pretrained_cfg states it
    (tmp_path / "config.json").write_text(
        json.dumps({"architecture": "vit_small_patch16_224", "pretrained_cfg": stats})
    )
    assert vit_family.convert(tmp_path).data == stats


def test_a_timm_file_named_with_its_tag_normalizes_as_timm_says_it_was_trained(tmp_path, caplog):
    # a DeiT or DINO file was normalized with 0.5: a bare file does not say, but timm keeps every tag's pretrained
    # config (mean and std) offline
    imagenet = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    file = tmp_path / "w.safetensors"
    save_file(_timm().state_dict(), file)
    assert vit_family.convert(file, timm_name="deit_tiny_patch16_224").data == imagenet
    assert vit_family.convert(file, timm_name="vit_tiny_patch16_224.augreg_in21k").data == {
        "mean": [0.5] * 3,
        "std": [0.5] * 3,
    }
    assert vit_family.convert(file).data == {}  # no name: the data's (or the config's) normalization
    small = tmp_path / "small.safetensors"
    save_file(_timm("vit_small_patch16_224").state_dict(), small)
    assert vit_family.convert(small, timm_name="vit_small_patch16_224.dino").data == imagenet
    with caplog.at_level(logging.WARNING, logger="attnzoo"):  # a typo (or a newer tag) was 0.5 without a word
        assert vit_family.convert(small, timm_name="vit_small_patch16_224.dinoo").data == {}
    assert "timm_name 'vit_small_patch16_224.dinoo': Invalid pretrained tag (dinoo)" in caplog.text
    assert "'dino'" in caplog.text and "set data.mean and data.std" in caplog.text


def test_timm_name_gives_the_head_count_of_a_width_outside_the_classic_sizes(tmp_path):
    name = "vit_medium_patch16_gap_256"  # width 512, 8 heads; here with a class token
    theirs = _timm(name, class_token=True, global_pool="token")
    file = tmp_path / "medium.safetensors"
    save_file(theirs.state_dict(), file)
    with pytest.raises(ValueError, match="cannot tell the timm ViT of width 512.*pass its timm_name"):
        vit_family.convert(file)
    c = vit_family.convert(file, timm_name=f"{name}.sw_in12k")
    assert c.options["num_heads"] == 8 and c.source.startswith(f"{name} (timm)")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():  # 8 heads of 64 channels: another head count would give other outputs
        torch.testing.assert_close(_build(c)(x), theirs(x), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="timm_name 'resnet50' is not a supported timm ViT: timm builds it as ResNet"):
        vit_family.convert(file, timm_name="resnet50")


def test_timm_at_another_image_size_resamples_positions(tmp_path):
    theirs = _timm()
    file = tmp_path / "vit.pth"
    torch.save(theirs.state_dict(), file)
    c = vit_family.convert(file)
    model = MODELS["vit"](**{**c.options, "img_size": 64})
    model.load_state_dict(c.state_dict)  # strict: pos_embed resampled on load
    want = resample_abs_pos_embed(theirs.pos_embed, new_size=[4, 4], old_size=[2, 2], num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed, want)
    # into a model of other channels and another head: the patch projection is adapted, the head starts new
    other = MODELS["vit"](**{**c.options, "in_chans": 1, "num_classes": 3})
    assert transfer(other, c.state_dict, source=c.source).new == ["head.weight", "head.bias"]
    torch.testing.assert_close(other.encoder.blocks[1].attn.qkv.weight, theirs.blocks[1].attn.qkv.weight)


def test_timm_names_and_shapes_that_do_not_fit(tmp_path):
    theirs = _timm()
    file = tmp_path / "vit.pth"
    torch.save(theirs.state_dict(), file)
    with pytest.raises(ValueError, match=r"does not hold a vit_small_patch16_224: .*width 192"):
        vit_family.convert(file, timm_name="vit_small_patch16_224")
    with pytest.raises(ValueError, match="not a supported timm ViT"):
        vit_family.convert(file, timm_name="resnet50")
    state = theirs.state_dict()
    state["blocks.1.mlp.fc2.weight"] = torch.zeros(192, 10)
    torch.save(state, file)
    with pytest.raises(ValueError, match=r"vit.pth: tensor 'encoder.blocks.1.mlp.fc2.weight' has shape \[192, 10\]"):
        vit_family.convert(file)
    odd = _randomize(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1, embed_dim=96))
    torch.save(odd.state_dict(), file)
    with pytest.raises(ValueError, match="cannot tell the timm ViT of width 96"):
        vit_family.convert(file)
    file.write_bytes(b"garbage")
    assert not vit_family.matches(file) and not vit_family.matches(tmp_path / "none.pth")


@pytest.mark.parametrize("attention", [{"pattern": {"kind": "sliding_window", "window": 32}}, {"backend": "sdpa"}])
def test_attention_that_starts_equal_reproduces_hf(tmp_path, attention):
    hf = _randomize(transformers.ViTForImageClassification(_hf_config(num_labels=5)))
    hf.save_pretrained(tmp_path)
    c = vit_family.convert(tmp_path)
    model = MODELS["vit"](**{**c.options, "attention": {**c.options["attention"], **attention}})
    model.load_state_dict(c.state_dict)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), hf(x).logits, atol=1e-5, rtol=0)


# --- a timm file through attnzoo.pretrained.load (what the ViT builder's older `pretrained=` argument did) ---------


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
    ours = pretrained.load(path, attention={"backend": backend}).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(image=x), theirs(x), atol=1e-4, rtol=0)


def test_fine_tuning_adapts_size_channels_and_head(timm_checkpoint, caplog):
    theirs, path = timm_checkpoint
    with caplog.at_level("INFO", logger="attnzoo"):
        ours = pretrained.load(path, img_size=64, in_chans=1, num_classes=7)
    assert "pos_embed: resampled from a 14x14 patch grid" in caplog.text
    assert "adapted from 3 to 1 input channels" in caplog.text and "2 new (head.weight, head.bias)" in caplog.text
    assert ours.pos_embed.shape == (1, 1 + 16, 192) and ours(torch.randn(2, 1, 64, 64)).shape == (2, 7)
    torch.testing.assert_close(ours.cls_token, theirs.cls_token)
    torch.testing.assert_close(ours.encoder.blocks[3].attn.qkv.weight, theirs.blocks[3].attn.qkv.weight)
    # the class token's position is kept; patch positions are resampled from the 14x14 grid
    torch.testing.assert_close(ours.pos_embed[:, 0], theirs.pos_embed[:, 0])


def test_a_grey_checkpoint_reads_rgb_images_as_it_read_their_grey(tmp_path):
    # a 1-channel timm file on RGB images: timm's adapt_input_conv left the weight [C, 1, P, P] (it adapts RGB
    # sources only), the log said "adapted from 1 to 3", and the load failed on the shape
    torch.manual_seed(0)
    grey = timm.create_model("vit_tiny_patch16_224", pretrained=False, in_chans=1, img_size=32, num_classes=3).eval()
    torch.save(grey.state_dict(), tmp_path / "grey.pth")
    rgb = pretrained.load(tmp_path / "grey.pth", img_size=32, in_chans=3, num_classes=3).eval()
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(rgb(image=x.expand(-1, 3, -1, -1)), grey(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 7])
def test_rgb_patch_weights_adapt_to_other_channels_as_timm_adapts_them(channels):
    # adapt_channels is ours because timm's grey-to-RGB rule (base_chans) exists only in its newest release: an older
    # timm failed every start whose channels differ with a TypeError; for RGB sources both must give the same weights
    from attnzoo.models.vit import adapt_channels

    rgb = torch.randn(8, 3, 4, 4, dtype=torch.bfloat16)
    ours = adapt_channels(rgb, channels)
    assert ours.dtype == torch.bfloat16 and ours.shape == (8, channels, 4, 4)
    torch.testing.assert_close(ours, timm.models.adapt_input_conv(channels, rgb))


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path):
    other = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2)
    path = tmp_path / "other.pth"
    torch.save(other.state_dict(), path)
    with pytest.raises(ValueError, match=r"^depth=12, but .*other.pth has depth 2: .*leave depth out"):
        pretrained.load(path, depth=12)
    with pytest.raises(ValueError, match="does not exist"):
        pretrained.load(tmp_path / "none.pth")


@pytest.mark.parametrize(
    ("name", "kw", "named"),
    [("deit_tiny_distilled_patch16_224", {}, r"'dist_token': .* a distillation token .*"),
     ("vit_tiny_patch16_224", {"qk_norm": True}, r"'blocks\.0\.attn\.q_norm': .* \(qk_norm\)")],
)  # fmt: skip
def test_a_timm_file_with_tokens_or_norms_attnzoo_lacks_is_refused_naming_them(tmp_path, name, kw, named):
    # DeiT's distillation token was blamed on the position table's shape; qk_norm named an attnzoo-renamed tensor
    model = timm.create_model(name, pretrained=False, depth=1, img_size=32, **kw)
    torch.save(model.state_dict(), tmp_path / "file.pth")
    with pytest.raises(ValueError, match=rf"file\.pth: tensor {named} are not supported"):
        pretrained.load(tmp_path / "file.pth")


@pytest.mark.parametrize("global_pool", ["token", "avg"])
def test_timm_parity_for_both_poolings(global_pool, tmp_path):
    kwargs = dict(img_size=32, patch_size=8, depth=2, global_pool=global_pool)
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, **kwargs).eval()
    path = tmp_path / "small.pth"
    torch.save(theirs.state_dict(), path)
    ours = pretrained.load(path).eval()
    assert ours.global_pool == global_pool
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("name", "kw", "timm_name"),
    [
        ("vit_medium_patch16_gap_256", {}, "vit_medium_patch16_gap_256"),  # the architecture's own pooling: avg of
        ("vit_base_patch16_gap_224", {}, "vit_base_patch16_gap_224"),  # the normed tokens, no fc_norm
        ("vit_tiny_patch16_224", dict(class_token=False, global_pool="avg", fc_norm=False), None),
    ],
)
def test_timm_pooling_with_the_final_norm_or_fc_norm_equals_timm(tmp_path, name, kw, timm_name):
    # a "gap" architecture (avg pooling of the final norm's tokens, no fc_norm) was built as token pooling and
    # refused; a class token with fc_norm was pooled as avg
    theirs = _timm(name, **{"depth": 1, **kw})
    file = tmp_path / "vit.safetensors"
    save_file(theirs.state_dict(), file)
    c = vit_family.convert(file, timm_name=timm_name)
    assert (c.options["global_pool"], c.options["fc_norm"]) == (theirs.global_pool, "fc_norm.weight" in c.state_dict)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(_build(c)(x), theirs(x), atol=1e-5, rtol=0)


def test_a_class_token_with_fc_norm_equals_timm():
    theirs = _timm(fc_norm=True)  # the class token pooled, then normed: no timm architecture's default
    ours = MODELS["vit"](img_size=32, patch_size=16, num_classes=10, depth=2, fc_norm=True)
    ours.load_state_dict(timm_to_attnzoo(theirs.state_dict()))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), theirs(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("timm_name", "kw", "why"),
    [
        ("vit_base_patch16_rpn_224", {}, "its blocks are timm's ResPostBlock"),  # post-norm: the same tensors
        ("vit_base_patch32_siglip_gap_256", {}, r"its MLP activation is GELUTanh\(\)"),
        ("vit_base_patch16_clip_quickgelu_224", {"pre_norm": False}, r"its MLP activation is QuickGELU\(\)"),
    ],
)
def test_a_timm_architecture_the_tensors_cannot_tell_apart_is_refused_by_name(tmp_path, timm_name, kw, why):
    theirs = _timm(timm_name, depth=1, **kw)
    file = tmp_path / "vit.safetensors"
    save_file(theirs.state_dict(), file)
    with pytest.raises(ValueError, match=f"timm_name '{timm_name}' is not a supported timm ViT: {why}"):
        vit_family.convert(file, timm_name=timm_name)


@pytest.mark.parametrize(
    "kw",
    [
        {"num_heads": 12},
        {"global_pool": "avg", "fc_norm": False},
        {"class_token": False, "global_pool": "avg"},
        {"act_layer": "gelu"},  # timm's own GELU class (exact), not torch's
    ],
    ids=["heads", "avg-no-fc-norm", "no-class-token", "timm-gelu"],
)
def test_a_timm_hub_folder_is_built_with_the_model_args_its_config_json_records(tmp_path, kw):
    """timm's save_for_hf records the keywords a model was built with (model_args), which timm's own loader builds
    with; read without them, the registry's defaults (6 heads, token pooling) gave other outputs."""
    from timm.models import save_for_hf

    theirs = _timm("vit_small_patch16_224", **kw)
    save_for_hf(theirs, tmp_path, safe_serialization=True)
    assert json.loads((tmp_path / "config.json").read_text())["model_args"]  # as timm writes it
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(pretrained.load(tmp_path).eval()(x), theirs(x), atol=1e-5, rtol=0)


def test_a_timm_hub_folder_whose_model_args_attnzoo_cannot_compute_or_timm_would_not_take_is_refused(tmp_path):
    from timm.models import save_for_hf

    save_for_hf(_timm("vit_small_patch16_224", act_layer="gelu_tanh"), tmp_path, safe_serialization=True)
    with pytest.raises(ValueError, match=r"model_args .*'act_layer': 'gelu_tanh'.* is not a supported timm ViT: its "):
        vit_family.convert(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_args"] = {"depth": 2, "checkpoint_path": "/elsewhere/evil.pth"}  # create_model's, not the model's
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json': model_args \['checkpoint_path'\] are not taken"):
        vit_family.convert(tmp_path)
    config["model_args"] = {"depth": 2, "device": "cpu"}  # built on the meta device, whatever the folder says
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"model_args \['device'\] are not taken"):
        vit_family.convert(tmp_path)
    config["model_args"] = {"norm_layer": "rmsnorm"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"its norms are RmsNorm"):
        vit_family.convert(tmp_path)
