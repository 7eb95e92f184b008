"""The embedded default audio dataset: two-vowel syllables synthesized in code (no download, no system program).

Each class is an ORDERED pair of distinct vowels ("a-i" differs from "i-a"), so a bag of frames cannot tell
classes apart: the model must know which vowel came first. Every clip varies in speaker (vocal-tract length,
formant jitter), pitch and intonation, speaking rate and timing, loudness, and background noise (white or pink,
at a random SNR). Clips are deterministic from (seed, split).

Synthesis is source-filter: a sawtooth glottal source (-6 dB/octave harmonics of f0(t)) shaped frame by frame by
a cascade of formant resonances in the STFT domain. Notation: N clips, T samples, Fb STFT bins, Nf STFT frames.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

Tensor = torch.Tensor

# average adult formants F1-F3 in Hz (Peterson & Barney style values)
VOWELS: dict[str, tuple[float, float, float]] = {
    "a": (730.0, 1090.0, 2440.0),
    "e": (530.0, 1840.0, 2480.0),
    "i": (270.0, 2290.0, 3010.0),
    "o": (570.0, 840.0, 2410.0),
    "u": (300.0, 870.0, 2240.0),
}
BANDWIDTHS = (90.0, 110.0, 170.0)
SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}
_CHUNK = 64  # clips synthesized at once (fixed, so outputs do not depend on memory)


def class_names(vowels: str = "aeiou") -> list[str]:
    """Class names "a-e", "a-i", ...: ordered pairs of distinct vowels."""
    unknown = [v for v in vowels if v not in VOWELS]
    if unknown or len(set(vowels)) != len(vowels) or len(vowels) < 2:
        raise ValueError(f"vowels {vowels!r} must be >= 2 distinct letters from {''.join(VOWELS)!r}")
    return [f"{a}-{b}" for a in vowels for b in vowels if a != b]


def synthesize(
    *,
    split: str,
    per_class: int,
    sample_rate: int = 8000,
    clip_seconds: float = 1.0,
    vowels: str = "aeiou",
    snr_db: tuple[float, float] = (0.0, 30.0),
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Waveforms [N, T] in [-1, 1] and labels [N] (long) for one split; N = per_class * classes.

    Args:
        split: "train", "val" or "test" (each has its own clips).
        per_class: clips per class.
        snr_db: range of signal-to-noise ratios of the background noise.
    """
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split {split!r} is not one of {list(SPLIT_SEEDS)}")
    if per_class < 1:
        raise ValueError(f"per_class ({per_class}) must be >= 1")
    if sample_rate < 6000:
        raise ValueError(f"sample_rate ({sample_rate}) must be >= 6000 Hz to hold the vowels' third formant")
    if clip_seconds < 0.3:
        raise ValueError(f"clip_seconds ({clip_seconds}) must be >= 0.3 to hold a syllable")
    names = class_names(vowels)
    formants = torch.tensor([VOWELS[v] for v in vowels])  # [V, 3]
    pairs = torch.tensor([(i, j) for i in range(len(vowels)) for j in range(len(vowels)) if i != j])  # [C, 2]
    n = per_class * len(names)
    labels = torch.arange(n) % len(names)
    gen = torch.Generator().manual_seed(seed * 1000 + SPLIT_SEEDS[split])
    params = _draw(n, gen, clip_seconds, snr_db)
    num_samples = int(round(sample_rate * clip_seconds))
    waves = torch.empty(n, num_samples)
    with _one_thread():
        for start in range(0, n, _CHUNK):
            part = slice(start, min(start + _CHUNK, n))
            f_pair = formants[pairs[labels[part]]]  # [n, 2, 3]
            chunk = {k: v[part] for k, v in params.items()}
            waves[part] = _render(f_pair, chunk, sample_rate, num_samples, gen)
    return waves, labels


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Small elementwise ops: thread hand-offs cost more than they save (10x slower measured on a busy 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen)


def _draw(n: int, gen: torch.Generator, clip_seconds: float, snr_db: tuple[float, float]) -> dict[str, Tensor]:
    """Per-clip random parameters (times in seconds)."""
    length = _uniform(n, 0.45, 0.85, gen) * clip_seconds
    onset = _uniform(n, 0.0, 1.0, gen) * (clip_seconds - length)
    return {
        "vtl": _uniform(n, 0.82, 1.25, gen),  # formant scale: children and small speakers are higher
        "jitter": 1 + 0.08 * (2 * torch.rand(n, 2, 3, generator=gen) - 1),  # per-vowel formant variation
        "f0": _uniform(n, 80.0, 280.0, gen),
        "f0_slope": _uniform(n, -0.3, 0.3, gen),  # intonation over the syllable
        "vibrato": _uniform(n, 0.0, 0.03, gen),
        "onset": onset,
        "length": length,
        "split": _uniform(n, 0.3, 0.7, gen),  # where the second vowel starts, as a fraction of the syllable
        "glide": _uniform(n, 0.04, 0.2, gen) * clip_seconds,  # transition time between the vowels
        "gain_db": _uniform(n, -30.0, -3.0, gen),
        "snr_db": _uniform(n, snr_db[0], snr_db[1], gen),
        "pink": torch.rand(n, generator=gen) < 0.5,
    }


