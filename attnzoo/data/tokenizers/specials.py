"""The special tokens of every attnzoo tokenizer, and the names other tokenizer files give the same roles."""

SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "bos": "[BOS]", "eos": "[EOS]", "cls": "[CLS]"}
# Names other tokenizer files use for the same roles (read when loading a file attnzoo did not write).
ALIASES = {
    "pad": ("[PAD]", "<pad>", "<|pad|>", "<PAD>"),
    "unk": ("[UNK]", "<unk>", "<|unk|>", "<UNK>"),
    "bos": ("[BOS]", "<s>", "<bos>", "<|startoftext|>", "<|begin_of_text|>"),
    "eos": ("[EOS]", "</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>"),
    "cls": ("[CLS]", "<cls>"),
}
