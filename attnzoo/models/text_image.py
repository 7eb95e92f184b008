"""Text-image fusion: a ViT-style image encoder, a text encoder, then cross-attention in which text attends to patches
(`fusion` "text"/"both"), or a question-steered convolutional stem read cell by cell (`fusion` "film").

Notation: B batch, L text tokens, N image patches, Ct text width, Ci image width, H heads.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import Mlp
from torch import nn

from ..attention import capture_attention
from ..attention.factory import attention_builder, layer_shape
from ..attention.positions import POSITIONS
from ..attention.specs import build
from ..layers import CrossAttentionBlock, TransformerBlock
from ..layers.encoder import make_encoder
from ..layers.pooling import mean_pool
from ..util.checks import at_least
from .vit import STEMS, ViT, conv_stem

Tensor = torch.Tensor

IMAGE_POSITIONS = ("learned", "none")
POOLING = ("mean", "first")
FUSIONS = ("text", "both", "film")
CROSS_FUSIONS = ("text", "both")  # the fusions with cross-attention blocks (and maps)


class FiLMStem(nn.Module):
    """A convolutional stem whose layers the question steers: log2(patch_size) x (3x3 conv with stride 2,
    BatchNorm, FiLM, ReLU), then a 1x1 conv to `dim`: [B, in_chans, S, S] + condition [B, cond_dim] ->
    [B, dim, S / patch_size, S / patch_size]. FiLM (Perez et al. 2018, "FiLM: Visual Reasoning with a General
    Conditioning Layer") scales and shifts every channel by linear maps of the condition, starting at the identity
    (scale 1, shift 0), so the image features are computed for the question asked.
    """

    def __init__(self, in_chans: int, dim: int, patch_size: int, cond_dim: int) -> None:
        super().__init__()
        steps = patch_size.bit_length() - 1
        if patch_size < 2 or 2**steps != patch_size:
            raise ValueError(f"fusion 'film' needs a power-of-2 patch_size >= 2, got {patch_size}")
        widths = [min(dim, 16 * 2**i) for i in range(steps)]  # e.g. dim 64, patch 16: 16, 32, 64, 64
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False)
            for c_in, c_out in zip([in_chans, *widths[:-1]], widths, strict=True)
        )
        self.norms = nn.ModuleList(nn.BatchNorm2d(c) for c in widths)
        self.films = nn.ModuleList(nn.Linear(cond_dim, 2 * c) for c in widths)
        for film in self.films:  # identity at the start
            nn.init.zeros_(film.weight)
            nn.init.zeros_(film.bias)
        self.proj = nn.Conv2d(widths[-1], dim, 1)

    def forward(self, image: Tensor, cond: Tensor) -> Tensor:
        x = image
        for conv, norm, film in zip(self.convs, self.norms, self.films, strict=True):
            scale, shift = film(cond)[:, :, None, None].chunk(2, dim=1)  # [B, C, 1, 1] each
            x = torch.relu(norm(conv(x)) * (1 + scale) + shift)
        return self.proj(x)


class TextImageNet(nn.Module):
    """Image encoder + text encoder + `fusion_depth` x (cross-attention block, text self-attention block) + head.

    Text tokens are the queries of the cross-attention and image patches its keys, so text padding masks
    nothing there; it is the key padding mask of every text self-attention and is left out of the pooling,
    which makes the real tokens' outputs (and the logits) independent of how much padding a batch carries.

    Args:
        num_classes: outputs of the head.
        img_size, patch_size, in_chans: the image and its square patches.
        vocab_size, pad_id: token ids are in [0, vocab_size); `pad_id` gets a zero embedding (padding).
        max_len: longest text (learned text positions).
        image_dim, image_depth: width and blocks of the image encoder (Ci).
        text_dim, text_depth: width and blocks of the text encoder before fusion (Ct).
        fusion_depth: cross-attention blocks, each followed by a text self-attention block.
        num_heads: heads of every attention.
        mlp_ratio: hidden width of the MLPs as a multiple of the width.
        gated: tanh gates on the cross-attention branches, starting at 0 (Flamingo): the net starts text-only.
        image_pos: "learned" (one position embedding per patch of the 2D grid) or "none" (then a 2D attention
            bias or axial rotary can carry position: the image encoder's attention gets `grid_size` in its layer shape).
        text_pos: text positions, a `POSITIONS` spec ("learned", "sinusoidal", "none" with rotary, ...).
        pooling: "mean" over non-pad tokens, or the "first" token.
        image_stem: "patch" (one linear map of each patch, as ViT) or "conv" (`conv_stem`: strided 3x3
            convolutions to the same patch grid, so each patch token sees shapes across patch borders).
        fusion: "text": only text attends to patches, the head reads the pooled text. "both": in every fusion
            layer the patches also attend to the text (text padding is their key padding mask) and then to each
            other, and the head reads the pooled text beside the mean of the patches. Patches that know the
            question can each say whether they answer it, and a mean over them counts, which softmax attention
            from a text token (weights summing to 1) does poorly. "film": no cross-attention; the mean of the
            text tokens steers a `FiLMStem` (one token per patch-grid cell, then `image_depth` self-attention
            blocks among the cells, 0 allowed), a relation MLP reads each cell beside the question and an MLP head
            reads the sum over cells (`image_stem`, `fusion_depth`, `cross_attention` and `pooling` unused).
        attention: self-attention config of both encoders and the fusion blocks (`attnzoo.attention.factory`).
        image_attention: self-attention config of the image encoder alone, instead of `attention` (e.g. a
            `relative_2d` bias or `rope_2d`, which need the patch grid the text side does not have).
        cross_attention: cross-attention config.
        drop_path_rate: stochastic depth of the encoders.
        head_drop: dropout before the head.
    """

    # the submodules whose attention reads the image's patches alone (what viz draws over the image); the others
    # read the question (text self-attention) or both (cross-attention)
    patch_attention = ("image_encoder.", "image_blocks.", "cell_encoder.")

    def __init__(
        self,
        *,
        num_classes: int,
        img_size: int = 48,
        patch_size: int = 8,
        in_chans: int = 3,
        vocab_size: int = 257,
        pad_id: int = 0,
        max_len: int = 64,
        image_dim: int = 64,
        image_depth: int = 2,
        text_dim: int = 64,
        text_depth: int = 1,
        fusion_depth: int = 2,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        gated: bool = False,
        image_pos: str = "learned",
        text_pos: str | dict[str, Any] = "learned",
        pooling: str = "mean",
        image_stem: str = "patch",
        fusion: str = "text",
        attention: dict[str, Any] | None = None,
        image_attention: dict[str, Any] | None = None,
        cross_attention: dict[str, Any] | None = None,
        drop_path_rate: float = 0.0,
        head_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size ({img_size}) must be divisible by patch_size ({patch_size})")
        if image_pos not in IMAGE_POSITIONS:
            raise ValueError(f"image_pos {image_pos!r} is not one of {IMAGE_POSITIONS}")
        if pooling not in POOLING:
            raise ValueError(f"pooling {pooling!r} is not one of {POOLING}")
        if image_stem not in STEMS:  # the ViT's stems
            raise ValueError(f"image_stem {image_stem!r} is not one of {STEMS}")
        if fusion not in FUSIONS:
            raise ValueError(f"fusion {fusion!r} is not one of {FUSIONS}")
        for name, value in {"fusion_depth": fusion_depth, "max_len": max_len, "num_classes": num_classes}.items():
            at_least(name, value, 1)
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id ({pad_id}) must be in [0, vocab_size ({vocab_size}))")
        if fusion == "film" and gated:
            raise ValueError("gated (tanh gates on cross-attention) needs fusion 'text' or 'both'; 'film' has none")
        if image_depth < (0 if fusion == "film" else 1):
            least = "0 with fusion 'film'" if fusion == "film" else "1 (0 only with fusion 'film')"
            raise ValueError(f"image_depth ({image_depth}) must be >= {least}")
        self.img_size, self.max_len, self.pooling, self.fusion = img_size, max_len, pooling, fusion
        image_attn = attention if image_attention is None else image_attention  # every image-side self-attention

        if fusion == "film":  # the question steers the stem: no ViT patch embedding, no cross-attention
            self._build_film(
                img_size,
                patch_size,
                in_chans,
                image_dim,
                image_depth,
                text_dim,
                num_heads,
                mlp_ratio,
                image_pos,
                image_attn,
                drop_path_rate,
                head_drop,
                num_classes,
            )
        else:
            # the image encoder is attnzoo's ViT without class token or head: it returns patch tokens [B, N, Ci]
            self.image_encoder = ViT(
                img_size=img_size,
                patch_size=patch_size,
                in_chans=in_chans,
                num_classes=0,
                embed_dim=image_dim,
                depth=image_depth,
                num_heads=num_heads,
                mlp_ratio=mlp_ratio,
                class_token=False,
                global_pool="avg",
                pos_embed=image_pos,
                drop_path_rate=drop_path_rate,
                attention=image_attn,
            )
            self.grid_size = self.image_encoder.grid_size
            if image_stem == "conv":
                self.image_encoder.patch_embed.proj = conv_stem(in_chans, image_dim, patch_size)

        self.token_embed = nn.Embedding(vocab_size, text_dim, padding_idx=pad_id)
        text_shape = layer_shape(max_len=max_len)  # of every text self-attention
        self.text_pos = build(text_pos, POSITIONS, "model.text_pos", dim=text_dim, max_len=max_len)  # None: "none"
        self.text_encoder = make_encoder(
            dim=text_dim,
            depth=text_depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            attention=attention,
            drop_path_rate=drop_path_rate,
            final_norm=False,
            layer_shape=text_shape,
        )

        if fusion != "film":  # the cross-attention fusion layers and a linear head
            # a kind sized by its keys (sigmoid's b = -log n, linformer's projections) gets their number: the patches
            # for the text's queries, the text tokens for the patches' (fusion both)
            patches = self.grid_size[0] * self.grid_size[1]
            make_cross = attention_builder(cross_attention, what="model.cross_attention", seq_len=patches)
            make_self = attention_builder(attention, **text_shape)
            hidden = int(text_dim * mlp_ratio)
            self.cross_blocks = nn.ModuleList(
                CrossAttentionBlock(
                    dim=text_dim,
                    cross_attn=make_cross(text_dim, num_heads, layer_index=i, context_dim=image_dim),
                    mlp=Mlp(text_dim, hidden),
                    gated=gated,
                )
                for i in range(fusion_depth)
            )
            # the fusion self-attention layers continue the text encoder's stack: layer indices text_depth, ...
            self.text_blocks = nn.ModuleList(
                TransformerBlock(
                    dim=text_dim,
                    attn=make_self(text_dim, num_heads, layer_index=text_depth + i),
                    mlp=Mlp(text_dim, hidden),
                )
                for i in range(fusion_depth)
            )
            head_dim = text_dim
            if self.fusion == "both":  # patches read the text, then each other: [B, N, Ci]
                image_shape = layer_shape(grid_size=self.grid_size)
                make_image_self = attention_builder(image_attn, **image_shape)
                image_hidden = int(image_dim * mlp_ratio)
                make_image_cross = attention_builder(cross_attention, what="model.cross_attention", seq_len=max_len)
                self.image_cross_blocks = nn.ModuleList(
                    CrossAttentionBlock(
                        dim=image_dim,
                        # the image-side cross-attention layers continue the text side's: indices fusion_depth, ...
                        cross_attn=make_image_cross(
                            image_dim, num_heads, layer_index=fusion_depth + i, context_dim=text_dim
                        ),
                        mlp=Mlp(image_dim, image_hidden),
                        gated=gated,
                    )
                    for i in range(fusion_depth)
                )
                # the patches' fusion self-attention continues the image encoder's stack: indices image_depth, ...
                self.image_blocks = nn.ModuleList(
                    TransformerBlock(
                        dim=image_dim,
                        attn=make_image_self(image_dim, num_heads, layer_index=image_depth + i),
                        mlp=Mlp(image_dim, image_hidden),
                    )
                    for i in range(fusion_depth)
                )
                self.image_norm = nn.LayerNorm(image_dim)
                head_dim += image_dim
            self.norm = nn.LayerNorm(text_dim)
            self.head_drop = nn.Dropout(head_drop)
            self.head = nn.Linear(head_dim, num_classes)

    def _build_film(
        self,
        img_size: int,
        patch_size: int,
        in_chans: int,
        image_dim: int,
        image_depth: int,
        text_dim: int,
        num_heads: int,
        mlp_ratio: float,
        image_pos: str,
        image_attention: dict[str, Any] | None,
        drop_path_rate: float,
        head_drop: float,
        num_classes: int,
    ) -> None:
        """`fusion` "film": a `FiLMStem` steered by the pooled question makes one token per cell of the patch grid,
        `image_depth` self-attention blocks let the cells see each other ("left of"), and a relation MLP reads
        each cell beside the question; the sum over cells (a count where each cell says whether it is one of the
        things asked about) goes to an MLP head."""
        side = img_size // patch_size  # divisible: checked in __init__
        self.grid_size = (side, side)
        self.film_stem = FiLMStem(in_chans, image_dim, patch_size, cond_dim=text_dim)
        self.cell_pos = nn.Parameter(torch.zeros(1, side * side, image_dim)) if image_pos == "learned" else None
        self.cell_encoder = None
        if image_depth > 0:
            self.cell_encoder = make_encoder(
                dim=image_dim,
                depth=image_depth,
                num_heads=num_heads,
                mlp_ratio=mlp_ratio,
                attention=image_attention,
                drop_path_rate=drop_path_rate,
                final_norm=False,
                layer_shape=layer_shape(grid_size=self.grid_size),
            )
        self.image_norm = nn.LayerNorm(image_dim)
        width = image_dim + text_dim
        self.relation = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.norm = nn.LayerNorm(width)
        self.head_drop = nn.Dropout(head_drop)
        self.head = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, num_classes))

    def set_grad_checkpointing(self, enabled: bool = True, **kwargs: Any) -> None:
        """Checkpoint the image (or cell) and text encoders (`Encoder.set_grad_checkpointing`); fusion blocks are
        not."""
        image = self.cell_encoder if self.fusion == "film" else self.image_encoder
        if image is not None:
            image.set_grad_checkpointing(enabled, **kwargs)
        self.text_encoder.set_grad_checkpointing(enabled, **kwargs)

    def encode_image(self, image: Tensor, question: Tensor | None = None) -> Tensor:
        """[B, C, H, W] -> patch tokens [B, N, Ci]; fusion "film" needs the pooled `question` [B, Ct]."""
        if tuple(image.shape[-2:]) != (self.img_size, self.img_size):
            raise ValueError(f"image of size {tuple(image.shape[-2:])}; this model was built for {self.img_size}")
        if self.fusion == "film":
            if question is None:
                raise ValueError("fusion 'film' computes the image tokens for a question: pass the pooled question")
            cells = self.film_stem(image, question).flatten(2).transpose(1, 2)  # [B, N, Ci]
            if self.cell_pos is not None:
                cells = cells + self.cell_pos
            if self.cell_encoder is not None:
                cells = self.cell_encoder(cells)
            return self.image_norm(cells)
        vit = self.image_encoder
        return vit.fc_norm(vit.forward_features(image))  # [B, N, Ci]; with avg pooling the ViT norms with fc_norm

    def encode_text(self, tokens: Tensor, padding_mask: Tensor | None) -> Tensor:
        """[B, L] ids -> [B, L, Ct]."""
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"text of {tokens.shape[1]} tokens; this model takes at most max_len={self.max_len}")
        x = self.token_embed(tokens)  # [B, L, Ct]
        if self.text_pos is not None:
            x = self.text_pos(x)
        return self.text_encoder(x, key_padding_mask=padding_mask)

    def forward(
        self,
        image: Tensor,
        tokens: Tensor,
        padding_mask: Tensor | None = None,
        return_cross_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits [B, num_classes]; with `return_cross_attention` also each fusion layer's weights [B, H, L, N].

        Args:
            image: [B, C, H, W].
            tokens: [B, L] long.
            padding_mask: bool [B, L], True marks padding; None for no padding.
        """
        if padding_mask is not None and padding_mask.shape != tokens.shape:
            shapes = f"{tuple(padding_mask.shape)} vs {tuple(tokens.shape)}"
            raise ValueError(f"padding_mask must have the shape of tokens: {shapes}")
        if self.fusion == "film":
            logits = self._film(image, tokens, padding_mask)
            return (logits, []) if return_cross_attention else logits  # no cross-attention: no maps
        patches = self.encode_image(image)  # [B, N, Ci]
        x = self.encode_text(tokens, padding_mask)  # [B, L, Ct]
        maps = []
        for i, (cross, block) in enumerate(zip(self.cross_blocks, self.text_blocks, strict=True)):
            if return_cross_attention:
                with capture_attention() as records:
                    x = cross(x, patches)
                maps.append(records[-1])  # [B, H, L, N]
            else:
                x = cross(x, patches)
            if self.fusion == "both":
                patches = self.image_cross_blocks[i](patches, x, context_padding_mask=padding_mask)  # [B, N, Ci]
                patches = self.image_blocks[i](patches)
            x = block(x, key_padding_mask=padding_mask)
        pooled = self._pool(self.norm(x), padding_mask)  # [B, Ct]
        if self.fusion == "both":
            pooled = torch.cat([pooled, self.image_norm(patches).mean(dim=1)], dim=-1)  # [B, Ct + Ci]
        logits = self.head(self.head_drop(pooled))
        return (logits, maps) if return_cross_attention else logits

    def _film(self, image: Tensor, tokens: Tensor, padding_mask: Tensor | None) -> Tensor:
        question = mean_pool(self.encode_text(tokens, padding_mask), padding_mask)  # [B, Ct], padding left out
        cells = self.encode_image(image, question)  # [B, N, Ci]
        pairs = torch.cat([cells, question[:, None].expand(-1, cells.shape[1], -1)], dim=-1)  # [B, N, Ci + Ct]
        counted = self.relation(pairs).sum(dim=1)  # [B, Ci + Ct]: what the cells say about the question, summed
        return self.head(self.head_drop(self.norm(counted)))

    def _pool(self, x: Tensor, padding_mask: Tensor | None) -> Tensor:
        return x[:, 0] if self.pooling == "first" else mean_pool(x, padding_mask)  # [B, Ct]
