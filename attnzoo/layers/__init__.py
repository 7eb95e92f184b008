"""Blocks built from the attention core: pre-norm transformer, cross-attention and decoder blocks, the encoder and
the decoder."""

from timm.layers import SwiGLU

from .block import CrossAttentionBlock, PostNormBlock, TransformerBlock
from .decoder import Decoder, DecoderBlock, PostNormDecoderBlock, make_decoder
from .encoder import Encoder
from .mlp import Mlp

__all__ = [
    "CrossAttentionBlock",
    "Decoder",
    "DecoderBlock",
    "Encoder",
    "Mlp",
    "PostNormBlock",
    "PostNormDecoderBlock",
    "SwiGLU",
    "TransformerBlock",
    "make_decoder",
]
