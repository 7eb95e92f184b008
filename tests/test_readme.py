"""README's "Use the blocks in your own LightningModule" example runs as it stands and does what it says."""

import re
from pathlib import Path

import torch

from attnzoo.attention import capture_attention

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Use the blocks in your own LightningModule"


def _example() -> tuple[str, int]:
    """The first python block under SECTION, and the README line it starts on."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    found = re.search(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.DOTALL)
    assert found, f"no python code block in README section {SECTION!r}"
    return found.group(1), text[: start + found.start(1)].count("\n") + 1


def test_readme_lightning_example_trains_and_masks_padding(tmp_path, monkeypatch):
    code, line = _example()
    monkeypatch.chdir(tmp_path)  # anything Lightning writes stays out of the repository
    ns: dict = {"__name__": "readme_example"}
    exec(compile("\n" * (line - 1) + code, str(README), "exec"), ns)  # tracebacks point at README lines

    model, trainer, tokens, labels = ns["model"], ns["trainer"], ns["tokens"], ns["labels"]
    assert trainer.global_step == trainer.max_steps > 0
    assert model.encoder.checkpoint_every == 1, "activation checkpointing is not on"
    model.eval()
    with torch.no_grad():
        accuracy = (model(tokens).argmax(-1) == labels).float().mean().item()
        majority = max(labels.float().mean().item(), 1 - labels.float().mean().item())
        assert accuracy > majority + 0.2, (accuracy, majority)  # it learned the task, not the class prior

        batch = tokens[:8]
        pad = batch == 0
        assert pad.any(), "the example batch has no padding to check"
        with capture_attention() as maps:
            model(batch)
        assert len(maps) == len(model.encoder.blocks)
        lq = batch.shape[1]
        i, j = torch.arange(lq)[:, None], torch.arange(lq)[None, :]
        for w in maps:  # [B, H, L, L]
            assert (w[pad[:, None, None, :].expand_as(w)] == 0).all(), "a padded key got attention weight"
            assert (w[..., (i - j).abs() > 4] == 0).all(), "a key outside the sliding window got attention weight"

        longer = torch.cat([batch, torch.zeros(8, 5, dtype=batch.dtype)], 1)  # more padding: same logits
        torch.testing.assert_close(model(longer), model(batch), atol=1e-5, rtol=1e-5)
