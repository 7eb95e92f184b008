"""What several test modules share (recipes, quick-run overrides, fakes), so no test module imports another."""

from __future__ import annotations

import json

from attnzoo.config import Config


def smoke_overrides(cfg: Config) -> list[str]:
    """The recipe's `smoke:` mapping as `key=value` overrides."""
    return [f"{k}={json.dumps(v)}" for k, v in cfg.section("smoke").items()]
