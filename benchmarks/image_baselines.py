"""Classical baselines on an image folder's train/val/test splits: HOG + logistic regression, raw pixels + logistic
regression (the regularization C chosen on val), with their wall time.

    python benchmarks/image_baselines.py /tmp/standins/glyphs /tmp/standins/shapes --out benchmarks/results

HOG (histograms of oriented gradients, written here with numpy): grey levels, unsigned gradient orientation in 9
bins over 8x8-pixel cells, blocks of 2x2 cells normalized L2-Hys. The results go into `<out>/image_baselines.json`
and `.md`, beside which `benchmarks/recipes.py` records the ViT recipe's runs on the same folders.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
C_GRID = (0.01, 0.1, 1.0, 10.0)


def load_split(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [N, H, W, 3] and class indices [N] of `folder`/<class>/*."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    images, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((folder / name).iterdir()):
            images.append(np.asarray(Image.open(path).convert("RGB")))
            labels.append(label)
    return np.stack(images), np.array(labels)


def hog(images: np.ndarray, cell: int = 8, bins: int = 9) -> np.ndarray:
    """HOG features [N, D] of uint8 images [N, H, W, 3]."""
    grey = images.astype(np.float32).mean(-1) / 255.0  # [N, H, W]
    gy, gx = np.gradient(grey, axis=(1, 2))
    magnitude = np.hypot(gx, gy)
    angle = np.rad2deg(np.arctan2(gy, gx)) % 180.0  # unsigned: light-on-dark and dark-on-light alike
    n, h, w = grey.shape
    ch, cw = h // cell, w // cell
    index = np.minimum((angle / (180.0 / bins)).astype(int), bins - 1)
    hist = np.zeros((n, ch, cw, bins), np.float32)
    for b in range(bins):
        m = np.where(index == b, magnitude, 0.0)[:, : ch * cell, : cw * cell]
        hist[..., b] = m.reshape(n, ch, cell, cw, cell).sum((2, 4))
    blocks = np.concatenate(
        [hist[:, :-1, :-1], hist[:, 1:, :-1], hist[:, :-1, 1:], hist[:, 1:, 1:]], axis=-1
    )  # [N, ch-1, cw-1, 4 * bins]
    blocks = blocks / np.sqrt((blocks**2).sum(-1, keepdims=True) + 1e-6)
    blocks = np.minimum(blocks, 0.2)
    blocks = blocks / np.sqrt((blocks**2).sum(-1, keepdims=True) + 1e-6)
    return blocks.reshape(n, -1)


def fit_lr(train: tuple, val: tuple, test: tuple) -> dict:
    """Logistic regression on standardized features, C chosen on val; test accuracy of the chosen C."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train[0])
    xs = [scaler.transform(x) for x, _ in (train, val, test)]
    best = None
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=300).fit(xs[0], train[1])
        acc = float((model.predict(xs[1]) == val[1]).mean())
        if best is None or acc > best[0]:
            best = (acc, c, model)
    return {"val_acc": best[0], "C": best[1], "test_acc": float((best[2].predict(xs[2]) == test[1]).mean())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from threadpoolctl import threadpool_limits

    from attnzoo.benchmarks.harness import hardware

    records = []
    for folder in args.folders:
        splits = {s: load_split(folder / s) for s in ("train", "val", "test")}
        for name, features in (("HOG", hog), ("pixels", lambda x: x.reshape(len(x), -1).astype(np.float32) / 255)):
            if name == "HOG" and min(splits["train"][0].shape[1:3]) < 16:  # 2 x 2 cells of 8 px: no block fits
                print(f"{folder.name}: HOG left out: its images are smaller than one block (16 px)", file=sys.stderr)
                continue
            start = time.perf_counter()
            with threadpool_limits(1):
                made = {s: (features(x), y) for s, (x, y) in splits.items()}
                result = fit_lr(made["train"], made["val"], made["test"])
            result.update(data=folder.name, features=name, model="logistic regression", threads=1,
                          wall_seconds=round(time.perf_counter() - start, 1))  # fmt: skip
            records.append(result)
            print(json.dumps(result), flush=True)
    import sklearn

    info = {**hardware(), "python": platform.python_version(), "sklearn": sklearn.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "image_baselines.json").write_text(json.dumps({"hardware": info, "runs": records}, indent=2) + "\n")
    lines = [
        "# Classical baselines on the 64x64 image stand-ins",
        "",
        f"Hardware: {info['cpu']} ({info['cpu_cores']} cores), one thread, scikit-learn {info['sklearn']}, "
        f"Python {info['python']}. Command: `python benchmarks/image_baselines.py DIR ...`; C chosen on val.",
        "",
        "| data | features | test acc | val acc | C | wall s |",
        "|---|---|---:|---:|---:|---:|",
        *(f"| {r['data']} | {r['features']} + LR | {r['test_acc']:.4f} | {r['val_acc']:.4f} | {r['C']} | "
          f"{r['wall_seconds']:.0f} |" for r in records),
    ]  # fmt: skip
    (args.out / "image_baselines.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
