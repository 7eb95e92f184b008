"""ViT built from attnzoo's Encoder, state-dict compatible with timm's `VisionTransformer`.

Notation: B batch, C width, N patches (grid gh x gw), P prefix tokens (class token).
Parameter names follow timm (`patch_embed`, `cls_token`, `pos_embed`, `fc_norm`, `head`) except that the
blocks and final norm live in `encoder` (`encoder.blocks.N.*`, `encoder.norm.*`); `timm_to_attnzoo` maps timm's
`blocks.N.*` / `norm.*` onto them, so a timm checkpoint on disk fine-tunes with any attnzoo attention
(`model.init_from`, `attnzoo.pretrained.vit`).
"""

from __future__ import annotations

import inspect
import logging
import math
from functools import partial
from typing import Any, Literal

import torch
from timm.layers import PatchEmbed, resample_abs_pos_embed, trunc_normal_
from torch import nn

from ..attention.factory import layer_shape
from ..layers.encoder import make_encoder
from ..util.checks import at_least

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor


STEMS = ("patch", "conv")


def stem_strides(patch_size: int) -> list[int]:
    """The strides of `conv_stem`'s convolutions: 2 for each factor 2 of `patch_size`, then the odd factor left
    (8: 2, 2, 2; 12: 2, 2, 3; 28: 2, 2, 7)."""
    if patch_size < 2:
        raise ValueError(f"a conv stem needs a patch_size >= 2 (model.patch_size), got {patch_size}")
    twos = (patch_size & -patch_size).bit_length() - 1
    odd = patch_size >> twos
    return [2] * twos + ([odd] if odd > 1 else [])


