"""Hugging Face BERT and RoBERTa encoders -> attnzoo's text classifier (`attnzoo.models.text.TextClassifier`).

The encoder becomes post-norm `PostNormBlock`s whose attention is attnzoo's (`model.attention` overrides apply):
BERT's separate query/key/value projections are stacked into `qkv` (rows q | k | v, as timm's layout), and the
model keeps BERT's learned absolute positions, token-type table, embedding LayerNorm (eps from the config), exact
GELU MLPs and tanh pooler. A tokenizer.json whose post-processor starts every text with [CLS] (RoBERTa: <s>), as
the ones `transformers` saves do, gives the model BERT's own token stream ([CLS] ... [SEP]): the model pools the
first token (`pooling: first`). A tokenizer without one adds no special tokens, so the [CLS] embedding becomes the
model's cls token (`pooling: cls`), prepended at position 0 as BERT sees it. RoBERTa numbers positions from
`pad_token_id + 1`; its table is cut to start there (batches padded at the end number as RoBERTa does). A
`BertForSequenceClassification` classifier becomes `head`, a `RobertaForSequenceClassification` one the pooler
(`dense`) and `head` (`out_proj`), kept when the recipe's label count matches; MLM heads and buffers are left out.
A decoder's config (`is_decoder`, `add_cross_attention`) is refused.

Notation: C width, P position rows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from .converted import Converted, read_hf_config, read_weights
from .family import config_value, hf_model_type, weights_name
from .family import take as family_take

READS = "a Hugging Face bert or roberta folder"
log = logging.getLogger("attnzoo")

FAMILIES = {"bert": "[CLS]", "roberta": "<s>"}  # model_type -> the token whose embedding starts a sequence
PAD_IDS = {"bert": 0, "roberta": 1}  # model_type -> transformers' pad_token_id when config.json states none
# what transformers' BertConfig / RobertaConfig take for a key config.json leaves out
DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
}
NO_TOKENIZER = "tokenizer.json, vocab.txt or vocab.json + merges.txt"  # what a folder without its tokenizer lacks
PREFIXES = ("bert.", "roberta.")  # the encoder's prefix in *For{SequenceClassification,MaskedLM,...} checkpoints


def matches(path: str | Path) -> bool:
    """A Hugging Face model directory whose config.json says model_type bert or roberta."""
    return Path(path).is_dir() and hf_model_type(path) in FAMILIES


def _tokenizer(path: Path, family: str, given: str | Path | None = None) -> tuple[Path, int, bool]:
    """(the tokenizer file, the id of the token a sequence starts with, whether the tokenizer puts it first itself):
    the directory's (tokenizer.json, else vocab.txt or vocab.json + merges.txt), else `given` (data.tokenizer);
    ValueError when there is none."""
    from ..data.tokenizers.vocab_files import folder_tokenizer, read_tokenizer

    file = folder_tokenizer(path)
    if file is None and given is not None:
        file = Path(given)
        if not file.is_file():
            named = str(given)
            raise ValueError(f"{str(path)!r} has no {NO_TOKENIZER}, and the tokenizer named, {named!r}, is no file")
    if file is None:
        raise ValueError(
            f"{str(path)!r} has no {NO_TOKENIZER}: the run needs the tokenizer the weights were trained with (copy it "
            "from where the model was downloaded), or name it: data.tokenizer=<tokenizer.json> (in Python: load(dir, "
            "tokenizer=<tokenizer.json>))"
        )
    try:
        tok = read_tokenizer(file)
    except ValueError as err:
        raise ValueError(f"{err} (the tokenizer of {str(path)!r})") from None
    cls_id = tok.token_to_id(FAMILIES[family])
    if cls_id is None:
        raise ValueError(f"{str(file)!r} has no {FAMILIES[family]} token, which a {family} sequence starts with")
    return file, cls_id, tok.encode("a", add_special_tokens=True).ids[:1] == [cls_id]


def _options(cfg: dict[str, Any], family: str, file: Path, starts: bool) -> dict[str, Any]:
    """The `TextClassifier` options of a BERT/RoBERTa config; ValueError for what attnzoo does not reproduce."""
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"{file}: hidden_act {act!r} is not supported (attnzoo's text MLP uses exact 'gelu')")
    for key in ("is_decoder", "add_cross_attention"):  # a causal decoder (cross-attending): another function
        if cfg.get(key):
            raise ValueError(
                f"{file}: {key}: true is not supported (a {family} decoder; attnzoo's text classifier is its "
                "encoder, reading every token both ways)"
            )
    positions = cfg.get("position_embedding_type", "absolute")
    if positions != "absolute":
        raise ValueError(f"{file}: position_embedding_type {positions!r} is not supported (only 'absolute')")
    dim, hidden = _value(cfg, "hidden_size"), _value(cfg, "intermediate_size")
    ratio = hidden / dim
    if int(dim * ratio) != hidden:
        raise ValueError(f"{file}: intermediate_size {hidden} is no whole multiple of hidden_size {dim}'s ratio")
    pad_id = cfg.get("pad_token_id", PAD_IDS[family])
    if family == "roberta" and not isinstance(pad_id, int):  # RoBERTa numbers its positions from it
        raise ValueError(f"{file}: pad_token_id {pad_id!r}: a roberta config needs an integer (RoBERTa's: 1)")
    pad_id = pad_id if isinstance(pad_id, int) else 0  # BERT's positions do not depend on it
    first = pad_id + 1 if family == "roberta" else 0  # the position row of a sequence's first token
    return {
        "vocab_size": _value(cfg, "vocab_size"),
        "pad_id": pad_id,
        "max_len": _value(cfg, "max_position_embeddings") - first - (0 if starts else 1),  # a prepended cls takes a row
        "dim": dim,
        "depth": _value(cfg, "num_hidden_layers"),
        "num_heads": _value(cfg, "num_attention_heads"),
        "mlp_ratio": ratio,
        "drop_rate": float(cfg.get("hidden_dropout_prob", 0.1)),  # fills an auto model.drop_rate (run/start.py)
        "position": "learned",
        "pooling": "first" if starts else "cls",
        "norm": "post",
        "norm_eps": cfg.get("layer_norm_eps", 1e-12),
        "token_types": cfg.get("type_vocab_size", 2),
        "embed_norm": True,
        "attention": {"qkv_bias": True},
    }


def _value(cfg: dict[str, Any], key: str) -> Any:
    """`cfg[key]`, or transformers' default for BERT and RoBERTa when config.json leaves it out."""
    roberta = cfg.get("model_type") == "roberta" and key == "vocab_size"
    return config_value(cfg, key, 50265 if roberta else DEFAULTS[key])  # RobertaConfig's vocabulary: 50,265


