"""Attention surgery on a loaded checkpoint: what of an overridden attention (kind, num_kv_heads, bias, qk-norm) came
from the checkpoint and what starts fresh, for `transfer` and the log.

Each attention layer's projections (`qkv` or `q` + `kv`, and `proj`) must come from the checkpoint; its key/value
heads may be regrouped on load (`attnzoo.attention.kv_heads`). Everything else the layer holds (a kind's own tensors,
a bias table, qk-norm) may be missing there and then starts as the kind's load hook (`Attention.start_from_mha`) or
its constructor left it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

import torch
from torch import nn

from ..attention.attention import Attention
from ..attention.biases import BIASES
from ..attention.kv_heads import loaded_kv_heads
from ..attention.patterns import PATTERNS, Causal
from ..attention.rotary import ROTARY

PROJECTIONS = ("qkv.", "q.", "kv.", "proj.")  # an attention layer's names that every checkpoint of it holds
KIND_OF = ("q_norm.", "k_norm.", "bias.", "rotary.", "pattern.")  # parts any kind takes: the rest is the kind's own


def attention_layers(net: nn.Module) -> list[tuple[str, Attention]]:
    """(state dict prefix, layer) of every attnzoo attention layer of `net`."""
    return [(f"{name}." if name else "", m) for name, m in net.named_modules() if isinstance(m, Attention)]


def may_start_fresh(net: nn.Module) -> set[str]:
    """The state dict keys of `net`'s attention layers that a checkpoint may lack (all but the projections)."""
    own = net.state_dict()
    return {
        key
        for prefix, _ in attention_layers(net)
        for key in own
        if key.startswith(prefix) and not key[len(prefix) :].startswith(PROJECTIONS)
    }


