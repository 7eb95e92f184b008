"""Attention kinds whose math differs from multi-head attention; each is an `Attention` subclass.

They join `ATTENTION_KINDS` (config `attention.kind`) when this package is imported (`attnzoo.attention` does).
"""

from ..attention import ATTENTION_KINDS
from .chunked import chunked_attention
from .compose import ComposedAttention, HeadComposition
from .dcmha import DCMHAttention
from .differential import DifferentialAttention
from .gated import GatedAttention
from .linformer import LinformerAttention
from .mla import MultiHeadLatentAttention
from .sigmoid import SigmoidAttention
from .sinks import SinkAttention
from .talking_heads import TalkingHeadsAttention

ATTENTION_KINDS.update(
    {
        "talking_heads": TalkingHeadsAttention,
        "dcmha": DCMHAttention,
        "linformer": LinformerAttention,
        "gated": GatedAttention,
        "sinks": SinkAttention,
        "differential": DifferentialAttention,
        "sigmoid": SigmoidAttention,
        "mla": MultiHeadLatentAttention,
    }
)

__all__ = [
    "ComposedAttention",
    "DCMHAttention",
    "DifferentialAttention",
    "GatedAttention",
    "HeadComposition",
    "LinformerAttention",
    "MultiHeadLatentAttention",
    "SigmoidAttention",
    "SinkAttention",
    "TalkingHeadsAttention",
    "chunked_attention",
]
