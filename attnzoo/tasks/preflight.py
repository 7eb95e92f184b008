"""What a task checks when training sets up, before the first step: choices that only the device makes impossible."""

from __future__ import annotations

from torch import nn

from ..attention.attention import Attention
from ..attention.backends import BACKENDS, Request


class SetupError(ValueError):
    """A task's check as a pass sets up, before its first batch (a prompt longer than the context): the message is
    the whole error, which the commands print as they print a config error."""


# explicit backends whose refusals depend on the device (flex: no backward on CPU; flash: CUDA only, no bias)
DEVICE_BOUND = ("flex", "flash")


def check_trainable_backends(net: nn.Module, device_type: str) -> None:
    """Raise ValueError when an attention layer asks for a backend that cannot train it on `device_type` (FlexAttention
    on CPU has no backward, flash-attn runs on CUDA only): known when training sets up, not at the first step. What
    depends on the batch (lengths, padding) is left to the call; layers on `auto` always train."""
    for name, module in net.named_modules():
        if not isinstance(module, Attention) or module.backend not in DEVICE_BOUND or module.backend not in BACKENDS:
            continue
        request = Request(
            device_type=device_type,
            needs_grad=True,
            return_weights=False,
            pattern=None,  # its block layout depends on the lengths: checked per call
            bias=module.bias,
            has_padding=False,
            lq=1,
            lk=1,
            dropout_p=module.attn_drop,
            head_dim=module.head_dim,
        )
        reason = BACKENDS[module.backend].supports(request)
        if reason is not None:
            raise ValueError(
                f"attention backend {module.backend!r} (layer {name or 'net'}) cannot train on {device_type}: "
                f"{reason}; set the model's attention backend to 'auto' (or 'blocked' for sparse patterns on CPU)"
            )
