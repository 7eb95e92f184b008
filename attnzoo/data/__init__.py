"""DataModules: `DATAMODULES` maps a config `data.kind` to a LightningDataModule class."""

from .text import TextDataModule

DATAMODULES = {"text": TextDataModule}

__all__ = ["DATAMODULES", "TextDataModule"]
