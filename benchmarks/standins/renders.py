"""64x64 RGB image folders rendered from what is installed: fonts (glyphs) and sample photographs (shapes).

`render_glyphs`: 10 symbols (`GLYPHS`) drawn in the TrueType fonts of Debian's `fonts-dejavu-core` and those that
ship with matplotlib (DejaVu, STIX), each font in one split only, so val and test are drawn in styles train never
shows; filled or outlined strokes of random width, rotated and placed at random, light-on-dark or dark-on-light at
random, in random colours, with noise. This is the kind of folder of line-drawn symbols the ViT recipe once failed
to learn at all.

`render_shapes`: 10 filled shapes (`SHAPES`) over crops of the photographs that ship with scikit-learn
(china.jpg, flower.jpg) and matplotlib (grace_hopper.jpg), each shape filled with a tinted crop of another
photograph and shaded; train crops come from the left 60% of each photograph, val from the next 20%, test from
the last 20%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SIZE = 64
PER_CLASS = {"train": 300, "val": 60, "test": 60}
GLYPHS = "&#@$§?%¶KW"
SHAPES = ("circle", "square", "triangle", "star", "cross", "ring", "hexagon", "crescent", "arrow", "bar")


def _fonts() -> list[Path]:
    """Installed TrueType fonts with every glyph of `GLYPHS`, one file per font name."""
    import matplotlib

    dirs = [Path("/usr/share/fonts/truetype"), Path(matplotlib.get_data_path()) / "fonts" / "ttf"]
    found: dict[str, Path] = {}
    for folder in dirs:
        for path in sorted(folder.rglob("*.ttf")) if folder.is_dir() else []:
            if path.name in found or path.name.startswith(("cm", "LastResort", "STIXNonUni", "STIXSiz")):
                continue  # TeX and symbol-only fonts map ASCII to other glyphs
            font = ImageFont.truetype(str(path), 40)
            if all(font.getmask(c).getbbox() is not None for c in GLYPHS) and _distinct(font):
                found[path.name] = path
    return [found[name] for name in sorted(found)]


def _distinct(font: ImageFont.FreeTypeFont) -> bool:
    """Whether the font draws each glyph of `GLYPHS` differently from a character it lacks."""
    missing = np.asarray(font.getmask("\ue000"))
    return all(np.asarray(font.getmask(c)).tobytes() != missing.tobytes() for c in GLYPHS)


def _colours(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(background, foreground): light on dark or dark on light at random, random hues."""
    dark = tuple(int(v) for v in rng.integers(0, 90, 3))
    light = tuple(int(v) for v in rng.integers(165, 256, 3))
    return (dark, light) if rng.random() < 0.5 else (light, dark)


def _noise(img: Image.Image, rng: np.random.Generator, sigma: float) -> Image.Image:
    pixels = np.asarray(img, dtype=np.float32) + rng.normal(0, sigma, (SIZE, SIZE, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _glyph(char: str, font_path: Path, rng: np.random.Generator) -> Image.Image:
    bg, fg = _colours(rng)
    font = ImageFont.truetype(str(font_path), int(rng.integers(30, 48)))
    layer = Image.new("L", (2 * SIZE, 2 * SIZE))
    stroke = int(rng.integers(0, 3))
    outline = rng.random() < 0.3
    draw = ImageDraw.Draw(layer)
    draw.text((SIZE, SIZE), char, font=font, fill=0 if outline else 255, anchor="mm", stroke_width=stroke + outline,
              stroke_fill=255)  # fmt: skip
    layer = layer.rotate(float(rng.uniform(-20, 20)), resample=Image.BILINEAR)
    box = layer.getbbox() or (0, 0, 2 * SIZE, 2 * SIZE)
    layer = layer.crop(box)
    if max(layer.size) > SIZE - 6:  # keep the whole glyph inside the image
        scale = (SIZE - 6) / max(layer.size)
        layer = layer.resize((max(1, int(layer.width * scale)), max(1, int(layer.height * scale))), Image.BILINEAR)
    x = int(rng.integers(2, SIZE - layer.width - 1))
    y = int(rng.integers(2, SIZE - layer.height - 1))
    img = Image.new("RGB", (SIZE, SIZE), bg)
    img.paste(Image.new("RGB", layer.size, fg), (x, y), layer)
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.0))))
    return _noise(img, rng, float(rng.uniform(0, 12)))


def render_glyphs(out: Path, seed: int) -> dict:
    """Write out/<split>/<glyph index>/<n>.png; fonts are dealt to train/val/test (60/20/20%), never shared."""
    rng = np.random.default_rng(seed)
    fonts = _fonts()
    order = rng.permutation(len(fonts))
    n_val = n_test = max(1, round(0.2 * len(fonts)))
    split_fonts = {
        "test": [fonts[i] for i in order[:n_test]],
        "val": [fonts[i] for i in order[n_test : n_test + n_val]],
        "train": [fonts[i] for i in order[n_test + n_val :]],
    }
    counts = {}
    for split, n in PER_CLASS.items():
        for label, char in enumerate(GLYPHS):
            folder = out / split / f"{label}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                font = split_fonts[split][int(rng.integers(len(split_fonts[split])))]
                _glyph(char, font, rng).save(folder / f"{i:04d}.png")
        counts[split] = n * len(GLYPHS)
    counts["fonts"] = {s: [f.name for f in fs] for s, fs in split_fonts.items()}
    return counts


