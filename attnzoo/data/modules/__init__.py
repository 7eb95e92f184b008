"""The LightningDataModules, one per modality, their `auto` defaults and shared batching."""
