"""Model builders: `MODELS` maps a config `model.kind` to a function returning an `nn.Module`."""

from collections.abc import Callable

from torch import nn

from .text_image import TextImageNet

MODELS: dict[str, Callable[..., nn.Module]] = {"text_image": TextImageNet}

__all__ = ["MODELS", "TextImageNet"]
