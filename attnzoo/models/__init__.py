"""Model builders: `MODELS` maps a config `model.kind` to a function (or class) returning an `nn.Module`."""

from .text import TextClassifier

MODELS = {"text": TextClassifier}

__all__ = ["MODELS", "TextClassifier"]
