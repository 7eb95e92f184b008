"""WAV files written for the audio tests (with writers independent of attnzoo's reader), a Speech Commands folder
of them, and a small audio DataModule."""

import math
import struct
import wave
from pathlib import Path

import numpy as np

from attnzoo.data import DATAMODULES
from attnzoo.data.modules.audio import AudioDataModule

RATE = 8000


def tone(rate: int, seconds: float, freq: float, channels: int) -> np.ndarray:
    """[T, channels] sines in [-0.5, 0.5]; channel c at freq * (c + 1)."""
    t = np.arange(int(rate * seconds)) / rate
    return np.stack([0.5 * np.sin(2 * math.pi * freq * (c + 1) * t) for c in range(channels)], axis=1)


def write_pcm16(path: Path, data: np.ndarray, rate: int) -> None:
    """16-bit PCM with Python's `wave` module (a writer independent of the reader under test)."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(data.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((data * 32767).round().astype("<i2").tobytes())


def write_float32(path: Path, data: np.ndarray, rate: int) -> None:
    """IEEE-float WAV (format tag 3), header written by hand."""
    payload = data.astype("<f4").tobytes()
    ch = data.shape[1]
    fmt = struct.pack("<HHIIHH", 3, ch, rate, rate * ch * 4, ch * 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(payload)) + payload
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


WRITERS = {"pcm16": write_pcm16, "float32": write_float32}


def speech_commands(root: Path, rates=(8000, 16000, 44100)) -> dict[str, list[str]]:
    """Three classes of short clips in the Speech Commands layout, with validation/testing lists and noise folder."""
    lists = {"validation_list.txt": [], "testing_list.txt": []}
    for c, name in enumerate(["down", "go", "yes"]):
        (root / name).mkdir(parents=True)
        for i in range(6):
            rate, fmt = rates[i % len(rates)], list(WRITERS)[i % 2]
            rel = f"{name}/spk{i}_nohash_0.wav"
            WRITERS[fmt](root / rel, tone(rate, 0.3 + 0.1 * i, 200.0 * (c + 1), 1 + i % 2), rate)
            if i == 4:
                lists["validation_list.txt"].append(rel)
            if i == 5:
                lists["testing_list.txt"].append(rel)
    (root / "_background_noise_").mkdir()
    write_pcm16(root / "_background_noise_" / "noise.wav", tone(RATE, 1.0, 50.0, 1), RATE)
    for name, files in lists.items():
        (root / name).write_text("\n".join(files) + "\n")
    return lists


def small(**kw) -> AudioDataModule:
    return DATAMODULES["audio"](sample_rate=RATE, n_mels=32, clip_seconds=0.5, batch_size=4, **kw)
