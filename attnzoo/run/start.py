"""`model.init_from`: a run that starts from pretrained weights instead of random ones.

`read_start` converts the checkpoint before any data is read (`attnzoo.pretrained.convert`): an attnzoo run
directory (its best checkpoint) or `.ckpt` file, or a pretrained model directory or timm ViT file of a supported
family (`model.timm_name` names a timm file's architecture where its tensors do not tell the head count). What the
weights need from the rest of the config comes back as values `build` applies: the checkpoint's tokenizer as
`data.tokenizer` (ids must match the embedding), and the architecture (`model.dim`, `model.depth`, `model.position`,
`model.attention`, ...), which replaces the recipe's values unless the command line set them, or a run's own
config.yaml that names the same checkpoint (a resumed run, or a new one started with `--config <run>/config.yaml`:
it holds what that run resolved, its own overrides of the checkpoint included). For an attnzoo run that
is its config.yaml's model section less its training choices (dropout rates, `TRAINING_CHOICES`, the attention
backends), less the sizes the new data gives (`DATA_SIZED`: the image size, the text length; a learned position
table cuts `data.max_len` to its length), and less the keys the new model kind does not take (an MLM run's
`tie_embeddings` for a classifier); a command-line value that does not fit the weights stops with the first tensor
that differs.
`apply_start` then copies the tensors into the built network and logs which were loaded, new and dropped, and what
an attention override carried over and started fresh (`attnzoo.pretrained.surgery`); the recipe's head starts new
when the label set differs from the checkpoint's (an attnzoo run's labels.json, a folder's id2label), and its rows are
reordered when only the order differs. The run records the start in `init_from.json` (`keep_start`), which a resume
reads instead of the checkpoint (`attnzoo.run.train`).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..config import AUTO, MODEL_EXTRAS, Config, ConfigError, is_run_config, read_yaml
from ..util.checks import divisors
from .paths import same_path

log = logging.getLogger("attnzoo")
START_FILE = "init_from.json"  # a run's record of the checkpoint it started from (`keep_start`)
# its keys (`apply_start`); `origin`: the pretrained checkpoint (not an attnzoo run) the weights descend from, if any
START_KEYS = ("path", "source", "origin", "tokenizer", "loaded", "new", "dropped", "attention")
FROM_DATA = ("vocab_size", "pad_id", "num_classes")  # model inputs the data gives (from the tokenizer, the labels)
# data options that follow a converted model's value where the config leaves them to the data (None or auto): images
# resized to its image size, audio resampled and binned as its features were
FOLLOW_WEIGHTS = ("img_size", "sample_rate", "n_mels")
# model inputs the data measures (an AST's log-mel statistics) that a checkpoint's buffers set instead
NORMALIZED_AS = ("feature_mean", "feature_std")
# a pretraining model kind -> the model kind its encoder starts (the tensors share their names; the head starts new)
ENCODER_OF = {"mlm": "text"}
# the recipe that builds each model kind (named when a checkpoint's kind is not the run's)
RECIPE_OF = {"text": "text_cls.yaml", "mlm": "mlm.yaml", "lm": "lm.yaml", "vit": "vit.yaml", "ast": "ast.yaml",
             "text_image": "text_image.yaml", "seq2seq": "translation.yaml"}  # fmt: skip
# an attnzoo run's model options that are training choices, not its weights' architecture: the new recipe's stay
# (and dropout rates); pooling options that make tensors of their own (`pooler`, `global_pool`, `fc_norm`, `head_norm`)
# follow
TRAINING_CHOICES = ("spec_augment", "freeze_pad_embedding")
ATTENTION_CHOICES = ("backend",)  # the same for the keys of its attention sections (`attention`, `cross_attention`)
# a converted checkpoint's training choices (its dropout): they fill a key the config leaves to the data (auto) or
# lacks; a value in a config file stays, and so does a resumed run's own (its config.yaml is a file too)
CHECKPOINT_DEFAULTS = ("drop_rate",)
# the run's sizes of the data (images, texts): an own run's weights adapt to the new data's, as a run from scratch
# would size them (a position grid is resampled on load); but a learned table of positions holds only as many as the
# run's `max_len`, to which the new data's is cut. An AST run's audio features (sample_rate, n_mels) are not sizes:
# its patches and feature statistics hold for those alone, so the new run computes its features as the run did
DATA_SIZED = ("max_len", "img_size")
DEPTHS = ("depth", "encoder_depth", "decoder_depth")  # fewer blocks than a checkpoint's drop its last ones (logged)
# the peak learning rate of `task.optimizer.lr: auto` from a Hugging Face or timm checkpoint: pretrained weights are
# fine-tuned two orders of magnitude below the recipes' rates for their small models from random weights (3e-3 would
# overwrite what a BERT-base learned in the first steps). 5e-5: the Hugging Face Trainer's default, the top of the
# BERT paper's 2e-5..5e-5. An attnzoo run keeps the recipe's rate (`...data.modules.defaults.SCRATCH_LR`) unless its
# own weights descend from such a checkpoint (the `origin` its init_from.json records)
FINETUNE_LR = 5e-5
# `trainer.max_epochs: auto` from such a checkpoint: about FINETUNE_STEPS optimizer steps, within FINETUNE_EPOCHS
# epochs. The recipes' budgets (~2,000 steps, up to 100-200 epochs) are for their small models from random weights;
# BERT's authors fine-tuned for 2-4 epochs and the Hugging Face Trainer's default is 3, and on a small split a few
# hundred steps at 5e-5 are what moves the weights at all
FINETUNE_STEPS, FINETUNE_EPOCHS = 300, (3, 20)


class Start(NamedTuple):
    """A converted checkpoint and what the run's config takes from it."""

    given: str  # model.init_from as configured
    converted: Any  # attnzoo.pretrained.Converted
    own_run: Path | None  # the attnzoo run directory it comes from, if any
    preset: dict[str, Any]  # data options the weights need ({"data.tokenizer": ...}), applied before data is read
    options: dict[str, Any]  # model options the weights fix ({"model.dim": 768, ...})
    tuning: dict[str, Any] = {}  # training choices for the weights where the config leaves them to auto (the lr)
    origin: str | None = None  # the pretrained checkpoint (Hugging Face, timm) the weights descend from, if any


