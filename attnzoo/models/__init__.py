"""Model builders: `MODELS` maps a config `model.kind` to a function returning an `nn.Module`.

A builder takes keyword arguments only; it receives the `model:` config keys plus the data's
`model_inputs()` keys it accepts (num_classes, in_chans, img_size, ...).
"""

from collections.abc import Callable

from torch import nn

from .ast import AST
from .lm import CausalLM
from .mlm import MaskedLM
from .seq2seq import Seq2Seq
from .text import TextClassifier
from .text_image import TextImageNet
from .vit import ViT, vit

MODELS: dict[str, Callable[..., nn.Module]] = {
    "vit": vit,
    "text": TextClassifier,
    "ast": AST,
    "text_image": TextImageNet,
    "seq2seq": Seq2Seq,
    "lm": CausalLM,
    "mlm": MaskedLM,
}

__all__ = ["AST", "MODELS", "CausalLM", "MaskedLM", "Seq2Seq", "TextClassifier", "TextImageNet", "ViT", "vit"]
