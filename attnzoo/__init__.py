"""attnzoo: a PyTorch Lightning plug-in zoo of attention for multimodal models."""

__version__ = "0.1.0"
