"""Translation data: the embedded CLDR phrases, TSV/JSONL reading and its errors, splits, batches, artifacts."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import random

import pytest
import torch

from attnzoo.data import DATAMODULES
from attnzoo.data.embedded.cldr_pairs import COUNTRIES, LANGS, Generator, _fr_from, _fr_in, generate_pairs, number_words
from attnzoo.data.formats.parallel_files import BadLine, PairFormat, read_pairs
from attnzoo.data.modules.batching import IGNORE_INDEX
from attnzoo.data.modules.translation import TranslationDataModule

SMALL = {"num_train": 600, "num_val": 40, "num_test": 60}

# ------------------------------------------------------------------------------------------------ embedded data


@pytest.fixture
def gen() -> Generator:
    return Generator(random.Random(0))


def test_cldr_renderings(gen):
    day = dt.date(1998, 3, 3)
    gen._date = lambda: day
    full = gen.full_date()
    assert full == {"en": "Tuesday, March 3, 1998", "de": "Dienstag, 3. März 1998", "fr": "mardi 3 mars 1998"}
    assert gen.born()["de"] == "Ich wurde am 3. März 1998 geboren."  # the participle goes last
    assert gen.concert()["de"] == "Das Konzert ist am Dienstag, dem 3. März 1998."
    gen._date = lambda: dt.date(2001, 5, 1)
    assert gen.born()["fr"] == "Je suis né le 1er mai 2001."
    assert gen._unit(21, "length-kilometer", "en") == "twenty-one kilometers"
    assert gen._unit(21, "length-kilometer", "de") == "einundzwanzig Kilometer"
    assert gen._unit(21, "duration-hour", "fr") == "vingt et une heures"  # feminine agreement
    assert gen._unit(1, "duration-hour", "de") == "eine Stunde"
    assert gen._unit(1, "duration-day", "de", case="acc") == "einen Tag"  # accusative
    assert gen._unit(1, "duration-year", "de", case="acc") == "ein Jahr"
    assert gen._modified(
        {"en": "more than ", "de": "mehr als ", "fr": "plus de "},
        {lang: gen._unit(1, "length-kilometer", lang) for lang in LANGS},
    ) == {"en": "more than one kilometer", "de": "mehr als ein Kilometer", "fr": "plus d'un kilomètre"}
    assert gen._time(14, 30, "en") == "2:30 PM" and gen._time(14, 30, "de") == "14:30"  # no narrow no-break space
    assert number_words(81, "fr", "f") == "quatre-vingt-une" and number_words(71, "fr", "f") == "soixante et onze"
    assert gen._money(21, "SEK", "fr") == "vingt et une couronnes suédoises"
    assert gen._money(3457, "EUR", "en") == "three thousand four hundred and fifty-seven euros"  # no comma
    assert gen._money(3457, "EUR", "de") == "dreitausendvierhundertsiebenundfünfzig Euro"
    big = [gen._unit(5974, "volume-liter", lang) for lang in LANGS]
    assert big == ["5,974 liters", "5.974 Liter", "5 974 litres"]  # digits, grouped as each language does


def test_counts(gen):
    counts = [gen._count() for _ in range(3000)]
    assert min(counts) == 1 and 9000 < max(counts) <= 9999
    assert 0.5 < sum(n < 100 for n in counts) / len(counts) < 0.7
    assert not [n for n in counts if n > 100 and n % 100 == 1]  # German "hunderteins" before a noun is avoided
    assert min(gen._count(low=2) for _ in range(500)) == 2


def test_french_country_prepositions(gen):
    assert [_fr_in(c, n) for c, n in (("FR", "France"), ("JP", "Japon"), ("AT", "Autriche"))] == [
        "en France",
        "au Japon",
        "en Autriche",
    ]
    assert [_fr_from(c, n) for c, n in (("FR", "France"), ("JP", "Japon"), ("AT", "Autriche"))] == [
        "de France",
        "du Japon",
        "d'Autriche",
    ]
    for code in COUNTRIES:  # every listed country renders, with no "au"/"du" before a vowel
        name = gen.cldr.country(code, "fr")
        assert not _fr_in(code, name).startswith("au " + name[0]) or name[0] not in "AEIOUÉ"
        assert not _fr_from(code, name).startswith("du " + name[0]) or name[0] not in "AEIOUÉ"


@pytest.mark.parametrize(("src", "tgt"), list(itertools.permutations(LANGS, 2)))
def test_embedded_splits_are_deterministic_and_disjoint(src, tgt):
    sizes = {"train": 800, "val": 50, "test": 100}
    splits = generate_pairs(sizes, src_lang=src, tgt_lang=tgt, seed=1)
    assert splits == generate_pairs(sizes, src_lang=src, tgt_lang=tgt, seed=1)
    assert splits != generate_pairs(sizes, src_lang=src, tgt_lang=tgt, seed=2)
    assert {k: len(v) for k, v in splits.items()} == sizes
    train_src, train_tgt = ({p[i] for p in splits["train"]} for i in (0, 1))
    for split in ("val", "test"):
        assert not any(s in train_src or t in train_tgt for s, t in splits[split])
    assert all(s and t and s != t for pairs in splits.values() for s, t in pairs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"src_lang": "en", "tgt_lang": "en"}, "both 'en'"),
        ({"src_lang": "es"}, r"data.src_lang: 'es' is not an embedded language; valid: \['en', 'de', 'fr'\]"),
    ],
)
def test_embedded_language_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_pairs({"train": 10}, **kwargs)


def test_embedded_datamodule(caplog):
    caplog.set_level(logging.INFO, logger="attnzoo")
    dm = DATAMODULES["translation"](**SMALL, src_lang="de", tgt_lang="en", vocab_size=500, seed=4)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 600, "val": 40, "test": 60}
    ctx = dm.model_inputs()
    assert ctx == {"vocab_size": dm.tokenizer.vocab_size, "pad_id": 0, "bos_id": 2, "eos_id": 3, "max_len": 128,
                   "bleu_tokenize": "13a"}  # fmt: skip
    assert "de -> en" in caplog.text
    again = TranslationDataModule(**SMALL, src_lang="de", tgt_lang="en", vocab_size=500, seed=4)
    again.setup()
    assert again.pairs == dm.pairs and again.tokenizer.to_str() == dm.tokenizer.to_str()
    assert [t.tolist() for t in again.datasets["test"].tgt] == [t.tolist() for t in dm.datasets["test"].tgt]


def test_embedded_options_refused_with_files(tmp_path):
    with pytest.raises(ValueError, match=r"data.num_train sizes the embedded data, but data.train"):
        TranslationDataModule(train=str(tmp_path / "x.tsv"), num_train=10)
    with pytest.raises(ValueError, match="data.val .* given without data.train"):
        TranslationDataModule(val=str(tmp_path / "x.tsv"))
    with pytest.raises(ValueError, match=r"must be two different languages of the embedded data"):
        TranslationDataModule(src_lang="de", tgt_lang="de")


def test_recipe_sizes_of_the_embedded_data_are_left_out_with_files_and_typed_ones_refused(tmp_path, caplog):
    from pathlib import Path

    from attnzoo.config import ConfigError, load
    from attnzoo.run.build import build

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "translation.yaml"
    files = []
    for split, n in (("train", 40), ("val", 8), ("test", 8)):
        rows = [f"open {i} files\t{i} Dateien öffnen" for i in range(n)]
        files.append(f"data.{split}={_write(tmp_path / f'{split}.tsv', rows)}")
    caplog.set_level(logging.INFO, logger="attnzoo")
    cfg = load([recipe], [*files, "data.vocab_size=100"])
    data, _, resolved = build(cfg)
    assert "data.num_train 15000 (set in " in caplog.text and "left out" in caplog.text
    assert "num_train" not in resolved.section("data") and len(data.datasets["train"]) == 40
    assert data.auto_values()["trainer.max_epochs"][0] == 100  # 1 step an epoch: the ceiling
    assert data.auto_values()["data.split_digits"][0] is True  # files: each digit a token
    assert [p for p in data.tokenizer.tokens("open 12 files") if p.strip("▁").isdigit()] == ["1", "2"]
    with pytest.raises(ConfigError, match=r"data.num_val \(set in the command line \('data.num_val=5'\)\) configures"):
        build(load([recipe], [*files, "data.num_val=5"]))


# ------------------------------------------------------------------------------------------------ files


def _write(path, lines: list[str] | bytes):
    path.write_bytes(lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode())
    return path


def test_tsv_tatoeba_layouts(tmp_path):
    anki = _write(tmp_path / "deu.txt", ["Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org", "", "Hi. \t Hallo!"])
    assert read_pairs(anki, PairFormat()).pairs == [("Go.", "Geh."), ("Hi.", "Hallo!")]
    pairs = _write(tmp_path / "pairs.tsv", ["1\tI run.\t77\tIch renne."])
    assert read_pairs(pairs, PairFormat(src_column=1, tgt_column=3)).pairs == [("I run.", "Ich renne.")]
    assert read_pairs(pairs, PairFormat(src_column=3, tgt_column=1)).pairs == [("Ich renne.", "I run.")]
    bom = _write(tmp_path / "bom.tsv", "\ufeffa\tb\r\n".encode())
    assert read_pairs(bom, PairFormat()).pairs == [("a", "b")]


def test_a_header_row_is_read_as_a_pair_and_named(tmp_path, caplog):
    # "english<TAB>german" on the first line became a training pair without a word (TSV pair files have no header)
    rows = ["I see the house today.\tIch sehe heute das Haus.", "The cat sleeps on the mat.\tDie Katze schläft."] * 3
    words = ["cat\tKatze", "dog\tHund", "house\tHaus", "tree\tBaum"]  # a word list: its first pair is a pair
    for first, body, header in [("english\tgerman", rows, True), ("en\tde", words, True), ("src\ttgt", rows, True),
                                ("Hello\tHallo", rows, True), ("Hello\tHallo", words, False),
                                ("Go.\tGeh.", rows, False),
                                # names of more than one word, and an id column (read: columns 0 and 1)
                                ("source sentence\ttarget sentence", rows, True),
                                ("id\tEnglish sentence\tGerman sentence", rows, True),
                                ("The house\tDas Haus", rows, False)]:  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attnzoo"):
            pairs = read_pairs(_write(tmp_path / "p.tsv", [first, *body]), PairFormat()).pairs
        assert pairs[0] == tuple(first.split("\t")[:2])  # read as it is
        assert ("looks like a header row" in caplog.text) == header, (first, caplog.text)


def test_jsonl(tmp_path):
    path = _write(tmp_path / "p.jsonl", ['{"src": "a", "tgt": "b"}', '{"en": "c", "de": "d", "id": 3}'])
    with pytest.raises(BadLine, match=r"p.jsonl line 2: no key 'src' \(keys: \['en', 'de', 'id'\]; set data.src_key\)"):
        read_pairs(path, PairFormat())
    path = _write(tmp_path / "q.jsonl", ['{"en": "c", "de": "d", "id": 3}'])
    assert read_pairs(path, PairFormat(src_key="de", tgt_key="en")).pairs == [("d", "c")]


BAD_LINES = [
    ("tsv", "Go.", "line 2: no tab; expected at least 2"),
    ("tsv", "\tGeh.", "line 2: empty source"),
    ("tsv", "Go.\t  ", "line 2: empty target"),
    ("jsonl", '{"src": "a", "tgt": ', "line 2: not valid JSON"),
    ("jsonl", '["a", "b"]', "line 2: expected a JSON object, got list"),
    ("jsonl", '{"src": "a"}', "line 2: no key 'tgt'"),
    ("jsonl", '{"src": "a", "tgt": 3}', "line 2: 'tgt' is a int, not a string"),
    ("jsonl", '{"src": "", "tgt": "b"}', "line 2: empty source"),
]


@pytest.mark.parametrize(("fmt", "bad", "message"), BAD_LINES)
def test_bad_line_names_file_and_line(tmp_path, fmt, bad, message):
    good = "a\tb" if fmt == "tsv" else '{"src": "a", "tgt": "b"}'
    path = _write(tmp_path / f"pairs.{fmt}", [good, bad, good])
    with pytest.raises(BadLine, match=rf"pairs\.{fmt} {message}.*data.on_bad_line=skip"):
        read_pairs(path, PairFormat())
    skipped = read_pairs(path, PairFormat(on_bad_line="skip"))
    assert skipped.pairs == [("a", "b"), ("a", "b")] and [n for n, _ in skipped.skipped] == [2]


@pytest.mark.parametrize("end", [b"\r", b"\r\n", b"\n"], ids=["cr", "crlf", "lf"])
def test_every_line_end_ends_a_line_and_lines_keep_their_numbers(tmp_path, end):
    # old Mac Excel's "Tab delimited text" ends lines with "\r" alone: the whole file was read as one pair
    lines = [b"\xef\xbb\xbfGo.\tGeh.", b"", b"Hi. \t Hallo!", b"  ", b"Run!\tLauf!"]
    path = _write(tmp_path / "mac.tsv", end.join(lines) + end)
    assert read_pairs(path, PairFormat()).pairs == [("Go.", "Geh."), ("Hi.", "Hallo!"), ("Run!", "Lauf!")]
    _write(path, end.join([*lines, b"no tab", b"caf\xe9\tcoffee"]))
    with pytest.raises(BadLine, match=r"mac\.tsv line 6: no tab"):
        read_pairs(path, PairFormat())
    skipped = read_pairs(path, PairFormat(on_bad_line="skip")).skipped
    assert skipped == [
        (6, "no tab; expected at least 2 (source in column 0, target in 1)"),
        (
            7,
            "byte(s) e9 at column 4 are not UTF-8; save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 mac.tsv > "
            "utf8-mac.tsv)",
        ),
    ]
    jsonl = _write(tmp_path / "mac.jsonl", end.join([b'{"src": "a", "tgt": "b"}', b'{"src": "a"}']))
    with pytest.raises(BadLine, match=r"mac\.jsonl line 2: no key 'tgt'"):
        read_pairs(jsonl, PairFormat())


def test_a_stray_carriage_return_inside_a_line_of_a_newline_file_stays_in_it(tmp_path):
    # scraped text: a "\r" inside a field split the line (line 3 "no tab", later numbers shifted; skip kept half)
    path = _write(tmp_path / "x.tsv", b"hello\tbonjour\nI went home\tje suis\r rentre\ngood night\tbonne nuit\r\n")
    pairs = read_pairs(path, PairFormat()).pairs
    assert pairs == [("hello", "bonjour"), ("I went home", "je suis\r rentre"), ("good night", "bonne nuit")]


@pytest.mark.parametrize("fmt", ["tsv", "jsonl"])
def test_non_utf8_line(tmp_path, fmt):
    good = b"a\tb\n" if fmt == "tsv" else b'{"src": "a", "tgt": "b"}\n'
    path = _write(tmp_path / f"x.{fmt}", good + b"caf\xe9\tcoffee\n" + good)
    with pytest.raises(BadLine, match=rf"x\.{fmt} line 2: byte\(s\) e9 at column 4 are not UTF-8; .*iconv -f latin1 "):
        read_pairs(path, PairFormat())
    assert len(read_pairs(path, PairFormat(on_bad_line="skip")).pairs) == 2
    # Windows' CP1252 (curly quotes at 0x93 0x94): converted as Latin-1 they would be control characters in the text
    _write(path, good + b"\x93caf\xe9\x94\tcoffee\n")
    with pytest.raises(BadLine, match=r"line 2: byte\(s\) 93 at column 1 are not UTF-8; .*iconv -f cp1252 -t utf-8"):
        read_pairs(path, PairFormat())


@pytest.mark.parametrize("on_bad_line", ["error", "skip"])
def test_a_utf16_file_is_named_utf16_not_bad_lines(tmp_path, on_bad_line):
    # Excel's "Unicode Text": line 1 was "not UTF-8", and with skip the others were read with a NUL in every other byte
    path = _write(tmp_path / "excel.txt", "Go.\tGeh.\nHi.\tHallo!\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"excel\.txt: the file is UTF-16 text .*iconv -f utf-16 -t utf-8"):
        read_pairs(path, PairFormat(on_bad_line=on_bad_line))


def test_skips_are_counted_and_logged(tmp_path, caplog):
    lines = [f"s{i}\tt{i}" for i in range(40)]
    lines[3], lines[10], lines[20], lines[30] = "no tab", "\tx", "x\t", "also no tab"
    path = _write(tmp_path / "train.tsv", lines)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm = TranslationDataModule(train=str(path), on_bad_line="skip", tokenizer="bytes")
        dm.setup()
    assert "skipped 4 bad lines of" in caplog.text and "line 4: no tab" in caplog.text
    assert sum(len(v) for v in dm.datasets.values()) == 36
    record = json.loads(dm.save_artifacts(tmp_path / "run")[-1].read_text())
    assert [x["line"] for x in record["skipped"]["train"]] == [4, 11, 21, 31]
    with pytest.raises(BadLine, match=r"train.tsv line 4: no tab"):
        TranslationDataModule(train=str(path), tokenizer="bytes").setup()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"format": "csv"}, r"data.format: 'csv' is not one of \['auto', 'tsv', 'jsonl'\]"),
        ({"on_bad_line": "warn"}, r"data.on_bad_line: 'warn' is not one of \['error', 'skip'\]"),
        ({"src_column": 1, "tgt_column": 1}, "two different column indices"),
    ],
)
def test_format_option_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PairFormat(**kwargs)


def test_unknown_suffix_and_missing_file(tmp_path):
    path = _write(tmp_path / "pairs.csv", ["a,b"])
    with pytest.raises(ValueError, match=r"cannot tell the format from the suffix '.csv'.*data.format"):
        read_pairs(path, PairFormat())
    assert read_pairs(_write(tmp_path / "p.csv", ["a\tb"]), PairFormat(format="tsv")).pairs == [("a", "b")]
    with pytest.raises(ValueError, match="no such parallel text file"):
        read_pairs(tmp_path / "none.tsv", PairFormat())
    with pytest.raises(ValueError, match="no pairs"):
        read_pairs(_write(tmp_path / "empty.tsv", [""]), PairFormat())


def test_held_out_splits_keep_each_source_in_one_split(tmp_path):
    lines = [f"source {i // 2}\ttarget {i}" for i in range(400)]  # every source has two translations
    dm = TranslationDataModule(train=str(_write(tmp_path / "all.tsv", lines)), val_fraction=0.1, test_fraction=0.2)
    dm.setup()
    sources = {k: {s for s, _ in v} for k, v in dm.pairs.items()}
    assert {k: len(v) for k, v in sources.items()} == {"train": 140, "val": 20, "test": 40}
    assert not (
        sources["train"] & sources["val"] or sources["train"] & sources["test"] or sources["val"] & sources["test"]
    )
    assert all(len(v) == 2 * len(sources[k]) for k, v in dm.pairs.items())
    assert "(held-out test part)" in dm.sources["test"]
    dm2 = TranslationDataModule(train=str(tmp_path / "all.tsv"), val_fraction=0.1, test_fraction=0.2)
    dm2.setup()
    assert dm2.pairs == dm.pairs


def test_given_splits_and_overlap_warning(tmp_path, caplog):
    train = _write(tmp_path / "train.tsv", [f"s{i}\tt{i}" for i in range(50)])
    val = _write(tmp_path / "val.jsonl", ['{"src": "s1", "tgt": "t1"}', '{"src": "new", "tgt": "neu"}'])
    test = _write(tmp_path / "test.tsv", ["x\ty"])
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm = TranslationDataModule(train=str(train), val=str(val), test=str(test), tokenizer="wordpiece", vocab_size=80)
        dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 50, "val": 2, "test": 1}
    assert "1 of 2 val pairs have a source that also occurs in train" in caplog.text
    # the test file read as train and val too (evaluate of a run whose train file is elsewhere): no leak to warn of
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        TranslationDataModule(train=str(train), val=str(train), test=str(train), tokenizer="bytes").setup()
    assert "also occurs in train" not in caplog.text


# ------------------------------------------------------------------------------------------------ batches


@pytest.mark.parametrize("tokenizer", ["bpe", "bytes"])
def test_batches_teacher_forcing(tokenizer):
    dm = TranslationDataModule(**SMALL, tokenizer=tokenizer, vocab_size=400, batch_size=16, pad_to_multiple=4)
    dm.setup()
    pad, bos, eos = dm.tokenizer.pad_id, dm.tokenizer.bos_id, dm.tokenizer.eos_id
    for loader in (dm.train_dataloader(), dm.test_dataloader()):
        batch = next(iter(loader))
        B, S = batch["src"].shape
        T = batch["tgt_in"].shape[1]
        assert B == 16 and S % 4 == 0 and T % 4 == 0
        assert batch["labels"].shape == batch["tgt_padding_mask"].shape == (B, T)
        assert batch["src_padding_mask"].shape == (B, S) and batch["src"].dtype == torch.long
        for row in range(B):
            src_ids = dm.tokenizer.encode(batch["src_text"][row])
            tgt_ids = dm.tokenizer.encode(batch["tgt_text"][row])
            n, m = len(src_ids), len(tgt_ids) + 1
            assert batch["src"][row, :n].tolist() == src_ids and (batch["src"][row, n:] == pad).all()
            assert batch["src_padding_mask"][row].tolist() == [False] * n + [True] * (S - n)
            assert batch["tgt_in"][row, :m].tolist() == [bos, *tgt_ids] and (batch["tgt_in"][row, m:] == pad).all()
            assert batch["labels"][row, :m].tolist() == [*tgt_ids, eos]
            assert (batch["labels"][row, m:] == IGNORE_INDEX).all()
            assert batch["tgt_padding_mask"][row].tolist() == [False] * m + [True] * (T - m)
            assert dm.decode(batch["labels"][row, :m]) == batch["tgt_text"][row]
            assert dm.decode(batch["tgt_in"][row]) == batch["tgt_text"][row]  # bos and padding left out
    assert len(dm.train_dataloader()) == SMALL["num_train"] // 16


def test_buckets_group_similar_lengths():
    dm = TranslationDataModule(**SMALL, tokenizer="bytes", batch_size=32)
    dm.setup()
    padded = sum(b["tgt_padding_mask"].sum().item() for b in dm.train_dataloader())
    dm.bucket = False
    unbucketed = sum(b["tgt_padding_mask"].sum().item() for b in dm.train_dataloader())
    assert padded < 0.5 * unbucketed


def test_max_len_drops_train_and_cuts_eval(tmp_path, caplog):
    lines = ["short\tkurz"] * 1 + [f"a long source {i}\tein langes Ziel {i}" for i in range(20)]
    train = _write(tmp_path / "train.tsv", lines)
    val = _write(tmp_path / "val.tsv", ["a very long sentence indeed\tein sehr langer Satz"])
    test = _write(tmp_path / "test.tsv", ["short\tkurz"])
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm = TranslationDataModule(train=str(train), val=str(val), test=str(test), tokenizer="bytes", max_len=12)
        dm.setup()
    assert len(dm.datasets["train"]) == 1 and "left out 20 of 21 train pairs longer than max_len 12" in caplog.text
    assert "cut 1 of 1 val pairs" in caplog.text
    batch = next(iter(dm.val_dataloader()))
    assert batch["src"].shape[1] == 12 and batch["tgt_in"].shape[1] == 12
    assert batch["tgt_text"] == ["ein sehr langer Satz"]  # the reference stays whole
    with pytest.raises(ValueError, match="every pair is longer than data.max_len"):
        TranslationDataModule(train=str(val), val=str(val), test=str(test), tokenizer="bytes", max_len=5).setup()


def test_artifacts_reload_the_same_tokenizer(tmp_path):
    dm = TranslationDataModule(**SMALL, tokenizer="unigram", vocab_size=300)
    dm.setup()
    saved = dm.save_artifacts(tmp_path)
    assert [p.name for p in saved] == ["tokenizer.json", "translation.json"]
    record = json.loads(saved[1].read_text())
    assert record["src_lang"] == "en" and record["tgt_lang"] == "de" and record["tokenizer"]["file"] == "tokenizer.json"
    assert record["sizes"] == {"train": 600, "val": 40, "test": 60}
    again = TranslationDataModule(**SMALL, tokenizer=str(saved[0]))
    again.setup()
    assert again.tokenizer.to_str() == dm.tokenizer.to_str()
    assert again.encode_source("Tuesday, March 3, 1998") == dm.encode_source("Tuesday, March 3, 1998")
    with pytest.raises(RuntimeError, match="setup"):
        TranslationDataModule(**SMALL).model_inputs()


def test_val_that_is_the_train_file_or_the_test_split_is_warned_and_evaluates_one_file_is_not(tmp_path, caplog):
    """data.val=<the train file> trained silently with every train pair and the held-out test pairs as val
    (val/bleu 96.5 against test/bleu 19.4); val identical to test was silent too."""
    rows = [f"sentence number {i} here\tSatz Nummer {i} hier" for i in range(200)]
    pairs, other = _write(tmp_path / "pairs.tsv", rows), _write(tmp_path / "other.tsv", rows[:20])
    cases = [  # (files, warned)
        ({"train": pairs, "val": pairs}, "data.val is the train file"),
        ({"train": pairs, "val": other, "test": other}, "the val split is identical to the test split"),
        ({"train": pairs, "val": pairs, "test": pairs}, None),  # evaluate of a run whose train file is elsewhere
        ({"train": pairs, "val": other}, None),
    ]
    for files, warned in cases:
        caplog.clear()
        with caplog.at_level("WARNING", logger="attnzoo"):
            TranslationDataModule(**{k: str(v) for k, v in files.items()}, vocab_size=200).setup()
        said = [r.getMessage() for r in caplog.records if "give data.val a file of its own" in r.getMessage()]
        assert [warned in s for s in said] == ([True] if warned else []), (files, said)


def test_a_folder_or_too_few_pairs_say_what_to_give(tmp_path):
    """A folder was "no such parallel text file" (it exists), and two pairs said only "too few distinct sources"."""
    (tmp_path / "corpus").mkdir()
    with pytest.raises(ValueError, match=r"'.*corpus' is a folder: a parallel text is one file of pairs \(\.tsv"):
        TranslationDataModule(train=str(tmp_path / "corpus")).setup()
    two = _write(tmp_path / "two.tsv", ["a cat\teine Katze", "a dog\tein Hund"])
    with pytest.raises(ValueError, match=r"too few distinct sources \(2\) .*: give data.test=<file> and data.val="):
        TranslationDataModule(train=str(two)).setup()


def test_a_few_lines_with_more_tabs_than_the_rest_are_named(tmp_path, caplog):
    # "This line has a tab<TAB>inside the source<TAB>Diese Zeile..." was read as the pair ("This line has a tab",
    # "inside the source") without a word, among 3,000 lines of one tab
    lines = [f"Sentence {i}.\tSatz {i}." for i in range(40)]
    lines[7] = "This line has a tab\tinside the source\tDiese Zeile hat einen Tab"
    path = _write(tmp_path / "pairs.tsv", ("\n".join(lines) + "\n").encode())
    with caplog.at_level("WARNING", logger="attnzoo"):
        pairs = read_pairs(path, PairFormat()).pairs
    assert pairs[7] == ("This line has a tab", "inside the source") and len(pairs) == 40
    assert "1 line(s) hold more tab-separated fields than the 2 of most lines (lines 8): a tab inside a text?" in (
        caplog.text
    )
    caplog.clear()  # Tatoeba's four columns on every line: nothing to say
    path = _write(tmp_path / "tatoeba.tsv", b"".join(b"1\tHi.\t2\tHallo.\n" for _ in range(30)))
    with caplog.at_level("WARNING", logger="attnzoo"):
        read_pairs(path, PairFormat(src_column=1, tgt_column=3))
    assert "more tab-separated fields" not in caplog.text


def test_a_tatoeba_export_read_at_the_default_columns_is_refused_naming_the_columns_to_set(tmp_path):
    # id<TAB>english<TAB>id<TAB>german read as columns 0 and 1: the model learned to turn sentence ids into English
    lines = b"".join(f"{1000 + i}\tSentence {i}.\t{5000 + i}\tSatz {i}.\n".encode() for i in range(30))
    path = _write(tmp_path / "tatoeba.tsv", lines)
    with pytest.raises(ValueError, match=r"tatoeba.tsv: column 0, read as the source \(data.src_column\), is a whole "
                       r"number in 30 of 30 lines: ids, not text.*data.src_column=1 data.tgt_column=3"):  # fmt: skip
        read_pairs(path, PairFormat())
    with pytest.raises(ValueError, match=r"column 2, read as the target \(data.tgt_column\), is a whole number"):
        read_pairs(path, PairFormat(src_column=1, tgt_column=2))
    assert read_pairs(path, PairFormat(src_column=1, tgt_column=3)).pairs[2] == ("Sentence 2.", "Satz 2.")
    # two or three columns of numbers and words: a task of its own (numerals into words), read as given
    words = _write(tmp_path / "numbers.tsv", b"".join(f"{i}\tnumber {i}\n".encode() for i in range(30)))
    assert read_pairs(words, PairFormat()).pairs[3] == ("3", "number 3")
    words = _write(tmp_path / "numerals.tsv", b"".join(f"{i}\tnumber {i}\tnombre {i}\n".encode() for i in range(30)))
    assert read_pairs(words, PairFormat(src_column=0, tgt_column=2)).pairs[3] == ("3", "nombre 3")


def test_translations_are_scored_against_references_as_the_tokenizer_normalizes_text(tmp_path):
    # NFKC wrote "…" as "...", "²" as "2" and no-break spaces as spaces: a perfect translation scored BLEU 57 against
    # the raw references, while the translation memory, answering with raw train targets, was not penalized
    from attnzoo.run.translation_memory import fit_translation_memory, translation_scores

    targets = [f"Attends\u00a0{i}… 5 m² bitte\u202fjetzt" for i in range(40)]
    train = _write(tmp_path / "train.tsv", [f"wait {i} please\t{t}" for i, t in enumerate(targets)])
    test = _write(tmp_path / "test.tsv", [f"wait {i} please\t{targets[i]}" for i in range(5)])
    dm = TranslationDataModule(train=str(train), val=str(test), test=str(test), tokenizer="bpe", vocab_size=200)
    dm.setup()
    refs = [tgt for _, tgt in dm.baseline_pairs("test")]
    hyps = [dm.decode(dm.tokenizer.encode(t)) for t in refs]  # what a model writing each reference decodes to
    assert hyps[0] != refs[0]  # the raw text holds what NFKC changes
    assert translation_scores(hyps, [dm.scored(t) for t in refs])["bleu"] == pytest.approx(100.0)
    assert fit_translation_memory(dm)["test/exact"] == 1.0  # the memory's exact matches, normalized alike
