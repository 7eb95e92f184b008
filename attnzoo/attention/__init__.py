"""The shared attention core: no Lightning import anywhere in here."""

from . import flash, variants  # noqa: F401  (register the flash backend and the attention kinds)
from .attention import ATTENTION_KINDS, Attention, capture_attention
from .backends import AUTO_ORDER, BACKENDS, attend, choose_backend, register_backend
from .interop import from_multihead_attention
from .patterns import Causal, Pattern

__all__ = [
    "ATTENTION_KINDS",
    "AUTO_ORDER",
    "BACKENDS",
    "Attention",
    "Causal",
    "Pattern",
    "attend",
    "capture_attention",
    "choose_backend",
    "from_multihead_attention",
    "register_backend",
]
