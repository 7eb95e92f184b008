"""Spoken keywords in the Speech Commands layout, spoken by espeak-ng voices (apt install espeak-ng).

    python benchmarks/standins/audio.py commands OUT   # yes no up down left right on off stop go
    python benchmarks/standins/audio.py digits OUT     # zero one two ... nine

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
from scipy.signal import resample_poly

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", choices=sorted(WORDS))
    p.add_argument("out", type=Path)
    p.add_argument("--speakers", type=int, default=120)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} exists and is not empty")
    print(args.words, build(args.out, WORDS[args.words], args.speakers, args.seed))


if __name__ == "__main__":
    main()
