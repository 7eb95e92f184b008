"""`Mlp`: timm's MLP (fc1, act, drop1, norm, fc2, drop2), with its dropouts skipped outside training.

Notation: B batch, L tokens, C width.
"""

from __future__ import annotations

import torch
from timm.layers import Mlp as TimmMlp

Tensor = torch.Tensor


class Mlp(TimmMlp):
    """timm's `Mlp`: the same arguments, modules and parameter names (its state dicts load as they are), and the same
    outputs. Dropout is the identity in eval, so there its calls are skipped: a decoding step at batch 1 is made of
    many such small calls."""

    def forward(self, x: Tensor) -> Tensor:
        """x [B, L, C] -> [B, L, C]."""
        x = self.act(self.fc1(x))
        if self.training:
            x = self.drop1(x)
        x = self.fc2(self.norm(x))
        return self.drop2(x) if self.training else x
