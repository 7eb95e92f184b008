"""Loading a converted state dict into a freshly built network, tensor by tensor, and saying what happened.

A fine-tuning recipe keeps its own head when the checkpoint's does not fit (another label set); every other tensor
of the network must come from the checkpoint with the same shape, or the checkpoint is of another architecture,
except the parts of an overridden attention that the checkpoint lacks (`surgery`): a kind's own tensors, a bias
table, qk-norm. The network's load hooks run first (`adapted`): key/value heads regrouped to fewer or more, a kind's
own tensors set to start from the checkpoint's attention, positions resampled.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn

from ..attention.specs import no_spec
from . import surgery

HEAD_PREFIXES = ("head.",)  # the task's output layer in every attnzoo model: the recipe's own when it differs


class Transfer(NamedTuple):
    """What `transfer` did: parameter names loaded from the checkpoint, new (the network's own initialisation, or
    a load hook's), dropped (in the checkpoint, not used), and what an attention override carried over and started
    fresh (`surgery.changes`)."""

    loaded: list[str]
    new: list[str]
    dropped: list[str]
    attention: list[str] = []

    def describe(self) -> str:
        """One line for the log: counts, the names of new and dropped tensors, and what an attention override did."""

        def names(keys: list[str]) -> str:
            return ", ".join(keys[:8]) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")

        parts = [f"{len(self.loaded)} tensors loaded"]
        parts.append(f"{len(self.new)} new ({names(self.new)})" if self.new else "none new")
        parts.append(f"{len(self.dropped)} dropped ({names(self.dropped)})" if self.dropped else "none dropped")
        parts.extend(f"attention: {line}" for line in self.attention)
        return "; ".join(parts)


def adapted(net: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of `state` as `net.load_state_dict` sees it: after the load hooks the network's modules register for
    loaded tensors of another size (a position table resampled to this grid or cut to this max_len, a relative
    bias table resized, key/value heads regrouped) or missing (a gate at identity), so a checkpoint loads here exactly
    as it would through load_state_dict."""
    state = dict(state)
    for name, module in net.named_modules():
        for hook in module._load_state_dict_pre_hooks.values():  # no public way to run them without loading
            hook(state, f"{name}." if name else "", {}, True, [], [], [])
    return state


def source_kind(options: Mapping[str, object]) -> str:
    """The attention kind of a converted checkpoint's model options ("mha" unless its run configured another)."""
    attention = options.get("attention")
    return str(attention.get("kind") or "mha") if isinstance(attention, Mapping) else "mha"


def source_biases(options: Mapping[str, object]) -> set[str]:
    """The bias, rotary and pattern names ("alibi", "t5", "rope", "sliding_window", ...) of a converted checkpoint's
    attention sections (`attention`, `decoder_attention`, `cross_attention`, ...)."""
    names = set()
    for key, section in options.items():
        if not (key.endswith("attention") and isinstance(section, Mapping)):
            continue
        for part in ("bias", "rotary", "pattern"):
            spec = section.get(part)
            kind = spec.get("kind") if isinstance(spec, Mapping) else spec
            if not no_spec(kind):
                names.add(str(kind))
    return names


def transfer(
    net: nn.Module,
    state: Mapping[str, torch.Tensor],
    *,
    source: str,
    fresh: Sequence[str] = HEAD_PREFIXES,
    keep_fresh: bool = False,
    source_kind: str = "mha",
    options: Mapping[str, object] | None = None,
    target: Mapping[str, object] | None = None,
) -> Transfer:
    """Copy the tensors of `state` into `net` where names and shapes match.

    Args:
        source: the file or directory `state` was read from (named in errors).
        fresh: name prefixes of tensors that may start new (the head): missing from `state`, or of another shape.
        keep_fresh: also keep the network's own `fresh` tensors when the checkpoint's fit (another label set of the
            same size).
        source_kind: the attention kind the checkpoint was trained with (for the log of what an override changed).
        options: the checkpoint's model options (`Converted.options`), for a network whose load hooks need to know
            the checkpoint's sizes (`expect_checkpoint`: an AST's mel bins).
        target: the model options `net` was built with: attention options that differ from `options` (a pattern
            removed, a window or rope base changed) are named in the log (`surgery.option_changes`).

    Raises:
        ValueError naming `source` and the first tensor that does not fit, when a tensor outside `fresh` is
        missing from `state` or has another shape there (a checkpoint of another architecture or size).
    """
    own = net.state_dict()
    expecting = [m for m in net.modules() if hasattr(m, "expect_checkpoint")]
    for module in expecting:
        module.expect_checkpoint(dict(options or {}))
    try:
        biases = source_biases(options or {})
        done = _transfer(
            net, own, state, source=source, fresh=fresh, keep_fresh=keep_fresh, source_kind=source_kind, biases=biases
        )
        return done._replace(attention=[*done.attention, *surgery.option_changes(options or {}, target or {})])
    finally:
        for module in expecting:  # a later load (a resume, load_state_dict) reads the network's own sizes
            module.expect_checkpoint(None)


def _transfer(
    net: nn.Module,
    own: dict[str, torch.Tensor],
    state: Mapping[str, torch.Tensor],
    *,
    source: str,
    fresh: Sequence[str],
    keep_fresh: bool,
    source_kind: str,
    biases: Collection[str] = (),
) -> Transfer:
    original, state = state, adapted(net, state)
    is_fresh = tuple(fresh)
    surgical = surgery.may_start_fresh(net)

    surgery.check_projections(net, state, source)

    def fits(key: str) -> bool:
        return key in state and tuple(state[key].shape) == tuple(own[key].shape)

    wrong = [k for k in own if k in state and not fits(k) and not k.startswith(is_fresh)]
    if wrong:
        k = wrong[0]
        raise ValueError(
            f"{source} does not fit this model: tensor {k!r} is {list(state[k].shape)} there and "
            f"{list(own[k].shape)} here ({len(wrong)} tensors differ in shape; a checkpoint of another architecture "
            "or size)"
        )
    absent = [k for k in own if k not in state and not k.startswith(is_fresh) and k not in surgical]
    if absent:
        raise ValueError(
            f"{source} does not fit this model: it has no tensor {absent[0]!r} ({len(absent)} of this model's "
            f"{len(own)} tensors are missing there; a checkpoint of another architecture)"
        )
    take = [k for k in own if fits(k) and not (keep_fresh and k.startswith(is_fresh))]
    layers = [prefix for prefix, _ in surgery.attention_layers(net)]
    lost = [  # a projection tensor of one of the network's attention layers, that the layer has no place for
        k
        for k in original
        if k not in own and any(k.startswith(p) and k[len(p) :].startswith(surgery.PROJECTIONS) for p in layers)
    ]
    if lost:  # an attention option without the checkpoint's tensors (qkv_bias: false): another function, silently
        option = "proj_bias" if lost[0].endswith("proj.bias") else "qkv_bias" if lost[0].endswith(".bias") else None
        todo = (
            f": the checkpoint has these biases; leave the attention's {option} out, or set it true"
            if option
            else "; an attention option such as qkv_bias: false or proj_bias: false leaves them out"
        )
        raise ValueError(
            f"{source} does not fit this model: its tensor {lost[0]!r} has no place here ({len(lost)} attention "
            f"projection tensors{todo})"
        )
    with torch.no_grad():
        for key in take:
            own[key].copy_(state[key].to(own[key].dtype))  # state_dict tensors share the parameters' storage
    taken = {k for k in take if k in original}  # the rest a load hook made (a gate starting at identity)
    new = [k for k in own if k not in taken]
    dropped = [k for k in original if k not in taken]
    notes = surgery.changes(net, original, new, source_kind=source_kind, source_biases=biases)
    return Transfer([k for k in take if k in taken], new, dropped, notes)