def read_start(cfg: Config, *, converted: Any = None) -> Start | None:
    """The checkpoint `model.init_from` names, converted; None when unset. ConfigError naming the key, where it was
    set and the file when it cannot be read. `converted`: the checkpoint as `convert_start` read it already for a
    config of the same model.init_from, model.timm_name and data.tokenizer (an ablation's variants read each
    checkpoint they start from once)."""
    from .. import pretrained
    from ..pretrained import run_dir

    given = _given(cfg)
    if given is None:
        return None
    where = cfg.where("model.init_from")
    timm_name = cfg.section("model").get("timm_name")
    converted = convert_start(cfg) if converted is None else converted
    kind = cfg.section("model")["kind"]
    if converted.model_kind and kind not in (converted.model_kind, ENCODER_OF.get(converted.model_kind)):
        fits = " or ".join(repr(k) for k in (kind, *(k for k, enc in ENCODER_OF.items() if enc == kind)))
        theirs = RECIPE_OF.get(ENCODER_OF.get(converted.model_kind, converted.model_kind))
        recipe = f", or fine-tune this one with recipes/{theirs}" if theirs else ""
        raise ConfigError(
            f"model.init_from: {converted.source} is a {converted.model_kind!r} model, and this run builds model.kind "
            f"{kind!r} (set in {where}); start from a checkpoint of a {fits} model{recipe}"
        )
    attnzoo_run = run_dir.matches(given)
    own_run = run_dir.run_of(given) if attnzoo_run else None
    if own_run is not None and converted.tokenizer is not None:
        _check_run_tokenizer(own_run, run_dir.checkpoint_file(given), where)
    if converted.tokenizer is None:
        _refuse_lost_tokenizer(cfg, converted, given, own_run if attnzoo_run else False, where)
    preset = _tokenizer(cfg, converted) | _normalization(cfg, converted)
    arch = architecture(converted.options, kind) if attnzoo_run else converted.options
    if attnzoo_run:
        _refuse_imports(cfg, arch, f"{own_run}/config.yaml")
    options = _options(
        cfg,
        arch,
        preset,
        heads_stated=pretrained.heads_stated(given, timm_name),
        sized_by=None if attnzoo_run else converted.source,
    )
    tuning, origin = {}, _pretrained_origin(own_run) if attnzoo_run else converted.source
    if origin is not None and (cfg.section("task").get("optimizer") or {}).get("lr") == AUTO:
        via = "" if origin == converted.source else f" ({converted.source} was fine-tuned from {origin})"
        log.info("task.optimizer.lr: auto -> %g (fine-tuning pretrained weights%s: from random weights the recipe "
                 "would take a rate for its small model)", FINETUNE_LR, via)  # fmt: skip
        tuning["task.optimizer.lr"] = FINETUNE_LR
    return Start(str(given), converted, own_run, preset, options, tuning, origin)


def _given(cfg: Config) -> str | None:
    """`model.init_from`, absolute when it is a path here; None when unset."""
    given = cfg.section("model").get("init_from")
    if not given:
        return None
    if Path(given).exists():  # recorded as a path from anywhere (init_from.json, the summary, the converted source);
        given = os.path.abspath(given)  # a link stays the link (a hub cache's snapshot file names its blob)
    return given


def convert_start(cfg: Config) -> Any:
    """The checkpoint `model.init_from` names, converted (`attnzoo.pretrained.convert`) with `model.timm_name` and
    `data.tokenizer`, for `read_start`. ConfigError naming the key, where it was set and the file when it cannot be
    read."""
    from .. import pretrained
    from ..data.tokenizers.vocab_files import folder_tokenizer

    given = _given(cfg)
    where = cfg.where("model.init_from")
    timm_name = cfg.section("model").get("timm_name")
    named = _named_tokenizer(cfg)  # a tokenizer file for weights whose directory has none
    try:
        converted = pretrained.convert(given, timm_name=timm_name, tokenizer=named)
    except ValueError as err:
        if timm_name is not None and timm_name.split(".", 1)[0] in str(err):  # the name does not fit, or is no ViT's
            raise ConfigError(
                f"model.timm_name: {err} (model.timm_name set in {cfg.where('model.timm_name')}, model.init_from in "
                f"{where})"
            ) from None
        # the tokenizer file given for weights whose folder has none (the one read), not the weights
        if named is not None and named in str(err) and folder_tokenizer(given) is None:
            raise ConfigError(
                f"data.tokenizer: {err} (set in {cfg.where('data.tokenizer')}, for the weights of model.init_from): "
                "name the tokenizer.json, vocab.txt or vocab.json (with merges.txt beside it) of the folder the model "
                "was downloaded to"
            ) from None
        hint = "; in a config: model.timm_name=<timm architecture>" if "pass its timm_name" in str(err) else ""
        raise ConfigError(f"model.init_from: {err}{hint} (set in {where})") from None
    return converted


