"""The shared attention core: no Lightning import anywhere in here."""

# backends and attention kinds register themselves on import; sdpa first, so the table lists eager, sdpa, then the rest
from . import sdpa  # noqa: F401

# isort: split
from . import blocked, flash, flex, variants  # noqa: F401
from .attention import ATTENTION_KINDS, Attention, Call, capture_attention
from .backends import AUTO_ORDER, BACKENDS, Transform, attend, choose_backend, register_backend
from .cache import CrossKVCache, DecodingCache, KVCache, SlidingWindowKVCache
from .interop import from_multihead_attention
from .patterns import (
    PATTERNS,
    BigBird,
    BlockLocal,
    Causal,
    DilatedSlidingWindow,
    GlobalTokens,
    KeyPadding,
    Pattern,
    RandomBlocks,
    SlidingWindow,
)

__all__ = [
    "ATTENTION_KINDS",
    "AUTO_ORDER",
    "BACKENDS",
    "PATTERNS",
    "Attention",
    "BigBird",
    "BlockLocal",
    "Call",
    "Causal",
    "CrossKVCache",
    "DecodingCache",
    "DilatedSlidingWindow",
    "GlobalTokens",
    "KVCache",
    "KeyPadding",
    "Pattern",
    "RandomBlocks",
    "SlidingWindow",
    "SlidingWindowKVCache",
    "Transform",
    "attend",
    "capture_attention",
    "choose_backend",
    "from_multihead_attention",
    "register_backend",
]
