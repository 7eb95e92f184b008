"""attnzoo's own runs as a starting point: a run directory (its best checkpoint) or a `.ckpt` file of a run.

The network's tensors are the checkpoint's `net.*` entries; the model's kind and options come from the run's
`config.yaml` (the resolved config `fit` saved), its tokenizer from the run's `tokenizer.json`. Reading runs no code:
the YAML is read as data and the checkpoint with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .converted import Converted, read_weights

READS = "an attnzoo run directory or .ckpt file"
NET_PREFIX = "net."  # the LightningModule holds the network as `self.net`
BEST = Path("checkpoints") / "best.ckpt"


def matches(path: str | Path) -> bool:
    """A run directory (it holds `config.yaml`; `checkpoint_file` says when it has no checkpoint) or a `.ckpt` file."""
    path = Path(path)
    if path.is_dir():
        return (path / "config.yaml").is_file() and not (path / "config.json").is_file()
    return path.suffix == ".ckpt" and path.is_file()


def checkpoint_file(path: str | Path) -> Path:
    """The checkpoint a run directory starts others from (its best), or `path` itself when it is a file."""
    path = Path(path)
    if path.is_dir():
        ckpt = path / BEST
        if not ckpt.is_file():
            raise ValueError(
                f"run directory {str(path)!r} has no {BEST} (it saves one when it validates: did it train a batch?)"
            )
        return ckpt
    return path


def run_of(path: str | Path) -> Path | None:
    """The run directory of a run directory or of a checkpoint inside one (`<run>/checkpoints/x.ckpt`), if any."""
    path = Path(path)
    run = path if path.is_dir() else path.parent.parent
    return run if (run / "config.yaml").is_file() else None


def run_config(path: str | Path) -> dict[str, Any]:
    """The run's saved config (plain data), or {} when `path` is a checkpoint outside a run directory."""
    run = run_of(path)
    if run is None:
        return {}
    from omegaconf import OmegaConf

    from ..config import ConfigError, read_yaml

    file = run / "config.yaml"
    try:  # YAML read as data, holding no interpolation (`${oc.env:...}` would read this machine's environment)
        node = read_yaml(file, run=True)
        tree = OmegaConf.to_container(node, resolve=True)  # escaped literals (`\${`) as the values they are
    except ConfigError:
        raise
    except (OSError, ValueError) as err:
        raise ValueError(f"{str(file)!r} cannot be read as a run config ({type(err).__name__})") from None
    if not isinstance(tree, dict):
        raise ValueError(f"{str(file)!r} is not a run config (no mapping of sections)")
    return tree


def check_model(model: Any, file: Path) -> None:
    """ConfigError naming `file` (a run's config.yaml) and the key when its model section `model` does not hold the
    options the run's model kind takes, checked as a config's are (`attnzoo.config.validate_model`): a value of the
    wrong type or out of range stopped deep in the model's constructor (a ZeroDivisionError for num_heads 0). Keys
    the kind does not take are left to the reader (`attnzoo.pretrained.load` names them; a start drops them)."""
    from ..config import AUTO, MODEL_EXTRAS, Config, ConfigError, parameters, validate_model
    from ..models import MODELS

    model = {} if model is None else model  # no model section: its kind is missing
    if not isinstance(model, dict):
        raise ConfigError(f"{file}: its model section is {model!r}, not a mapping of the model's kind and options")
    kind = model.get("kind")
    takes = parameters(MODELS[kind]) if isinstance(kind, str) and kind in MODELS else {}
    # a value left to the data (auto: a recipe's, not what a run resolved) is not checked, as a config's is not
    known = {k: v for k, v in model.items() if (k == "kind" or k in takes or k in MODEL_EXTRAS) and v != AUTO}
    validate_model(Config.of_values({"model": known}, {"model": str(file)}))


def class_names(path: str | Path) -> list[str] | None:
    """The labels the run's head was trained on (`labels.json`), when it recorded them."""
    run = run_of(path)
    try:
        record = json.loads((run / "labels.json").read_text(encoding="utf-8")) if run is not None else None
    except (OSError, ValueError):
        return None
    names = record.get("class_names") if isinstance(record, dict) else None
    return [str(n) for n in names] if isinstance(names, list) else None


def convert(path: str | Path) -> Converted:
    """The network of an attnzoo run (or checkpoint file) as a `Converted`."""
    ckpt = checkpoint_file(path)
    state = read_weights(ckpt)
    net = {k[len(NET_PREFIX) :]: v for k, v in state.items() if k.startswith(NET_PREFIX)}
    if not net:
        raise ValueError(f"{str(ckpt)!r} holds no network tensors (no {NET_PREFIX}* keys): not an attnzoo checkpoint")
    saved = run_config(path)
    run = run_of(path)
    if run is not None:
        check_model(saved.get("model"), run / "config.yaml")
    model = dict(saved.get("model") or {})
    kind = str(model.pop("kind", ""))
    model.pop("init_from", None)
    model.pop("timm_name", None)
    tokenizer = run / "tokenizer.json" if run is not None and (run / "tokenizer.json").is_file() else None
    data = saved.get("data") or {}
    pixels = {k: list(data[k]) for k in ("mean", "std") if isinstance(data.get(k), list)}  # a ViT's normalization
    return Converted(kind, model, net, tokenizer, f"attnzoo run {ckpt}", pixels)
