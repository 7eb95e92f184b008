"""Model builders: `MODELS` maps a config `model.kind` to a function returning an `nn.Module`.

A builder takes keyword arguments only; it receives the `model:` config keys plus the data's
`model_context()` keys it accepts (num_classes, in_chans, img_size, ...).
"""

from collections.abc import Callable

from torch import nn

from .ast import AST
from .vit import ViT, vit

MODELS: dict[str, Callable[..., nn.Module]] = {"vit": vit, "ast": AST}

__all__ = ["AST", "MODELS", "ViT", "vit"]
