"""The text-image recipe on image-question JSONL files, as a user's data arrives: how long training and the classical
baseline take, and what each scores.

    python benchmarks/text_image_files.py --out /tmp/text_image_files               # 6,000 questions, 64x64 images
    python benchmarks/text_image_files.py --out /tmp/t --train 600 --epochs 1      # a quick look

Writes `train.jsonl`, `val.jsonl` and `test.jsonl` (1,000 questions each for val and test) with one 64x64 PNG per
question, rendered from attnzoo's scene generator at another seed than the embedded set, then runs
`python -m attnzoo.fit --config recipes/text_image.yaml data.train=... data.val=... data.test=...` (data keys only,
plus `trainer.max_epochs` when `--epochs` is given) and reads the run's summary.json: the wall time of training,
of the baseline (TF-IDF of the question + the pixels, logistic regression, bounded by max(60 s, 25% of the training
time)) and both test accuracies. Writes text_image_files.json and .md into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def write_split(out: Path, split: str, n: int, *, seed: int, size: int) -> Path:
    """`split`.jsonl and its PNGs under `out/images/split/`."""
    from PIL import Image

    from attnzoo.data.embedded.scenes import SceneGenerator

    gen = SceneGenerator(task="vqa", seed=seed)
    examples = gen.examples(n, split=split)
    images = gen.images(examples, image_size=size, split=split)
    folder = out / "images" / split
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (ex, pixels) in enumerate(zip(examples, images, strict=True)):
        name = f"{i:05d}.png"
        Image.fromarray(pixels).save(folder / name)
        lines.append(json.dumps({"image": f"images/{split}/{name}", "text": ex.text, "label": ex.label}))
    path = out / f"{split}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", type=int, default=6000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs (default: the data chooses)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = {s: write_split(args.out, s, n, seed=7, size=args.size)
             for s, n in (("train", args.train), ("val", 1000), ("test", 1000))}  # fmt: skip
    command = [sys.executable, "-m", "attnzoo.fit", "--config", "recipes/text_image.yaml",
               *(f"data.{s}={p}" for s, p in files.items()), f"run.dir={args.out / 'runs'}",
               "trainer.enable_progress_bar=false"]  # fmt: skip
    if args.epochs is not None:
        command.append(f"trainer.max_epochs={args.epochs}")
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"fit failed ({done.returncode}):\n{done.stderr[-3000:]}")
    (summary_file,) = sorted((args.out / "runs").rglob("summary.json"))[-1:]
    summary = json.loads(summary_file.read_text())
    baseline = summary.get("baseline") or {}
    import torch

    result = {
        "command": " ".join(str(c) for c in command[1:]),
        "questions": {"train": args.train, "val": 1000, "test": 1000},
        "image_size": args.size,
        "wall_s": round(wall, 1),
        "train_s": round(summary["train_seconds"], 1),
        "epochs": summary["epochs"],
        "best_epoch": summary.get("best_epoch"),
        "test_acc": summary["test"].get("test/acc"),
        "baseline_s": baseline.get("seconds"),
        "baseline_test_acc": baseline.get("test/acc"),
        "baseline_skipped": baseline.get("skipped"),
        "hardware": f"{platform.machine()} ({os.cpu_count()} cores)",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "text_image_files.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "# The text-image recipe on JSONL questions with PNG images",
        "",
        f"Hardware: {result['hardware']}, torch {result['torch']}, Python {result['python']}. "
        f"Command: `python {result['command']}`.",
        "",
        "| train questions | image size | epochs | test acc | baseline test acc | training (s) | whole run (s) | "
        "baseline (s) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {args.train} | {args.size}x{args.size} | {result['epochs']} | {result['test_acc']:.3f} | "
        f"{_num(result['baseline_test_acc'], 3)} | {result['train_s']} | {result['wall_s']} | "
        f"{_num(result['baseline_s'], 1)} |",
        "",
        "The baseline's budget is max(60 s, 25% of the training time); a baseline out of time is skipped and says so "
        f"(skipped here: {result['baseline_skipped'] or 'no'}).",
    ]
    (RESULTS / "text_image_files.md").write_text("\n".join(md) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
