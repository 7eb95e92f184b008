"""Spoken keywords in the Speech Commands layout, spoken by espeak-ng voices (apt install espeak-ng).

    python benchmarks/standins/audio.py commands OUT   # yes no up down left right on off stop go
    python benchmarks/standins/audio.py digits OUT     # zero one two ... nine
    python benchmarks/standins/audio.py scenes OUT     # rain wind engine ... : steady sounds, synthesized (no espeak)

A speaker is an English accent of espeak-ng (8: British, American, Scottish, Lancaster, RP, West Midlands,
Caribbean, New York) with one of its voice variants (m1, f3, klatt2, ...), a pitch, a speed and a loudness, all
drawn from `--seed`; `--speakers` speakers (default 120) each say every word once. The word is placed at a random
point of a 1 s clip at 16 kHz over white noise (10-30 dB SNR). Files are `OUT/<word>/<speaker>_nohash_0.wav`, and
`validation_list.txt` / `testing_list.txt` hold every clip of 15% / 15% of the speakers: test speakers are never
heard in training, as in Speech Commands.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import butter, resample_poly, sosfilt

WORDS = {
    "commands": ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"],
    "digits": ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"],
}
ACCENTS = ["en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
RATE = 16000


def variants() -> list[str]:
    try:
        listing = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        sys.exit("no espeak-ng to speak the keywords: apt install espeak-ng")
    names = [line.split()[4].split("/", 1)[1] for line in listing.splitlines()[1:] if len(line.split()) >= 5]
    return sorted(set(names))


def speak(word: str, voice: str, pitch: int, speed: int) -> tuple[int, np.ndarray]:
    wav = subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(speed), "--stdout", word],
                         capture_output=True, check=True).stdout  # fmt: skip
    rate, data = wavfile.read(io.BytesIO(wav))
    return rate, data.astype(np.float32) / 32768.0


def clip(word: str, speaker: dict, rng: np.random.Generator) -> np.ndarray:
    rate, wave = speak(word, speaker["voice"], speaker["pitch"], speaker["speed"])
    wave = resample_poly(wave, RATE, rate) if rate != RATE else wave
    loud = np.flatnonzero(np.abs(wave) > 0.02 * np.abs(wave).max())
    wave = wave[loud[0] : loud[-1] + 1][:RATE] * speaker["gain"] / (np.abs(wave).max() + 1e-9)
    out = np.zeros(RATE, dtype=np.float32)
    start = int(rng.integers(0, RATE - len(wave) + 1))
    out[start : start + len(wave)] = wave
    snr = rng.uniform(10.0, 30.0)
    power = np.mean(wave**2)
    out += rng.standard_normal(RATE).astype(np.float32) * np.sqrt(power / 10 ** (snr / 10))
    return np.clip(out, -1.0, 1.0)


def build(out: Path, words: list[str], speakers: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    pool = variants()
    people = [
        {"id": f"{rng.integers(16**8):08x}", "voice": f"{rng.choice(ACCENTS)}+{rng.choice(pool)}",
         "pitch": int(rng.integers(20, 81)), "speed": int(rng.integers(130, 201)), "gain": float(rng.uniform(0.3, 0.9))}
        for _ in range(speakers)
    ]  # fmt: skip
    order = rng.permutation(speakers)
    n_held = round(0.15 * speakers)
    ids = [people[i]["id"] for i in order]
    held = {"val": set(ids[:n_held]), "test": set(ids[n_held : 2 * n_held])}
    lists: dict[str, list[str]] = {"val": [], "test": []}
    for word in words:
        (out / word).mkdir(parents=True, exist_ok=True)
        for person in people:
            name = f"{word}/{person['id']}_nohash_0.wav"
            wave = clip(word, person, rng)
            wavfile.write(out / name, RATE, (wave * 32767).astype(np.int16))
            for split, ids in held.items():
                if person["id"] in ids:
                    lists[split].append(name)
    (out / "validation_list.txt").write_text("\n".join(lists["val"]) + "\n")
    (out / "testing_list.txt").write_text("\n".join(lists["test"]) + "\n")
    (out / "speakers.txt").write_text("\n".join(f"{p['id']} {p['voice']} pitch {p['pitch']} speed {p['speed']}"
                                                for p in people) + "\n")  # fmt: skip
    counts = {split: len(names) for split, names in lists.items()}
    return {"train": len(words) * speakers - sum(counts.values()), **counts}


SCENES = ["rain", "wind", "engine", "vacuum", "hum", "crickets", "stream", "fan", "clock", "fire"]


def _band(noise: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    if low and high:
        sos = butter(4, [low, high], btype="bandpass", fs=RATE, output="sos")
    elif low:
        sos = butter(4, low, btype="highpass", fs=RATE, output="sos")
    else:
        sos = butter(4, high, btype="lowpass", fs=RATE, output="sos")
    return sosfilt(sos, noise)


def _clicks(rng: np.random.Generator, t: np.ndarray, rate: float, decay_ms: float) -> np.ndarray:
    out = np.zeros_like(t)
    for start in rng.uniform(0, 1, rng.poisson(rate)):
        i = int(start * RATE)
        n = min(RATE - i, int(decay_ms * 16 * 5))
        out[i : i + n] += rng.uniform(0.3, 1.0) * rng.standard_normal(n) * np.exp(-np.arange(n) / (decay_ms * 16))
    return out


def scene(kind: str, rng: np.random.Generator) -> np.ndarray:
    """One second of a steady sound of `kind`: what tells the kinds apart is mostly the spectrum's shape, and for
    some (rain, clock, fire, crickets) a texture over time; each clip draws its own parameters."""
    t = np.arange(RATE) / RATE
    noise = rng.standard_normal(RATE)
    u = rng.uniform

    def harmonics(f0: float, count: int, tilt: float) -> np.ndarray:
        return sum(np.sin(2 * np.pi * f0 * k * t + u(0, 6.3)) / k**tilt for k in range(1, count + 1))

    if kind == "rain":
        wave = _band(noise, None, u(3000, 6000)) + 3 * _band(_clicks(rng, t, u(60, 200), 2), 1000, None)
    elif kind == "wind":
        wave = _band(noise, None, u(300, 800)) * (1 + 0.8 * np.sin(2 * np.pi * u(0.3, 1.5) * t + u(0, 6.3)))
    elif kind == "engine":
        f0 = u(25, 60)
        wave = harmonics(f0, 20, 1.0) * (1 + 0.5 * np.sin(2 * np.pi * f0 / 2 * t)) + 0.3 * _band(noise, None, 400)
    elif kind == "vacuum":
        wave = _band(noise, u(800, 1500), None) + 0.3 * harmonics(u(300, 600), 4, 1.5)
    elif kind == "hum":
        mains = 50.0 if u() < 0.5 else 60.0
        wave = sum(np.sin(2 * np.pi * mains * k * t) / k for k in (1, 2, 3, 5, 7)) + 0.05 * noise
    elif kind == "crickets":
        pulses = (np.sin(2 * np.pi * u(15, 30) * t) > 0) * (np.sin(2 * np.pi * u(1, 3) * t + u(0, 6.3)) > -0.2)
        wave = np.sin(2 * np.pi * u(3500, 5000) * t) * pulses + 0.05 * noise
    elif kind == "stream":
        gurgle = np.abs(_band(rng.standard_normal(RATE), None, u(8, 20))) * 10
        wave = _band(noise, u(400, 700), u(1800, 3000)) * (0.3 + gurgle)
    elif kind == "fan":
        pink = np.cumsum(noise) - _band(np.cumsum(noise), None, 20)
        wave = pink / (np.abs(pink).max() + 1e-9) + 0.4 * harmonics(u(100, 200), 3, 1.0)
    elif kind == "clock":
        period = 1 / u(2, 5)
        wave = np.zeros(RATE)
        for start in np.arange(u(0, period), 1, period):
            i = int(start * RATE)
            n = min(RATE - i, 160)
            wave[i : i + n] += _band(rng.standard_normal(n), 2000, 6000)[:n] * np.exp(-np.arange(n) / 30)
    else:  # fire: sparse crackles over a low rumble
        wave = 0.3 * _band(noise, None, 200) + 4 * _clicks(rng, t, u(5, 30), 1)
    wave = wave / (np.sqrt(np.mean(wave**2)) + 1e-9)
    tilt = _band(wave, None, 1000) if u() < 0.5 else _band(wave, 1000, None)  # a microphone's colour, +-6 dB
    wave = wave + u(-0.5, 1.0) * tilt
    wave = wave + rng.standard_normal(RATE) * np.sqrt(np.mean(wave**2) / 10 ** (u(10, 30) / 10))
    wave = wave * 10 ** (u(-30, -6) / 20) / (np.sqrt(np.mean(wave**2)) + 1e-9) * 0.3  # its level: -30 to -6 dB
    return np.clip(wave, -1.0, 1.0).astype(np.float32)


def build_scenes(out: Path, clips: int, seed: int) -> dict[str, int]:
    """`clips` per kind in Speech Commands' layout; 15% / 15% of the clip numbers are val / test."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(clips)
    n_held = round(0.15 * clips)
    held = {"val": set(order[:n_held].tolist()), "test": set(order[n_held : 2 * n_held].tolist())}
    lists: dict[str, list[str]] = {"val": [], "test": []}
    for kind in SCENES:
        (out / kind).mkdir(parents=True, exist_ok=True)
        for i in range(clips):
            name = f"{kind}/{i:04d}_nohash_0.wav"
            wavfile.write(out / name, RATE, (scene(kind, rng) * 32767).astype(np.int16))
            for split, ids in held.items():
                if i in ids:
                    lists[split].append(name)
    (out / "validation_list.txt").write_text("\n".join(lists["val"]) + "\n")
    (out / "testing_list.txt").write_text("\n".join(lists["test"]) + "\n")
    counts = {split: len(names) for split, names in lists.items()}
    return {"train": len(SCENES) * clips - sum(counts.values()), **counts}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", choices=sorted([*WORDS, "scenes"]))
    p.add_argument("out", type=Path)
    p.add_argument("--speakers", type=int, default=120, help="speakers, or clips per kind for scenes")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} exists and is not empty")
    if args.words == "scenes":
        print(args.words, build_scenes(args.out, args.speakers, args.seed))
    else:
        print(args.words, build(args.out, WORDS[args.words], args.speakers, args.seed))


if __name__ == "__main__":
    main()
