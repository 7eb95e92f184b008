"""Tokenizers: fixed vocabularies (bytes, ListOps words, a file) and subwords learned from the train split."""
