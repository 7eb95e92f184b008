"""Hugging Face GPT-2 (`GPT2LMHeadModel` / `GPT2Model` directories) -> attnzoo's `CausalLM` (model kind "lm").

GPT-2 is a pre-norm decoder with learned absolute positions, unscaled token embeddings, a final LayerNorm (`ln_f`)
and an output head tied to the token embeddings. Its linear layers are `Conv1D`, which store weights as
[in, out]: they are transposed into `nn.Linear`'s [out, in]. The fused `c_attn` projection is laid out as
[q | k | v] with heads contiguous inside each, as attnzoo's `qkv`, so it maps one to one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .converted import Converted, read_hf_config, read_weights
from .family import check_consumed, check_fits, config_value, hf_model_type, refuse, take, tokenizer_file, weights_name

Tensor = torch.Tensor
READS = "a Hugging Face gpt2 folder"
MODEL_KIND = "lm"
# config.json `activation_function` -> CausalLM `activation`
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
ACTIVATIONS |= {"silu": "silu", "swish": "silu"}
# checkpoint tensors that are no weights (older transformers saved the causal mask as buffers)
IGNORED = (".attn.bias", ".attn.masked_bias")


def matches(path: str | Path) -> bool:
    """A Hugging Face directory whose config.json says model_type "gpt2"."""
    return Path(path).is_dir() and hf_model_type(path) == "gpt2"


def options_from_config(config: dict, path: str | Path) -> dict:
    """`CausalLM` options reproducing a GPT-2 config.json; ValueError for settings it cannot reproduce."""
    if config.get("model_type") != "gpt2":
        raise refuse(path, "model_type", config.get("model_type"), "this converter reads GPT-2 (model_type 'gpt2')")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if config_value(config, key, want) != want:
            raise refuse(path, key, config[key], f"attnzoo attention scales scores by 1/sqrt(head_dim) only: {want}")
    if config.get("add_cross_attention"):
        raise refuse(path, "add_cross_attention", True, "a decoder-only model has no cross-attention")
    act = config_value(config, "activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise refuse(path, "activation_function", act, f"valid: {list(ACTIVATIONS)}")
    dim, vocab = config_value(config, "n_embd", 768), config_value(config, "vocab_size", 50257)
    inner = config_value(config, "n_inner", 4 * dim)
    if int(dim * (inner / dim)) != inner:
        raise refuse(path, "n_inner", inner, f"not reachable as int(n_embd * mlp_ratio) with n_embd {dim}")
    pad = config.get("pad_token_id")
    if pad is None:  # GPT-2 has no padding token; its end-of-text token pads (as HF's generate does)
        pad = config.get("eos_token_id")
    resid = config_value(config, "resid_pdrop", 0.1)
    return dict(
        vocab_size=vocab,
        pad_id=pad if isinstance(pad, int) and 0 <= pad < vocab else 0,
        max_len=config_value(config, "n_positions", 1024),
        dim=dim,
        depth=config_value(config, "n_layer", 12),
        num_heads=config_value(config, "n_head", 12),
        mlp_ratio=inner / dim,
        position="learned",
        attention={"qkv_bias": True, "attn_drop": config_value(config, "attn_pdrop", 0.1), "proj_drop": resid},
        tie_embeddings=bool(config_value(config, "tie_word_embeddings", True)),
        drop_rate=resid,
        norm_eps=float(config_value(config, "layer_norm_epsilon", 1e-5)),
        activation=ACTIVATIONS[act],
        scale_embeddings=False,
        freeze_pad_embedding=False,  # GPT-2 pads with a real token (end of text): its embedding row trains
    )


def convert(path: str | Path) -> Converted:
    """A GPT-2 directory -> `Converted` for `CausalLM`; ValueError naming the file and the first tensor that does not
    fit config.json."""
    path = Path(path)
    options = options_from_config(read_hf_config(path), path)
    state, file = dict(read_weights(path)), weights_name(path)
    c, v, depth = options["dim"], options["vocab_size"], options["depth"]
    inner = int(c * options["mlp_ratio"])
    pre = ("transformer.", "")  # GPT2LMHeadModel nests the stack under `transformer.`; GPT2Model does not

    def linear(name: str, n_in: int, n_out: int) -> tuple[Tensor, Tensor]:
        """A Conv1D's weight [in, out] as nn.Linear's [out, in], and its bias."""
        weight = take(state, f"{name}.weight", (n_in, n_out), file, pre)
        return weight.t().contiguous(), take(state, f"{name}.bias", (n_out,), file, pre)

    out = {
        "embed.embed.weight": take(state, "wte.weight", (v, c), file, pre),
        "embed.pos_embed.table": take(state, "wpe.weight", (options["max_len"], c), file, pre)[None],
    }
    for i in range(depth):
        h, b = f"h.{i}", f"decoder.blocks.{i}"
        for src, dst in (("ln_1", "norm1"), ("ln_2", "norm2")):
            for p in ("weight", "bias"):
                out[f"{b}.{dst}.{p}"] = take(state, f"{h}.{src}.{p}", (c,), file, pre)
        for src, dst, n_in, n_out in (
            ("attn.c_attn", "attn.qkv", c, 3 * c),
            ("attn.c_proj", "attn.proj", c, c),
            ("mlp.c_fc", "mlp.fc1", c, inner),
            ("mlp.c_proj", "mlp.fc2", inner, c),
        ):
            out[f"{b}.{dst}.weight"], out[f"{b}.{dst}.bias"] = linear(f"{h}.{src}", n_in, n_out)
    for p in ("weight", "bias"):
        out[f"decoder.norm.{p}"] = take(state, f"ln_f.{p}", (c,), file, pre)
    head = state.pop("lm_head.weight", None)
    if not options["tie_embeddings"]:
        if head is None:
            raise ValueError(f"{file}: tensor 'lm_head.weight' is missing (config.json: tie_word_embeddings false)")
        out["head.weight"] = take({"lm_head.weight": head}, "lm_head.weight", (v, c), file)
    check_consumed(state, file, IGNORED)
    check_fits(MODEL_KIND, options, out, file)
    return Converted(MODEL_KIND, options, out, tokenizer_file(path), f"gpt2 (Hugging Face) {path}")
