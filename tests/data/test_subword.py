"""Subword tokenizers: round trip, determinism, save/load, special tokens, errors, and their use for text data."""

from __future__ import annotations

import json

import pytest

from attnzoo.data.embedded.cldr_pairs import generate_pairs
from attnzoo.data.modules.text import TextDataModule
from attnzoo.data.tokenizers.factory import make_tokenizer
from attnzoo.data.tokenizers.subword import KINDS, SPECIALS, SubwordTokenizer, run_tokenizer, tokenizer_digest
from attnzoo.data.tokenizers.tokenize import ByteTokenizer, FileTokenizer


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    pairs = generate_pairs({"train": 1500}, src_lang="en", tgt_lang="de", seed=3)["train"]
    return [side for pair in pairs for side in pair]


@pytest.fixture(scope="module", params=KINDS)
def trained(request, corpus) -> SubwordTokenizer:
    return SubwordTokenizer.train(corpus, kind=request.param, vocab_size=600)


def test_specials_come_first(trained):
    ids = [trained.pad_id, trained.unk_id, trained.bos_id, trained.eos_id, trained.cls_id]
    assert ids == [0, 1, 2, 3, 4]
    assert [trained.id_to_token(i) for i in ids] == list(SPECIALS.values())
    assert len(SPECIALS) < trained.vocab_size <= 600


def test_round_trip(trained, corpus):
    for text in corpus[:300] + ["two  spaces, then  two more ", "Dienstag, 3. März 1998"]:
        ids = trained.encode(text)
        assert trained.bos_id not in ids and trained.eos_id not in ids  # encode adds no special tokens
        assert trained.decode(ids) == text
    assert trained.encode_batch(corpus[:5]) == [trained.encode(t) for t in corpus[:5]]


def test_pieces_are_subwords(trained):
    """A long compound splits into known pieces, none of them unknown (the letters are all in the corpus)."""
    ids = trained.encode("neunundneunzigtausend")
    assert trained.unk_id not in ids and len(ids) > 1


def test_unknown_character_and_decode_skips_specials(trained):
    ids = trained.encode("Tag ☃")
    assert trained.unk_id in ids
    assert trained.decode([trained.bos_id, *trained.encode("Tag"), trained.eos_id, trained.pad_id]) == "Tag"


@pytest.mark.parametrize("kind", KINDS)
def test_training_is_deterministic(kind, corpus):
    first = SubwordTokenizer.train(corpus, kind=kind, vocab_size=500)
    for _ in range(2):  # the trainers' hash maps are seeded afresh each time
        assert SubwordTokenizer.train(corpus, kind=kind, vocab_size=500).to_str() == first.to_str()


def test_save_load_equal(trained, corpus, tmp_path):
    path = trained.save(tmp_path / "run" / "tokenizer.json")
    loaded = SubwordTokenizer.load(path)
    assert loaded.to_str() == trained.to_str()
    assert loaded.kind == trained.kind and loaded.vocab_size == trained.vocab_size
    assert loaded.describe() | {"name": None} == trained.describe() | {"name": None}
    assert [loaded.encode(t) for t in corpus[:50]] == [trained.encode(t) for t in corpus[:50]]
    # the classification path reads the same file as a user's tokenizer file, with the same ids
    as_file = make_tokenizer(str(path))
    assert isinstance(as_file, FileTokenizer) and as_file.pad_id == trained.pad_id
    assert [as_file.encode(t) for t in corpus[:50]] == [trained.encode(t) for t in corpus[:50]]
    assert run_tokenizer(path.parent, "bpe").to_str() == trained.to_str()


def test_lowercase_and_vocab_size(corpus):
    lower = SubwordTokenizer.train(corpus, kind="bpe", vocab_size=300, lowercase=True)
    assert lower.encode("DIENSTAG") == lower.encode("dienstag")
    assert lower.vocab_size <= 300
    small = SubwordTokenizer.train(corpus, kind="bpe", vocab_size=120)
    assert len(small.encode("einundzwanzig Kilometer")) > len(lower.encode("einundzwanzig kilometer"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "sentencepiece"}, r"kind 'sentencepiece' is unknown; valid: \['bpe', 'wordpiece', 'unigram'\]"),
        ({"vocab_size": 5}, r"data.vocab_size \(5\) must exceed the 5 special tokens"),
        ({"min_frequency": 0}, r"data.min_frequency \(0\) must be >= 1"),
    ],
)
def test_bad_arguments(kwargs, match, corpus):
    with pytest.raises(ValueError, match=match):
        SubwordTokenizer.train(corpus, **kwargs)


def test_no_text():
    with pytest.raises(ValueError, match=r"data\.tokenizer 'bpe' is learned from the training texts, and all 2 of "
                       r"them are empty: give texts, or data\.tokenizer=bytes"):  # fmt: skip
        SubwordTokenizer.train(["", "  "], kind="bpe")


def test_make_tokenizer_names_the_subword_kinds():
    with pytest.raises(ValueError, match=r"'bpe' is trained on the train split's texts"):
        make_tokenizer("bpe")
    with pytest.raises(ValueError, match=r"subword kind trained on the train split \['bpe', 'wordpiece', 'unigram'\]"):
        make_tokenizer("bpee")
    assert make_tokenizer("wordpiece", texts=["a b c a b"], vocab_size=40).kind == "wordpiece"