def _named_tokenizer(cfg: Config) -> str | None:
    """The tokenizer file `data.tokenizer` names for the start (not a kind, and not another run's config.yaml's,
    which gives way to the checkpoint's as `_tokenizer` says)."""
    from ..data.tokenizers.subword import KINDS
    from ..data.tokenizers.tokenize import TOKENIZERS

    spec = cfg.section("data").get("tokenizer")
    if not isinstance(spec, str) or spec in (AUTO, *KINDS, *TOKENIZERS):
        return None
    if is_run_config(Path(cfg.where("data.tokenizer"))) and not _stays(cfg, "data.tokenizer"):
        return None
    return spec


def _normalization(cfg: Config, converted: Any) -> dict[str, Any]:
    """{"data.mean": ..., "data.std": ...}: the data options the weights were trained with (`Converted.data`, a ViT's
    pixel statistics), unless the config sets one of them: a value given for this very key (or a null on the command
    line or in a run's own config.yaml) keeps the pair the user's, with a warning where it differs."""
    from ..data import DATAMODULES

    data = cfg.section("data")
    takes = inspect.signature(DATAMODULES[data["kind"]]).parameters
    theirs = {k: v for k, v in converted.data.items() if k in takes}

    def given(key: str) -> bool:  # `Config.where` of an unset key is its section's: another data.* key's origin
        full = f"data.{key}"
        return full in cfg.origins and (data.get(key) is not None or _stays(cfg, full))

    mine = [k for k in theirs if given(k) and data.get(k) != theirs[k]]  # the checkpoint's own value is no change
    if not mine:
        for key, value in theirs.items():
            if data.get(key) != value:
                log.info("data.%s: None -> %s (as model.init_from's weights were trained)", key, value)
        return {f"data.{k}": v for k, v in theirs.items()}
    for key in [k for k in theirs if data.get(k) != theirs[k]]:
        shown = "null (0.5 for every channel)" if data.get(key) is None else data.get(key)
        how = f"set in {cfg.where(f'data.{key}')}" if key in mine else f"data.{mine[0]} is set, so it stays"
        log.warning("data.%s: %s (%s), not the %s model.init_from's weights were trained with", key, shown, how,
                    theirs[key])  # fmt: skip
    return {}


def _pretrained_origin(run: Path | None) -> str | None:
    """The pretrained checkpoint (Hugging Face, timm) an attnzoo run's weights descend from, as the run's record of
    its start says (`init_from.json`); None for a run from scratch, or from attnzoo runs only."""
    record = recorded_start(run) if run is not None else None
    if record is None:
        return None
    if "origin" in record:  # recorded when the run started, through any chain of attnzoo runs
        return record["origin"] if isinstance(record["origin"], str) and record["origin"] else None
    return None if record["source"].startswith("attnzoo run") else record["source"]  # a record from before


def _check_run_tokenizer(run: Path, ckpt: Path, where: str) -> None:
    """ConfigError unless the run's tokenizer.json is the one its checkpoint was trained with (the digest every
    checkpoint records): another run's tokenizer.json gives other ids to the same rows of the embedding."""
    from .checkpoint_io import read_checkpoint
    from .tokenizer_stamp import check_saved_tokenizer

    try:
        check_saved_tokenizer(run, ckpt, read_checkpoint(ckpt, mmap=True))
    except (ConfigError, ValueError) as err:
        raise ConfigError(f"model.init_from (set in {where}): {err}") from None


def _refuse_lost_tokenizer(cfg: Config, converted: Any, given: str, run: Path | None | bool, where: str) -> None:
    """ConfigError when the weights were trained with a tokenizer that is not beside them: their embedding rows are
    its ids, and the tokenizer this run would otherwise learn from its data (or a recipe's default) gives the same
    rows to other tokens, with no error when the sizes happen to agree. `run`: the attnzoo run directory, None for an
    attnzoo checkpoint outside one, False for another library's checkpoint. A config that names a tokenizer file
    (data.tokenizer=<tokenizer.json>) says which ids the weights take."""
    from ..data.tokenizers.subword import KINDS, TOKENIZER_FILE
    from ..data.tokenizers.tokenize import TOKENIZERS
    from ..pretrained import run_dir
    from . import checkpoint_io
    from .tokenizer_stamp import STAMP_KEY

    spec = cfg.section("data").get("tokenizer")
    if isinstance(spec, str) and (spec.endswith(".json") or Path(spec).is_file()):  # the config names the file
        return
    if run is False:  # a pretrained folder: the family converters read its tokenizer.json when it has one
        if "vocab_size" in converted.options:
            raise ConfigError(
                f"model.init_from (set in {where}): {given} has no {TOKENIZER_FILE}, vocab.txt or vocab.json + "
                "merges.txt, and its weights embed the ids of the tokenizer they were trained with: a tokenizer "
                "learned from this run's data would give those rows to other tokens. Copy it from where the model was "
                "downloaded, or name it: data.tokenizer=<its tokenizer.json>"
            )
        return
    if run is not None:
        theirs = (run_dir.run_config(run).get("data") or {}).get("tokenizer")
        if theirs in KINDS or isinstance(theirs, str) and theirs not in TOKENIZERS:  # learned, or a file it copied
            raise ConfigError(
                f"model.init_from (set in {where}): {run} has no {TOKENIZER_FILE}, and its weights were trained with "
                f"the tokenizer its config.yaml names (data.tokenizer {theirs!r}): another one (learned again from "
                f"this run's data) would give the embedding's rows to other tokens. Copy the run's own "
                f"{TOKENIZER_FILE} back beside its config.yaml, or name the file: data.tokenizer=<tokenizer.json>"
            )
        return
    ckpt = run_dir.checkpoint_file(given)
    try:
        stamp = checkpoint_io.read_checkpoint(ckpt, mmap=True).get(STAMP_KEY)
    except ValueError as err:
        raise ConfigError(f"model.init_from (set in {where}): {err}") from None
    if isinstance(stamp, str) and spec in TOKENIZERS:  # a fixed tokenizer (bytes): the same one, or another
        from ..data.tokenizers.subword import tokenizer_digest

        if tokenizer_digest(TOKENIZERS[spec]()) == stamp:
            return
    if isinstance(stamp, str):
        raise ConfigError(
            f"model.init_from (set in {where}): {given} is a checkpoint outside its run directory, and its weights "
            f"were trained with a tokenizer (sha256 {stamp[:12]}...) that is not beside it. Give the run directory "
            f"(its config.yaml, {TOKENIZER_FILE} and checkpoints/), or keep the file at <run>/checkpoints/ (alone, "
            "it needs data.tokenizer=<the run's tokenizer.json> and the model.* keys the run was trained with: a "
            ".ckpt holds neither)"
        )


