"""Ablations: a grid of config variants (`grid`), run as isolated fit processes (`runner`), one report (`report`)."""
