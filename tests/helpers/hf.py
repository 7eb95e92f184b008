"""Small random Hugging Face encoders saved to disk with a tokenizer.json, as a downloaded model folder would be."""

from __future__ import annotations

from pathlib import Path

import torch

SPECIALS = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "roberta": ["<s>", "<pad>", "</s>", "<unk>"]}
VOCAB = 60
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def tokenizer(family: str, words: list[str] = (), *, processor: bool = True):
    """A word-level `tokenizers.Tokenizer` over VOCAB tokens: the family's special tokens, `words`, then w0, w1, ...;
    with `processor` it wraps every text as the family's tokenizers do ([CLS] ... [SEP], <s> ... </s>)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    names = [*SPECIALS[family], *words]
    names += [f"w{i}" for i in range(VOCAB - len(names))]
    unk = "[UNK]" if family == "bert" else "<unk>"
    tok = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token=unk))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS[family])
    if processor:
        first, last = ("[CLS]", "[SEP]") if family == "bert" else ("<s>", "</s>")
        tok.post_processor = processors.TemplateProcessing(
            single=f"{first} $A {last}", special_tokens=[(first, names.index(first)), (last, names.index(last))]
        )
    return tok


def save_encoder(
    family: str,
    path: Path,
    *,
    classes: int | None = None,
    words: list[str] = (),
    processor: bool = True,
    sizes: dict = SIZES,
):
    """A random `transformers` BERT or RoBERTa (eval mode; `classes`: its ForSequenceClassification) of `sizes` saved
    with its tokenizer.json (`tokenizer(family, words, processor=processor)`) into `path`."""
    import transformers

    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=24, pad_token_id=0, **sizes)
    else:
        config = transformers.RobertaConfig(
            vocab_size=VOCAB, max_position_embeddings=26, pad_token_id=1, type_vocab_size=1, **sizes
        )
    if classes is not None:
        config.num_labels = classes
        model = (
            transformers.BertForSequenceClassification
            if family == "bert"
            else transformers.RobertaForSequenceClassification
        )(config)
    else:
        model = transformers.BertModel(config) if family == "bert" else transformers.RobertaModel(config)
    with torch.no_grad():  # BERT's LayerNorms start at 1 / 0; random ones check every parameter lands where it should
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    tokenizer(family, list(words), processor=processor).save(str(Path(path) / "tokenizer.json"))
    return model.eval()


def save_vit(path: Path, *, image_size: int = 32, classes: int = 4, sizes: dict = SIZES) -> None:
    """A random `transformers` ViTForImageClassification (RGB, patch 8) of `sizes` saved into `path`."""
    import transformers

    config = transformers.ViTConfig(image_size=image_size, patch_size=8, num_labels=classes, **sizes)
    torch.manual_seed(0)
    transformers.ViTForImageClassification(config).save_pretrained(path)


def save_ast(path: Path, *, mel_bins: int = 128, frames: int = 64, classes: int = 5, sizes: dict = SIZES) -> None:
    """A random `transformers` ASTForAudioClassification (16 kHz features) of `sizes` saved into `path`."""
    import transformers

    config = transformers.ASTConfig(num_mel_bins=mel_bins, max_length=frames, num_labels=classes, **sizes)
    torch.manual_seed(0)
    transformers.ASTForAudioClassification(config).save_pretrained(path)


def save_gpt2(path: Path, texts: list[str], *, vocab_size: int = 300, spare_rows: int = 0, **config) -> None:
    """A random `transformers` GPT2LMHeadModel saved into `path` with a byte-level BPE tokenizer.json learned from
    `texts`, as GPT-2's own folders hold one; `spare_rows`: embedding rows past the tokenizer's tokens (a table
    padded by `resize_token_embeddings(pad_to_multiple_of=...)`), or fewer rows when negative; `config` overrides
    GPT2Config."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                                       special_tokens=["<|endoftext|>"]))  # fmt: skip
    Path(path).mkdir(parents=True, exist_ok=True)
    tok.save(str(Path(path) / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    sizes = dict(n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=tok.get_vocab_size() + spare_rows, **{**sizes, **config})
    ).save_pretrained(path)


BART_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, as BART's own tokenizer has them


def save_bart(
    path: Path, texts: list[str], *, vocab_size: int = 300, max_positions: int = 80, std: float = 0.3, **config
):
    """A random `transformers` BartForConditionalGeneration (eval mode) saved into `path` with a byte-level BPE
    tokenizer.json learned from `texts`, as BART's own folders hold one. Every tensor is drawn with `std` around its
    usual value, so that a misplaced one shows (LayerNorm scales around 1, a nonzero final_logits_bias); `config`
    overrides BartConfig."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                                       special_tokens=BART_SPECIALS))  # fmt: skip
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    Path(path).mkdir(parents=True, exist_ok=True)
    tok.save(str(Path(path) / "tokenizer.json"))
    sizes = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=64, decoder_ffn_dim=64)  # fmt: skip
    ids = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)
    cfg = transformers.BartConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=max_positions,
                                  **{**sizes, **ids, **config})  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, std)
        model.final_logits_bias.normal_(0.0, std)
        for stack in (model.model.encoder, model.model.decoder):  # untied (transformers 5 unties these too): the same
            stack.embed_tokens.weight.copy_(model.model.shared.weight)
    model.save_pretrained(path)
    return model