def conv_stem(in_chans: int, dim: int, patch_size: int) -> nn.Sequential:
    """Strided convolutions (`stem_strides`: 3x3 with stride 2 for each factor 2 of `patch_size`, then one whose
    kernel and stride are the odd factor left), each with BatchNorm and ReLU, widths doubling up to `dim`, then a
    1x1 conv to `dim`: [B, in_chans, S, S] -> [B, dim, S / patch_size, S / patch_size], the grid of a patchify
    convolution (Xiao et al. 2021, "Early convolutions help transformers see better")."""
    strides = stem_strides(patch_size)
    steps = len(strides)
    widths = [max(8, dim // 2 ** (steps - 1 - i)) for i in range(steps)]  # e.g. dim 64, patch 8: 16, 32, 64
    layers: list[nn.Module] = []
    for c_in, c_out, stride in zip([in_chans, *widths[:-1]], widths, strides, strict=True):
        kernel = 3 if stride == 2 else stride
        conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=1 if stride == 2 else 0, bias=False)
        layers += [conv, nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Conv2d(widths[-1], dim, 1))


class ViT(nn.Module):
    """Vision transformer classifier: patches -> [class token] + position -> Encoder -> pool -> head.

    Args:
        attention: the `model.attention` config (`attnzoo.attention.factory.attention_builder`); its parts
            receive `grid_size` (gh, gw), `num_prefix_tokens` and `seq_len` (tokens per image) as their layer shape.
        global_pool: "token" (class token) or "avg" (mean of patch tokens).
        fc_norm: normalize the pooled token (`fc_norm`) instead of every token after the last block (the encoder's
            final norm), as timm; None: with "avg" pooling only (timm's default). A timm checkpoint's choice follows
            from its tensors (`fc_norm.weight` or `norm.weight`).
        pos_embed: "learned" absolute position embedding, or "none" (e.g. with rotary or relative biases).
        layer_scale: initial LayerScale value, None for none.
        norm_eps: epsilon of every LayerNorm (timm's ViT: 1e-6; Hugging Face's: 1e-12).
        stem: "patch" (one linear map of each patch, timm's `patch_embed.proj`) or "conv" (`conv_stem`: strided
            convolutions to the same grid, `stem_strides`), which learns shapes in larger images
            from few examples much sooner (Xiao et al. 2021).

    A loaded `pos_embed` of another patch grid (a checkpoint trained at another image size) is resampled to this
    model's grid (timm's `resample_abs_pos_embed`), and the log says so.
    """

    def __init__(
        self,
        *,
        img_size: int = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        embed_dim: int = 192,
        depth: int = 12,
        num_heads: int = 3,
        mlp_ratio: float = 4.0,
        class_token: bool = True,
        global_pool: Literal["token", "avg"] = "token",
        fc_norm: bool | None = None,
        pos_embed: Literal["learned", "none"] = "learned",
        drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        layer_scale: float | None = None,
        attention: dict[str, Any] | None = None,
        norm_eps: float = 1e-6,
        stem: Literal["patch", "conv"] = "patch",
    ) -> None:
        super().__init__()
        if stem not in STEMS:
            raise ValueError(f"stem {stem!r} is not one of {STEMS}")
        if not norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {norm_eps!r}")
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True")
        if pos_embed not in ("learned", "none"):
            raise ValueError(f"pos_embed must be 'learned' or 'none', got {pos_embed!r}")
        at_least("num_classes", num_classes, 0)  # 0: no head (timm's features-only convention)
        if img_size % patch_size:
            raise ValueError(f"img_size ({img_size}) must be a multiple of patch_size ({patch_size})")
        if fc_norm not in (None, True, False):
            raise ValueError(f"fc_norm must be true, false or null (with avg pooling only), got {fc_norm!r}")
        use_fc_norm = global_pool == "avg" if fc_norm is None else fc_norm
        norm_layer = partial(nn.LayerNorm, eps=norm_eps)
        self.num_classes, self.global_pool = num_classes, global_pool
        self.num_prefix_tokens = 1 if class_token else 0
        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        self.grid_size = tuple(self.patch_embed.grid_size)
        if stem == "conv":  # the same patch grid from strided 3x3 convolutions
            self.patch_embed.proj = conv_stem(in_chans, embed_dim, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        shape = layer_shape(grid_size=self.grid_size, num_prefix_tokens=self.num_prefix_tokens)
        n_pos = shape["seq_len"]  # tokens per image
        self.pos_embed = nn.Parameter(torch.randn(1, n_pos, embed_dim) * 0.02) if pos_embed == "learned" else None
        self.pos_drop = nn.Dropout(pos_drop_rate)
        self.encoder = make_encoder(
            dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            # timm's ViT defaults: qkv bias on, proj_drop_rate on the attention projection as on the MLP
            attention={"qkv_bias": True, "proj_drop": proj_drop_rate, **(attention or {})},
            drop_path_rate=drop_path_rate,
            layer_scale=layer_scale,
            proj_drop=proj_drop_rate,
            final_norm=not use_fc_norm,
            norm_layer=norm_layer,
            layer_shape=shape,
        )
        self.fc_norm = norm_layer(embed_dim) if use_fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        self.apply(_init_weights)
        self._register_load_state_dict_pre_hook(self._resample_loaded_pos_embed)

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        self.encoder.set_grad_checkpointing(enabled, **kwargs)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "cls_token"}

    def _resample_loaded_pos_embed(self, state_dict: dict[str, Tensor], prefix: str, *args: Any) -> None:
        """Loaded weights of another input: a patch embedding of other channels (RGB for grey images, grey for RGB)
        adapted by `adapt_channels`, a position table of another square grid resampled to this one."""
        conv = prefix + "patch_embed.proj.weight"
        weight, own = state_dict.get(conv), getattr(self.patch_embed.proj, "weight", None)  # None: a conv stem
        if weight is not None and own is not None and weight.dim() == 4 and weight.shape[1] != own.shape[1]:
            if weight.shape[0] == own.shape[0] and weight.shape[2:] == own.shape[2:]:
                state_dict[conv] = adapt_channels(weight, own.shape[1])
                log.info("%s: adapted from %d to %d input channels", conv, weight.shape[1], own.shape[1])
        key = prefix + "pos_embed"
        old = state_dict.get(key)
        if self.pos_embed is None or old is None or old.shape == self.pos_embed.shape or old.dim() != 3:
            return
        side = int(round((old.shape[1] - self.num_prefix_tokens) ** 0.5))
        if side * side != old.shape[1] - self.num_prefix_tokens or old.shape[2] != self.pos_embed.shape[2]:
            return  # not a square grid of this width: load_state_dict reports the size mismatch
        state_dict[key] = resample_abs_pos_embed(
            old, new_size=list(self.grid_size), old_size=[side, side], num_prefix_tokens=self.num_prefix_tokens
        )
        log.info("%s: resampled from a %dx%d patch grid to %s", key, side, side, self.grid_size)

    def forward_features(self, image: Tensor) -> Tensor:
        """image [B, in_chans, S, S] -> tokens [B, P + N, C]."""
        x = self.patch_embed(image)  # [B, N, C]
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # [B, P + N, C]
        if self.pos_embed is not None:
            x = x + self.pos_embed
        return self.encoder(self.pos_drop(x))

    def forward(self, image: Tensor) -> Tensor:
        """image [B, in_chans, S, S] -> logits [B, num_classes]."""
        x = self.forward_features(image)
        x = x[:, 0] if self.global_pool == "token" else x[:, self.num_prefix_tokens :].mean(dim=1)  # [B, C]
        return self.head(self.head_drop(self.fc_norm(x)))


def adapt_channels(weight: Tensor, channels: int) -> Tensor:
    """A patch convolution's weight [C, I, P, P] for `channels` inputs: one channel reads the sum of the I it was
    trained on (a grey pixel stands for I equal ones); other counts repeat (or cut) the I and scale by I / channels,
    so that where `channels` is a multiple of I, an image whose channels repeat the I gives what they gave. For I = 3
    this is timm's `adapt_input_conv`; its rule for other sources (grey to RGB) came only in timm 1.0.31."""
    given = weight.shape[1]
    if channels == given:
        return weight
    work = weight.float()
    if channels == 1:
        work = work.sum(dim=1, keepdim=True)
    else:
        work = work.repeat(1, math.ceil(channels / given), 1, 1)[:, :channels] * (given / channels)
    return work.to(weight.dtype)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def timm_to_attnzoo(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename timm `VisionTransformer` keys to `ViT` keys (`blocks.N.*` -> `encoder.blocks.N.*`, `norm.*` -> ...)."""
    out = {}
    for key, value in state.items():
        if key.startswith("blocks.") or key.startswith("norm."):
            key = "encoder." + key
        out[key] = value
    return out


def vit(**kwargs: Any) -> ViT:
    """Build a `ViT` (keyword arguments as `ViT`). To start from a timm or Hugging Face checkpoint, configure
    `model.init_from` (in Python: `attnzoo.pretrained.load(path, **overrides)`)."""
    return ViT(**kwargs)


vit.__signature__ = inspect.signature(ViT, eval_str=True)  # the config validates `model:` keys against this
