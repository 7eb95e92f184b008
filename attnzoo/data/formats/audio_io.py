"""Reading WAV clips: decode, mix down to mono, resample, pad or crop. No Lightning here.

WAV is read with `scipy.io.wavfile` (PCM 8/16/24/32-bit and 32/64-bit float, any channel count): it needs no
system program, while `torchaudio.load` in torchaudio >= 2.9 needs torchcodec and FFmpeg's libraries.
Resampling is `torchaudio.functional.resample`. Every error names the file.
"""

from __future__ import annotations

import os
import struct
import warnings
from pathlib import Path

import numpy as np
import torch
import torchaudio
from scipy.io import wavfile

Tensor = torch.Tensor
CROPS = ("random", "start", "center")


class AudioFileError(ValueError):
    """A file that cannot be read as a WAV clip (the message starts with its path), or a list of such files."""


def _check_header(path: str | Path) -> None:
    """Raise when the fmt chunk gives values scipy cannot read (`_check_fmt`), or the data chunk declares more bytes
    than the file holds (scipy would return a short clip)."""
    try:
        f = open(path, "rb")
    except OSError as err:
        raise AudioFileError(f"{path}: cannot open ({err.strerror})") from err
    with f:
        head = f.read(12)
        if len(head) < 12 or head[:4] not in (b"RIFF", b"RIFX") or head[8:12] != b"WAVE":
            raise AudioFileError(f"{path}: not a RIFF/WAVE file (starts with {head[:12]!r})")
        order = "<" if head[:4] == b"RIFF" else ">"
        while chunk := f.read(8):
            if len(chunk) < 8:
                break
            size = struct.unpack(order + "I", chunk[4:])[0]
            if chunk[:4] == b"fmt " and size >= 16:  # a shorter one is scipy's error
                fields = f.read(16)
                if len(fields) == 16:
                    tag, channels, rate, _, block_align, bits = struct.unpack(order + "HHIIHH", fields)
                    if tag in PLAIN_SAMPLES:  # a compressed format is scipy's to name (ADPCM, MP3: not supported)
                        _check_fmt(path, channels=channels, rate=rate, block_align=block_align, bits=bits)
                size -= len(fields)
            elif chunk[:4] == b"data":
                left = os.fstat(f.fileno()).st_size - f.tell()
                if size not in (0, 0xFFFFFFFF) and size > left:  # 0 / all ones: written by a stream, size unknown
                    raise AudioFileError(
                        f"{path}: truncated: its data chunk declares {size} bytes, the file holds {left}"
                    )
                return
            f.seek(size + size % 2, os.SEEK_CUR)


PLAIN_SAMPLES = (1, 3, 0xFFFE)  # the fmt tags of PCM, IEEE float and WAVE_FORMAT_EXTENSIBLE


def _check_fmt(path: str | Path, *, channels: int, rate: int, block_align: int, bits: int) -> None:
    """Raise on fmt chunk values that leave no sample to read: scipy divides by `channels` and by the sample size
    `block_align // channels` (a ZeroDivisionError naming no file), and has no dtype for a sample over 8 bytes."""
    zero = [
        f"{name} {value}"
        for name, value in (("channels", channels), ("sample rate", rate), ("bits", bits))
        if not value
    ]
    if zero:
        raise AudioFileError(
            f"{path}: cannot read as WAV (its fmt chunk gives {', '.join(zero)}; channels, sample rate and bits per "
            "sample must each be >= 1)"
        )
    if not 1 <= block_align // channels <= 8:
        raise AudioFileError(
            f"{path}: cannot read as WAV (its fmt chunk gives block align {block_align} for {channels} channel(s); "
            "block align / channels is the bytes of one sample, which must be 1 to 8)"
        )


