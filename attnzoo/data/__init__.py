"""DataModules: `DATAMODULES` maps a config `data.kind` to a LightningDataModule class.

After `setup()` a DataModule exposes `num_classes`, `class_names` and `model_inputs()` (what the model
builder needs, e.g. {"num_classes": 10, "in_chans": 1, "img_size": 28}). Batches are dicts.
"""

from .audio import AudioDataModule
from .image import ImageDataModule
from .lm import LMDataModule
from .text import TextDataModule
from .text_image import TextImageDataModule
from .translation import TranslationDataModule

DATAMODULES = {
    "image": ImageDataModule,
    "text": TextDataModule,
    "audio": AudioDataModule,
    "text_image": TextImageDataModule,
    "translation": TranslationDataModule,
    "lm": LMDataModule,
}

__all__ = [
    "DATAMODULES",
    "AudioDataModule",
    "ImageDataModule",
    "LMDataModule",
    "TextDataModule",
    "TextImageDataModule",
    "TranslationDataModule",
]
