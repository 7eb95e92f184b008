"""Model folders saved without a tokenizer.json (a WordPiece vocab.txt, a byte-level BPE vocab.json + merges.txt) read
as `transformers` reads them: the same ids for every text, special tokens typed in a text included."""

import json

import pytest

from attnzoo.data.tokenizers.vocab_files import folder_tokenizer, is_vocab_file, read_tokenizer, tokenizer_text

TEXTS = [
    "Hello, World! Café naïve résumé ÉCOLE",
    "中文字符 mixed with English and 日本語",
    "  leading and   trailing spaces  ",
    "[CLS] typed [MASK] tokens <s> and </s> and <mask>",
    "tabs\tand\nnewlines\r\nhere",
    "averyveryverylongwordthatthevocabularyhasneverseenxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "",
    "emoji 🙂 and a control\x00char and a soft\u00adhyphen",
    "numbers 12345.678, don't stop-words; (brackets) [x]",
    "Hello <mask> world and [E1] Smith [E2] met [NEW] here",
]
CORPUS = [t for t in TEXTS if t] * 3 + ["the cat sat on the mat", "résumé café naïve", "stop words don't"] * 5
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _wordpiece_folder(path, settings):
    from tokenizers import BertWordPieceTokenizer

    trained = BertWordPieceTokenizer(lowercase=settings.get("do_lower_case", True))
    trained.train_from_iterator(
        CORPUS, vocab_size=300, min_frequency=1, special_tokens=[*BERT_SPECIALS, "[E1]", "[E2]"]
    )
    path.mkdir()
    trained.save_model(str(path))  # vocab.txt alone
    (path / "tokenizer_config.json").write_text(json.dumps(settings))
    return path / "vocab.txt"


