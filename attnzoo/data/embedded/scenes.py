"""Generated scenes: the embedded default data of the text-image recipe (no download).

A scene is a few shapes (colour, shape, size) in the cells of a grid x grid layout, drawn on a dark canvas.
Each example pairs a scene with a text whose answer needs the image:

- `vqa` (answer classification): "what color is the shape left of the red circle?", "is there a blue square?",
  "how many triangles are there?" / "how many green shapes are there?". The answer is drawn uniformly first
  and the scene is built to fit it, so for a given question every answer of its type is equally likely:
  the text alone predicts nothing beyond the question type.
- `match` (image-text matching): "a small red circle", "a red circle left of a blue square"; half true, half
  false (one attribute changed so the caption no longer fits).

Colour/shape pairs named by the text in the held-out set never appear in the training texts (the shapes
still appear in training images): validation asks about combinations the model has never read.
Everything is deterministic from `seed`.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (230, 50, 50),
    "green": (50, 190, 70),
    "blue": (60, 110, 255),
    "yellow": (240, 220, 50),
    "purple": (170, 70, 220),
}
SHAPES = ("square", "circle", "triangle")
SIZES: dict[str, float] = {"small": 0.22, "large": 0.42}  # half-width as a fraction of a cell
COUNTS = ("0", "1", "2", "3")
VQA_ANSWERS = (*COLORS, "no", "yes", *COUNTS)
MATCH_ANSWERS = ("mismatch", "match")
QUESTION_KINDS = ("color_left", "exists", "count_shape", "count_color")
CAPTION_KINDS = ("exists", "left_of")
TASKS = ("vqa", "match")


@dataclass(frozen=True)
class Item:
    """One shape in a scene, at grid cell (row, col)."""

    color: str
    shape: str
    size: str
    row: int
    col: int


@dataclass(frozen=True)
class Example:
    """A scene with its text and answer; `kind` says which template made the text."""

    items: tuple[Item, ...]
    text: str
    label: str
    kind: str


def render(items: tuple[Item, ...], *, image_size: int, grid: int, rng: random.Random) -> np.ndarray:
    """uint8 [image_size, image_size, 3]; each shape is jittered inside its cell."""
    img = Image.new("RGB", (image_size, image_size), (20, 20, 20))
    draw = ImageDraw.Draw(img)
    cell = image_size / grid
    for it in items:
        r = SIZES[it.size] * cell
        slack = max(cell / 2 - r - 1, 0.0)
        cy = (it.row + 0.5) * cell + rng.uniform(-slack, slack)
        cx = (it.col + 0.5) * cell + rng.uniform(-slack, slack)
        box = (cx - r, cy - r, cx + r, cy + r)
        if it.shape == "square":
            draw.rectangle(box, fill=COLORS[it.color])
        elif it.shape == "circle":
            draw.ellipse(box, fill=COLORS[it.color])
        else:  # triangle, apex up
            draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=COLORS[it.color])
    return np.asarray(img)


class SceneGenerator:
    """Makes examples for one task; training and validation splits differ in seed and in held-out pairs.

    Args:
        task: "vqa" (answer from `VQA_ANSWERS`) or "match" (`MATCH_ANSWERS`).
        grid: cells per side; shapes sit one per cell.
        min_objects, max_objects: shapes per scene.
        held_out: how many colour/shape pairs the training texts never mention.
        seed: everything (scenes, texts, held-out pairs) follows from it.
    """

    def __init__(
        self,
        *,
        task: str = "vqa",
        grid: int = 3,
        min_objects: int = 3,
        max_objects: int = 6,
        held_out: int = 3,
        seed: int = 0,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"task {task!r} is not one of {TASKS}")
        if grid < 2:
            raise ValueError(f"grid ({grid}) must be >= 2 (left-of questions need two columns)")
        if not 3 <= min_objects <= max_objects <= grid * grid:
            raise ValueError(f"need 3 <= min_objects ({min_objects}) <= max_objects ({max_objects}) <= grid^2")
        pairs = list(itertools.product(COLORS, SHAPES))
        if not 0 <= held_out < len(pairs):
            raise ValueError(f"held_out ({held_out}) must be in [0, {len(pairs)})")
        self.task, self.grid, self.seed = task, grid, seed
        self.min_objects, self.max_objects = min_objects, max_objects
        self.held_out_pairs = frozenset(random.Random(f"held-out {seed}").sample(pairs, held_out))
        self.class_names = list(VQA_ANSWERS if task == "vqa" else MATCH_ANSWERS)

    def examples(self, n: int, *, split: str) -> list[Example]:
        """`n` examples of `split` ("train": no held-out pair named; "val"/"test": any pair)."""
        splits = ("train", "val", "test")
        if split not in splits:
            raise ValueError(f"split {split!r} is not one of {splits}")
        rng = random.Random(f"{split} {self.seed}")
        make, kinds = (self._vqa, QUESTION_KINDS) if self.task == "vqa" else (self._match, CAPTION_KINDS)
        out = []
        for _ in range(n):
            kind = _pick(rng, kinds)  # kinds stay balanced: draw again within the kind until one fits
            ex = None
            while ex is None or (split == "train" and self._names_held_out(ex)):
                ex = make(rng, kind)
            out.append(ex)
        return out

    def images(self, examples: list[Example], *, image_size: int, split: str) -> np.ndarray:
        """uint8 [N, image_size, image_size, 3] renderings of `examples` (deterministic jitter)."""
        if image_size < 4 * self.grid:
            raise ValueError(f"image_size ({image_size}) is too small for a {self.grid}x{self.grid} grid")
        rng = random.Random(f"{split} images {self.seed}")
        return np.stack([render(ex.items, image_size=image_size, grid=self.grid, rng=rng) for ex in examples])

    # -- scenes and texts -------------------------------------------------------------------------------------

    def _names_held_out(self, ex: Example) -> bool:
        return any(f"{c} {s}" in ex.text for c, s in self.held_out_pairs)

    def _scene(self, rng: random.Random) -> list[Item]:
        n = rng.randint(self.min_objects, self.max_objects)
        cells = rng.sample(range(self.grid * self.grid), n)
        return [
            Item(_pick(rng, COLORS), _pick(rng, SHAPES), _pick(rng, SIZES), c // self.grid, c % self.grid)
            for c in cells
        ]

    def _vqa(self, rng: random.Random, kind: str) -> Example | None:
        items = self._scene(rng)
        if kind == "color_left":
            answer = _pick(rng, COLORS)
            cells = {(it.row, it.col): i for i, it in enumerate(items)}
            refs = [i for i, it in enumerate(items) if (it.row, it.col - 1) in cells]
            if not refs:
                return None
            ref = items[rng.choice(refs)]
            left = cells[(ref.row, ref.col - 1)]
            items[left] = _replace(items[left], color=answer)
            if sum(_same(it, ref) for it in items) > 1:  # the reference must be unique
                return None
            return Example(tuple(items), f"what color is the shape left of the {ref.color} {ref.shape}?", answer, kind)
        if kind == "exists":
            color, shape, answer = _pick(rng, COLORS), _pick(rng, SHAPES), _pick(rng, ("no", "yes"))
            others = [c for c in COLORS if c != color]
            items = [
                _replace(it, color=_pick(rng, others)) if (it.color, it.shape) == (color, shape) else it for it in items
            ]
            if answer == "yes":
                i = rng.randrange(len(items))
                items[i] = _replace(items[i], color=color, shape=shape)
            return Example(tuple(items), f"is there a {color} {shape}?", answer, kind)
        count = rng.randrange(len(COUNTS))
        field = "shape" if kind == "count_shape" else "color"
        value = _pick(rng, SHAPES if field == "shape" else COLORS)
        others = [v for v in (SHAPES if field == "shape" else COLORS) if v != value]
        chosen = set(rng.sample(range(len(items)), count))
        items = [_replace(it, **{field: value if i in chosen else _pick(rng, others)}) for i, it in enumerate(items)]
        text = f"how many {value}s are there?" if field == "shape" else f"how many {value} shapes are there?"
        return Example(tuple(items), text, str(count), kind)

    def _match(self, rng: random.Random, kind: str) -> Example | None:
        items = self._scene(rng)
        match = rng.random() < 0.5
        cells = {(it.row, it.col): it for it in items}
        pairs = [(cells[(it.row, it.col - 1)], it) for it in items if (it.row, it.col - 1) in cells]
        if kind == "left_of":
            if not pairs:
                return None
            a, b = rng.choice(pairs)
            if not match:  # change one attribute of one side so the relation no longer holds
                a, b = (_corrupt(rng, a), b) if rng.random() < 0.5 else (a, _corrupt(rng, b))
            text = f"a {a.color} {a.shape} left of a {b.color} {b.shape}"
            truth = any(_same(x, a) and _same(y, b) for x, y in pairs)
        else:
            it = rng.choice(items)
            if not match:
                it = _corrupt(rng, it)
            text = f"a {it.size} {it.color} {it.shape}"
            truth = any(_same(x, it) and x.size == it.size for x in items)
        if truth != match:  # a corruption that happens to be true elsewhere in the scene: draw again
            return None
        return Example(tuple(items), text, MATCH_ANSWERS[int(match)], kind)


def _pick(rng: random.Random, choices) -> str:
    return rng.choice(list(choices))


def _same(a: Item, b: Item) -> bool:
    return (a.color, a.shape) == (b.color, b.shape)


def _replace(it: Item, **changes) -> Item:
    return Item(**{**it.__dict__, **changes})


def _corrupt(rng: random.Random, it: Item) -> Item:
    field = _pick(rng, ("color", "shape"))
    options = [v for v in (COLORS if field == "color" else SHAPES) if v != getattr(it, field)]
    return _replace(it, **{field: _pick(rng, options)})


def write_jsonl(directory: str | Path, examples: list[Example], images: np.ndarray, *, name: str = "data") -> Path:
    """Save `examples` in the on-disk format: `<name>.jsonl` plus one PNG per example under `<name>/`.

    Each line is `{"image": "<name>/00000.png", "text": ..., "label": ...}` (image path relative to the JSONL).
    """
    directory = Path(directory)
    (directory / name).mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.jsonl"
    with path.open("w") as f:
        for i, (ex, img) in enumerate(zip(examples, images, strict=True)):
            rel = f"{name}/{i:05d}.png"
            Image.fromarray(img).save(directory / rel)
            f.write(json.dumps({"image": rel, "text": ex.text, "label": ex.label}) + "\n")
    return path
