"""Gated attention (Qiu et al., 2025, "Gated Attention for Large Language Models"): a sigmoid gate computed from
the layer input multiplies each head's attention output, before the heads are concatenated and projected.

    out_h = attention_h(q, k, v) * sigmoid(x W_g + b_g)_h        (the paper's best position, G1)

The gate is elementwise (one value per head channel, W_g [C, H D]) or headwise (one value per head, [C, H]).
It acts after attention, so every backend runs the attention itself: patterns, biases, key padding, GQA,
cross-attention (the gate comes from the queries' input), rotary and decoding with a cache all work as in `mha`.

Notation: B batch, H heads, Lq queries, C model width, D head dim.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..attention import Attention, Call

Tensor = torch.Tensor

GATES = ("elementwise", "headwise")


class GatedAttention(Attention):
    """Multi-head attention whose head outputs are scaled by a sigmoid gate from the layer input.

    State-dict compatible with `Attention` (and timm's) plus `gate.weight`, `gate.bias`.

    Args:
        gate: "elementwise" (a gate per head channel, the paper's best) or "headwise" (one per head).
        kwargs: `Attention` options.
    """

    kind = "gated"
    mha_start = "weights and biases at 0: a gate of 0.5 for every input, and proj.weight doubled"
    starts_as_mha = True

    def __init__(self, dim: int, num_heads: int = 8, *, gate: str = "elementwise", **kwargs: Any) -> None:
        if gate not in GATES:
            raise ValueError(f"gate must be one of {list(GATES)}, got {gate!r}")
        super().__init__(dim, num_heads, **kwargs)
        self.gate_kind = gate
        dd = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        self.gate = nn.Linear(dim, dim if gate == "elementwise" else num_heads, **dd)

    def start_from_mha(self, state: dict[str, Tensor], prefix: str) -> None:
        """A multi-head checkpoint's layer, gated at identity: sigmoid(0) = 0.5 halves each head's output and the
        doubled output projection restores it (both exact in binary floating point), so the layer computes what the
        checkpoint's did and every gate weight gets gradients from the start."""
        if prefix + "gate.weight" in state:
            return
        state[prefix + "gate.weight"] = torch.zeros_like(self.gate.weight)
        state[prefix + "gate.bias"] = torch.zeros_like(self.gate.bias)
        state[prefix + "proj.weight"] = state[prefix + "proj.weight"] * 2

    def gates(self, x: Tensor) -> Tensor:
        """The gate of x [B, Lq, C]: [B, H, Lq, D] (elementwise) or [B, H, Lq, 1] (headwise)."""
        b, lq, _ = x.shape
        g = torch.sigmoid(self.gate(x))  # [B, Lq, H D] or [B, Lq, H]
        return g.view(b, lq, self.num_heads, -1).transpose(1, 2)  # [B, H, Lq, D or 1]

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, call: Call) -> tuple[Tensor, Tensor | None]:
        out, weights = super().attend_heads(q, k, v, call)
        return out * self.gates(call.x).to(out.dtype), weights  # weights: the softmax's, before the gate

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gate={self.gate_kind}"
