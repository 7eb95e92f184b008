"""Hugging Face ASTForAudioClassification -> attnzoo AST: a small random model saved to disk converts exactly (logits
and hidden states within 1e-5 in fp32 on the same features), and waveforms through attnzoo's own features give the
logits of Hugging Face's feature extractor + model."""

import json

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from attnzoo.models import MODELS
from attnzoo.pretrained import hf_ast

MELS, FRAMES = 32, 64  # patch grid: 2 frequency x 5 time patches (16x16 patches, strides 10)


def _ast(tmp_path, **kw):
    base = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=96)
    config = transformers.ASTConfig(
        **base, num_mel_bins=MELS, max_length=FRAMES, num_labels=5, **kw, attn_implementation="eager"
    )
    torch.manual_seed(0)
    hf = transformers.ASTForAudioClassification(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():  # far from the initialization, LayerNorms too: every tensor is checked
            p.normal_(1.0 if p.dim() == 1 and "layernorm" in name and name.endswith("weight") else 0.0, 0.3)
    hf.save_pretrained(tmp_path)
    return hf


def _converted(path):
    c = hf_ast.convert(path)
    model = MODELS[c.model_kind](**c.options)
    model.load_state_dict(c.state_dict)  # strict
    return c, model.eval()


@pytest.mark.parametrize(("qkv_bias", "names"), [(True, "on disk"), (False, "on disk"), (True, "in memory")])
def test_same_features_give_hf_logits_and_hidden_states(tmp_path, qkv_bias, names):
    hf = _ast(tmp_path, qkv_bias=qkv_bias)
    if names == "in memory":  # transformers 5's own module names (layers.N.attention.q_proj, ...), not the hub's
        assert any(".layers.0.attention.q_proj." in k for k in hf.state_dict())
        save_file(hf.state_dict(), tmp_path / "model.safetensors")
    assert hf_ast.matches(tmp_path)
    c, model = _converted(tmp_path)
    assert c.model_kind == "ast" and c.options["num_classes"] == 5 and c.options["norm_eps"] == 1e-12
    x = torch.randn(2, FRAMES, MELS)  # Hugging Face input_values [B, frames, mel bins]
    with torch.no_grad():
        want = hf(x).logits
        want_hidden = hf.audio_spectrogram_transformer(x).last_hidden_state  # [B, 2 + Fp * Tp, C], frequency-major
        feats = x.transpose(1, 2)  # [B, F, N]
        got = model.from_features(feats)
        got_hidden = model.encoder(model.tokens(feats))  # time-major, after the final norm
    assert want.abs().max() > 1.0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    grid = want_hidden[:, 2:].reshape(2, 2, 5, 48).transpose(1, 2).reshape(2, 10, 48)  # to time-major
    torch.testing.assert_close(got_hidden, torch.cat([want_hidden[:, :2], grid], 1), atol=1e-5, rtol=0)


def test_waveforms_give_hf_extractor_and_model_logits(tmp_path):
    hf = _ast(tmp_path)
    extractor = transformers.ASTFeatureExtractor(num_mel_bins=MELS, max_length=FRAMES, mean=-3.0, std=4.0)
    extractor.save_pretrained(tmp_path)
    c, model = _converted(tmp_path)
    wave = np.random.default_rng(0).normal(0.0, 0.1, 400 + (FRAMES - 1) * 160).astype(np.float32)  # FRAMES frames
    with torch.no_grad():
        inputs = extractor(wave, sampling_rate=16000, return_tensors="pt").input_values
        want = hf(inputs).logits
        got = model(torch.from_numpy(wave)[None])
        feats = model.features(torch.from_numpy(wave)[None])
    # the features differ only by float32 rounding of log(32768^2 * energy) vs log(energy) + 2 ln 32768
    torch.testing.assert_close(feats, inputs.transpose(1, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_wrong_checkpoints_name_file_and_tensor(tmp_path):
    _ast(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_length": 80}))
    with pytest.raises(ValueError, match=r"model.safetensors: tensor '.*position_embeddings' has shape \[1, 12, 48\]"):
        hf_ast.convert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match="hidden_act='relu' is not supported"):
        hf_ast.convert(tmp_path)
    # a stride above the patch: "fstride (10) and tstride (10) must be in [1, patch_size=8]", no file or key named
    (tmp_path / "config.json").write_text(json.dumps({**config, "patch_size": 8}))
    with pytest.raises(ValueError, match=r"config\.json'\: frequency_stride=10 is not supported \(a patch stride is in "
                       r"\[1, patch_size=8\]\)"):  # fmt: skip
        hf_ast.convert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "vit"}))
    assert not hf_ast.matches(tmp_path)


def test_other_clip_length_resamples_positions_along_time(tmp_path, caplog):
    from timm.layers import resample_abs_pos_embed

    _ast(tmp_path)
    c = hf_ast.convert(tmp_path)
    model = MODELS["ast"](**{**c.options, "target_frames": 104})  # 9 time patches instead of 5
    with caplog.at_level("INFO", logger="attnzoo"):
        model.load_state_dict(c.state_dict)
    assert "from 5 x 2 to 9 x 2 (time x frequency patches" in caplog.text
    want = resample_abs_pos_embed(c.state_dict["pos_embed"], new_size=[9, 2], old_size=[5, 2], num_prefix_tokens=2)
    torch.testing.assert_close(model.pos_embed, want)
    assert model.eval()(torch.randn(1, 400 + 103 * 160)).shape == (1, 5)


@pytest.mark.parametrize(
    ("options", "grid"),
    [
        ({"n_mels": 64, "target_frames": 104}, (9, 5)),  # before: the 5 x 2 table was read as 2 x 5, silently
        ({"n_mels": 56, "target_frames": 26}, (2, 5)),  # as many positions, the axes swapped: before, loaded as is
        ({"fstride": 5}, (5, 4)),  # the checkpoint's grid comes from its own stride (10), not the model's
    ],
    ids=["64-mels", "swapped", "fstride"],
)
def test_another_grid_resamples_positions_along_both_axes(options, grid, tmp_path, caplog):
    """The checkpoint's features: 32 mel bins x 64 frames, 5 time x 2 frequency patches at strides 10."""
    from timm.layers import resample_abs_pos_embed

    from attnzoo.pretrained import load

    _ast(tmp_path)
    c = hf_ast.convert(tmp_path)
    with caplog.at_level("INFO", logger="attnzoo"):
        model = load(tmp_path, **options)
    assert f"from 5 x 2 to {grid[0]} x {grid[1]} (time x frequency patches" in caplog.text
    want = resample_abs_pos_embed(c.state_dict["pos_embed"], new_size=list(grid), old_size=[5, 2], num_prefix_tokens=2)
    torch.testing.assert_close(model.pos_embed, want)
    assert model.loaded_freq_patches is None  # a later load (a resume) reads the model's own grid
    assert model.eval()(torch.randn(1, 400 + 103 * 160)).shape == (1, 5)
    model.load_state_dict(model.state_dict())  # its own grid: loaded as it is
    torch.testing.assert_close(model.pos_embed, want)
