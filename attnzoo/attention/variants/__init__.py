"""Attention kinds whose math differs from multi-head attention; each is an `Attention` subclass.

They join `ATTENTION_KINDS` (config `attention.kind`) when this package is imported (`attnzoo.attention` does).
"""

from ..attention import ATTENTION_KINDS
from .chunked import chunked_attention
from .compose import ComposedAttention, HeadComposition
from .dcmha import DCMHAttention
from .linformer import LinformerAttention
from .talking_heads import TalkingHeadsAttention

ATTENTION_KINDS.update(
    {"talking_heads": TalkingHeadsAttention, "dcmha": DCMHAttention, "linformer": LinformerAttention}
)

__all__ = [
    "ComposedAttention",
    "DCMHAttention",
    "HeadComposition",
    "LinformerAttention",
    "TalkingHeadsAttention",
    "chunked_attention",
]
