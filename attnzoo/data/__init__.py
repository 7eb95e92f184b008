"""DataModules: `DATAMODULES` maps a config `data.kind` to a LightningDataModule class."""

from .text_image import TextImageDataModule

DATAMODULES = {"text_image": TextImageDataModule}

__all__ = ["DATAMODULES", "TextImageDataModule"]
