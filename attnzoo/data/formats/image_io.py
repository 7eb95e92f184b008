"""Reading image files for folder datasets: any PIL mode to RGB, and errors that name the file.

torchvision's default loader converts with `Image.convert("RGB")`, which clips 16-bit images (most pixels turn
white), keeps the colour stored under transparent pixels, ignores the EXIF orientation, and fails deep inside a
DataLoader worker on a corrupt or truncated file. `load_rgb` turns images as their EXIF orientation says,
rescales 16/32-bit images, composites transparency on white (where the alpha draws a shape) and converts CMYK,
palette and grayscale images to RGB; `unreadable_images` decodes every file at setup and names each one that is
corrupt or truncated, or a floating-point image with NaN or infinite pixels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ...util.names import shortened

# what PIL raises on a file it cannot decode (its DecompressionBombError, a whole file over its pixel limit, is
# caught apart: `_too_large`)
DECODE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError)
ORIENTATION = 0x0112  # the EXIF tag of how the stored pixels are turned (1: as stored; 5-8: a quarter turn)


class ImageFileError(ValueError):
    """An image file cannot be read."""


def _sixteen_bits(img: Image.Image) -> bool:
    """Whether an image opened as mode "I" was stored with 16 bits per sample (a PGM/PPM of maxval above 255, which
    PIL scales to 0-65535; a 16-bit TIFF): what its header says, before its pixels are read."""
    if img.format == "PPM" and img.mode == "I":
        return True
    rawmodes = [t.args if isinstance(t.args, str) else t.args[0] for t in img.tile if t.args]
    return any(isinstance(r, str) and "16" in r for r in rawmodes)


def _to_8bit(img: Image.Image, sixteen_bits: bool = False) -> Image.Image:
    """16-bit ("I;16*", or "I" stored in 16 bits) and 32-bit ("I", "F") single-band images scaled to 8 bits by their
    type's range: the range of the file's type, not of its content, so that every image of a folder is scaled alike
    (an "I" image without a stated depth: 16 bits where a value exceeds 255; "F": 0-1, 0-255, else its maximum)."""
    values = np.asarray(img)
    top = 65535.0 if img.mode.startswith("I;16") or sixteen_bits or values.max(initial=0) > 255 else 255.0
    if img.mode == "F":
        peak = float(values.max(initial=0))
        top = 1.0 if peak <= 1.0 else 255.0 if peak <= 255.0 else peak
    scaled = np.clip(values.astype(np.float64) / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def _non_finite(img: Image.Image) -> str | None:
    """What is wrong with a floating-point image ("F") holding NaN or infinite pixels (scaled to 8 bits they made
    the whole image black), or None."""
    if img.mode != "F":
        return None
    values = np.asarray(img)
    bad = int(values.size - np.isfinite(values).sum())
    return f"{bad} of {values.size} pixels are NaN or infinite" if bad else None


def _too_large(err: Exception) -> str:
    """What a DecompressionBombError means: a whole image, with more pixels than PIL decodes unasked."""
    return (
        f"DecompressionBombError: {err} (the file may be whole: PIL refuses more than twice Image.MAX_IMAGE_PIXELS "
        "pixels, a guard against files made to exhaust memory; downscale it, or raise PIL.Image.MAX_IMAGE_PIXELS "
        "in your own code if you trust it)"
    )


def load_rgb(path: str) -> Image.Image:
    """The image at `path` as an 8-bit RGB PIL image (raises `ImageFileError` naming the file)."""
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            sixteen_bits = _sixteen_bits(img)  # from the header: loading the pixels drops it
            img.load()
    except Image.DecompressionBombError as err:
        raise ImageFileError(f"{path}: {_too_large(err)}") from None
    except DECODE_ERRORS as err:
        raise ImageFileError(f"{path}: truncated or corrupt image ({err}); remove or replace the file") from None
    if (wrong := _non_finite(img)) is not None:
        raise ImageFileError(f"{path}: {wrong}; replace the file (or its NaN pixels)")
    img = ImageOps.exif_transpose(img)  # a phone photo stored sideways, turned as viewers show it
    if img.mode in ("I", "F") or img.mode.startswith("I;16"):
        img = _to_8bit(img, sixteen_bits)
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        # transparent pixels as viewers show them, on white: dropping alpha kept whatever colour they store (often
        # black, so dark ink on a transparent background became a black image). Only where the alpha draws a shape:
        # a uniform one (all 0 from a careless export) carries none, and the stored colours are the image
        rgba = img.convert("RGBA")
        low, high = rgba.getchannel("A").getextrema()
        if low < high:
            img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img.convert("RGB")  # converts CMYK / palette / grayscale; drops a uniform alpha


def oriented_size(img: Image.Image) -> tuple[int, int]:
    """(width, height) of an opened image as `load_rgb` turns it (EXIF orientation), from its header alone (a PNG's
    as stored)."""
    w, h = img.size
    if img.format not in ("JPEG", "MPO", "TIFF", "WEBP"):  # a PNG's EXIF may follow its pixels: reading it decodes
        return w, h
    return (h, w) if img.getexif().get(ORIENTATION) in (5, 6, 7, 8) else (w, h)  # a quarter turn


def unreadable_images(paths: Sequence[str]) -> dict[str, str]:
    """Path -> what is wrong, for each file that is not a whole readable image (its pixels are decoded, so a file
    cut short is found here, not in the middle of an epoch)."""
    bad = {}
    for path in paths:
        try:
            if os.path.getsize(path) == 0:  # PIL: "cannot identify image file", which hides why
                bad[path] = "empty file (0 bytes)"
                continue
            with Image.open(path) as img:
                img.load()
                if (wrong := _non_finite(img)) is not None:
                    bad[path] = wrong
        except Image.DecompressionBombError as err:
            bad[path] = _too_large(err)
        except DECODE_ERRORS as err:
            bad[path] = f"{type(err).__name__}: {err}"
    return bad


def check_images(paths: Sequence[str]) -> None:
    """Raise `ImageFileError` listing every file that is not a whole readable image."""
    bad = unreadable_images(paths)
    if bad:
        raise ImageFileError(f"{len(bad)} unreadable image file(s): {describe(bad)}; remove or replace them")


def describe(bad: dict[str, str], shown: int = 10) -> str:
    """`path (problem); ...` for the first `shown` files, and how many more."""
    return shortened([f"{path} ({why})" for path, why in bad.items()], shown)