def test_a_tokenizer_for_generation_has_bos_and_eos(corpus, tmp_path):
    byte = make_tokenizer("bytes", texts=corpus, generates="generation")
    assert isinstance(byte, ByteTokenizer) and (byte.bos_id, byte.eos_id, byte.vocab_size) == (257, 258, 259)
    assert byte.decode([byte.bos_id, *byte.encode("März"), byte.eos_id]) == "März"
    # a user's file without bos/eos tokens is refused, naming what was looked for
    trained = SubwordTokenizer.train(corpus[:200], kind="bpe", vocab_size=200)
    record = json.loads(trained.to_str())
    for token in record["added_tokens"]:
        token["content"] = {"[BOS]": "[B]", "[EOS]": "[E]"}.get(token["content"], token["content"])
    record["model"]["vocab"] = {
        {"[BOS]": "[B]", "[EOS]": "[E]"}.get(k, k): v for k, v in record["model"]["vocab"].items()
    }
    path = tmp_path / "no_bos.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"no_bos.json: translation needs \['bos', 'eos'\] tokens.*'<s>'"):
        make_tokenizer(str(path), texts=corpus, generates="translation")
    with pytest.raises(ValueError, match=r"unknown 'bpeh'.*did you mean 'bpe'"):
        make_tokenizer("bpeh", texts=corpus, generates="generation")
    with pytest.raises(ValueError, match="no tokenizer.json"):
        run_tokenizer(tmp_path, "bpe")


def test_text_classification_learns_a_subword_tokenizer_from_train_only(tmp_path):
    train = tmp_path / "train.csv"
    val = tmp_path / "val.csv"
    train.write_text("text,label\n" + "".join(f"the cat sat on mat {i},a\nthe dog ran far {i},b\n" for i in range(30)))
    val.write_text("text,label\nzebrazebra quokkaquokka,a\nthe cat ran,b\n")
    dm = TextDataModule(train=str(train), val=str(val), tokenizer="bpe", vocab_size=200)
    dm.setup()
    tok = dm.tokenizer
    assert dm.model_inputs()["vocab_size"] == tok.vocab_size and dm.model_inputs()["pad_id"] == tok.pad_id
    assert "▁cat" in tok.tok.get_vocab() and "▁zebrazebra" not in tok.tok.get_vocab()  # val text was not learned
    assert tok.decode(dm.datasets["val"].ids[1].tolist()) == "the cat ran"
    saved = dm.save_artifacts(tmp_path / "run")
    assert [p.name for p in saved] == ["labels.json", "tokenizer.json"]
    assert json.loads(saved[0].read_text())["tokenizer"]["kind"] == "bpe"
    again = TextDataModule(train=str(train), val=str(val), tokenizer=str(saved[1]))
    again.setup()
    assert [x.tolist() for x in again.datasets["val"].ids] == [x.tolist() for x in dm.datasets["val"].ids]


@pytest.mark.parametrize("kind", KINDS)
def test_split_digits_makes_each_digit_a_token_and_round_trips(kind, corpus, tmp_path):
    texts = [*corpus, "It costs 131.7 euros, 84,509 in 1995.", "Seite 576 von 2024"] * 2
    tok = SubwordTokenizer.train(texts, kind=kind, vocab_size=600, split_digits=True)
    text = "Wir sind 3.500 Meter gelaufen, 1995 und 84,509."
    pieces = [p.replace("▁", "") for p in tok.tokens(text)]
    assert all(len(p) == 1 for p in pieces if any(c.isdigit() for c in p)), pieces
    assert tok.decode(tok.encode(text)) == text
    loaded = SubwordTokenizer.load(tok.save(tmp_path / "tok.json"))
    assert loaded.encode(text) == tok.encode(text)
    merged = SubwordTokenizer.train(texts, kind=kind, vocab_size=600)  # the default: digits merge like letters
    assert any(sum(c.isdigit() for c in p) > 1 for p in merged.tokens(text))


def test_split_digits_on_a_tokenizer_file_is_noted_unless_it_is_a_runs_own(corpus, tmp_path, caplog):
    # every evaluate of a run with a learned tokenizer logged "data.split_digits: no effect on data.tokenizer"
    import logging

    tok = SubwordTokenizer.train(corpus, kind="bpe", vocab_size=300, split_digits=True)
    (tmp_path / "run").mkdir()
    own, other = tok.save(tmp_path / "run" / "tokenizer.json"), tok.save(tmp_path / "mine.json")
    (tmp_path / "run" / "config.yaml").write_text("data: {}\n")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        make_tokenizer(str(own), split_digits=True)
        assert "no effect" not in caplog.text
        make_tokenizer(str(other), split_digits=True)
    assert f"data.split_digits: no effect on data.tokenizer '{other}'" in caplog.text


def test_a_padding_token_named_only_by_the_files_settings_survives_the_runs_copy(tmp_path):
    # the pad id came from the file's padding settings, which the run's copy (save) left out: reloaded, the copy
    # padded with the end-of-text token, and a language model run was refused ("model.pad_id ... records 0")
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({"<blank>": 0, "<oov>": 1, "</s>": 2, "a": 3}, unk_token="<oov>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens(["<blank>", "</s>"])
    raw.enable_padding(pad_id=0, pad_token="<blank>")
    raw.save(str(tmp_path / "mine.json"))
    tok = SubwordTokenizer.load(tmp_path / "mine.json")
    assert (tok.pad_id, tok.eos_id) == (0, 2)
    copy = SubwordTokenizer.load(tok.save(tmp_path / "copy.json"))
    assert copy.pad_id == 0 and tokenizer_digest(copy) == tokenizer_digest(tok)
    assert tok.tok.padding is None  # the DataModules pad, not the tokenizer


def test_a_file_whose_ids_leave_gaps_sizes_the_embedding_table_by_its_largest_id(tmp_path):
    # vocab_size was the count of tokens (4): id 9 then indexed past the embedding table (a raw IndexError in generate)
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 9}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.save(str(tmp_path / "gaps.json"))
    tok = SubwordTokenizer.load(tmp_path / "gaps.json")
    assert tok.encode("a b") == [2, 9] and tok.vocab_size == 10