def _render(f_pair: Tensor, p: dict[str, Tensor], sample_rate: int, num_samples: int, gen: torch.Generator) -> Tensor:
    """Waveforms [n, T] for vowel pairs `f_pair` [n, 2, 3] and parameters `p`."""
    n = f_pair.shape[0]
    t = torch.arange(num_samples) / sample_rate  # [T]
    rel = ((t[None] - p["onset"][:, None]) / p["length"][:, None]).clamp(0, 1)  # [n, T] position in the syllable
    # source: a sawtooth glottal pulse train (harmonics falling 6 dB/octave) with intonation and vibrato
    f0 = p["f0"][:, None] * (1 + p["f0_slope"][:, None] * (rel - 0.5))
    f0 = f0 * (1 + p["vibrato"][:, None] * torch.sin(2 * math.pi * 5.5 * t[None]))  # [n, T]
    cycles = torch.cumsum(f0 / sample_rate, dim=1) + torch.rand(n, 1, generator=gen)
    source = 1 - 2 * torch.frac(cycles) + 0.05 * torch.randn(n, num_samples, generator=gen)  # [n, T], a breath
    # filter: formant resonances applied frame by frame in the STFT domain (a time-varying vocal tract)
    n_fft = 1 << math.ceil(math.log2(0.032 * sample_rate))
    hop = n_fft // 4
    window = torch.hann_window(n_fft)
    spec = torch.stft(source, n_fft, hop, window=window, return_complex=True)  # [n, Fb, Nf]
    frame_t = torch.arange(spec.shape[2]) * hop / sample_rate  # [Nf] frame centres
    centre = p["onset"] + p["split"] * p["length"]
    mix = ((frame_t[None] - centre[:, None]) / p["glide"][:, None] + 0.5).clamp(0, 1)  # [n, Nf]
    mix = mix * mix * (3 - 2 * mix)  # smoothstep from the first vowel to the second
    f_pair = f_pair * p["jitter"] * p["vtl"][:, None, None]  # [n, 2, 3]
    tracks = f_pair[:, 0, :, None] * (1 - mix[:, None]) + f_pair[:, 1, :, None] * mix[:, None]  # [n, 3, Nf]
    freq = torch.fft.rfftfreq(n_fft, 1 / sample_rate)[None, :, None]  # [1, Fb, 1]
    bw = torch.tensor(BANDWIDTHS)[None, :, None] * p["vtl"][:, None, None]  # [n, 3, 1]
    env = torch.ones(n, freq.shape[1], spec.shape[2])  # [n, Fb, Nf]: cascade of resonances, unit gain at DC
    for i in range(3):
        fi, bi = tracks[:, i : i + 1], bw[:, i : i + 1]  # [n, 1, Nf], [n, 1, 1]
        env = env * fi**2 / torch.sqrt((fi**2 - freq**2) ** 2 + (bi * freq) ** 2)
    voiced = torch.istft(spec * env, n_fft, hop, window=window, length=num_samples)  # [n, T]
    # loudness envelope: 30 ms raised-cosine attack and release inside the syllable
    edge = (0.03 / p["length"]).clamp(max=0.5)[:, None]
    shape = torch.where(rel < edge, 0.5 - 0.5 * torch.cos(math.pi * rel / edge), torch.ones_like(rel))
    shape = torch.where(rel > 1 - edge, 0.5 - 0.5 * torch.cos(math.pi * (1 - rel) / edge), shape)
    inside = (t[None] >= p["onset"][:, None]) & (t[None] <= (p["onset"] + p["length"])[:, None])
    voiced = voiced * shape * inside
    rms = voiced.pow(2).sum(1).div(inside.sum(1).clamp(min=1)).sqrt().clamp(min=1e-8)  # over the syllable
    voiced = voiced / rms[:, None] * 10 ** (p["gain_db"][:, None] / 20)
    noise = _noise(n, num_samples, p["pink"], gen)
    noise = noise * (10 ** ((p["gain_db"] - p["snr_db"]) / 20))[:, None]
    return (voiced + noise).clamp(-1, 1)


def _noise(n: int, num_samples: int, pink: Tensor, gen: torch.Generator) -> Tensor:
    """Unit-RMS noise [n, T]: white, or pink (1/f power) where `pink`."""
    white = torch.randn(n, num_samples, generator=gen)
    spec = torch.fft.rfft(white)
    f = torch.arange(spec.shape[1]).clamp(min=1).float()
    shaped = torch.fft.irfft(spec / f.sqrt(), n=num_samples)
    out = torch.where(pink[:, None], shaped, white)
    return out / out.pow(2).mean(1, keepdim=True).sqrt().clamp(min=1e-8)
