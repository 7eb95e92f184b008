"""What fit refuses of a start (`model.init_from`) before its data decides anything, checked without reading the
data: an ablation checks every variant this way before its first run begins (`attnzoo.ablation.runner.check_starts`).

`read_start` already refuses another `model.num_heads` than the checkpoint states, and for a Hugging Face or timm
checkpoint the sizes, key/value heads and biases it cannot take (`start._options`). `check_start` then builds the
network from the checkpoint's architecture on the meta device (no memory, no weights), with the sizes the data would
give taken from the checkpoint (its vocabulary, pad id, length or image size; a two-class head where it names none:
the head starts new anyway), and runs what fit runs when it builds that network and copies the tensors in: the
builder's own checks (`model.attention.num_kv_heads` that does not divide the checkpoint's heads) and `transfer` on
meta tensors (a `model.depth` or width the run's checkpoint does not have, an attention kind whose projections the
checkpoint does not hold: mla from a BERT).
What depends on the data itself (a tokenizer's size against the embedding, the label set, a tensor of a data-given
size) is left to fit.
"""

from __future__ import annotations

import logging

from ..config import AUTO, MODEL_EXTRAS, Config, ConfigError, named_error, parameters
from .start import DATA_SIZED, FROM_DATA, Start

log = logging.getLogger("attnzoo")


def check_start(cfg: Config, start: Start | None) -> None:
    """ConfigError, worded as fit's, when `cfg`'s network cannot be built with `start`'s architecture or cannot take
    its attention projections; nothing for a run from scratch, or a model the checkpoint alone cannot size."""
    import torch

    from ..models import MODELS
    from ..pretrained.transfer import transfer
    from .start import differences

    if start is None:
        return
    model = cfg.section("model")
    kind, theirs = model["kind"], start.converted.options
    takes = parameters(MODELS[kind])
    inputs = {k: theirs[k] for k in (*FROM_DATA, *DATA_SIZED) if k in theirs and k in takes}
    if "num_classes" in takes and "num_classes" not in inputs:
        inputs["num_classes"] = 2
    mine = {k: v for k, v in model.items() if k not in ("kind", *MODEL_EXTRAS) and v != AUTO}  # auto: the data's
    options = {**mine, **inputs, **{k.removeprefix("model."): v for k, v in start.options.items()}}
    try:
        with torch.device("meta"):
            net = MODELS[kind](**options)
    except ValueError as err:  # worded as fit's build words it
        raise named_error("model", str(err), f"kind {kind!r}, model.init_from's architecture") from err
    except (TypeError, RuntimeError, NotImplementedError) as err:  # an input only the data gives, an op meta lacks
        log.debug("model.init_from: the network was not built before the data (%s); fit checks it", err)
        return
    state = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in start.converted.state_dict.items()}
    try:  # what `apply_start` runs, on meta tensors (nothing is copied): another depth or width, a projection
        transfer(net, state, source=start.converted.source, options=theirs)
    except ValueError as err:  # as `apply_start` words it
        hint = differences(start, cfg)
        raise ConfigError(f"model.init_from: {err}{hint} (set in {cfg.where('model.init_from')})") from None
    except (RuntimeError, NotImplementedError) as err:  # a load hook's op that meta tensors lack
        log.debug("model.init_from: the checkpoint was not matched before the data (%s); fit checks it", err)
