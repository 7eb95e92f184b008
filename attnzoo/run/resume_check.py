"""The training state of a checkpoint `fit --resume` starts from, checked before anything is written or trained.

A checkpoint is read as data only (`read_checkpoint`), but its values are then handed to Lightning, torch and the
callbacks as they are: a copied or downloaded run whose `last.ckpt` holds a string where a count belongs, or a list
where a dict belongs, stopped in a traceback from deep inside them (and some of it only after training). The check
is of what attnzoo fit writes: the counters, the loops' progress (against this trainer's own loops), the optimizer
and schedule states, and the state of each callback and of the task, which say what their own saved state holds
(`saved_state_error`). Keys a checkpoint of an older attnzoo lacks stay fine wherever their readers allow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..util.checks import WRITES, is_count, is_integer, is_number, shown


def check_resume_state(path: str | Path, checkpoint: dict[str, Any], trainer: Any, task: Any) -> None:
    """Raise ValueError naming `path` and the first of its keys whose value attnzoo fit never writes there."""
    why = _state_error(checkpoint, trainer, task)
    if why:
        raise ValueError(f"checkpoint {str(path)!r} cannot be resumed: {why}")


def _state_error(checkpoint: dict[str, Any], trainer: Any, task: Any) -> str | None:
    for key in ("epoch", "global_step"):
        if key in checkpoint and not is_count(checkpoint[key]):
            return f"its {key} is {shown(checkpoint[key])}, where {WRITES} is a count (an integer >= 0)"
    for key in ("optimizer_states", "lr_schedulers"):  # Lightning restores both, or stops on a KeyError
        if key not in checkpoint:
            return f"it holds no {key} (a checkpoint of the weights only); resume from a last.ckpt of attnzoo fit"
    why = (
        _loops_error(checkpoint.get("loops"), trainer)
        or _optimizers_error(checkpoint["optimizer_states"])
        or _schedulers_error(checkpoint["lr_schedulers"])
        or _callbacks_error(checkpoint.get("callbacks"), trainer)
    )
    if why:
        return why
    own = getattr(task, "saved_state_error", None)
    return own(checkpoint) if own is not None else None


def _loops_error(loops: Any, trainer: Any) -> str | None:
    """The fit loop's progress, against this trainer's own: each count an int, each flag a bool, each group a dict.
    Lightning reads each progress record whole and the loop's own `state_dict` key by key, present or not."""
    if loops is None:  # none saved: Lightning starts the loops from zero
        return None
    if not isinstance(loops, dict) or not isinstance(loops.get("fit_loop"), dict):
        what = shown(loops) if not isinstance(loops, dict) else f"a fit_loop of {shown(loops.get('fit_loop'))}"
        return f"its loops is {what}, where {WRITES} is a dict holding the fit_loop's progress (a dict)"
    saved = loops["fit_loop"]
    for key, own in trainer.fit_loop.state_dict().items():
        if key in saved:
            where = f"loops.fit_loop[{key!r}]"
            why = _form_error(saved[key], own, where, every_key=not key.endswith("state_dict"))
            if why:
                return why
    return None


def _form_error(saved: Any, own: Any, where: str, *, every_key: bool) -> str | None:
    """Where `saved` differs in form from `own`: a dict for a dict (with each of its keys, `every_key`), an int for an
    int, a bool for a bool; values of other types are not compared."""
    if isinstance(own, dict):
        if not isinstance(saved, dict):
            return f"its {where} is {shown(saved)}, where {WRITES} is a dict with keys {sorted(own)}"
        for key, value in own.items():
            if key not in saved:
                if every_key:
                    return f"its {where} has no {key!r}, which {WRITES} holds (keys {sorted(own)})"
                continue
            why = _form_error(saved[key], value, f"{where}[{key!r}]", every_key=every_key)
            if why:
                return why
    elif isinstance(own, bool):
        if not isinstance(saved, bool):
            return f"its {where} is {shown(saved)}, where {WRITES} is True or False"
    elif isinstance(own, int) and not is_integer(saved):
        return f"its {where} is {shown(saved)}, where {WRITES} is an integer"
    return None