def _read(path: str | Path, mmap: bool) -> tuple[int, np.ndarray]:
    _check_header(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)  # unknown chunks (LIST, ...) are skipped
            rate, data = wavfile.read(path, mmap=mmap)
    # struct.error: a header cut short; UnboundLocalError: scipy's reader on a RIFF/WAVE header without chunks;
    # ZeroDivisionError, TypeError (no dtype): fmt values `_check_fmt` missed
    except (OSError, ValueError, EOFError, struct.error, UnboundLocalError, ZeroDivisionError, TypeError) as err:
        raise AudioFileError(f"{path}: cannot read as WAV ({type(err).__name__}: {err})") from err
    if data.size == 0:
        raise AudioFileError(f"{path}: WAV file has no samples")
    return rate, data


def probe_wav(path: str | Path) -> int:
    """Check a WAV file's header and data size, and float samples for NaN and infinity, without decoding integer
    samples (which are always finite) or keeping the file in memory (raises `AudioFileError`); its sample rate."""
    try:
        rate, data = _read(path, mmap=True)
    except AudioFileError:  # memory mapping cannot read every layout (24-bit): decode for the real verdict
        rate, data = _read(path, mmap=False)
    _check_finite(path, data)
    return int(rate)


def _check_finite(path: str | Path, data: np.ndarray, chunk: int = 1 << 20) -> None:
    """Raise unless every sample is finite as float32 (what `read_wav` makes of it: float64 beyond ~3.4e38 is not),
    read `chunk` samples at a time so that a memory-mapped file is never loaded whole (integer samples always are)."""
    if not np.issubdtype(data.dtype, np.floating):
        return
    flat = data.reshape(-1)  # a view of a memory map stays one
    with np.errstate(over="ignore"):  # float64 -> float32 overflow is the inf looked for
        finite = all(np.isfinite(flat[i : i + chunk].astype(np.float32)).all() for i in range(0, flat.size, chunk))
    if not finite:
        raise AudioFileError(f"{path}: WAV file holds NaN or infinite samples")


def read_wav(path: str | Path) -> tuple[Tensor, int]:
    """(waveform [channels, T] float32 in [-1, 1], sample rate) of a WAV file."""
    rate, data = _read(path, mmap=False)
    _check_finite(path, data)
    if data.dtype == np.uint8:  # 8-bit PCM is unsigned
        wave = (data.astype(np.float32) - 128.0) / 128.0
    elif np.issubdtype(data.dtype, np.integer):  # 16-bit, 24-bit (left-justified in int32) and 32-bit PCM
        wave = data.astype(np.float32) / float(-np.iinfo(data.dtype).min)
    else:
        wave = data.astype(np.float32)
    wave = torch.from_numpy(np.ascontiguousarray(wave))
    wave = wave[None] if wave.dim() == 1 else wave.T  # [channels, T]
    return wave, int(rate)


def load_clip(path: str | Path, *, sample_rate: int) -> Tensor:
    """Mono waveform [T] at `sample_rate` (channels averaged, resampled when the file's rate differs)."""
    return read_clip(path, sample_rate=sample_rate)[0]


def read_clip(path: str | Path, *, sample_rate: int) -> tuple[Tensor, int]:
    """`load_clip`'s waveform and the file's own sample rate."""
    wave, rate = read_wav(path)
    wave = wave.mean(0)  # [T]: mono mix-down
    if rate != sample_rate:
        wave = torchaudio.functional.resample(wave, rate, sample_rate)
    return wave, rate


def fit_length(wave: Tensor, num_samples: int, crop: str = "start", generator: torch.Generator | None = None) -> Tensor:
    """`wave` [T] padded with zeros at the end or cropped to [num_samples].

    Args:
        crop: which part of a longer clip to keep: "random", "start" or "center".
    """
    if crop not in CROPS:
        raise ValueError(f"crop {crop!r} is not one of {list(CROPS)}")
    extra = wave.shape[0] - num_samples
    if extra < 0:
        return torch.nn.functional.pad(wave, (0, -extra))
    if crop == "start" or extra == 0:
        start = 0
    elif crop == "center":
        start = extra // 2
    else:
        start = int(torch.randint(extra + 1, (1,), generator=generator))
    return wave[start : start + num_samples]
