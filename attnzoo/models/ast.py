"""Audio Spectrogram Transformer (AST, Gong et al. 2021) with attention from config.

Notation: B batch, T samples, F mel bins, N frames, Fp / Tp patches along frequency / time, P = Tp * Fp patches,
D width. Every patch grid here (`patch_grid`, `grid_size_for`, `train_grid_size`, the attention parts'
`grid_size`) is (Tp, Fp): rows are time steps, columns frequency patches, the order of the tokens.

The model takes waveforms: log-mel features (`attnzoo.layers.audio_features.LogMel`), normalization with the
train-set statistics (buffers, so checkpoints carry them), SpecAugment in training, overlapping 16x16 patches
with separate frequency and time strides, cls + distillation tokens whose outputs are averaged for the head.
Patch tokens are ordered time-major (all frequency patches of time step 0, then of time step 1, ...), so a 1D
sliding window over tokens is a window over time, and a longer clip only appends rows to the patch grid.
Position embeddings are learned for `target_frames` and interpolated along time for clips of other lengths, and
when loading a checkpoint trained on clips of another length.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import torch
from timm.layers import resample_abs_pos_embed, trunc_normal_
from timm.models.vision_transformer import init_weights_vit_timm
from torch import nn

from ..attention.factory import layer_shape
from ..attention.patterns import Pattern
from ..layers.audio_features import ClipTooShort, LogMel, SpecAugment
from ..layers.encoder import make_encoder
from ..util.checks import at_least

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor


def patch_grid(n_mels: int, frames: int, patch_size: int = 16, fstride: int = 10, tstride: int = 10) -> tuple[int, int]:
    """(Tp, Fp): patches along time and frequency (the AST paper's t_dim and f_dim), rows of the grid being time."""
    if n_mels < patch_size or frames < patch_size:
        raise ValueError(f"features of {n_mels} mel bins x {frames} frames are smaller than a {patch_size} patch")
    return (frames - patch_size) // tstride + 1, (n_mels - patch_size) // fstride + 1


class TimeWindow(Pattern):
    """Sliding window over time for AST tokens: a patch reads patches at most `steps` time steps away (any
    frequency); prefix tokens (cls, distillation) read and are read by every token.

    Use it from config by import path: `pattern: {kind: attnzoo.models.ast.TimeWindow, steps: 2}`; the model
    supplies `grid_size` and `num_prefix_tokens`. It holds for any clip length (only the time rows change).
    """

    def __init__(self, *, steps: int, grid_size: tuple[int, int], num_prefix_tokens: int = 0) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
        self.steps, self.freq_patches, self.num_prefix_tokens = steps, int(grid_size[1]), num_prefix_tokens

    def mask_mod(self, b, h, q_idx, kv_idx):
        p = self.num_prefix_tokens
        tq = (q_idx - p).div(self.freq_patches, rounding_mode="floor")  # time step of each token (time-major)
        tk = (kv_idx - p).div(self.freq_patches, rounding_mode="floor")
        return ((tq - tk).abs() <= self.steps) | (q_idx < p) | (kv_idx < p)


FEATURE_NORMS = ("dataset", "clip", "level")


class AST(nn.Module):
    """Waveforms [B, T] -> logits [B, num_classes].

    Args:
        num_classes: output classes (or labels, for multi-label tasks).
        sample_rate, n_mels, win_ms, hop_ms, features: log-mel settings (`LogMel`); a DataModule supplies them.
        target_frames: frames of the training clips; sizes the position table (interpolated for other lengths).
        feature_mean, feature_std: normalization statistics of the train split's log-mel features.
        feature_norm: "dataset" (subtract the train split's mean, as the AST paper), "level" (subtract each clip's
            own mean over every bin and frame: its loudness goes away, the shape of its spectrum stays) or "clip"
            (subtract each clip's own mean of every mel bin over time, cepstral mean normalization: a microphone's
            colour goes away too, and with it a steady sound's whole spectrum: hum, engines and rain become alike);
            each then divides by the train split's std. A clip's means leave out its frames of digital silence (the
            zeros a short clip is padded with), so its length does not move its level.
        patch_size: square patch side in bins/frames.
        fstride, tstride: patch strides along frequency and time (< patch_size: overlapping patches).
        embed_dim, depth, num_heads, mlp_ratio: transformer size.
        attention: the attention config (`attnzoo.attention.factory.attention_builder`); attention parts receive
            `grid_size=(Tp, Fp)` (rows are time steps), `num_prefix_tokens` and `seq_len` (tokens per clip).
        dist_token: add the distillation token (its output is averaged with the cls token's).
        global_pool: "token" (the mean of the cls and distillation outputs, as the AST paper) or "avg" (the mean of
            the patch tokens, with a norm after pooling, as timm's ViT).
        spec_augment: `SpecAugment` options ({freq_mask, time_mask, num_masks}), or None for none.
        drop_rate: dropout on the embeddings and before the head.
        drop_path_rate: stochastic depth of the last block.
        norm_eps: epsilon of every LayerNorm (Hugging Face's AST: 1e-12).
        head_norm: a LayerNorm on the pooled tokens before the head also with `global_pool="token"` (Hugging Face's
            `ASTForAudioClassification` has one); "avg" always has it.
    """

    def __init__(
        self,
        *,
        num_classes: int,
        sample_rate: int = 16000,
        n_mels: int = 128,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        features: str = "fbank",
        target_frames: int = 1024,
        feature_mean: float = 0.0,
        feature_std: float = 1.0,
        feature_norm: str = "dataset",
        patch_size: int = 16,
        fstride: int = 10,
        tstride: int = 10,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        attention: dict[str, Any] | None = None,
        dist_token: bool = True,
        global_pool: str = "token",
        spec_augment: dict[str, Any] | None = None,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_eps: float = 1e-5,
        head_norm: bool = False,
    ) -> None:
        super().__init__()
        if not norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {norm_eps!r}")
        at_least("num_classes", num_classes, 1)
        if not (0 < fstride <= patch_size and 0 < tstride <= patch_size):
            raise ValueError(f"fstride ({fstride}) and tstride ({tstride}) must be in [1, patch_size={patch_size}]")
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
        if feature_norm not in FEATURE_NORMS:
            raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")
        if feature_std <= 0:
            raise ValueError(f"feature_std ({feature_std}) must be > 0")
        self.logmel = LogMel(sample_rate=sample_rate, n_mels=n_mels, win_ms=win_ms, hop_ms=hop_ms, kind=features)
        if n_mels < patch_size or target_frames < patch_size:  # what patch_grid refuses, said in the options' terms
            need = (self.logmel.win + (patch_size - 1) * self.logmel.hop) / sample_rate
            short = [f"{n_mels} mel bins (n_mels; at least {patch_size}: data.n_mels)"] if n_mels < patch_size else []
            if target_frames < patch_size:
                short.append(f"{target_frames} frames (target_frames; at least {patch_size}: clips of {need:.3g} s or "
                             "more, data.clip_seconds)")  # fmt: skip
            raise ValueError(
                f"patch_size ({patch_size}) is larger than the log-mel spectrogram: {' and '.join(short)}; or a "
                "smaller model.patch_size"
            )
        self.register_buffer("feature_mean", torch.tensor(float(feature_mean)))
        self.register_buffer("feature_std", torch.tensor(float(feature_std)))
        self.feature_norm = feature_norm
        self.spec_augment = SpecAugment(**spec_augment) if spec_augment else None
        self.patch_size, self.fstride, self.tstride, self.target_frames = patch_size, fstride, tstride, target_frames
        self.train_grid_size = patch_grid(n_mels, target_frames, patch_size, fstride, tstride)  # (Tp, Fp)
        self.num_prefix_tokens = 2 if dist_token else 1
        self.patch_embed = nn.Conv2d(1, embed_dim, kernel_size=patch_size, stride=(fstride, tstride))
        self.prefix = nn.Parameter(torch.zeros(1, self.num_prefix_tokens, embed_dim))  # cls (, dist)
        # seq_len: tokens per training clip
        shape = layer_shape(grid_size=self.train_grid_size, num_prefix_tokens=self.num_prefix_tokens)
        self.pos_embed = nn.Parameter(torch.zeros(1, shape["seq_len"], embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)
        self.encoder = make_encoder(
            dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            attention=attention,
            drop_path_rate=drop_path_rate,
            final_norm=global_pool == "token",
            norm_layer=partial(nn.LayerNorm, eps=norm_eps),
            layer_shape=shape,
        )
        self.global_pool = global_pool
        self.fc_norm = nn.LayerNorm(embed_dim, eps=norm_eps) if global_pool == "avg" or head_norm else nn.Identity()
        self._grid_now = self.train_grid_size  # (Tp, Fp) the encoder's grid-aware parts are set for
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes)
        trunc_normal_(self.pos_embed, std=0.02)
        trunc_normal_(self.prefix, std=0.02)
        self.apply(init_weights_vit_timm)
        # frequency patches of the next checkpoint loaded, when its features had another number of mel bins
        # (`expect_checkpoint`); None: as many as this model's
        self.loaded_freq_patches: int | None = None
        self._register_load_state_dict_pre_hook(self._resample_loaded_pos_embed)

    def expect_checkpoint(self, options: dict[str, Any] | None) -> None:
        """Before loading a converted checkpoint (`attnzoo.pretrained.transfer`): its model options say how many mel
        bins its features had, so a position grid of another frequency size is resampled along both axes."""
        options = options or {}
        n_mels, patch = options.get("n_mels"), options.get("patch_size", self.patch_size)
        self.loaded_freq_patches = None
        if isinstance(n_mels, int) and isinstance(patch, int) and n_mels >= patch:
            self.loaded_freq_patches = patch_grid(n_mels, patch, patch, options.get("fstride", self.fstride))[1]

    def _resample_loaded_pos_embed(self, state_dict: dict[str, Tensor], prefix: str, *args: Any) -> None:
        key, (tp, fp), p = prefix + "pos_embed", self.train_grid_size, self.num_prefix_tokens
        old, old_fp = state_dict.get(key), self.loaded_freq_patches or fp
        if (
            old is None
            or old.dim() != 3
            or (old.shape == self.pos_embed.shape and old_fp == fp)  # the same grid (a swapped one has the same size)
            or old.shape[2] != self.pos_embed.shape[2]
        ):
            return
        if (old.shape[1] - p) % old_fp:
            return  # not this many frequency patches: load_state_dict reports the size mismatch
        old_tp = (old.shape[1] - p) // old_fp
        state_dict[key] = resample_abs_pos_embed(old, new_size=[tp, fp], old_size=[old_tp, old_fp], num_prefix_tokens=p)
        log.info("%s: resampled from %d x %d to %d x %d (time x frequency patches: target_frames, n_mels)", key,
                 old_tp, old_fp, tp, fp)  # fmt: skip

    def grid_size_for(self, num_samples: int) -> tuple[int, int]:
        """(Tp, Fp): the patch grid of a clip of `num_samples` samples (the tokens after the prefix, time-major)."""
        return patch_grid(
            self.logmel.n_mels, self.logmel.num_frames(num_samples), self.patch_size, self.fstride, self.tstride
        )

    def num_patches(self, num_samples: int) -> int:
        """Patch tokens P for a clip of `num_samples` samples."""
        tp, fp = self.grid_size_for(num_samples)
        return tp * fp

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Parameters timm's optimizer factory keeps out of weight decay."""
        return {"pos_embed", "prefix"}

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        self.encoder.set_grad_checkpointing(enabled, **kwargs)

    def features(self, audio: Tensor) -> Tensor:
        """Normalized (and, in training, SpecAugmented) log-mel features [B, F, N]."""
        feats = self.logmel(audio)  # [B, F, N]
        if self.feature_norm in ("clip", "level"):
            # the clip's own frames: the zeros a short clip is padded with would pull its level down by its length
            sound = (~self.logmel.silent_frames(feats)).to(feats.dtype)[:, None]  # [B, 1, N]
            sound = torch.where(sound.sum(2, keepdim=True) > 0, sound, torch.ones_like(sound))  # silence alone: all
            center = (feats * sound).sum(2, keepdim=True) / sound.sum(2, keepdim=True)  # [B, F, 1]
            if self.feature_norm == "level":
                center = center.mean(1, keepdim=True)  # [B, 1, 1]
        else:
            center = self.feature_mean  # []
        feats = (feats - center) / self.feature_std
        return self.spec_augment(feats) if self.spec_augment is not None else feats

    def tokens(self, feats: Tensor) -> Tensor:
        """Features [B, F, N] -> tokens [B, prefix + P, D] with position embeddings."""
        if feats.shape[2] < self.patch_size:
            raise ClipTooShort(
                f"a clip of {feats.shape[2]} frames is shorter than one {self.patch_size}-frame patch "
                f"({self.patch_size * self.logmel.hop_ms:.0f} ms at hop {self.logmel.hop_ms} ms)"
            )
        # the features are fp32 (`features`); the weights may be bf16/fp16/fp64 (trainer.precision "-true")
        x = self.patch_embed(feats[:, None].to(self.patch_embed.weight.dtype))  # [B, D, Fp, Tp]
        fp, tp = x.shape[2], x.shape[3]
        x = x.permute(0, 3, 2, 1).flatten(1, 2)  # [B, Tp * Fp, D], time-major
        grid = (tp, fp)
        pos = self.pos_embed
        if grid != self._grid_now:  # grid-aware attention parts (2D relative bias) follow the clip length
            for module in self.encoder.modules():
                if hasattr(module, "set_grid_size"):
                    module.set_grid_size(grid)
            self._grid_now = grid
        if grid != self.train_grid_size:
            pos = resample_abs_pos_embed(
                pos, new_size=list(grid), old_size=list(self.train_grid_size), num_prefix_tokens=self.num_prefix_tokens
            )  # [1, prefix + Tp * Fp, D]
        x = torch.cat([self.prefix.expand(x.shape[0], -1, -1), x], dim=1)  # [B, prefix + P, D]
        return self.pos_drop(x + pos)

    def forward(self, audio: Tensor) -> Tensor:
        """audio [B, T] waveforms at `sample_rate` -> logits [B, num_classes]."""
        return self.from_features(self.features(audio))

    def from_features(self, feats: Tensor) -> Tensor:
        """Normalized log-mel features [B, F, N] (`features`) -> logits [B, num_classes]."""
        x = self.encoder(self.tokens(feats))  # [B, prefix + P, D]
        if self.global_pool == "token":
            pooled = x[:, : self.num_prefix_tokens].mean(1)  # [B, D]: mean of cls and distillation outputs
        else:
            pooled = x[:, self.num_prefix_tokens :].mean(1)  # [B, D]: mean of the patch tokens
        return self.head(self.head_drop(self.fc_norm(pooled)))
