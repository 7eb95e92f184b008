"""Names in messages: did-you-mean for a name that is not one of the valid choices (config keys, kinds, columns,
options), and a long list of named problems shortened."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def suggest(word: str, choices: list[str]) -> str:
    """ "; did you mean 'x'?" for the closest of `choices`, or "" when none is close; of equally close ones, the
    first in `choices` (registries list their defaults first: "mah" suggests "mha", not "mla")."""
    if not isinstance(word, str):  # a YAML null or number where a name belongs
        return ""
    close = difflib.get_close_matches(word, choices, n=len(choices), cutoff=0.6)
    if not close:
        return ""
    best = max(difflib.SequenceMatcher(None, word, c).ratio() for c in close)
    first = next(c for c in choices if c in close and difflib.SequenceMatcher(None, word, c).ratio() == best)
    return f"; did you mean {first!r}?"


def shortened(items: Sequence[str], shown: int = 10) -> str:
    """`items` joined with "; ", the first `shown` of them, and how many more ("a; b; and 3 more")."""
    text = "; ".join(items[:shown])
    return text + (f"; and {len(items) - shown} more" if len(items) > shown else "")


# parts of a metric's name that mark lower values as better (a loss, a perplexity, an error rate)
LOWER_IS_BETTER = ("loss", "err", "perplexity", "ppl", "wer", "cer")


def metric_mode(metric: str) -> str:
    """ "min" for a metric whose lower values are better (`LOWER_IS_BETTER`: val/loss, val/ppl), else "max"."""
    return "min" if any(part in metric for part in LOWER_IS_BETTER) else "max"
