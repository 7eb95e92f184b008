"""Reading image files for folder datasets: any PIL mode to RGB, and errors that name the file.

torchvision's default loader converts with `Image.convert("RGB")`, which clips 16-bit images (most pixels turn
white) and fails deep inside a DataLoader worker on a corrupt or truncated file. `load_rgb` rescales 16/32-bit
images, drops alpha and converts CMYK, palette and grayscale images to RGB; `check_images` rejects unreadable
files at setup, naming each one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError


class ImageFileError(ValueError):
    """An image file cannot be read."""


def _to_8bit(img: Image.Image) -> Image.Image:
    """16-bit ("I;16*") and 32-bit ("I", "F") single-band images scaled to 8 bits by their type's range."""
    values = np.asarray(img)
    top = 65535.0 if img.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
    if img.mode == "F":
        top = max(float(values.max(initial=0)), 1.0) if values.max(initial=0) > 1.0 else 1.0
    scaled = np.clip(values.astype(np.float64) / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def load_rgb(path: str) -> Image.Image:
    """The image at `path` as an 8-bit RGB PIL image (raises `ImageFileError` naming the file)."""
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ImageFileError(f"{path}: truncated or corrupt image ({err}); remove or replace the file") from None
    if img.mode in ("I", "F") or img.mode.startswith("I;16"):
        img = _to_8bit(img)
    return img.convert("RGB")  # drops alpha, converts CMYK / palette / grayscale


def check_images(paths: Sequence[str]) -> None:
    """Open each file's header; raise `ImageFileError` listing every file that is not a readable image."""
    bad = []
    for path in paths:
        try:
            with Image.open(path) as img:
                img.size  # noqa: B018 (the header is parsed on open)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            bad.append(f"{path} ({type(err).__name__})")
    if bad:
        shown = "; ".join(bad[:10]) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise ImageFileError(f"{len(bad)} unreadable image file(s): {shown}; remove or replace them")