def _photos() -> list[np.ndarray]:
    """The photographs that ship with scikit-learn and matplotlib, as uint8 [H, W, 3]."""
    import matplotlib
    import sklearn.datasets

    paths = [Path(sklearn.datasets.__file__).parent / "images" / name for name in ("china.jpg", "flower.jpg")]
    paths.append(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg")
    return [np.asarray(Image.open(p).convert("RGB")) for p in paths]


def _crop(photo: np.ndarray, lo: float, hi: float, rng: np.random.Generator) -> Image.Image:
    """A random square crop (side 64-160 px) from columns lo..hi (fractions) of `photo`, resized to 64x64."""
    h, w = photo.shape[:2]
    left, right = int(lo * w), int(hi * w)
    side = int(rng.integers(SIZE, min(160, right - left, h) + 1))
    x = int(rng.integers(left, right - side + 1))
    y = int(rng.integers(0, h - side + 1))
    return Image.fromarray(photo[y : y + side, x : x + side]).resize((SIZE, SIZE), Image.BILINEAR)


def _polygon(shape: str, r: float) -> list[list[tuple[float, float]]]:
    """Polygons (outer first; a second one is cut out) of `shape` with radius `r` around (0, 0)."""

    def ring(n: int, radius: float, phase: float = -math.pi / 2) -> list[tuple[float, float]]:
        return [(radius * math.cos(phase + 2 * math.pi * k / n), radius * math.sin(phase + 2 * math.pi * k / n))
                for k in range(n)]  # fmt: skip

    if shape == "circle":
        return [ring(48, r)]
    if shape == "square":
        return [ring(4, r, math.pi / 4)]
    if shape == "triangle":
        return [ring(3, r)]
    if shape == "hexagon":
        return [ring(6, r)]
    if shape == "star":
        outer, inner = ring(5, r), ring(5, 0.4 * r, -math.pi / 2 + math.pi / 5)
        return [[p for pair in zip(outer, inner, strict=True) for p in pair]]
    if shape == "ring":
        return [ring(48, r), ring(48, 0.55 * r)]
    if shape == "crescent":
        return [ring(48, r), [(x + 0.45 * r, y - 0.1 * r) for x, y in ring(48, 0.85 * r)]]
    t = 0.3 * r
    if shape == "cross":
        return [[(-t, -r), (t, -r), (t, -t), (r, -t), (r, t), (t, t), (t, r), (-t, r), (-t, t), (-r, t), (-r, -t),
                 (-t, -t)]]  # fmt: skip
    if shape == "arrow":  # points up
        return [[(0, -r), (0.75 * r, -0.1 * r), (t, -0.1 * r), (t, r), (-t, r), (-t, -0.1 * r), (-0.75 * r, -0.1 * r)]]
    if shape == "bar":
        return [[(-r, -0.25 * r), (r, -0.25 * r), (r, 0.25 * r), (-r, 0.25 * r)]]
    raise ValueError(shape)


def _shape(shape: str, photos: list[np.ndarray], lo: float, hi: float, rng: np.random.Generator) -> Image.Image:
    img = _crop(photos[int(rng.integers(len(photos)))], lo, hi, rng)
    r = float(rng.uniform(0.22, 0.4)) * SIZE
    angle = float(rng.uniform(-25, 25)) * math.pi / 180
    cx, cy = (float(rng.uniform(r + 2, SIZE - r - 2)) for _ in range(2))
    mask = Image.new("L", (SIZE, SIZE))
    draw = ImageDraw.Draw(mask)
    for k, poly in enumerate(_polygon(shape, r)):
        turned = [(cx + x * math.cos(angle) - y * math.sin(angle), cy + x * math.sin(angle) + y * math.cos(angle))
                  for x, y in poly]  # fmt: skip
        draw.polygon(turned, fill=0 if k else 255)
    fill = np.asarray(_crop(photos[int(rng.integers(len(photos)))], lo, hi, rng), dtype=np.float32)
    tint = rng.uniform(0.2, 1.0, 3) * 255
    light = np.linspace(1.2, 0.7, SIZE)[:, None, None] if rng.random() < 0.5 else 1.0  # shading from above
    fill = np.clip((0.4 * fill + 0.6 * tint) * light, 0, 255).astype(np.uint8)
    img.paste(Image.fromarray(fill), (0, 0), mask.filter(ImageFilter.GaussianBlur(0.6)))
    return _noise(img, rng, float(rng.uniform(0, 8)))


def render_shapes(out: Path, seed: int) -> dict:
    """Write out/<split>/<shape>/<n>.png; each split's backgrounds and fills come from its own columns."""
    rng = np.random.default_rng(seed)
    photos = _photos()
    columns = {"train": (0.0, 0.6), "val": (0.6, 0.8), "test": (0.8, 1.0)}
    counts = {}
    for split, n in PER_CLASS.items():
        for shape in SHAPES:
            folder = out / split / shape
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                _shape(shape, photos, *columns[split], rng).save(folder / f"{i:04d}.png")
        counts[split] = n * len(SHAPES)
    return counts
