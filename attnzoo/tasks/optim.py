"""Optimizer (timm's factory) and learning-rate schedule (linear warmup, then cosine or constant) from config."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import timm.optim
import torch
from torch import nn

from ..util.names import suggest

# options timm's create_optimizer_v2 takes itself; the rest go to the optimizer class
_FACTORY_OPTIONS = ("lr", "weight_decay", "momentum", "filter_bias_and_bn", "layer_decay", "foreach")


def check_optimizer(spec: Mapping[str, Any], what: str = "task.optimizer") -> None:
    """Raise ValueError for an unknown optimizer kind or option, before anything is built."""
    import inspect

    kind = spec.get("kind", "adamw")
    valid = timm.optim.list_optimizers()
    if kind not in valid:
        raise ValueError(
            f"{what}.kind: unknown {kind!r}; valid: timm optimizers, e.g. {valid[:12]}{suggest(kind, valid)}"
        )
    cls = timm.optim.get_optimizer_class(kind)
    params = set(inspect.signature(cls).parameters) - {"params", "self"}
    accepted = sorted(params | set(_FACTORY_OPTIONS))
    for key in spec:
        if key != "kind" and key not in accepted:
            raise ValueError(f"{what}: {kind!r} takes no option {key!r}; valid: {accepted}{suggest(key, accepted)}")
    for key in ("lr", "weight_decay", "momentum"):  # per-group values, which the optimizer classes do not check
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{what}.{key}: {value!r} is not a number (e.g. {key}: 3.0e-3)")
        if value < 0:
            raise ValueError(f"{what}.{key}: {value} must be >= 0")
    betas = spec.get("betas")
    if betas is not None and not (isinstance(betas, list | tuple) and len(betas) == 2):
        raise ValueError(f"{what}.betas: {betas!r}; expected two numbers, e.g. [0.9, 0.999]")
    # other values (betas out of range, ...): built as training builds it, for a one-weight model
    options = {k: v for k, v in spec.items() if k != "kind"}
    try:
        make_optimizer(nn.Linear(1, 1), spec)
    except Exception as err:  # noqa: BLE001 (an optimizer's own check may raise anything, e.g. IndexError for betas)
        raise ValueError(f"{what}: {kind!r} refuses {options}: {type(err).__name__}: {err}") from None


def optimizer_spec(optimizer: Mapping[str, Any] | None, default: Mapping[str, Any]) -> dict[str, Any]:
    """The `task.optimizer` spec, `default` when None (the key left out), checked by `check_optimizer`."""
    if optimizer is not None and not (isinstance(optimizer, Mapping) and optimizer):
        raise ValueError(f"task.optimizer: {optimizer!r} is not an optimizer; give e.g. {{kind: adamw, lr: 0.001}}")
    spec = dict(optimizer if optimizer is not None else default)
    check_optimizer(spec)
    return spec


def configure_optimizers(
    net: nn.Module, spec: Mapping[str, Any], schedule: Callable[[int, int], float] | None, total_steps: int
) -> Any:
    """What a task's `configure_optimizers` returns: the optimizer of `spec`, and with `schedule` a LambdaLR over
    `total_steps` stepped every optimizer step."""
    optimizer = make_optimizer(net, spec)
    if schedule is None:
        return optimizer
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step, total_steps))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def make_optimizer(net: nn.Module, spec: Mapping[str, Any]) -> torch.optim.Optimizer:
    """timm's `create_optimizer_v2`: no weight decay on norms, biases and the model's `no_weight_decay()`."""
    spec = dict(spec)
    return timm.optim.create_optimizer_v2(net, opt=spec.pop("kind", "adamw"), **spec)


def warmup_cosine(*, warmup: float = 0.05, min_lr_ratio: float = 0.0) -> Callable[[int, int], float]:
    """Linear warmup over `warmup` (a fraction of all steps if < 1, else a step count), then cosine.

    The cosine goes from the base learning rate down to `min_lr_ratio` times it at the last step.
    """
    return _schedule(warmup, min_lr_ratio, cosine=True)


def warmup_constant(*, warmup: float = 0.0) -> Callable[[int, int], float]:
    """Linear warmup, then the base learning rate."""
    return _schedule(warmup, 1.0, cosine=False)


def _schedule(warmup: float, min_lr_ratio: float, *, cosine: bool) -> Callable[[int, int], float]:
    if warmup < 0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"warmup ({warmup}) must be >= 0 and min_lr_ratio ({min_lr_ratio}) in [0, 1]")

    def factor(step: int, total: int) -> float:
        n_warm = int(warmup * total) if warmup < 1 else int(warmup)
        if step < n_warm:
            return (step + 1) / (n_warm + 1)  # > 0 from the first step
        if not cosine:
            return 1.0
        progress = min(1.0, (step - n_warm) / max(1, total - n_warm))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


SCHEDULES = {"cosine": warmup_cosine, "constant": warmup_constant}