SPEC_KEYS = ("kind", "pattern", "bias", "rotary", "position")  # options whose string names a class (kind tables)
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _refuse_imports(cfg: Config, options: Mapping[str, Any], origin: str, prefix: str = "model") -> None:
    """ConfigError naming the first spec that is an import path (`package.module.Name`: code of its own; as a `kind`
    or a spec's short string form) among the options a start takes over from another run's config (`origin`), unless
    imports are allowed; an entry the command line replaces is not taken over. The error would otherwise come later,
    blaming the recipe the options were merged into."""
    from ..util.imports import ALLOW_IMPORTS_ENV, OWN_PATHS, imports_allowed

    if imports_allowed():
        return
    for key, value in options.items():
        full = f"{prefix}.{key}"
        if _stays(cfg, full):
            continue
        if isinstance(value, Mapping):
            _refuse_imports(cfg, value, origin, full)
        elif key in SPEC_KEYS and isinstance(value, str) and DOTTED.fullmatch(value) and value not in OWN_PATHS:
            raise ConfigError(
                f"{full}: {value!r} is an import path in model.init_from's {origin}, and this run takes it over: "
                f"importing it would run code from {value.rpartition('.')[0]!r}. attnzoo imports code a config names "
                "only when asked, since a run directory may come from anyone; if you trust that run, pass "
                f"--allow-imports or set {ALLOW_IMPORTS_ENV}=1"
            )


