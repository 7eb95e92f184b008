"""ViT checkpoints -> attnzoo's `ViT` (model kind "vit"): Hugging Face `ViTModel` / `ViTForImageClassification`
directories, and timm ViT checkpoints (a `.safetensors` / `.pth` file, or a timm hub directory whose config.json
names the `architecture` and, as timm's save_for_hf writes it, the `model_args` it was built with).

timm keys map with `attnzoo.models.vit.timm_to_attnzoo`. The architecture's hyper-parameters are read from the
tensors' shapes (width, depth, patch size, image size, MLP ratio, head, class token, `fc_norm` or final norm); the
number of heads, the pooling and the norms' eps are not in the shapes: they come from the timm name (with a hub
directory's `model_args`: keywords of timm's `VisionTransformer` only), given (a timm
`VisionTransformer` of pre-norm `Block`s with exact GELU and token or avg pooling, e.g. `vit_medium_patch16_gap_256`;
read from timm's registry, built on the meta device: nothing is downloaded or allocated; other architectures are
refused by name), or the heads from the width of the classic sizes (192 tiny, 384 small, 768 base, 1024 large) and
the pooling as timm's default for the tensors (also when they do not fit the named architecture's, logged).
Hugging Face ViT uses LayerNorm eps 1e-12 (timm: 1e-6) and separate q/k/v projections, fused here into `qkv`. A
`ViTModel`'s pooler (dense + tanh on the class token) has no attnzoo counterpart and is dropped (logged).
Loading into a model of another image size resamples `pos_embed` (`ViT` does it on load).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ..models.vit import timm_to_attnzoo
from .converted import Converted, read_hf_config, read_preprocessor_config, read_weights
from .family import check_consumed, check_fits, config_value, hf_model_type, hf_vit_blocks, refuse, take, weights_name

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor
MODEL_KIND = "vit"
# timm size name -> (width, heads): the widths a head count is inferred from when no timm name is given
TIMM_SIZES = {"tiny": (192, 3), "small": (384, 6), "base": (768, 12), "large": (1024, 16)}
TIMM_NAME = re.compile(r"[a-z0-9_]+")  # a timm registry name (a pretrained tag after a dot is ignored)
FILE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
READS = f"a Hugging Face vit folder, a timm ViT file ({', '.join(FILE_SUFFIXES)})"


def matches(path: str | Path) -> bool:
    """A Hugging Face ViT directory, a timm hub directory of a ViT, or a file holding a timm ViT state dict."""
    path = Path(path)
    if path.is_dir():
        return hf_model_type(path) == "vit" or _timm_architecture(path) is not None
    if not (path.is_file() and path.suffix in FILE_SUFFIXES):
        return False
    try:
        keys = _keys(path)
    except ValueError:
        return False
    return "patch_embed.proj.weight" in keys and "blocks.0.attn.qkv.weight" in keys


def convert(path: str | Path, *, timm_name: str | None = None) -> Converted:
    """A ViT checkpoint -> `Converted` for `ViT`.

    Args:
        path: a Hugging Face ViT directory, a timm hub directory, or a timm checkpoint file.
        timm_name: the timm architecture of a timm checkpoint (e.g. "vit_small_patch16_224"; a pretrained tag after
            a dot is ignored); default: the hub directory's `architecture`, else inferred from the width
            (192 tiny, 384 small, 768 base, 1024 large; any other width needs the name). Not for Hugging Face
            directories.
    """
    path = Path(path)
    if path.is_dir() and hf_model_type(path) == "vit":
        if timm_name is not None:
            raise ValueError(
                f"{str(path)!r} is a Hugging Face ViT directory: timm_name ({timm_name!r}) is for timm files"
            )
        return _convert_hf(path)
    model_args: dict[str, Any] = {}
    if path.is_dir():
        own = _timm_architecture(path)
        timm_name = timm_name or own
        if own is not None and timm_name.split(".", 1)[0] == own.split(".", 1)[0]:
            model_args = _timm_model_args(path)  # what the folder's model was built with beyond the name's defaults
    state = _strip_module(dict(read_weights(path)))
    return _convert_timm(state, timm_name, weights_name(path) if path.is_dir() else str(path), path, model_args)


# --- Hugging Face ------------------------------------------------------------------------------------------------


def _hf_options(config: dict, path: Path) -> dict[str, Any]:
    act = config_value(config, "hidden_act", "gelu")
    if act != "gelu":
        raise refuse(path, "hidden_act", act, "attnzoo's ViT MLP uses GELU ('gelu')")
    dim, inner = config_value(config, "hidden_size", 768), config_value(config, "intermediate_size", 3072)
    if int(dim * (inner / dim)) != inner:
        raise refuse(path, "intermediate_size", inner, f"not reachable as int(hidden_size * mlp_ratio), {dim}")
    size, patch = config_value(config, "image_size", 224), config_value(config, "patch_size", 16)
    for key, value in (("image_size", size), ("patch_size", patch)):
        if not isinstance(value, int):
            if not (isinstance(value, list | tuple) and len(set(value)) == 1):
                raise refuse(path, key, value, "attnzoo's ViT takes square images and patches")
    hidden_drop = config_value(config, "hidden_dropout_prob", 0.0)
    return dict(
        img_size=size if isinstance(size, int) else size[0],
        patch_size=patch if isinstance(patch, int) else patch[0],
        stem="patch",  # a checkpoint's linear patch embedding
        in_chans=config_value(config, "num_channels", 3),
        embed_dim=dim,
        depth=config_value(config, "num_hidden_layers", 12),
        num_heads=config_value(config, "num_attention_heads", 12),
        mlp_ratio=inner / dim,
        pos_drop_rate=hidden_drop,
        proj_drop_rate=hidden_drop,
        attention={
            "qkv_bias": bool(config_value(config, "qkv_bias", True)),
            "attn_drop": config_value(config, "attention_probs_dropout_prob", 0.0),
        },
        norm_eps=float(config_value(config, "layer_norm_eps", 1e-12)),
    )


def _convert_hf(path: Path) -> Converted:
    options = _hf_options(read_hf_config(path), path)
    state, file = dict(read_weights(path)), weights_name(path)
    c, depth, bias = options["embed_dim"], options["depth"], options["attention"]["qkv_bias"]
    inner, patch, chans = int(c * options["mlp_ratio"]), options["patch_size"], options["in_chans"]
    n_pos = 1 + (options["img_size"] // patch) ** 2
    pre = ("vit.", "")  # ViTForImageClassification nests the model under `vit.`; ViTModel does not
    out = {
        "cls_token": take(state, "embeddings.cls_token", (1, 1, c), file, pre),
        "pos_embed": take(state, "embeddings.position_embeddings", (1, n_pos, c), file, pre),
        "patch_embed.proj.weight": take(
            state, "embeddings.patch_embeddings.projection.weight", (c, chans, patch, patch), file, pre
        ),
        "patch_embed.proj.bias": take(state, "embeddings.patch_embeddings.projection.bias", (c,), file, pre),
    }
    out |= hf_vit_blocks(state, depth=depth, dim=c, inner=inner, qkv_bias=bias, file=file, prefixes=pre)
    for p in ("weight", "bias"):
        out[f"encoder.norm.{p}"] = take(state, f"layernorm.{p}", (c,), file, pre)
    head = state.get("classifier.weight")
    options["num_classes"] = 0 if head is None else int(head.shape[0])
    if head is not None:
        out["head.weight"] = take(state, "classifier.weight", (options["num_classes"], c), file)
        out["head.bias"] = take(state, "classifier.bias", (options["num_classes"],), file)
    dropped = sorted(k for k in state if "pooler." in k or k.endswith("embeddings.mask_token"))
    if dropped:
        log.info("%s: %s dropped (no attnzoo ViT counterpart: the pooler, the MIM mask token)", file, dropped)
    check_consumed({k: v for k, v in state.items() if k not in dropped}, file)
    check_fits(MODEL_KIND, options, out, file)
    source = f"vit (Hugging Face) {path}"
    return Converted(MODEL_KIND, options, out, None, source, _hf_normalization(path), tuple(dropped))


# --- timm --------------------------------------------------------------------------------------------------------


def _hf_normalization(path: Path) -> dict[str, Any]:
    """{"mean", "std"} of the pixels as the directory's preprocessor_config.json (ViTImageProcessor) normalizes them,
    when it has one: ImageNet's statistics for some checkpoints, 0.5 for others; {} without the file (the processor's
    default, 0.5, is attnzoo's)."""
    config = read_preprocessor_config(path)
    if config is None:
        return {}
    file = path / "preprocessor_config.json"
    if not config.get("do_rescale", True):
        raise ValueError(f"{str(file)!r}: do_rescale=false is not supported (attnzoo scales pixels to [0, 1] first)")
    if not config.get("do_normalize", True):
        return {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
    return _statistics(file, config.get("image_mean"), config.get("image_std"))


def _timm_normalization(path: Path) -> dict[str, Any]:
    """{"mean", "std"} of a timm hub directory's config.json (`pretrained_cfg`), when it states them."""
    try:
        config = read_hf_config(path) if (path / "config.json").is_file() else {}
    except ValueError:
        return {}
    cfg = config.get("pretrained_cfg") if isinstance(config, dict) else None
    if not isinstance(cfg, dict) or "mean" not in cfg or "std" not in cfg:
        return {}
    return _statistics(path / "config.json", cfg["mean"], cfg["std"])


def _statistics(file: Path, mean: Any, std: Any) -> dict[str, Any]:
    if mean is None and std is None:
        return {}
    ok = lambda v: isinstance(v, list | tuple) and v and all(isinstance(x, int | float) for x in v)  # noqa: E731
    if not (ok(mean) and ok(std) and len(mean) == len(std) and all(x > 0 for x in std)):
        raise ValueError(f"{str(file)!r}: image mean {mean!r} and std {std!r} must be lists of numbers (std > 0)")
    return {"mean": [float(x) for x in mean], "std": [float(x) for x in std]}


def _timm_architecture(path: Path) -> str | None:
    """The `architecture` of a timm hub directory's config.json when it is a ViT (no Hugging Face model_type)."""
    file = path / "config.json"
    if not file.is_file() or hf_model_type(path) is not None:
        return None
    try:
        arch = read_hf_config(path).get("architecture")
    except (ValueError, AttributeError):
        return None
    return arch if isinstance(arch, str) and arch.startswith("vit_") else None


def _timm_model_args(path: Path) -> dict[str, Any]:
    """The `model_args` of a timm hub directory's config.json (timm's save_for_hf records the keywords the model was
    built with: num_heads, global_pool, act_layer, ...; timm's own loader builds with them), checked to be keywords of
    timm's VisionTransformer: nothing else (checkpoint_path, pretrained_cfg_overlay, ...) reaches timm."""
    import inspect

    from timm.models.vision_transformer import VisionTransformer

    file = path / "config.json"
    args = read_hf_config(path).get("model_args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ValueError(f"{str(file)!r}: model_args {args!r} is no mapping of keyword arguments")
    # where the model is built is attnzoo's (the meta device: nothing allocated)
    known = set(inspect.signature(VisionTransformer.__init__).parameters) - {"self", "kwargs", "device", "dtype"}
    unknown = sorted(k for k in args if k not in known)
    if unknown:
        raise ValueError(
            f"{str(file)!r}: model_args {unknown} are not taken (those that shape a timm VisionTransformer are: "
            f"{sorted(known)})"
        )
    return args


def _keys(file: Path) -> set[str]:
    if file.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(file), framework="pt") as f:
                return {k.removeprefix("module.") for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        except Exception:  # noqa: BLE001 (a damaged file is simply not a match)
            return set()
    return set(_strip_module(dict(read_weights(file))))


def _strip_module(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A DataParallel / DDP checkpoint's keys without their `module.` prefix."""
    if state and all(k.startswith("module.") for k in state):
        return {k.removeprefix("module."): v for k, v in state.items()}
    return state


class _Arch(NamedTuple):
    """What a timm ViT architecture is, as far as its checkpoint's tensors cannot tell or must agree."""

    name: str
    heads: int
    global_pool: str | None  # None: not known (no timm name), read from the tensors
    class_token: bool | None = None
    fc_norm: bool | None = None
    norm_eps: float = 1e-6  # of every LayerNorm (timm's ViT: 1e-6)


def _arch(timm_name: str | None, width: int, patch: int, file: str, model_args: dict[str, Any]) -> _Arch:
    """The architecture from the timm name, or its head count from the width when no name is given."""
    by_width = {w: (size, h) for size, (w, h) in TIMM_SIZES.items()}
    if timm_name is None:
        if width not in by_width:
            raise ValueError(
                f"{file}: cannot tell the timm ViT of width {width} (known widths: "
                f"{ {w: f'vit_{s}' for w, (s, _) in by_width.items()} }); pass its timm_name (the timm architecture "
                "it was trained as, e.g. vit_medium_patch16_gap_256 for width 512: it gives the head count)"
            )
        size, heads = by_width[width]
        return _Arch(f"vit_{size}_patch{patch} (inferred from the width)", heads, None)
    name = timm_name.split(".", 1)[0]
    arch, (want_width, want_patch) = _timm_arch(name, timm_name, model_args, file)
    if (want_width, want_patch) != (width, patch):
        raise ValueError(
            f"{file} does not hold a {name}: its patch embedding is width {width}, patch {patch} "
            f"(a {name} has width {want_width}, patch {want_patch})"
        )
    return arch


def _timm_arch(name: str, given: str, model_args: dict[str, Any], file: str) -> tuple[_Arch, tuple[int, int]]:
    """The timm ViT architecture `name` built with `model_args` on the meta device (no weights), and its (width, patch
    size).
    ValueError naming what attnzoo's ViT does not compute as the architecture does (blocks, activation, pooling):
    such options leave no tensor of their own, so the checkpoint cannot tell them."""
    import timm
    from timm.layers import GELU as TimmGELU  # act_layer "gelu": F.gelu, exact
    from timm.models.vision_transformer import Block, VisionTransformer

    if not (TIMM_NAME.fullmatch(name) and timm.is_model(name)):
        raise ValueError(
            f"timm_name {given!r} is not a supported timm ViT: expected a timm VisionTransformer architecture "
            "(e.g. vit_tiny_patch16_224, vit_small_patch16_224, vit_medium_patch16_gap_256)"
        )
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **model_args)
    except Exception as err:  # noqa: BLE001 (a registered model that cannot be built here is refused, not a crash)
        built = f" with the model_args of its config.json, {model_args}," if model_args else ""
        raise ValueError(
            f"{file}: timm_name {given!r}: timm could not build it{built} ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"timm_name {given!r} is not a supported timm ViT: timm builds it as {type(model).__name__}, "
            "not a VisionTransformer"
        )
    block, pool = model.blocks[0], model.global_pool
    act = getattr(getattr(block, "mlp", None), "act", None)
    norm = getattr(block, "norm1", None)
    unlike = (
        f"its blocks are timm's {type(block).__name__} (attnzoo's ViT: pre-norm blocks, timm's Block)"
        if type(block) is not Block
        else f"its MLP activation is {act!r} (attnzoo's ViT: GELU, exact)"
        if not (type(act) is torch.nn.GELU and act.approximate == "none" or type(act) is TimmGELU)
        else f"its norms are {type(norm).__name__} (attnzoo's ViT: LayerNorm)"
        if not isinstance(norm, nn.LayerNorm)
        else f"it pools with global_pool={pool!r} (attnzoo's ViT: 'token' or 'avg')"
        if pool not in ("token", "avg")
        else "its average pool includes the class token (pool_include_prefix)"
        if getattr(model, "pool_include_prefix", False)
        else None
    )
    if unlike:
        built = f" built with the model_args of its config.json ({model_args})" if model_args else ""
        raise ValueError(f"{file}: timm_name {given!r}{built} is not a supported timm ViT: {unlike}")
    arch = _Arch(
        name,
        int(block.attn.num_heads),
        pool,
        model.cls_token is not None,
        not isinstance(model.fc_norm, nn.Identity),
        float(norm.eps),
    )
    return arch, (int(model.embed_dim), int(model.patch_embed.patch_size[0]))


def _convert_timm(
    state: dict[str, Tensor], timm_name: str | None, file: str, path: Path, model_args: dict[str, Any] | None = None
) -> Converted:
    proj = state.get("patch_embed.proj.weight")
    if proj is None or proj.dim() != 4 or proj.shape[2] != proj.shape[3] or "blocks.0.mlp.fc1.weight" not in state:
        raise ValueError(f"{file}: not a timm ViT checkpoint (no square 'patch_embed.proj.weight' / 'blocks.0')")
    for key, what in (
        ("reg_token", "register tokens"),
        ("norm_pre.weight", "a pre-norm"),
        ("attn_pool", "attn pool"),
        ("dist_token", "a distillation token (DeiT's distilled models)"),
        ("blocks.0.attn.q_norm", "a norm of queries and keys (qk_norm)"),
    ):
        if any(k.startswith(key) for k in state):
            raise ValueError(f"{file}: tensor {key!r}: timm ViTs with {what} are not supported")
    width, chans, patch = int(proj.shape[0]), int(proj.shape[1]), int(proj.shape[2])
    arch = _arch(timm_name, width, patch, file, model_args or {})
    heads, name, pool = arch.heads, arch.name, arch.global_pool
    prefix = 1 if "cls_token" in state else 0
    fc_norm = "fc_norm.weight" in state  # else the final norm of every token (`norm.weight`; without: refused)
    if (arch.class_token, arch.fc_norm) != (bool(prefix), fc_norm):  # no name, or a file built with other options
        pool = "avg" if fc_norm or not prefix else "token"  # timm's default for those tensors
        log.info(
            "%s: pooled as global_pool=%r, read from its tensors (%s; pre-norm blocks and exact GELU assumed)",
            file,
            pool,
            "no model.timm_name" if timm_name is None else f"its class token and norms are not {name}'s",
        )
    pos = state.get("pos_embed")
    if pos is None or pos.dim() != 3:
        raise ValueError(f"{file}: tensor 'pos_embed' is missing (timm ViTs without learned positions: unsupported)")
    side = int(round((pos.shape[1] - prefix) ** 0.5))
    if side * side != pos.shape[1] - prefix:
        raise ValueError(
            f"{file}: tensor 'pos_embed' of {pos.shape[1]} rows is not {prefix} prefix + a square grid "
            "(a ViT without class-token positions?): unsupported"
        )
    depth = sum(1 for k in state if re.fullmatch(r"blocks\.\d+\.norm1\.weight", k))
    head = state.get("head.weight")
    options: dict[str, Any] = dict(
        img_size=side * patch,
        patch_size=patch,
        stem="patch",  # a checkpoint's linear patch embedding
        in_chans=chans,
        num_classes=0 if head is None else int(head.shape[0]),
        embed_dim=width,
        depth=depth,
        num_heads=heads,
        mlp_ratio=state["blocks.0.mlp.fc1.weight"].shape[0] / width,
        class_token=bool(prefix),
        global_pool=pool,
        fc_norm=fc_norm,
        attention={"qkv_bias": "blocks.0.attn.qkv.bias" in state},
        layer_scale=1e-5 if "blocks.0.ls1.gamma" in state else None,  # the checkpoint's scales replace the value
        norm_eps=arch.norm_eps,
    )
    converted = timm_to_attnzoo(state)
    check_fits(MODEL_KIND, options, converted, file)
    data = _timm_normalization(path) if path.is_dir() else _named_normalization(timm_name)
    return Converted(MODEL_KIND, options, converted, None, f"{name} (timm) {path}", data)


def _named_normalization(timm_name: str | None) -> dict[str, Any]:
    """{"mean", "std"} of the pretrained config timm keeps for `timm_name` (with its tag: deit_tiny_patch16_224 and
    vit_small_patch16_224.dino were trained on ImageNet statistics, vit_tiny_patch16_224.augreg on 0.5), read offline;
    {} without a name (a file alone does not tell how its images were normalized)."""
    import timm

    if timm_name is None:
        log.info(
            "model.init_from: a timm file does not say how its images were normalized: the data's statistics are "
            "used (data.mean and data.std; unset: 0.5 for every channel, as timm's augreg ViTs); name its "
            "model.timm_name (with its tag, e.g. deit_small_patch16_224) to take timm's, or set them"
        )
        return {}
    try:
        cfg = timm.models.get_pretrained_cfg(timm_name)
    except RuntimeError as err:  # "Invalid pretrained tag (dinoo) for vit_small_patch16_224.": a typo, or a newer tag
        name = timm_name.split(".", 1)[0]
        tags = [t.split(".", 1)[1] for t in timm.list_pretrained(f"{name}.*")]
        log.warning(
            "timm_name %r: %s (this timm's tags: %s), so its pixel statistics are not known here: the data's are used; "
            "set data.mean and data.std if the weights were trained with others", timm_name, err, tags,
        )  # fmt: skip
        return {}
    except Exception:  # noqa: BLE001 (a name timm keeps no pretrained config for: nothing to read)
        return {}
    if cfg is None or cfg.mean is None or cfg.std is None:
        return {}
    return _statistics(Path(f"timm's pretrained config of {timm_name}"), list(cfg.mean), list(cfg.std))
