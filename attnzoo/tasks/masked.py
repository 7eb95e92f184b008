"""`MaskedLMTask`: masked-language-model pretraining; the network is injected.

Cross entropy over the picked positions only (labels -100 elsewhere: `attnzoo.data.modules.masking`). Logs
`{split}/loss`, `{split}/ppl` (exp of the mean loss per picked token) and `{split}/acc` (the share of picked tokens
predicted exactly). Validation and test masks are fixed, so their numbers compare across epochs and runs.

Notation: B batch, L tokens, V vocabulary, N picked positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from ..data.modules.batching import IGNORE_INDEX
from .sequence import _SequenceTask, sequence_loss

Tensor = torch.Tensor


class MaskedLMTask(_SequenceTask):
    """Masked token prediction (BERT's objective).

    Args:
        net: a masked language model (`attnzoo.models.MaskedLM`): `net(tokens, padding_mask, select)` -> logits
            [N, V] of the selected positions.
        optimizer: `{kind: adamw, lr: ..., ...}`, any timm optimizer and its options; None is AdamW, lr 1e-3.
        scheduler: `{kind: cosine | constant, warmup: ...}` stepped every optimizer step, or None.
    """

    def __init__(
        self,
        *,
        net: nn.Module,
        optimizer: Mapping[str, Any] | None = None,
        scheduler: Mapping[str, Any] | str | None = "cosine",
    ) -> None:
        super().__init__(net=net, optimizer=optimizer, scheduler=scheduler, num_examples=0)
        self.monitor, self.monitor_mode, self.metric_names = "ppl", "min", ("ppl", "acc")
        self.ppl = nn.ModuleDict({s: Perplexity(ignore_index=IGNORE_INDEX) for s in ("val", "test")})
        self.acc = nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return self.net(tokens, padding_mask)

    @staticmethod
    def net_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The keyword arguments of `net` in a batch (every position predicted)."""
        return {"tokens": batch["tokens"], "padding_mask": batch["padding_mask"]}

    def _predict(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(logits [N, V], labels [N]) of the picked positions."""
        select = batch["labels"] != IGNORE_INDEX  # [B, L]
        return self.net(batch["tokens"], batch["padding_mask"], select=select), batch["labels"][select]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits, labels = self._predict(batch)
        loss = sequence_loss(logits[None], labels[None])
        return self._logged_train_loss(loss, batch["tokens"].shape[0])

    def _evaluate(self, batch: dict[str, Tensor], split: str) -> None:
        logits, labels = self._predict(batch)  # [N, V], [N]
        self._logged_eval_loss(split, logits[None], labels[None])
        self.ppl[split].update(logits[None].float(), labels[None])
        self.acc[split].update((logits.argmax(-1) == labels).float())

    def _epoch_end(self, split: str) -> None:
        self.log(f"{split}/ppl", self.ppl[split].compute(), prog_bar=split == "val")
        self.log(f"{split}/acc", self.acc[split].compute())
        self.ppl[split].reset()
        self.acc[split].reset()
