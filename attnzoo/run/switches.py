"""Trainer switches of the `trainer:` section: precision `auto`, activation checkpointing, torch.compile.

- `trainer.precision: auto` resolves to `bf16-mixed` where bfloat16 is fast (a CUDA device with bf16, or a CPU
  with AMX bf16 tiles; avx512_bf16 alone measured ~2x slower than fp32 for the recipes' models), `16-mixed`
  (fp16 with loss scaling) on CUDA without bf16, else `32-true`. The choice
  is logged once and written into the run's saved config.
- `trainer.grad_checkpointing: true | {enabled, every, attention_only}` is applied to every `Encoder` of the net.
- `trainer.compile: true` compiles the net in place (`nn.Module.compile`; parameter names are unchanged).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger("attnzoo")
# tests only: "1" / "0" makes precision `auto` act as on a CPU with / without bfloat16 instructions
CPU_BF16_ENV = "ATTNZOO_CPU_BF16"


def cpu_has_fast_bf16() -> bool:
    """Whether bf16 autocast pays on this CPU: it has AMX bf16 tiles (avx512_bf16 alone measured ~2x slower).

    The environment variable `ATTNZOO_CPU_BF16=1|0` overrides what the CPU says, so the test suite can run both
    branches of `precision: auto` on any machine.
    """
    forced = os.environ.get(CPU_BF16_ENV)
    if forced is not None:
        if forced not in ("0", "1"):
            raise ValueError(f"{CPU_BF16_ENV}={forced!r}: expected 1 (CPU has bf16) or 0 (it has not)")
        return forced == "1"
    return _cpu_flags_have_bf16()


@functools.cache
def _cpu_flags_have_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "amx_bf16" in flags


def uses_cuda(accelerator: Any) -> bool:
    """Whether a trainer of `accelerator` computes on CUDA (named, or `auto` with a GPU here)."""
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator in (None, "auto") and torch.cuda.is_available()


def resolve_precision(precision: Any, accelerator: Any = "auto") -> tuple[Any, str]:
    """(precision, why): `precision` unchanged unless it is "auto"."""
    if precision != "auto":
        return precision, "set explicitly"
    if uses_cuda(accelerator):
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16-mixed", f"CUDA device {torch.cuda.get_device_name()} supports bfloat16"
        return "16-mixed", "CUDA device without bfloat16: float16 autocast with loss scaling"
    if cpu_has_fast_bf16():
        return "bf16-mixed", "CPU has AMX bf16 tiles"
    capability = torch.backends.cpu.get_cpu_capability()
    return "32-true", f"CPU ({capability}) has no AMX, where bf16 autocast is slower than fp32"


def apply_grad_checkpointing(net: nn.Module, value: Any) -> int:
    """Apply `trainer.grad_checkpointing` to every `Encoder` in `net`; returns how many were set."""
    from ..layers.encoder import Encoder, checkpointing_options

    opts = checkpointing_options(value)
    if not opts["enabled"]:
        return 0
    encoders = [m for m in net.modules() if isinstance(m, Encoder)]
    if not encoders:
        raise ValueError(f"trainer.grad_checkpointing: {type(net).__name__} has no attnzoo Encoder to checkpoint")
    for encoder in encoders:
        encoder.set_grad_checkpointing(True, every=opts["every"], attention_only=opts["attention_only"])
    log.info("activation checkpointing on %d encoder(s): %s", len(encoders), opts)
    return len(encoders)


def compile_net(net: nn.Module) -> nn.Module:
    """Compile `net` in place with torch.compile (inductor); the first steps are slow while it compiles."""
    net.compile()
    log.info("torch.compile: %s compiled in place (inductor)", type(net).__name__)
    return net
