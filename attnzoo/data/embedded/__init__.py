"""Generators of the embedded default datasets (no download, deterministic from a seed)."""