def _renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keys without the task model's prefix, and old checkpoints' LayerNorm gamma/beta as weight/bias."""
    out = {}
    for key, value in state.items():
        for prefix in PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
                break
        out[key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = value
    return out


def convert(path: str | Path, tokenizer: str | Path | None = None) -> Converted:
    """A BERT or RoBERTa model directory (config.json, model.safetensors or pytorch_model.bin, tokenizer.json, or
    `tokenizer` naming the file where the directory has none)."""
    path = Path(path)
    cfg = read_hf_config(path)
    family = cfg.get("model_type")
    file, cls_id, starts = _tokenizer(path, family, tokenizer)
    options = _options(cfg, family, path / "config.json", starts)
    rows = options["max_len"] + (0 if starts else 1)
    hf = _renamed(read_weights(path))
    weights = weights_name(path)
    dim, hidden = options["dim"], int(_value(cfg, "intermediate_size"))
    # [out, in] of each dense layer of an encoder layer (a LayerNorm's: [C]); its bias: [out]
    dense = {
        "attention.self.query": (dim, dim),
        "attention.self.key": (dim, dim),
        "attention.self.value": (dim, dim),
        "attention.output.dense": (dim, dim),
        "intermediate.dense": (hidden, dim),
        "output.dense": (dim, hidden),
    }

    def take(key: str, shape: tuple[int, ...]) -> torch.Tensor:
        # popped, shape checked against config.json (a k/v of half the rows loaded as grouped-query heads, a longer
        # position table was cut without a word): what is left over is what the converter drops
        return family_take(hf, key, shape, weights)

    def layer_part(layer: int, name: str, part: str) -> torch.Tensor:
        shape = dense.get(name, (dim,))
        return take(f"encoder.layer.{layer}.{name}.{part}", shape if part == "weight" else shape[:1])

    first = options["pad_id"] + 1 if family == "roberta" else 0
    words = take("embeddings.word_embeddings.weight", (options["vocab_size"], dim))  # [V, C]
    table = take("embeddings.position_embeddings.weight", (int(_value(cfg, "max_position_embeddings")), dim))  # [P, C]
    state = {
        "embed.weight": words,
        "pos_embed.table": table[first : first + rows].unsqueeze(0).clone(),  # [1, rows, C]
        "type_embed.weight": take("embeddings.token_type_embeddings.weight", (options["token_types"], dim)),
        "embed_norm.weight": take("embeddings.LayerNorm.weight", (dim,)),
        "embed_norm.bias": take("embeddings.LayerNorm.bias", (dim,)),
    }
    if not starts:
        state["cls_token"] = words[cls_id].reshape(1, 1, -1).clone()  # [1, 1, C]
    for i in range(options["depth"]):
        own = f"encoder.blocks.{i}."
        for part in ("weight", "bias"):
            q, k, v = (layer_part(i, f"attention.self.{name}", part) for name in ("query", "key", "value"))
            state[f"{own}attn.qkv.{part}"] = torch.cat([q, k, v], dim=0)  # [3C, C] / [3C]: q | k | v
            state[f"{own}attn.proj.{part}"] = layer_part(i, "attention.output.dense", part)
            state[f"{own}norm1.{part}"] = layer_part(i, "attention.output.LayerNorm", part)
            state[f"{own}mlp.fc1.{part}"] = layer_part(i, "intermediate.dense", part)
            state[f"{own}mlp.fc2.{part}"] = layer_part(i, "output.dense", part)
            state[f"{own}norm2.{part}"] = layer_part(i, "output.LayerNorm", part)
    if "pooler.dense.weight" in hf:
        options["pooler"] = True
        state["pooler.weight"] = take("pooler.dense.weight", (dim, dim))
        state["pooler.bias"] = take("pooler.dense.bias", (dim,))
    architectures = cfg.get("architectures") or []  # BertForTokenClassification's classifier labels each token
    sequence_head = not architectures or any(str(a).endswith("ForSequenceClassification") for a in architectures)
    if family == "bert" and sequence_head and "classifier.weight" in hf:  # BertForSequenceClassification's labels
        classes = int(hf["classifier.weight"].shape[0])
        state["head.weight"] = take("classifier.weight", (classes, dim))
        state["head.bias"] = take("classifier.bias", (classes,))
        options["num_classes"] = classes
    if family == "roberta" and sequence_head and "classifier.out_proj.weight" in hf:  # RobertaForSequence...: dense
        options["pooler"] = True  # and tanh on <s>, then the head for its labels, as BERT's pooler and classifier
        state["pooler.weight"] = take("classifier.dense.weight", (dim, dim))
        state["pooler.bias"] = take("classifier.dense.bias", (dim,))
        classes = int(hf["classifier.out_proj.weight"].shape[0])
        state["head.weight"] = take("classifier.out_proj.weight", (classes, dim))
        state["head.bias"] = take("classifier.out_proj.bias", (classes,))
        options["num_classes"] = classes
    left = sorted(k for k in hf if not k.endswith("position_ids"))
    deeper = [k for k in left if k.startswith("encoder.layer.")]
    if deeper:  # config.json of another checkpoint, or one edited: the weights are not the model it describes
        raise ValueError(
            f"{str(path)!r}: the weights hold layers that config.json's num_hidden_layers ({options['depth']}) does "
            f"not (first: {min(deeper, key=lambda k: int(k.split('.')[2]))!r}); config.json and the weights come "
            "from different models"
        )
    if left:
        log.info("%s: %d tensors have no place in attnzoo's text classifier (%s%s)", path, len(left),
                 ", ".join(left[:4]), ", ..." if len(left) > 4 else "")  # fmt: skip
    return Converted("text", options, state, file, f"{family} (HF) {path}", dropped=tuple(left))
