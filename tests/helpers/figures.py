"""What a written figure shows: the texts drawn in it and where, to check that labels stay inside and apart."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import matplotlib.text
from matplotlib.transforms import Bbox


@dataclass
class Drawn:
    """A text as drawn: its string, its box and its figure's box, in the pixels of the drawing."""

    text: str
    box: Bbox
    figure: Bbox
    artist: Any

    def inside(self) -> bool:
        f, b = self.figure, self.box
        return f.x0 - 0.5 <= b.x0 and f.y0 - 0.5 <= b.y0 and b.x1 <= f.x1 + 0.5 and b.y1 <= f.y1 + 0.5


def record_texts(monkeypatch: Any) -> dict[int, Drawn]:
    """Record every text each draw puts on a figure (ticks outside the axes are not drawn, so not recorded); the
    last draw of a text (`savefig`'s) wins. Keyed by the text artist."""
    drawn: dict[int, Drawn] = {}
    draw = matplotlib.text.Text.draw

    def recording(self: matplotlib.text.Text, renderer: Any) -> None:
        draw(self, renderer)
        if self.get_visible() and self.get_text():
            box = self.get_window_extent(renderer).frozen()
            drawn[id(self)] = Drawn(self.get_text(), box, self.figure.bbox.frozen(), self)

    monkeypatch.setattr(matplotlib.text.Text, "draw", recording)
    return drawn


def clipped_and_overlapping(drawn: dict[int, Drawn]) -> tuple[list[str], list[tuple[str, str]]]:
    """(texts not wholly inside their figure, pairs of texts whose boxes overlap)."""
    texts = list(drawn.values())
    clipped = [t.text for t in texts if not t.inside()]
    overlapping = [(a.text, b.text) for a, b in itertools.combinations(texts, 2) if a.box.overlaps(b.box)]
    return clipped, overlapping
