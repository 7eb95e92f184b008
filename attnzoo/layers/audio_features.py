"""Log-mel features and SpecAugment for waveforms, batched, on the waveform's device (no Lightning here).

Notation: B batch, T samples, F mel bins, N frames.
The AST model computes these in its forward pass; `AudioDataModule` uses the same module for the
normalization statistics of its train split, so both always agree on the features.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torchaudio
from torch import nn
from torch.nn import functional as F

Tensor = torch.Tensor

FEATURE_KINDS = ("fbank", "melspec")
MELSPEC_FLOOR = 1e-6  # added to mel energies before the log ("fbank": Kaldi's floor, float32's eps)


class ClipTooShort(ValueError):
    """A clip too short for the features or patches: the input's fault, not the model's (commands name the file)."""


class LogMel(nn.Module):
    """Waveforms [B, T] -> log-mel features [B, F, N].

    Args:
        sample_rate: the waveforms' rate in Hz.
        n_mels: mel bins F.
        win_ms: analysis window length.
        hop_ms: frame shift.
        kind: "fbank" (Kaldi-compatible filterbank, `torchaudio.compliance.kaldi.fbank`, as the AST paper) or
            "melspec" (`torchaudio.transforms.MelSpectrogram` with log, no Kaldi pre-emphasis / DC removal).
    """

    def __init__(
        self,
        *,
        sample_rate: int = 16000,
        n_mels: int = 128,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        kind: str = "fbank",
    ) -> None:
        super().__init__()
        if kind not in FEATURE_KINDS:
            raise ValueError(f"features kind {kind!r} is not one of {list(FEATURE_KINDS)}")
        if sample_rate <= 0 or n_mels <= 0 or win_ms <= 0 or hop_ms <= 0:
            raise ValueError(
                f"sample_rate ({sample_rate}), n_mels ({n_mels}), win_ms ({win_ms}) and hop_ms ({hop_ms}) must be > 0"
            )
        self.sample_rate, self.n_mels, self.win_ms, self.hop_ms, self.kind = sample_rate, n_mels, win_ms, hop_ms, kind
        self.win = int(sample_rate * win_ms / 1000)  # samples, as Kaldi rounds them
        self.hop = int(sample_rate * hop_ms / 1000)
        if self.win < 2 or self.hop < 1:
            raise ValueError(f"win_ms ({win_ms}) and hop_ms ({hop_ms}) are too short at {sample_rate} Hz")
        self.melspec = None
        if kind == "melspec":
            self.melspec = torchaudio.transforms.MelSpectrogram(
                sample_rate=sample_rate,
                n_fft=self.win,
                win_length=self.win,
                hop_length=self.hop,
                n_mels=n_mels,
                center=False,
                mel_scale="htk",
            )

    def config(self) -> dict[str, Any]:
        """The constructor's arguments (saved with a run, accepted back by `LogMel(**config)`)."""
        return {
            "sample_rate": self.sample_rate,
            "n_mels": self.n_mels,
            "win_ms": self.win_ms,
            "hop_ms": self.hop_ms,
            "kind": self.kind,
        }

    def empty_bins(self, n_mels: int | None = None) -> int:
        """How many of `n_mels` (default: this module's) mel filters get no FFT bin at this rate and window: their
        features are a constant, which no model learns from (too many bins for a low rate or a short window)."""
        n_mels = self.n_mels if n_mels is None else n_mels
        if self.kind == "fbank":  # Kaldi's: the window padded to a power of two, filters from 20 Hz to Nyquist
            padded = 1 << (self.win - 1).bit_length()
            banks, _ = torchaudio.compliance.kaldi.get_mel_banks(
                n_mels, padded, float(self.sample_rate), 20.0, 0.0, 100.0, -500.0, 1.0
            )  # [n_mels, padded / 2]
            return int((banks.abs().sum(1) == 0).sum())
        banks = torchaudio.functional.melscale_fbanks(
            self.win // 2 + 1, 0.0, self.sample_rate / 2, n_mels, self.sample_rate, mel_scale="htk"
        )  # [freqs, n_mels]
        return int((banks.abs().sum(0) == 0).sum())

    def num_frames(self, num_samples: int) -> int:
        """Frames N for a clip of `num_samples` samples (frames never run past the clip's end)."""
        return max(0, 1 + (num_samples - self.win) // self.hop)

    def silent_frames(self, feats: Tensor) -> Tensor:
        """Frames [B, N] of features [B, F, N] whose every bin is at the log floor: digital silence, as the zeros a
        clip shorter than the model's length is padded with give."""
        floor = math.log(MELSPEC_FLOOR if self.kind == "melspec" else torch.finfo(torch.float32).eps)
        return (feats <= floor + 1e-3).all(dim=1)

    def forward(self, wave: Tensor) -> Tensor:
        if wave.dim() != 2:
            raise ValueError(f"LogMel expects waveforms [B, T], got shape {tuple(wave.shape)}")
        if wave.shape[1] < self.win:
            raise ClipTooShort(f"clips of {wave.shape[1]} samples are shorter than one {self.win}-sample window")
        # features in fp32 whatever the trainer's precision: FFTs and logs of small energies need it
        with torch.autocast(device_type=wave.device.type, enabled=False):
            wave = wave.float()
            if self.melspec is not None:
                return (self.melspec(wave) + MELSPEC_FLOOR).log()  # [B, F, N]
            feats = torch.func.vmap(self._fbank)(wave)  # [B, N, F]
            return feats.transpose(1, 2)  # [B, F, N]

    def _fbank(self, wave: Tensor) -> Tensor:
        return torchaudio.compliance.kaldi.fbank(
            wave[None] * 32768.0,  # Kaldi's scale (int16 range), as the AST recipe
            sample_frequency=self.sample_rate,
            num_mel_bins=self.n_mels,
            frame_length=self.win_ms,
            frame_shift=self.hop_ms,
            htk_compat=True,
            use_energy=False,
            window_type="hanning",
            dither=0.0,
        )

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config().items())