def _optimizers_error(states: Any) -> str | None:
    """Each optimizer's `state_dict`: a dict of `state` (parameter id -> a dict) and `param_groups` (dicts, each
    with the list of its parameter ids and a numeric lr or None). What a parameter's dict holds is the optimizer's own
    (timm's kron keeps lists of tensors, muon flags), so it is not checked."""
    form = (
        f"where {WRITES} is a list of optimizer states (dicts of 'state', per parameter a dict, and "
        "'param_groups', dicts of a numeric 'lr' or None and a list of integer 'params')"
    )
    if not isinstance(states, list):
        return f"its optimizer_states is {shown(states)}, {form}"
    for i, state in enumerate(states):
        where = f"optimizer_states[{i}]"
        if not isinstance(state, dict) or not {"state", "param_groups"} <= set(state):
            return f"its {where} is {shown(state)}, {form}"
        per_param, groups = state["state"], state["param_groups"]
        if not isinstance(per_param, dict):
            return f"its {where}['state'] is {shown(per_param)}, {form}"
        for key, value in per_param.items():
            if not is_count(key) or not isinstance(value, dict):
                return f"its {where}['state'][{key!r}] is {shown(value)}, {form}"
        if not isinstance(groups, list):
            return f"its {where}['param_groups'] is {shown(groups)}, {form}"
        for j, group in enumerate(groups):
            good = (
                isinstance(group, dict)
                and isinstance(group.get("params"), list)
                and all(is_count(p) for p in group["params"])
                and (group.get("lr") is None or is_number(group["lr"]))  # None: timm's adafactor sets its own
            )
            if not good:
                return f"its {where}['param_groups'][{j}] is {shown(group)}, {form}"
    return None


def _schedulers_error(states: Any) -> str | None:
    """Each learning-rate schedule's `state_dict`, as torch's LambdaLR (the schedule of `attnzoo.tasks.optim`)
    writes it: its step counts, its rates per parameter group, and `lr_lambdas` (which LambdaLR cannot load without)."""
    form = (
        f"where {WRITES} is a list of LambdaLR states (dicts of the integers 'last_epoch' and '_step_count', lists of "
        "numbers 'base_lrs' and '_last_lr', and a list 'lr_lambdas' of None or dicts)"
    )
    if not isinstance(states, list):
        return f"its lr_schedulers is {shown(states)}, {form}"
    for i, state in enumerate(states):
        where = f"lr_schedulers[{i}]"
        if not isinstance(state, dict) or not isinstance(state.get("lr_lambdas"), list):
            return f"its {where} is {shown(state)}, {form}"
        if not all(f is None or isinstance(f, dict) for f in state["lr_lambdas"]):
            return f"its {where}['lr_lambdas'] is {shown(state['lr_lambdas'])}, {form}"
        for key in ("last_epoch", "_step_count"):
            if key in state and not is_integer(state[key]):
                return f"its {where}[{key!r}] is {shown(state[key])}, {form}"
        for key in ("base_lrs", "_last_lr"):
            if key in state and (not isinstance(state[key], list) or not all(is_number(v) for v in state[key])):
                return f"its {where}[{key!r}] is {shown(state[key])}, {form}"
    return None


def _callbacks_error(states: Any, trainer: Any) -> str | None:
    """Each saved callback state: a dict, and what the callback of its key says of it (`saved_state_error`)."""
    if states is None:
        return None
    if not isinstance(states, dict):
        return f"its callbacks is {shown(states)}, where {WRITES} is a dict of each callback's state (a dict)"
    for callback in trainer.callbacks:
        key = callback.state_key
        if key not in states:  # a callback the saved run did not have: Lightning leaves it as it is
            continue
        state = states[key]
        if not isinstance(state, dict):
            return f"its callbacks[{key!r}] is {shown(state)}, where {WRITES} is a dict"
        check = getattr(callback, "saved_state_error", None)
        why = check(state) if check is not None else None
        if why:
            return f"its callbacks[{key!r}] {why}"
    return None
