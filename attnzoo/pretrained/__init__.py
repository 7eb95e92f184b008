"""Pretrained weights: Hugging Face and timm checkpoints on disk, and attnzoo's own runs (`converted.Converted`)."""
