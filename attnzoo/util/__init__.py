"""Helpers every layer of attnzoo uses (the attention core too): "did you mean" for names, and the gate on code
that a config names by import path, and JSON files written whole. Standard library only; imports nothing else from
attnzoo."""
