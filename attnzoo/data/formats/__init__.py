"""Readers of the on-disk formats: text/CSV/JSONL, parallel TSV/JSONL, images, WAV clips."""
