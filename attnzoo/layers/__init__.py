"""Blocks built from the attention core: pre-norm transformer and cross-attention blocks, and the encoder."""

from timm.layers import Mlp, SwiGLU

from .block import CrossAttentionBlock, TransformerBlock
from .encoder import Encoder

__all__ = ["CrossAttentionBlock", "Encoder", "Mlp", "SwiGLU", "TransformerBlock"]
