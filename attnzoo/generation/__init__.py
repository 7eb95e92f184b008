"""Generation over the KV cache: greedy, sampling and beam search, as plain functions (no Lightning).

They drive any model with the `Decodes` protocol (`steps.py`): `new_cache()`, `decode_step(tokens, memory,
memory_padding_mask, cache)` and, for an encoder-decoder, `encode(src, src_padding_mask)`. Every function takes
`use_cache=False` to recompute the whole prefix at each step instead: the reference the cache is tested against.
"""

from .beam import BeamSearchOutput, Hypothesis, beam_search
from .sampling import filter_logits, greedy, sample
from .steps import Decodes, NonFiniteScores, Steps

__all__ = [
    "BeamSearchOutput",
    "Decodes",
    "Hypothesis",
    "NonFiniteScores",
    "Steps",
    "beam_search",
    "filter_logits",
    "greedy",
    "sample",
]
