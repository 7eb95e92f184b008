"""DataModules, one per modality, each with an embedded default dataset. `DATAMODULES`: config kind -> class."""

from .audio import AudioDataModule

DATAMODULES = {
    "audio": AudioDataModule,
}