class SpecAugment(nn.Module):
    """Frequency and time masking (`torchaudio.transforms.FrequencyMasking` / `TimeMasking`), in training only,
    after an optional random stretch of both axes.

    Each clip gets its own masks. Masked values are 0, which after normalization is the train-set mean.

    Args:
        freq_mask: largest frequency mask width in bins (0 = none).
        time_mask: largest time mask width in frames (0 = none).
        num_masks: masks of each kind per clip.
        stretch: each clip's frequency axis (from 0 Hz up) and time axis (about the clip's middle) are scaled by
            their own random factors in [1 - stretch, 1 + stretch] (0 = none): formants and word lengths move as
            they do between speakers, like speed perturbation but on the features, batched.
    """

    def __init__(self, *, freq_mask: int = 48, time_mask: int = 192, num_masks: int = 1, stretch: float = 0.0) -> None:
        super().__init__()
        if freq_mask < 0 or time_mask < 0 or num_masks < 0:
            raise ValueError(
                f"freq_mask ({freq_mask}), time_mask ({time_mask}) and num_masks ({num_masks}) must be >= 0"
            )
        if not 0.0 <= stretch < 1.0:
            raise ValueError(f"stretch ({stretch}) must be in [0, 1)")
        self.num_masks, self.stretch = num_masks, stretch
        self.freq = torchaudio.transforms.FrequencyMasking(freq_mask, iid_masks=True) if freq_mask else None
        self.time = torchaudio.transforms.TimeMasking(time_mask, iid_masks=True) if time_mask else None

    def forward(self, feats: Tensor) -> Tensor:
        """feats [B, F, N] -> [B, F, N] (unchanged in eval mode)."""
        if not self.training:
            return feats
        x = feats[:, None]  # [B, 1, F, N]: torchaudio's iid masks want a channel axis
        if self.stretch:
            x = self._stretch(x)
        for _ in range(self.num_masks):
            if self.freq is not None:
                x = self.freq(x)
            if self.time is not None:
                x = self.time(x)
        return x[:, 0]

    def _stretch(self, x: Tensor) -> Tensor:
        """x [B, 1, F, N] -> [B, 1, F, N], each clip resampled on its own scaled grid (edges repeated)."""
        b = x.shape[0]
        scale = 1.0 + self.stretch * (2.0 * torch.rand(b, 2, device=x.device) - 1.0)  # [B, 2]: time, frequency
        theta = torch.zeros(b, 2, 3, device=x.device, dtype=x.dtype)  # output -> input coordinates in [-1, 1]
        theta[:, 0, 0] = scale[:, 0]  # time about the middle
        theta[:, 1, 1] = scale[:, 1]  # frequency about bin 0 (row -1): y_in = s * y + s - 1
        theta[:, 1, 2] = scale[:, 1] - 1.0
        grid = F.affine_grid(theta, list(x.shape), align_corners=True)  # [B, F, N, 2]
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)
