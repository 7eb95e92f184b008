"""The shared attention core: no Lightning import anywhere in here."""

from . import blocked, flex  # noqa: F401  (backends register themselves in backends.BACKENDS)
from .attention import Attention, capture_attention
from .backends import AUTO_ORDER, BACKENDS, attend, choose_backend, register_backend
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
    "AUTO_ORDER",
    "BACKENDS",
    "PATTERNS",
    "Attention",
    "BigBird",
    "BlockLocal",
    "Causal",
    "DilatedSlidingWindow",
    "GlobalTokens",
    "KeyPadding",
    "Pattern",
    "RandomBlocks",
    "SlidingWindow",
    "attend",
    "capture_attention",
    "choose_backend",
    "from_multihead_attention",
    "register_backend",
]
