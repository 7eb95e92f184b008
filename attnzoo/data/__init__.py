"""DataModules: `DATAMODULES` maps a config `data.kind` to a LightningDataModule class.

After `setup()` a DataModule exposes `num_classes`, `class_names` and `model_context()` (what the model
builder needs, e.g. {"num_classes": 10, "in_chans": 1, "img_size": 28}). Batches are dicts.
"""

from .audio import AudioDataModule
from .image import ImageDataModule
from .text import TextDataModule
from .text_image import TextImageDataModule

DATAMODULES = {
    "image": ImageDataModule,
    "text": TextDataModule,
    "audio": AudioDataModule,
    "text_image": TextImageDataModule,
}

__all__ = ["DATAMODULES", "AudioDataModule", "ImageDataModule", "TextDataModule", "TextImageDataModule"]
