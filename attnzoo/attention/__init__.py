"""The shared attention core: no Lightning import anywhere in here."""

from .attention import Attention, capture_attention
from .backends import AUTO_ORDER, BACKENDS, attend, choose_backend, register_backend
from .interop import from_multihead_attention
from .patterns import Causal, Pattern

__all__ = [
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
