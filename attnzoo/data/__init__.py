"""DataModules: `DATAMODULES` maps a config `data.kind` to a LightningDataModule class.

Sub-packages by role: `modules` (the LightningDataModules and their defaults), `formats` (readers of files on
disk), `embedded` (generators of the default datasets that need no download), `tokenizers`.

After `setup()` a DataModule exposes `num_classes`, `class_names` and `model_inputs()` (what the model
builder needs, e.g. {"num_classes": 10, "in_chans": 1, "img_size": 28}). Batches are dicts.
"""

from .modules.audio import AudioDataModule
from .modules.image import ImageDataModule
from .modules.lm import LMDataModule
from .modules.mlm import MLMDataModule
from .modules.text import TextDataModule
from .modules.text_image import TextImageDataModule
from .modules.translation import TranslationDataModule

DATAMODULES = {
    "image": ImageDataModule,
    "text": TextDataModule,
    "audio": AudioDataModule,
    "text_image": TextImageDataModule,
    "translation": TranslationDataModule,
    "lm": LMDataModule,
    "mlm": MLMDataModule,
}

__all__ = [
    "DATAMODULES",
    "AudioDataModule",
    "ImageDataModule",
    "LMDataModule",
    "MLMDataModule",
    "TextDataModule",
    "TextImageDataModule",
    "TranslationDataModule",
]