def architecture(options: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """An attnzoo run's model options that its weights depend on and `kind`'s builder takes (`TRAINING_CHOICES`,
    dropout rates, the attention sections' too, the attention backends and the data's sizes stay the new run's)."""
    from ..config import parameters
    from ..models import MODELS

    takes = parameters(MODELS[kind])
    learned = _position_kind(options.get("position")) == "learned"
    skip = (*TRAINING_CHOICES, *(k for k in DATA_SIZED if not (learned and k == "max_len")))
    kept = {k: v for k, v in options.items() if k in takes and k not in skip and "drop" not in k}
    for key, value in kept.items():
        if key.endswith("attention") and isinstance(value, Mapping):
            kept[key] = {k: v for k, v in value.items() if k not in ATTENTION_CHOICES and "drop" not in k}
    return kept


def _position_kind(position: Any) -> Any:
    """`model.position` as a kind: the string, or a mapping's `kind`."""
    return position.get("kind") if isinstance(position, Mapping) else position


def _tokenizer(cfg: Config, converted: Any) -> dict[str, Any]:
    """{"data.tokenizer": the checkpoint's tokenizer.json} when the data would otherwise choose or learn one."""
    from ..data.tokenizers.subword import KINDS

    data = cfg.section("data")
    spec = data.get("tokenizer")
    if converted.tokenizer is None or "tokenizer" not in data:
        return {}
    # a run's config.yaml for another checkpoint names that checkpoint's tokenizer: it gives way, as its model keys do
    other_run = is_run_config(Path(cfg.where("data.tokenizer"))) and not _stays(cfg, "data.tokenizer")
    theirs = same_path("data.tokenizer", str(spec), str(converted.tokenizer))
    if spec in KINDS and cfg.typed("data.tokenizer"):  # asked for by the user, and not what they get: said aloud
        unused = " (data.vocab_size is not used)" if cfg.typed("data.vocab_size") else ""
        log.warning(
            "data.tokenizer: %r (set in %s) gives way to %s, the tokenizer model.init_from's weights were trained "
            "with: one learned anew would give other ids to its embedding's rows%s", spec, cfg.where("data.tokenizer"),
            converted.tokenizer, unused,
        )  # fmt: skip
        return {"data.tokenizer": str(converted.tokenizer)}
    if spec in ("auto", None, *KINDS) or (other_run and not theirs):
        log.info("data.tokenizer: %r -> %s (the tokenizer model.init_from's weights were trained with)", spec,
                 converted.tokenizer)  # fmt: skip
        if cfg.typed("data.vocab_size"):  # the size of a vocabulary learned here: none is
            log.warning("data.vocab_size (set in %s) is not used: the tokenizer is model.init_from's, %s",
                        cfg.where("data.vocab_size"), converted.tokenizer)  # fmt: skip
        return {"data.tokenizer": str(converted.tokenizer)}
    if not theirs:
        log.warning(
            "data.tokenizer: %r (set in %s), not %s that model.init_from's weights were trained with: token ids may "
            "not match the embedding",
            spec, cfg.where("data.tokenizer"), converted.tokenizer,
        )  # fmt: skip
    return {}


def _options(
    cfg: Config,
    options: Mapping[str, Any],
    preset: dict[str, Any],
    *,
    heads_stated: bool = True,
    sized_by: str | None = None,
) -> dict[str, Any]:
    """{"model.<key>": value} of a converted model's architecture. A config file's value gives way (logged); a
    command-line value wins (an attention override, a new pooling), and so does a run's own config.yaml (`_stays`).
    Its dropout (`CHECKPOINT_DEFAULTS`) only fills an auto or missing key. `data.max_len` is cut to the model's.
    Another `model.num_heads` than the one the checkpoint states (`heads_stated`) is refused: the same tensors would
    load, split into other heads, and compute another function; so are key/value heads that do not divide its heads.
    `sized_by`: the Hugging Face or timm checkpoint whose sizes (`other_sizes`: model.dim, model.depth above its own,
    ...) are refused as well, before the network is built (an attnzoo run's differing keys are named by the error of
    the tensor that does not fit, `differences`)."""
    from ..pretrained.converted import other_sizes

    model = cfg.section("model")
    chosen: dict[str, Any] = {}
    for key, value in options.items():
        if key in FROM_DATA:
            continue
        full = f"model.{key}"
        if key in CHECKPOINT_DEFAULTS and model.get(key) not in (None, AUTO):
            continue
        if key.endswith("attention") and isinstance(value, dict):
            _check_attention(cfg, full, value, options.get("num_heads"))
            value = _attention(cfg, full, dict(model.get(key) or {}), value)
        elif key in model and _stays(cfg, full):
            if sized_by is not None and other_sizes(options, {key: model[key]}):
                _refuse_size(cfg, full, model[key], value, sized_by)
            if key == "num_heads" and model[key] != value:
                if heads_stated:
                    raise ConfigError(
                        f"model.num_heads: {model[key]} (set in {cfg.where(full)}), but model.init_from's weights "
                        f"have {value} heads: its tensors would load split into other heads and compute another "
                        f"function. Leave model.num_heads out (key/value heads: model.attention.num_kv_heads)"
                    )
                log.warning("model.num_heads: %r (set in %s) in place of the %r heads guessed from the width of "
                            "model.init_from's weights, which do not state a count (model.timm_name would)",
                            model[key], cfg.where(full), value)  # fmt: skip
            if key in DEPTHS and isinstance(value, int) and isinstance(model[key], int) and model[key] < value:
                cut = f"block {value - 1} is" if model[key] == value - 1 else f"blocks {model[key]} to {value - 1} are"
                log.warning("%s: %d (set in %s), and model.init_from's weights have %d blocks: the first %d are "
                            "loaded, %s dropped", full, model[key], cfg.where(full), value, model[key],
                            cut)  # fmt: skip
            continue
        if model.get(key) != value:
            if key in model:
                log.info("%s: %r (set in %s) -> %r (model.init_from)", full, model[key], cfg.where(full), value)
            chosen[full] = value
    data = cfg.section("data")
    for key in FOLLOW_WEIGHTS:  # inputs prepared as the weights were trained on, where the data would choose
        value, mine = options.get(key), data.get(key, "absent")
        if isinstance(value, int) and mine in (None, "auto") and value != mine:
            log.info("data.%s: %s -> %d (as model.init_from's weights were trained)", key, mine, value)
            preset[f"data.{key}"] = value
    max_len = options.get("max_len")
    position = _position_kind(model.get("position")) if "position" in model and _stays(cfg, "model.position") else None
    if isinstance(position, str) and position != "learned" and _position_kind(options.get("position")) == "learned":
        max_len = None  # the command line drops the checkpoint's table of positions: nothing to cut the data to
        chosen.pop("model.max_len", None)
    for key in ("max_len", "block_size"):  # text classification's longest input, the LM's context
        data_len = data.get(key)
        if not (isinstance(max_len, int) and isinstance(data_len, int)) or data_len == max_len:
            continue
        if data_len > max_len:
            log.info("data.%s: %d -> %d (the longest input model.init_from's positions hold)", key, data_len, max_len)
            preset[f"data.{key}"] = max_len
        else:  # the data's shorter length sizes the model; the model's load hook cuts the checkpoint's table
            chosen.pop("model.max_len", None)
            log.info("data.%s: %d (set in %s) of the %d positions model.init_from's weights hold: the model keeps the "
                     "first %d, and reads (and generates, translates) at most %d tokens for good; data.%s=%d keeps "
                     "them all, at more memory and time a step", key, data_len, cfg.where(f"data.{key}"), max_len,
                     data_len, data_len, key, max_len)  # fmt: skip
    if model.get("kind") == "seq2seq" and "decoder_attention" not in options:
        from ..models.seq2seq import decoder_layout

        mine = model.get("decoder_attention")
        decoder = decoder_layout(options, {"decoder_attention": dict(mine) if isinstance(mine, Mapping) else None})
        if decoder is not None and decoder != dict(mine):  # a decoder override: the checkpoint's biases keep a place
            log.info("model.decoder_attention: %s (the projections and dropout of model.init_from's decoder)", decoder)
            chosen["model.decoder_attention"] = decoder
    return chosen


def _refuse_size(cfg: Config, full: str, mine: Any, theirs: Any, source: str) -> None:
    """ConfigError for `full` set (where `cfg` says) to `mine`, a size of the checkpoint `source` that is `theirs`."""
    where = f"set in {cfg.where(full)}"
    if full.endswith("depth"):
        blocks = f"block {theirs}" if mine == theirs + 1 else f"blocks {theirs} to {mine - 1}"
        raise ConfigError(
            f"{full}: {mine} ({where}), but model.init_from's weights ({source}) have {theirs} blocks: {blocks} "
            f"would have no weights. A start's architecture is its checkpoint's: leave {full} out (or set at most "
            f"{theirs}: fewer blocks load its first ones)"
        )
    raise ConfigError(
        f"{full}: {mine!r} ({where}), but model.init_from's weights ({source}) have {full.removeprefix('model.')} "
        f"{theirs!r}: its tensors would not fit a network of that size. A start's architecture is its checkpoint's: "
        f"leave {full} out"
    )


def _check_attention(cfg: Config, full: str, theirs: Mapping[str, Any], heads: Any) -> None:
    """ConfigError for an entry of the attention section `full` that the command line (or a run's own config.yaml,
    `_stays`) sets and the checkpoint's tensors cannot take: key/value heads (`num_kv_heads`) that do not divide its
    `heads`, naming the counts that do; no query/key/value biases (`qkv_bias: false`) where it has them."""
    model = cfg.section("model")
    section = model.get(full.removeprefix("model."))  # model.attention, model.cross_attention, ...
    section = section if isinstance(section, Mapping) else {}
    kv = section.get("num_kv_heads")
    guessed = "num_heads" in model and _stays(cfg, "model.num_heads") and model["num_heads"] != heads
    if isinstance(kv, int) and isinstance(heads, int) and kv > 0 and heads % kv and not guessed:
        if _stays(cfg, f"{full}.num_kv_heads"):  # (a head count in place of a guessed one: the builder checks it)
            raise ConfigError(
                f"{full}.num_kv_heads: {kv} (set in {cfg.where(f'{full}.num_kv_heads')}) must divide the head count, "
                f"and model.init_from's weights (set in {cfg.where('model.init_from')}) have {heads} heads, which "
                f"the start keeps (model.num_heads is the checkpoint's): give one of {divisors(heads)}"
            )
    if section.get("qkv_bias") is False and theirs.get("qkv_bias") is True and _stays(cfg, f"{full}.qkv_bias"):
        raise ConfigError(
            f"{full}.qkv_bias: false (set in {cfg.where(f'{full}.qkv_bias')}), but model.init_from's weights (set "
            f"in {cfg.where('model.init_from')}) have query/key/value biases, which would have no place and change "
            f"the function its layers compute. Leave {full}.qkv_bias out, or set it true"
        )


def another_start(cfg: Config, key: str) -> bool:
    """Whether `key` comes from a run's config.yaml that started from another checkpoint than `cfg`'s model.init_from
    (a new run from `--config <run>/config.yaml model.init_from=<other>`): what that start and its data set there
    (the tokenizer's pad id, sizes) gives way to this start's."""
    return bool(cfg.section("model").get("init_from")) and is_run_config(Path(cfg.where(key))) and not _stays(cfg, key)


def _stays(cfg: Config, key: str) -> bool:
    """Whether `key`'s value stays over the checkpoint's: set on the command line, or in a run's own config.yaml that
    also names the checkpoint (`model.init_from`). That file holds what its run resolved from the same checkpoint:
    the checkpoint's options, and the overrides the run was started with. With another checkpoint its values give way,
    as a recipe's do."""
    if cfg.typed(key):
        return True
    where = cfg.where(key)
    path = Path(where)
    if not is_run_config(path):
        return False
    if cfg.where("model.init_from") == where:
        return True
    try:  # model.init_from set again elsewhere (the command line): the same checkpoint?
        saved = (read_yaml(path, run=True).get("model") or {}).get("init_from")
    except (ConfigError, AttributeError):
        return False
    return saved is not None and same_path("model.init_from", str(saved), str(cfg.section("model").get("init_from")))


def _attention(cfg: Config, full: str, mine: dict[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
    """An attention section (`full`: `model.attention`, `model.cross_attention`, ...) of a start: the checkpoint's
    (`theirs`), with the recipe's backend and, over both, every entry the command line or a run's config.yaml set (a
    whole entry: `model.attention.pattern.window=8` alone is no pattern). The recipe's other entries give way."""
    kept = {k: v for k, v in mine.items() if k in ATTENTION_CHOICES and k not in theirs}
    typed = {k: v for k, v in mine.items() if _stays(cfg, f"{full}.{k}")}
    return {**theirs, **kept, **typed}


def finetune_budget(start: Start | None, data: Any, cfg: Config) -> dict[str, Any]:
    """{"trainer.max_epochs": n} of a start from pretrained weights (a Hugging Face or timm checkpoint, or a run that
    descends from one: `Start.origin`) where the config leaves the budget to auto: epochs for about `FINETUNE_STEPS`
    optimizer steps of `data`'s train split, within `FINETUNE_EPOCHS`; logged. {} otherwise. A hint where the recipe's
    one thread would compute such a model."""
    if start is None or start.origin is None:
        return {}
    from .cluster import usable_cores
    from .switches import uses_cuda

    cores = usable_cores()

    trainer = cfg.section("trainer")
    gpu = uses_cuda(trainer.get("accelerator", "auto"))
    if trainer.get("num_threads") == 1 and cores > 1 and not gpu and not cfg.typed("trainer.num_threads"):
        log.info("trainer.num_threads: 1 (set in %s), for the recipe's small model: a pretrained model's large "
                 "matrices compute faster on more threads (trainer.num_threads=%d: this machine's cores)",
                 cfg.where("trainer.num_threads"), cores)  # fmt: skip
    if trainer.get("max_epochs") != AUTO:
        return {}
    from .cluster import planned_processes

    batches = len(data.train_dataloader())  # one process's loader, before the trainer: every batch of the split
    accumulate = trainer.get("accumulate_grad_batches") or 1
    per_epoch = max(1, math.ceil(batches / planned_processes(trainer) / max(1, int(accumulate))))  # optimizer steps
    low, high = FINETUNE_EPOCHS
    epochs = min(high, max(low, math.ceil(FINETUNE_STEPS / per_epoch)))
    log.info("trainer.max_epochs: auto -> %d (fine-tuning pretrained weights: %d steps an epoch, ~%d steps, %d-%d "
             "epochs; from random weights the recipe would train its small model for thousands)", epochs, per_epoch,
             FINETUNE_STEPS, low, high)  # fmt: skip
    return {"trainer.max_epochs": epochs}


def fixed_options(start: Start | None, inputs: Mapping[str, Any], cfg: Config) -> dict[str, Any]:
    """The model options `start` fixes, less those the data gives (`DataModule.model_inputs()`: the vocabulary,
    the image size, ...): the data's values build the model, and the checkpoint's tensors must fit them (a learned
    grid of positions is resampled on load). Exceptions: an embedding with more rows than the checkpoint's own
    tokenizer has tokens keeps them (`model.vocab_size`; one with fewer is a ConfigError), and the checkpoint's
    feature statistics replace the data's (`NORMALIZED_AS`). With them, the start's training choices (`tuning`)."""
    if start is None:
        return {}
    fixed = {k: v for k, v in start.options.items() if k.split(".", 1)[1] not in inputs} | start.tuning
    for key in NORMALIZED_AS:  # the data measures its own; the checkpoint's buffers, loaded over them, are what counts
        value = start.options.get(f"model.{key}")
        if value is not None and key in inputs:
            log.info("model.%s: %.4f (this data's) -> %.4f (model.init_from's: its weights were trained on features so "
                     "normalized)", key, inputs[key], value)  # fmt: skip
            fixed[f"model.{key}"] = value
    rows, tokens = start.converted.options.get("vocab_size"), inputs.get("vocab_size")
    own = _start_tokenizer(start, cfg) is not None  # another tokenizer's ids do not match: the embedding is named
    sized = isinstance(rows, int) and isinstance(tokens, int) and rows != tokens
    if sized and not own and start.own_run is None:  # (an attnzoo run's error names its config.yaml's tokenizer)
        theirs = f" ({start.converted.tokenizer})" if start.converted.tokenizer is not None else ""
        spec = cfg.section("data").get("tokenizer")
        raise ConfigError(
            f"data.tokenizer: {spec!r} (set in {cfg.where('data.tokenizer')}) has {tokens} tokens, and "
            f"model.init_from's embedding ({start.converted.source}) has {rows} rows: its weights were trained with "
            f"another tokenizer{theirs}, whose ids its rows embed. Leave data.tokenizer out to tokenize with that "
            "one, or start from weights trained with this tokenizer"
        )
    if own and sized:
        if rows < tokens:
            raise ConfigError(
                f"model.init_from: {start.converted.source} has an embedding of {rows} rows, and its tokenizer "
                f"({_start_tokenizer(start, cfg)}) has {tokens} tokens: ids {rows} to {tokens - 1} would have no "
                "row. Its weights and its tokenizer do not belong together; put the tokenizer.json its weights were "
                "trained with beside them"
            )
        # a table padded past the tokenizer (resize_token_embeddings(pad_to_multiple_of=...)): the model keeps its rows
        log.info("model.vocab_size: %d (the tokenizer's tokens) -> %d (the rows of model.init_from's embedding; the "
                 "tokenizer never gives ids %d to %d)", tokens, rows, tokens, rows - 1)  # fmt: skip
        fixed["model.vocab_size"] = rows
    return fixed


def apply_start(start: Start, net: Any, data: Any, cfg: Config) -> dict[str, Any]:
    """Copy the checkpoint's tensors into `net`; log and return what was done (the run summary's `init_from`)."""
    from ..pretrained import run_dir
    from ..pretrained.transfer import source_kind, transfer

    keep_fresh, state = False, start.converted.state_dict
    before = run_dir.class_names(start.given) if start.own_run is not None else _hf_class_names(start.given)
    now = None if data.class_names is None else [str(name) for name in data.class_names]  # as the files hold them
    if before is not None and now is not None and list(before) != now:
        same_labels = sorted(before) == sorted(now)  # in another order: the head's rows follow them
        reordered = _head_rows(state, [before.index(name) for name in now]) if same_labels else None
        if reordered is not None:
            state = reordered
            log.info("model.init_from: the same %d labels in another order than the checkpoint's: its head's rows are "
                     "reordered to this data's", len(now))  # fmt: skip
        else:
            keep_fresh = True
            why = (
                "the labels are the checkpoint's, but its head has no one layer of their rows to reorder"
                if same_labels
                else "the label set differs from the checkpoint's"
            )
            log.info("model.init_from: %s (%d classes there, %d here): the head starts new", why, len(before), len(now))
    try:  # a longer position table is cut, a grid of positions resampled (the model's own load hooks)
        done = transfer(
            net,
            state,
            source=start.converted.source,
            keep_fresh=keep_fresh,
            source_kind=source_kind(start.converted.options),
            options=start.converted.options,
            target=cfg.section("model"),
        )
    except ValueError as err:
        hint = differences(start, cfg)
        raise ConfigError(f"model.init_from: {err}{hint} (set in {cfg.where('model.init_from')})") from None
    done = done._replace(dropped=[*start.converted.dropped, *done.dropped])  # the converter's too (a BERT's MLM head)
    log.info("model.init_from: %s: %s", start.converted.source, done.describe())
    return {
        "path": start.given,
        "source": start.converted.source,
        "origin": start.origin,
        "tokenizer": _start_tokenizer(start, cfg),
        "loaded": len(done.loaded),
        "new": done.new,
        "dropped": done.dropped,
        "attention": done.attention,
    }


def _start_tokenizer(start: Start, cfg: Config) -> str | None:
    """The start's tokenizer.json when the run tokenizes with it: chosen for it (`_tokenizer`), or named by the config
    already (a run's config.yaml, or `data.tokenizer` set to it)."""
    chosen = start.preset.get("data.tokenizer")
    if chosen is not None:
        return os.path.abspath(chosen)
    mine, theirs = cfg.section("data").get("tokenizer"), start.converted.tokenizer
    if theirs is not None and isinstance(mine, str) and same_path("data.tokenizer", mine, str(theirs)):
        return os.path.abspath(theirs)
    return None


def _hf_class_names(given: str) -> list[str] | None:
    """The class names of a Hugging Face folder's config.json (`id2label`, in id order), when it names them:
    None for none, or for the placeholders `LABEL_0`, `LABEL_1`, ... (a head kept then keeps its class ids)."""
    import re

    from ..pretrained.converted import read_hf_config

    try:
        id2label = read_hf_config(given).get("id2label")
        names = [str(id2label[key]) for key in sorted(id2label, key=int)]
    except (ValueError, TypeError, AttributeError, KeyError):  # no readable config.json, or no id2label mapping
        return None
    if not names or all(re.fullmatch(r"LABEL_\d+", name) for name in names):
        return None
    return names


def _head_rows(state: dict[str, Any], order: list[int]) -> dict[str, Any] | None:
    """`state` with the head's per-class rows taken in `order`: the `HEAD_PREFIXES` tensors of len(order) rows, which
    must be those of one layer (its weight and bias); None when they are not (no such layer, or several)."""
    from ..pretrained.transfer import HEAD_PREFIXES

    rows = [k for k, v in state.items() if k.startswith(HEAD_PREFIXES) and v.dim() and v.shape[0] == len(order)]
    if len({key.rsplit(".", 1)[0] for key in rows}) != 1:
        return None
    index = list(order)
    return {key: value[index] if key in rows else value for key, value in state.items()}


def differences(start: Start, cfg: Config) -> str:
    """For an attnzoo run: the model options (and the tokenizer) of this config that differ from the run's
    config.yaml; the head's label count may differ."""
    from ..config import parameters
    from ..models import MODELS
    from ..pretrained import run_dir

    if start.own_run is None and start.converted.source.startswith("attnzoo run"):  # a .ckpt outside its run
        return (
            ". A checkpoint outside its run directory holds no architecture: the network is this config's. Give the "
            "run directory (its config.yaml beside checkpoints/), or set the model.* keys the run was trained with"
        )
    if start.own_run is None:
        return ""
    kind = cfg.section("model")["kind"]
    before = architecture(start.converted.options, kind)  # what the run fixes, as `read_start` takes it
    now = architecture({k: v for k, v in cfg.section("model").items() if k not in ("kind", *MODEL_EXTRAS)}, kind)
    before["data.tokenizer"] = (run_dir.run_config(start.given).get("data") or {}).get("tokenizer")
    now["data.tokenizer"] = cfg.section("data").get("tokenizer")
    if start.converted.tokenizer is not None and now["data.tokenizer"] == str(start.converted.tokenizer):
        now["data.tokenizer"] = before["data.tokenizer"]  # the run's own tokenizer.json: the same ids
    theirs = (run_dir.run_config(start.given).get("model") or {}).get("kind")
    takes = parameters(MODELS[theirs]) if theirs in MODELS else set(before)
    keys = sorted(  # an option the run's model kind has not (a classifier's pooling from an MLM run) is this config's
        k
        for k in set(before) | set(now)
        if before.get(k) != now.get(k) and k != "num_classes" and (k in takes or k.startswith("data."))
    )
    if not keys:
        return ""
    shown = ", ".join(
        f"{k if k.startswith('data.') else f'model.{k}'} ({before.get(k)!r} there, {now.get(k)!r} here)"
        for k in keys[:6]
    )
    return f". This config differs from {start.own_run / 'config.yaml'} in {shown}"


def keep_start(record: Mapping[str, Any], run_dir: Path) -> None:
    """Record the start in the run directory (`record` as `apply_start` returned it): `START_FILE`, and a copy of
    the start's tokenizer.json when the run tokenizes with it and has no tokenizer.json of its own. A command that
    loads the run reads that copy (`attnzoo.run.tokenizer_stamp.saved_tokenizer`), and `--resume` both: the run
    works, and goes on, after the folder it started from moved."""
    from ..data.tokenizers.subword import TOKENIZER_FILE
    from ..data.tokenizers.vocab_files import tokenizer_text
    from ..util.files import write_json, write_text

    source = record.get("tokenizer")
    if source and not (run_dir / TOKENIZER_FILE).exists():
        write_text(run_dir / TOKENIZER_FILE, tokenizer_text(source))  # a vocab.txt kept as the JSON it was read as
    write_json(run_dir / START_FILE, dict(record))


def recorded_start(run_dir: Path) -> dict[str, Any] | None:
    """The start a run recorded (`keep_start`), or None when it recorded none (a run from scratch, or one made
    before runs recorded it)."""
    import json

    try:
        record = json.loads((run_dir / START_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    kept = {key: value for key, value in record.items() if key in START_KEYS}  # what apply_start records, nothing else
    return kept if isinstance(kept.get("source"), str) else None
