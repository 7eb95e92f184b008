"""Hugging Face BART (`BartForConditionalGeneration` / `BartModel` directories) -> attnzoo's `Seq2Seq` (model kind
"seq2seq"), for the translation recipe.

Why BART of the encoder-decoder families: its directories carry the `tokenizer.json` the weights were trained with
(byte-level BPE with <s>, <pad>, </s>), one vocabulary shared by source and target as attnzoo's translation data
has it, and its architecture is attnzoo's transformer with options that say where it differs: post-norm blocks
(`norm: post`), learned positions, unscaled token embeddings with a LayerNorm over embeddings plus positions, a
position table and embedding norm per stack (`decoder_positions`), exact-GELU MLPs, biased q/k/v projections and a
fixed `final_logits_bias` (`logits_bias`). Marian (Opus-MT) ships no `tokenizer.json` but two SentencePiece models,
one per language, which one-tokenizer translation data cannot use, and its sinusoidal positions are laid out
[sin | cos] where attnzoo's interleave them; T5 would need RMSNorm, unscaled attention, gated MLPs and a rescaled
tied head.

Layout: BART's separate q, k, v projections become `qkv` (rows q | k | v) in self-attention and `q` plus `kv`
(rows k | v) in cross-attention; its learned positions start at row 2 of each table (fairseq's offset), so rows
2 .. 2 + max_len become attnzoo's table. A checkpoint runs exactly as in `transformers` for the same token ids; the
recipe feeds them as its data does: the source without <s> ... </s>, and the decoder input starting with <s> (BART's
own `generate` starts with </s> then <s>): fine-tuning teaches the model that stream. Training differs in one
dropout: attnzoo's MLP drops after the activation at `dropout`, BART at `activation_dropout`.

Notation: C width, V vocabulary, P position rows.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .converted import Converted, read_hf_config, read_weights
from .family import check_consumed, check_fits, config_value, hf_model_type, refuse, take, tokenizer_file, weights_name

READS = "a Hugging Face bart folder"
log = logging.getLogger("attnzoo")
Tensor = torch.Tensor
MODEL_KIND = "seq2seq"
PARTS = ("weight", "bias")
OFFSET = 2  # BART's learned position tables start at row 2
PREFIXES = ("model.", "")  # BartForConditionalGeneration nests the model under `model.`; BartModel does not
# the token table: one of these; the others, when present, must be the same tensor (tied)
TABLES = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
# old BartConfig switches (mBART-style variants saved as model_type "bart") and the value this converter reproduces
FIXED = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": True,
    "static_position_embeddings": False,
    "add_bias_logits": False,
    "do_blenderbot_90_layernorm": False,
    "extra_pos_embeddings": OFFSET,
}


def matches(path: str | Path) -> bool:
    """A Hugging Face directory whose config.json says model_type "bart"."""
    return Path(path).is_dir() and hf_model_type(path) == "bart"


def options_from_config(config: dict, path: str | Path) -> dict:
    """`Seq2Seq` options reproducing a BART config.json; ValueError for settings it cannot reproduce."""
    if config.get("model_type") != "bart":
        raise refuse(path, "model_type", config.get("model_type"), "this converter reads BART (model_type 'bart')")
    for key, want in FIXED.items():
        if config_value(config, key, want) != want:
            raise refuse(path, key, config[key], f"attnzoo reproduces BART's default ({want})")
    act = config_value(config, "activation_function", "gelu")
    if act != "gelu":
        raise refuse(path, "activation_function", act, "attnzoo's Seq2Seq MLP uses exact 'gelu'")
    dim = config_value(config, "d_model", 1024)
    heads, inner = config_value(config, "encoder_attention_heads", 16), config_value(config, "encoder_ffn_dim", 4096)
    for key, same in (("decoder_attention_heads", heads), ("decoder_ffn_dim", inner)):
        if config_value(config, key, same) != same:
            raise refuse(path, key, config[key], f"attnzoo's Seq2Seq gives both stacks one size: the encoder's {same}")
    if int(dim * (inner / dim)) != inner:
        raise refuse(path, "encoder_ffn_dim", inner, f"not reachable as int(d_model * mlp_ratio) with d_model {dim}")
    vocab, pad = config_value(config, "vocab_size", 50265), config_value(config, "pad_token_id", 1)
    drop, attn_drop = config_value(config, "dropout", 0.1), config_value(config, "attention_dropout", 0.0)
    attention = {"qkv_bias": True, "attn_drop": attn_drop, "proj_drop": drop}
    return dict(
        vocab_size=vocab,
        pad_id=pad if isinstance(pad, int) and 0 <= pad < vocab else 0,
        max_len=config_value(config, "max_position_embeddings", 1024),
        dim=dim,
        encoder_depth=config_value(config, "encoder_layers", 12),
        decoder_depth=config_value(config, "decoder_layers", 12),
        num_heads=heads,
        mlp_ratio=inner / dim,
        position="learned",
        attention=attention,
        cross_attention=dict(attention),
        tie_embeddings=bool(config_value(config, "tie_word_embeddings", True)),
        drop_rate=drop,
        norm="post",
        scale_embeddings=bool(config_value(config, "scale_embedding", False)),
        embed_norm=True,
        decoder_positions=True,
        logits_bias=True,
    )


def convert(path: str | Path) -> Converted:
    """A BART directory -> `Converted` for `Seq2Seq`; ValueError naming the file and the first tensor that does not
    fit config.json."""
    path = Path(path)
    options = options_from_config(read_hf_config(path), path)
    state, file = dict(read_weights(path)), weights_name(path)
    c, v, rows = options["dim"], options["vocab_size"], options["max_len"]
    inner = int(c * options["mlp_ratio"])

    def pair(src: str, dst: str, shape: tuple[int, ...]) -> dict[str, Tensor]:
        """{dst.weight, dst.bias} from src.weight [shape], src.bias [shape[0]]."""
        weight = take(state, f"{src}.weight", shape, file, PREFIXES)
        return {f"{dst}.weight": weight, f"{dst}.bias": take(state, f"{src}.bias", shape[:1], file, PREFIXES)}

    def stacked(src: str, names: tuple[str, ...]) -> dict[str, Tensor]:
        """BART's separate projections `src.{name}_proj` as one linear, rows in the order of `names`."""
        parts = [pair(f"{src}.{name}_proj", name, (c, c)) for name in names]
        # weight [len(names) * C, C], bias [len(names) * C]
        return {p: torch.cat([part[f"{n}.{p}"] for part, n in zip(parts, names, strict=True)]) for p in PARTS}

    tables = {p + k: state.pop(p + k) for k in TABLES for p in PREFIXES if p + k in state}
    if not tables:
        raise ValueError(f"{file}: tensor 'model.shared.weight' is missing (a checkpoint of another architecture?)")
    (first, table), *copies = tables.items()
    for key, copy in copies:  # tied copies (transformers 5 unties them when tie_word_embeddings is false)
        if not torch.equal(copy, table):
            raise ValueError(
                f"{file}: tensor {key!r} differs from {first!r}: attnzoo's Seq2Seq reads source and target tokens "
                "through one table (BART's shared embedding)"
            )
    out = {"embed.embed.weight": take({first: table}, first, (v, c), file)}
    for stack, own in (("encoder", "embed"), ("decoder", "tgt_positions")):
        positions = take(state, f"{stack}.embed_positions.weight", (rows + OFFSET, c), file, PREFIXES)
        out[f"{own}.pos_embed.table"] = positions[OFFSET:][None].clone()  # [1, P, C]
        out |= pair(f"{stack}.layernorm_embedding", f"{own}.norm", (c,))
    for stack in ("encoder", "decoder"):
        depth = options[f"{stack}_depth"]
        for i in range(depth):
            hf, block = f"{stack}.layers.{i}", f"{stack}.blocks.{i}"
            qkv = stacked(f"{hf}.self_attn", ("q", "k", "v"))
            out |= {f"{block}.attn.qkv.{p}": t for p, t in qkv.items()}
            out |= pair(f"{hf}.self_attn.out_proj", f"{block}.attn.proj", (c, c))
            out |= pair(f"{hf}.self_attn_layer_norm", f"{block}.norm1", (c,))
            if stack == "decoder":
                out |= pair(f"{hf}.encoder_attn.q_proj", f"{block}.cross_attn.q", (c, c))
                kv = stacked(f"{hf}.encoder_attn", ("k", "v"))
                out |= {f"{block}.cross_attn.kv.{p}": t for p, t in kv.items()}
                out |= pair(f"{hf}.encoder_attn.out_proj", f"{block}.cross_attn.proj", (c, c))
                out |= pair(f"{hf}.encoder_attn_layer_norm", f"{block}.norm_cross", (c,))
            out |= pair(f"{hf}.fc1", f"{block}.mlp.fc1", (inner, c))
            out |= pair(f"{hf}.fc2", f"{block}.mlp.fc2", (c, inner))
            out |= pair(f"{hf}.final_layer_norm", f"{block}.norm2", (c,))
    bias = {"final_logits_bias": state.pop("final_logits_bias", torch.zeros(1, v))}  # a BartModel has none: zeros
    out["logits_bias"] = take(bias, "final_logits_bias", (1, v), file)[0]  # [V]
    head = state.pop("lm_head.weight", None)
    if not options["tie_embeddings"]:
        if head is None:
            raise ValueError(f"{file}: tensor 'lm_head.weight' is missing (config.json: tie_word_embeddings false)")
        out["head.weight"] = take({"lm_head.weight": head}, "lm_head.weight", (v, c), file)
    check_consumed(state, file)
    check_fits(MODEL_KIND, options, out, file)
    return Converted(MODEL_KIND, options, out, tokenizer_file(path), f"bart (Hugging Face) {path}")
