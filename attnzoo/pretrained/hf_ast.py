"""Hugging Face `ASTForAudioClassification` directories -> attnzoo's `AST` (model kind "ast").

Hugging Face's AST reads features its feature extractor made (`ASTFeatureExtractor`: Kaldi fbank of the raw
waveform, padded or cut to `max_length` frames, then (x - mean) / (2 std)); attnzoo's AST reads waveforms and makes
the same Kaldi fbank itself, of the waveform scaled to the int16 range (the AST recipe's convention). That scaling
adds 2 ln(32768) to every log-mel value, so the extractor's normalization becomes `feature_mean = mean +
2 ln(32768)`, `feature_std = 2 std` (from the directory's preprocessor_config.json, else the extractor's AudioSet
defaults). A clip of exactly `max_length` frames then gives the original's logits; attnzoo resamples positions for
clips of other lengths instead of padding them.

Hugging Face orders patch tokens frequency-major, attnzoo time-major: the position table is reordered to match.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from .converted import Converted, read_hf_config, read_preprocessor_config, read_weights
from .family import check_consumed, check_fits, config_value, hf_model_type, hf_vit_blocks, refuse, take, weights_name

Tensor = torch.Tensor
READS = "a Hugging Face audio-spectrogram-transformer folder"
MODEL_KIND = "ast"
MODEL_TYPE = "audio-spectrogram-transformer"
KALDI_SCALE_SHIFT = 2 * math.log(32768.0)  # log-mel of a waveform scaled by 32768 (power: squared)
# ASTFeatureExtractor's defaults (AudioSet statistics), when a directory has no preprocessor_config.json
EXTRACTOR_DEFAULTS = {"mean": -4.2677393, "std": 4.5689974, "do_normalize": True, "sampling_rate": 16000}


def matches(path: str | Path) -> bool:
    """A Hugging Face directory whose config.json says model_type "audio-spectrogram-transformer"."""
    return Path(path).is_dir() and hf_model_type(path) == MODEL_TYPE


def _extractor(path: Path) -> dict[str, Any]:
    config = read_preprocessor_config(path) or {}
    return {k: config.get(k, v) for k, v in EXTRACTOR_DEFAULTS.items()}


def options_from_config(config: dict, extractor: dict[str, Any], path: Path) -> dict[str, Any]:
    """`AST` options reproducing an AST config.json and its feature extractor's normalization."""
    act = config_value(config, "hidden_act", "gelu")
    if act != "gelu":
        raise refuse(path, "hidden_act", act, "attnzoo's AST MLP uses GELU ('gelu')")
    dim, inner = config_value(config, "hidden_size", 768), config_value(config, "intermediate_size", 3072)
    if int(dim * (inner / dim)) != inner:
        raise refuse(path, "intermediate_size", inner, f"not reachable as int(hidden_size * mlp_ratio), {dim}")
    patch = config_value(config, "patch_size", 16)
    for key in ("frequency_stride", "time_stride"):
        stride = config_value(config, key, 10)
        if not 1 <= stride <= patch:  # the model's own check named fstride/tstride, not the file or the key
            raise refuse(path, key, stride, f"a patch stride is in [1, patch_size={patch}]")
    normalize = bool(extractor["do_normalize"])
    hidden_drop = config_value(config, "hidden_dropout_prob", 0.0)
    return dict(
        sample_rate=int(extractor["sampling_rate"]),
        n_mels=config_value(config, "num_mel_bins", 128),
        target_frames=config_value(config, "max_length", 1024),
        feature_mean=float(extractor["mean"]) + KALDI_SCALE_SHIFT if normalize else KALDI_SCALE_SHIFT,
        feature_std=2.0 * float(extractor["std"]) if normalize else 1.0,
        feature_norm="dataset",  # the extractor's one mean and std for every clip (a fit would choose per clip)
        patch_size=patch,
        fstride=config_value(config, "frequency_stride", 10),
        tstride=config_value(config, "time_stride", 10),
        embed_dim=dim,
        depth=config_value(config, "num_hidden_layers", 12),
        num_heads=config_value(config, "num_attention_heads", 12),
        mlp_ratio=inner / dim,
        attention={
            "qkv_bias": bool(config_value(config, "qkv_bias", True)),
            "attn_drop": config_value(config, "attention_probs_dropout_prob", 0.0),
            "proj_drop": hidden_drop,
        },
        dist_token=True,
        global_pool="token",
        drop_rate=hidden_drop,
        norm_eps=float(config_value(config, "layer_norm_eps", 1e-12)),
        head_norm=True,
    )


def convert(path: str | Path) -> Converted:
    """An `ASTForAudioClassification` directory -> `Converted` for `AST`; ValueError naming the file and the first
    tensor that does not fit config.json."""
    path = Path(path)
    config = read_hf_config(path)
    if config.get("model_type") != MODEL_TYPE:
        raise refuse(path, "model_type", config.get("model_type"), f"this converter reads {MODEL_TYPE!r}")
    options = options_from_config(config, _extractor(path), path)
    state, file = dict(read_weights(path)), weights_name(path)
    if "classifier.dense.weight" not in state:
        raise ValueError(f"{file}: no 'classifier.dense.weight': attnzoo's AST converts ASTForAudioClassification")
    options["num_classes"] = int(state["classifier.dense.weight"].shape[0])
    c, depth, bias = options["embed_dim"], options["depth"], options["attention"]["qkv_bias"]
    inner, patch = int(c * options["mlp_ratio"]), options["patch_size"]
    fp = (options["n_mels"] - patch) // options["fstride"] + 1
    tp = (options["target_frames"] - patch) // options["tstride"] + 1
    pre = ("audio_spectrogram_transformer.",)
    emb = "embeddings."
    pos = take(state, emb + "position_embeddings", (1, 2 + fp * tp, c), file, pre)
    grid = pos[:, 2:].reshape(1, fp, tp, c).transpose(1, 2).reshape(1, tp * fp, c)  # frequency- to time-major
    out = {
        "feature_mean": torch.tensor(options["feature_mean"]),
        "feature_std": torch.tensor(options["feature_std"]),
        "patch_embed.weight": take(state, emb + "patch_embeddings.projection.weight", (c, 1, patch, patch), file, pre),
        "patch_embed.bias": take(state, emb + "patch_embeddings.projection.bias", (c,), file, pre),
        "prefix": torch.cat(
            [take(state, emb + name, (1, 1, c), file, pre) for name in ("cls_token", "distillation_token")], dim=1
        ),
        "pos_embed": torch.cat([pos[:, :2], grid], dim=1),  # [1, 2 + Tp * Fp, C]
    }
    out |= hf_vit_blocks(state, depth=depth, dim=c, inner=inner, qkv_bias=bias, file=file, prefixes=pre)
    for p in ("weight", "bias"):
        out[f"encoder.norm.{p}"] = take(state, f"layernorm.{p}", (c,), file, pre)
        out[f"fc_norm.{p}"] = take(state, f"classifier.layernorm.{p}", (c,), file)
    n = options["num_classes"]
    out["head.weight"] = take(state, "classifier.dense.weight", (n, c), file)
    out["head.bias"] = take(state, "classifier.dense.bias", (n,), file)
    check_consumed(state, file)
    check_fits(MODEL_KIND, options, out, file)
    return Converted(MODEL_KIND, options, out, None, f"ast (Hugging Face) {path}")
