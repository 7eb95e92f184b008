"""Tensors kept across calls (cached masks, plans, dense biases) made so that any later call may use them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def lasting(make: Callable[[], T]) -> T:
    """`make()`, for a cache that outlives this call. Under `torch.inference_mode` its tensors would be inference
    tensors, which autograd refuses to save for backward when the same module trains afterwards (a
    `trainer.validate()` before `fit`, a generation before fine-tuning); there it is made outside inference mode,
    still without gradients."""
    if not torch.is_inference_mode_enabled():
        return make()
    with torch.inference_mode(False), torch.no_grad():
        return make()
