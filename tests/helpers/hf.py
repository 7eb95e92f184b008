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


def save_encoder(family: str, path: Path, *, classes: int | None = None, words: list[str] = (), processor: bool = True):
    """A random `transformers` BERT or RoBERTa (eval mode; `classes`: BertForSequenceClassification) saved with its
    tokenizer.json (`tokenizer(family, words, processor=processor)`) into `path`."""
    import transformers

    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=24, pad_token_id=0, **SIZES)
    else:
        config = transformers.RobertaConfig(
            vocab_size=VOCAB, max_position_embeddings=26, pad_token_id=1, type_vocab_size=1, **SIZES
        )
    if classes is not None:
        config.num_labels = classes
        model = transformers.BertForSequenceClassification(config)
    else:
        model = transformers.BertModel(config) if family == "bert" else transformers.RobertaModel(config)
    with torch.no_grad():  # BERT's LayerNorms start at 1 / 0; random ones check every parameter lands where it should
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    tokenizer(family, list(words), processor=processor).save(str(Path(path) / "tokenizer.json"))
    return model.eval()