def check_projections(net: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """ValueError naming the kind when an attention layer's projections are missing from `state` (after load hooks)
    that holds another kind's projections in their place (a multi-head checkpoint and kind 'mla')."""
    for prefix, layer in attention_layers(net):
        mine = [k for k in layer.state_dict() if k.startswith(PROJECTIONS)]
        theirs = [k[len(prefix) :] for k in state if k.startswith(prefix) and k[len(prefix) :].startswith(PROJECTIONS)]
        absent = [k for k in mine if prefix + k not in state]
        if absent and theirs:
            mine, theirs = (", ".join(sorted({k.split(".")[0] for k in names})) for names in (mine, theirs))
            raise ValueError(
                f"{source} cannot start attention kind {kind_name(layer)!r}: its layer {prefix.rstrip('.')!r} "
                f"projects with {mine}, and the checkpoint's with {theirs} (it has no "
                f"{absent[0]!r}). Start this kind from random weights or from a run of the same kind, or choose a kind "
                "that keeps the checkpoint's projections (mha, with num_kv_heads for grouped-query heads; gated, "
                "talking_heads, ...)"
            )


def _kind_class(layer: Attention) -> type:
    """The layer's kind: its class, less the `Configured...` wrappers of `attention_layer` and `configure`."""
    return next(c for c in type(layer).__mro__ if not c.__name__.startswith("Configured"))


def kind_name(layer: Attention) -> str:
    """The config name of the layer's kind ("mha" for `Attention`, the class name for a user's own)."""
    cls = _kind_class(layer)
    return "mha" if cls is Attention else getattr(cls, "kind", None) or cls.__name__


def _starts_as_mha(cls: type) -> bool | None:
    """Whether the kind says it starts equal to a multi-head checkpoint's attention; None when it does not say (a
    user's own kind that leaves `starts_as_mha` to `Attention`)."""
    if cls is Attention or any("starts_as_mha" in vars(c) for c in cls.__mro__ if c is not Attention):
        return cls.starts_as_mha
    return None


def changes(
    net: nn.Module,
    state: Mapping[str, torch.Tensor],
    new: list[str],
    *,
    source_kind: str = "mha",
    source_biases: Collection[str] = (),
) -> list[str]:
    """What loading `state` (the checkpoint's tensors, before load hooks) into `net` carried over and what started
    fresh in its attention layers, one line per kind of change with its layer count; empty when nothing changed.

    Args:
        new: keys of `net` that did not come from `state` (`Transfer.new`).
        source_kind: the attention kind the checkpoint was trained with.
        source_biases: the `BIASES`, `ROTARY` and `PATTERNS` names of the biases, rotary embeddings and patterns it
            was trained with (a bias without tensors, ALiBi, a rotary embedding or a sparse pattern changes the
            function without any tensor starting fresh; one the checkpoint had is not named).
    """
    regrouped: Counter[tuple[int, int]] = Counter()
    kinds: Counter[tuple[str, tuple[str, ...]]] = Counter()
    shared: Counter[tuple[str, ...]] = Counter()
    added: Counter[str] = Counter()
    masked: Counter[str] = Counter()
    fresh = set(new)
    kept: set[str] = set()  # the bias and rotary names the network's attention layers hold
    for prefix, layer in attention_layers(net):
        # a decoder's own causal mask is no change (nor its part of a pattern intersected with it); a named pattern
        # made of parts (BigBird) is named whole
        named = layer.pattern is None or type(layer.pattern) in PATTERNS.values()
        parts = [layer.pattern] if named else getattr(layer.pattern, "parts", [layer.pattern])
        for pattern in (p for p in parts if p is not None and not isinstance(p, Causal)):
            name = next((n for n, cls in PATTERNS.items() if type(pattern) is cls), type(pattern).__name__)
            if name not in source_biases:
                masked[f"pattern {name!r}"] += 1
        # a bias without tensors (one with them is named below when they start fresh), or a rotary embedding (q and
        # k turned by position): nothing starts fresh, the function changes
        for part, table, held in (("bias", BIASES, layer.bias), ("rotary", ROTARY, layer.rotary)):
            if held is None:
                continue
            name = next((n for n, cls in table.items() if type(held) is cls), type(held).__name__)
            kept.add(name)
            if not held.state_dict() and name not in source_biases:
                added[f"{part} {name!r}"] += 1
        name = prefix + ("kv" if layer.is_cross else "qkv") + ".weight"
        heads = loaded_kv_heads(layer, state[name]) if name in state else None
        if heads is not None and heads != layer.num_kv_heads:
            regrouped[heads, layer.num_kv_heads] += 1
        started = [k[len(prefix) :] for k in layer.state_dict(prefix=prefix) if k in fresh]
        own = tuple(dict.fromkeys(k.split(".")[0] for k in started if not k.startswith(KIND_OF)))  # gate, pre, ...
        kind = kind_name(layer)
        if own or kind != source_kind:
            kinds[kind, own] += 1
        other = tuple(k for k in started if k.startswith(KIND_OF))
        if other:
            shared[other] += 1
    lines = []
    for (before, after), n in regrouped.items():
        how = (
            f"mean-pooled {before} -> {after} in {_layers(n)} (groups of {before // after} averaged; it changes the "
            "function)"
            if before > after
            else f"repeated {before} -> {after} in {_layers(n)} (each for its group of queries; the same function)"
        )
        lines.append(f"k/v heads {how}")
    for (kind, own), n in kinds.items():
        cls = next(_kind_class(m) for _, m in attention_layers(net) if kind_name(m) == kind)
        what = f"{', '.join(own)} start{'s' if len(own) == 1 else ''} fresh" if own else "nothing new"
        same = _starts_as_mha(cls) if source_kind == "mha" else False  # another kind's own parts are dropped
        keeps = {
            True: "starts equal to the checkpoint's attention",
            False: "changes the function",
            None: "may change the function (its class does not set starts_as_mha)",
        }[same]
        how = f" ({cls.mha_start})" if cls.mha_start else ""
        lines.append(f"kind {kind!r} in place of {source_kind!r} in {_layers(n)}: {what}{how}; it {keeps}")
    for what, n in added.items():
        lines.append(f"{what} added in {_layers(n)} (it has no tensors); it changes the function")
    for part, table in (("bias", BIASES), ("rotary", ROTARY)):  # the checkpoint's, that no layer holds any more
        for name in sorted(n for n in source_biases if n in table and n not in kept):
            lines.append(f"{part} {name!r} of the checkpoint removed from every attention layer; it changes the "
                         "function")  # fmt: skip
    for what, n in masked.items():
        lines.append(f"{what} added in {_layers(n)} (it masks scores, no tensors); it changes the function where a "
                     "query would read keys it leaves out")  # fmt: skip
    for names, n in shared.items():
        lines.append(
            f"{', '.join(names)} start{'s' if len(names) == 1 else ''} fresh in {_layers(n)}; it changes the function"
        )
    return lines


SPEC_PARTS = {"pattern": PATTERNS, "bias": BIASES, "rotary": ROTARY}  # an attention section's parts with options
SWITCHES = ("qk_norm", "scale_norm")  # an attention section's switches that change the function


def option_changes(source: Mapping[str, object], target: Mapping[str, object]) -> list[str]:
    """What `changes` cannot see in the layers: a pattern of the checkpoint removed, or a part kept by kind with
    other options (a window of 4 made 1, a rope base, T5's max_distance), or a switch (qk_norm) turned, between the
    checkpoint's model options (`source`) and those the network was built with (`target`): one line each, naming
    the key and both values. Options left out count as their class's defaults."""
    from ..attention.specs import no_spec

    lines = []
    for key, section in target.items():
        theirs = source.get(key)
        if not (key.endswith("attention") and isinstance(section, Mapping) and isinstance(theirs, Mapping)):
            continue
        for part, table in SPEC_PARTS.items():
            before, after = theirs.get(part), section.get(part)
            if no_spec(before):
                continue  # none there: one added here is named by `changes`
            if no_spec(after):
                if part == "pattern":  # a bias or rotary removed is named by `changes`
                    lines.append(f"model.{key}.pattern {_kind(before)!r} of the checkpoint removed; it changes the "
                                 "function")  # fmt: skip
                continue
            if _kind(before) == _kind(after) and _same(_resolved(table, before)) != _same(_resolved(table, after)):
                lines.append(f"model.{key}.{part}: {_shown(before)} there, {_shown(after)} here; it changes the "
                             "function")  # fmt: skip
        for switch in SWITCHES:
            if bool(theirs.get(switch)) != bool(section.get(switch)):
                lines.append(f"model.{key}.{switch}: {bool(theirs.get(switch))} there, {bool(section.get(switch))} "
                             "here; it changes the function")  # fmt: skip
    return lines


def _kind(spec: object) -> object:
    return spec.get("kind") if isinstance(spec, Mapping) else spec


def _resolved(table: Mapping[str, type], spec: object) -> dict[str, object]:
    """A part's options with its class's defaults for those left out (a spec given as its kind name alone too)."""
    import inspect

    given = {k: v for k, v in spec.items() if k != "kind"} if isinstance(spec, Mapping) else {}
    cls = table.get(str(_kind(spec)))
    if cls is None:
        return given
    defaults = {
        name: p.default
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is not p.empty and p.kind is not p.VAR_KEYWORD
    }
    return {**defaults, **given}


def _same(options: Mapping[str, object]) -> str:
    """Options as JSON, so that a list and a tuple default of the same items compare equal (global_tokens [0])."""
    import json

    return json.dumps(options, sort_keys=True, default=str)


def _shown(spec: object) -> str:
    return repr(dict(spec)) if isinstance(spec, Mapping) else repr(spec)


def _layers(n: int) -> str:
    return f"{n} layer{'s' if n != 1 else ''}"
