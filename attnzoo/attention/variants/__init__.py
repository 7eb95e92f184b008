"""Attention kinds whose math differs from multi-head attention; each is an `Attention` subclass.

They join `ATTENTION_KINDS` (config `attention.kind`) when this package is imported (`attnzoo.attention` does).

A new kind is one file here and one line in the table below. It changes one of two things:
- how weights come from scores (like `sinks.py`, `sigmoid.py`): a `backends.Transform` subclass with the formula
  (`weights`), optionally its fused or flex forms, named by the kind's `transform_class`; the backend table in
  `backends.py` then picks, runs and reports the backend ("blocked[sigmoid]") and refuses the rest with a reason;
- what attention reads or returns (like `gated.py`, `mla.py`): override `Attention.attend_heads(q, k, v, call)`.
The kind tests in tests/attention/variants run over `ATTENTION_KINDS`.
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
