"""Example configs of every pattern short name, and the patterns built from them (shared by the pattern and backend
tests)."""

from attnzoo.attention import PATTERNS
from attnzoo.attention.patterns import BlockLocal, Causal, DilatedSlidingWindow, GlobalTokens, Pattern, SlidingWindow
from attnzoo.attention.specs import build

# one example config per short name; a new entry in PATTERNS needs a line here (example_patterns says so)
EXAMPLES = {
    "causal": {},
    "sliding_window": {"window": 100},
    "dilated": {"window": 20, "dilation": 3},
    "global": {"tokens": [0, 517], "num_prefix_tokens": 2},
    "bigbird": {"window": 40, "global_tokens": [0, 5], "num_random": 2, "block": 64, "seed": 3},
    "block_local": {"block": 150},
    "random_blocks": {"num_random": 3, "block": 96, "seed": 1},
}


def example_patterns() -> dict[str, Pattern]:
    """Every short name from its example config, plus compositions with causal and global tokens."""
    missing = set(PATTERNS) - set(EXAMPLES)
    assert not missing, f"add an example config for the new pattern(s) {sorted(missing)} to EXAMPLES (tests/helpers)"
    out = {name: build({"kind": name, **EXAMPLES[name]}, PATTERNS, f"pattern {name}") for name in PATTERNS}
    out["causal_window"] = SlidingWindow(window=77, causal=True)
    out["causal_dilated"] = DilatedSlidingWindow(window=9, dilation=4, causal=True)
    out["window_or_global"] = SlidingWindow(window=30) | GlobalTokens(tokens=[3, 700])
    out["block_local_and_causal"] = BlockLocal(block=77) & Causal()
    return out


PATTERN_CASES = example_patterns()
