"""What a task checks when training sets up, before the first step: choices that only the device makes impossible."""

from __future__ import annotations

from torch import nn

from ..attention.attention import Attention
from ..attention.backends import BACKENDS, Request


def check_trainable_backends(net: nn.Module, device_type: str) -> None:
    """Raise ValueError when an attention layer asks for a backend that cannot train on `device_type` (FlexAttention
    on CPU has no backward): known when training sets up, not at the first step. Layers on `auto` always train."""
    for name, module in net.named_modules():
        if not isinstance(module, Attention) or module.backend != "flex":
            continue
        request = Request(device_type, True, False, module.pattern, None, False, 1, 1, dropout_p=module.attn_drop)
        reason = BACKENDS["flex"].supports(request)
        if reason is not None:
            raise ValueError(
                f"attention backend 'flex' (layer {name or 'net'}) cannot train on {device_type}: {reason}; set "
                "model.attention.backend to 'blocked' or 'auto', or train on a GPU"
            )