def _bpe_folder(path, model_type, settings):
    from tokenizers import ByteLevelBPETokenizer

    trained = ByteLevelBPETokenizer()
    specials = BPE_SPECIALS if model_type != "gpt2" else ["<|endoftext|>"]
    trained.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1, special_tokens=specials)
    path.mkdir()
    trained.save_model(str(path))  # vocab.json + merges.txt
    (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    (path / "tokenizer_config.json").write_text(json.dumps(settings))
    return path / "vocab.json"


def _added(content: str, special: bool = True, lstrip: bool = False) -> dict:
    """An added_tokens_decoder entry as transformers 4 writes it into tokenizer_config.json."""
    return {"content": content, "lstrip": lstrip, "normalized": not special, "rstrip": False, "single_word": False,
            "special": special}  # fmt: skip


CASES = {
    "bert uncased (transformers' default)": ("bert", {}),
    "bert with entity markers, one new (additional_special_tokens)": (
        "bert",
        {"additional_special_tokens": ["[E1]", "[E2]", "[NEW]"]},
    ),
    "roberta whose <mask> takes the space before it (added_tokens_decoder)": (
        "roberta",
        {"added_tokens_decoder": {str(i): _added(t, lstrip=t == "<mask>") for i, t in enumerate(BPE_SPECIALS)}},
    ),
    "roberta whose <mask> is an AddedToken object": (
        "roberta",
        {"mask_token": {"__type": "AddedToken", **_added("<mask>", lstrip=True)}},
    ),
    "gpt2 with a bos token first (add_bos_token)": ("gpt2", {"add_bos_token": True}),
    "bert cased": ("bert", {"do_lower_case": False}),
    "bert lowercased, accents kept": ("bert", {"do_lower_case": True, "strip_accents": False}),
    "bert without Chinese characters split": ("bert", {"tokenize_chinese_chars": False}),
    "roberta": ("roberta", {}),
    "roberta with a prefix space": ("roberta", {"add_prefix_space": True}),
    "bart": ("bart", {}),
    "gpt2": ("gpt2", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ids_equal_transformers_for_every_text(tmp_path, case):
    transformers = pytest.importorskip("transformers")
    family, settings = CASES[case]
    folder = tmp_path / "model"
    file = _wordpiece_folder(folder, settings) if family == "bert" else _bpe_folder(folder, family, settings)
    reference = {
        "bert": transformers.BertTokenizer,
        "roberta": transformers.RobertaTokenizer,
        "bart": transformers.RobertaTokenizer,
        "gpt2": transformers.GPT2Tokenizer,
    }[family].from_pretrained(str(folder))
    assert folder_tokenizer(folder) == file and is_vocab_file(file)
    ours = read_tokenizer(file)
    for text in TEXTS:
        expected = reference(text)["input_ids"]
        assert ours.encode(text).ids == expected, text
        assert ours.decode(expected, skip_special_tokens=True) == reference.decode(expected, skip_special_tokens=True)
    added = len(ours.encode("the cat").ids) - len(ours.encode("the cat", add_special_tokens=False).ids)
    wraps = 2 if family != "gpt2" else 1 if settings.get("add_bos_token") else 0
    assert added == wraps  # BERT, RoBERTa and BART wrap a text, GPT-2 does not (but for a bos token asked for)


def test_a_word_added_after_the_vocabulary_takes_its_listed_id_and_a_wrong_id_is_named(tmp_path):
    transformers = pytest.importorskip("transformers")
    file = _wordpiece_folder(tmp_path / "model", {})
    size = len(file.read_text().splitlines())
    settings = {"added_tokens_decoder": {str(size): _added("zorblax", special=False)}}
    (file.parent / "tokenizer_config.json").write_text(json.dumps(settings))
    reference = transformers.BertTokenizer.from_pretrained(str(file.parent))
    text = "the zorblax sat on ZORBLAX"
    assert read_tokenizer(file).encode(text).ids == reference(text)["input_ids"]
    assert size in read_tokenizer(file).encode(text).ids
    settings = {"added_tokens_decoder": {str(size + 5): _added("zorblax", special=False)}}
    (file.parent / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=rf"added token 'zorblax' has id {size + 5} there and {size} after the"):
        read_tokenizer(file)


def test_a_vocab_txt_of_another_tokenizer_class_is_refused(tmp_path):
    # a BertJapaneseTokenizer folder (MeCab words, then WordPiece) would have been read as BERT's WordPiece
    file = _wordpiece_folder(tmp_path / "model", {"tokenizer_class": "BertJapaneseTokenizer"})
    with pytest.raises(ValueError, match=r"tokenizer_class 'BertJapaneseTokenizer' \(tokenizer_config.json\) is not "
                       r"read from a vocab.txt"):  # fmt: skip
        read_tokenizer(file)


def test_tokenizer_json_comes_first_and_a_vocab_json_needs_its_merges(tmp_path):
    folder = tmp_path / "model"
    file = _bpe_folder(folder, "roberta", {})
    (folder / "merges.txt").unlink()
    assert folder_tokenizer(folder) is None and not is_vocab_file(file)
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nword\n")
    assert folder_tokenizer(folder) == folder / "vocab.txt"
    (folder / "tokenizer.json").write_text(tokenizer_text(folder / "vocab.txt"))
    assert folder_tokenizer(folder) == folder / "tokenizer.json"
    # what a run keeps of a vocab.txt reads back as the same tokenizer
    assert read_tokenizer(folder / "tokenizer.json").to_str() == read_tokenizer(folder / "vocab.txt").to_str()


def test_settings_come_from_special_tokens_map_and_added_token_objects(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "vocab.txt").write_text("<pad>\n<unk>\n<cls>\n<sep>\nword\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"unk_token": "<unk>", "cls_token": {"content": "<cls>", "lstrip": False}, "sep_token": "<sep>"})
    )
    tok = read_tokenizer(folder / "vocab.txt")
    assert tok.encode("word other").ids == [2, 4, 1, 3]  # <cls> word <unk> <sep>


@pytest.mark.parametrize(
    "files, message",
    [
        ({"vocab.txt": "[PAD]\n[UNK]\nword\n"}, r"vocab.txt' has no cls_token '\[CLS\]'"),
        ({"vocab.txt": ""}, "vocab.txt' lists no token"),
        ({"vocab.txt": "[UNK]\n[CLS]\n[SEP]\n", "added_tokens.json": '{"new": 3}'}, "added_tokens.json'.*not read"),
        ({"vocab.txt": "[UNK]\n[CLS]\n[SEP]\n", "tokenizer_config.json": "{no"}, "config.json' cannot be read as JSON"),
        ({"vocab.json": '{"a": 0}', "merges.txt": "a b\n"}, r"vocab.json'.*not known for model_type None.*'roberta'"),
        ({"vocab.json": '["a"]', "merges.txt": "", "config.json": '{"model_type": "gpt2"}'}, r"JSON object \(a list"),
        (
            {"vocab.json": '{"a": 0}', "merges.txt": "a b c\n", "config.json": '{"model_type": "gpt2"}'},
            r"merges.txt'.*'a b c' is not two tokens",
        ),
    ],
)
def test_unreadable_vocabulary_files_are_named(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    vocab = tmp_path / ("vocab.txt" if "vocab.txt" in files else "vocab.json")
    with pytest.raises(ValueError, match=message):
        read_tokenizer(vocab)
