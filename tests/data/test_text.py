"""Text data: ListOps generation, tokenizers, CSV/TSV/JSONL reading and its errors, batching, artifacts."""

import builtins
import json
import logging
import re

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler

from attnzoo.data.embedded import listops
from attnzoo.data.formats.text_files import label_vocabulary, read_text_file
from attnzoo.data.modules.batching import BucketBatchSampler, PadCollate, TokenDataset
from attnzoo.data.modules.text import TextDataModule
from attnzoo.data.tokenizers.factory import make_tokenizer
from attnzoo.data.tokenizers.tokenize import TOKENIZERS, ByteTokenizer, FileTokenizer

LISTOPS_SETTINGS = [
    dict(min_len=4, max_len=40, max_depth=3, max_args=4),
    dict(min_len=5, max_len=12, max_depth=1, max_args=10),
    dict(min_len=500, max_len=2000, max_depth=10, max_args=10),
]


def _depth(text: str) -> int:
    depth = deepest = 0
    for tok in text.split():
        depth += tok.startswith("[")
        depth -= tok == "]"
        deepest = max(deepest, depth)
    return deepest


# ----------------------------------------------------------------------------------------------------------------
# ListOps


@pytest.mark.parametrize(
    "text, value",
    [
        ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
        ("[SM 5 6 [MED 1 2 3 4 ] ]", 3),  # MED of 1 2 3 4 is 2.5, rounded down; 5 + 6 + 2 = 13
        ("[MED 3 [MIN 8 1 ] 7 ]", 3),
        ("7", 7),
    ],
)
def test_listops_evaluate(text, value):
    assert listops.evaluate(text) == value


@pytest.mark.parametrize("bad", ["[MAX 2 9", "[MAX 2 ] ]", "[ADD 1 2 ]", "12"])
def test_listops_evaluate_rejects_malformed(bad):
    with pytest.raises(ValueError):
        listops.evaluate(bad)


@pytest.mark.parametrize("opts", LISTOPS_SETTINGS, ids=lambda o: f"len{o['max_len']}")
def test_listops_is_deterministic_and_within_bounds(opts):
    num = 30 if opts["max_len"] > 100 else 300
    data = listops.generate(num, seed=3, **opts)
    assert data == listops.generate(num, seed=3, **opts)
    assert data != listops.generate(num, seed=4, **opts)
    for text, value in data:
        assert opts["min_len"] <= len(text.split()) <= opts["max_len"]
        assert 1 <= _depth(text) <= opts["max_depth"]
        assert listops.evaluate(text) == value


def test_listops_splits_do_not_overlap():
    splits = listops.generate_splits({"train": 500, "val": 100, "test": 100}, seed=0, max_len=12, max_depth=2)
    texts = {name: {t for t, _ in ex} for name, ex in splits.items()}
    assert [len(ex) for ex in splits.values()] == [500, 100, 100]
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"] and not texts["val"] & texts["test"]


@pytest.mark.parametrize(
    "opts, match",
    [
        (dict(min_len=50, max_len=10), "min_len"),
        (dict(max_depth=0), "max_depth"),
        (dict(max_depth=1, max_args=3, min_len=8), "max_args"),
    ],
)
def test_listops_bad_options(opts, match):
    with pytest.raises(ValueError, match=match):
        listops.generate(5, **opts)


def test_listops_runs_out_of_distinct_expressions():
    with pytest.raises(ValueError, match="distinct"):
        listops.generate_splits({"train": 200, "val": 300}, min_len=4, max_len=4, max_depth=1, max_args=2)


# ----------------------------------------------------------------------------------------------------------------
# tokenizers


def test_bytes_roundtrip_any_language():
    tok = ByteTokenizer()
    for text in ["hello", "déjà vu", "東京タワー", "مرحبا", "emoji 🙂"]:
        ids = tok.encode(text)
        assert min(ids) >= 1 and max(ids) < tok.vocab_size
        assert tok.decode(ids) == text


def test_listops_words():
    tok = make_tokenizer("listops")
    ids = tok.encode("[MAX 2 9 ]")
    assert len(ids) == 4 and tok.pad_id not in ids and tok.decode(ids) == "[MAX 2 9 ]"
    with pytest.raises(ValueError, match="'hello' is not in the listops vocabulary"):
        tok.encode("[MAX hello ]")


def test_unknown_tokenizer_suggests():
    with pytest.raises(ValueError, match="did you mean 'bytes'"):
        make_tokenizer("byte")
    with pytest.raises(ValueError, match="no tokenizer file"):
        make_tokenizer("missing/tokenizer.json")


def test_file_tokenizer_without_package_says_how_to_install(tmp_path, monkeypatch):
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    real_import = builtins.__import__

    def no_tokenizers(name, *args, **kwargs):
        if name == "tokenizers":
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    with pytest.raises(ValueError, match="pip install tokenizers"):
        FileTokenizer(path=path)


def test_file_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = tokenizers.Tokenizer(WordLevel({"[PAD]": 0, "[UNK]": 1, "good": 2, "bad": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    ours = make_tokenizer(str(tmp_path / "tok.json"))
    assert (ours.pad_id, ours.vocab_size) == (0, 4)
    assert ours.encode("good bad ugly") == [2, 3, 1]


# ----------------------------------------------------------------------------------------------------------------
# batching


def test_pad_collate():
    items = [(torch.tensor([5, 6, 7]), torch.tensor(1)), (torch.tensor([8]), torch.tensor(0))]
    batch = PadCollate(pad_id=0, multiple=4)(items)
    assert batch["tokens"].tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    assert batch["padding_mask"].tolist() == [[False, False, False, True], [False, True, True, True]]
    assert batch["label"].tolist() == [1, 0] and batch["tokens"].dtype == torch.long


@pytest.mark.parametrize("drop_last", [False, True])
def test_bucket_batches_cover_every_index_once(drop_last):
    lengths = torch.randint(1, 100, (103,)).tolist()
    sampler = BucketBatchSampler(range(103), 8, drop_last, lengths=lengths, pool=4)
    batches = list(sampler)
    assert len(batches) == len(sampler) == (12 if drop_last else 13)
    seen = [i for b in batches for i in b]
    assert len(seen) == len(set(seen)) == (96 if drop_last else 103)
    # within each pool of 4 batches lengths are sorted, so a batch spans a narrow range of lengths
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 30


def test_bucket_batches_shard_under_ddp():
    ds = TokenDataset([torch.ones(n, dtype=torch.int32) for n in range(1, 41)], [0] * 40)
    ranks = [
        list(
            BucketBatchSampler(
                DistributedSampler(ds, num_replicas=2, rank=r, shuffle=False),
                4,
                False,
                lengths=ds.lengths,
                shuffle=False,
            )
        )
        for r in range(2)
    ]
    flat = [sorted(i for b in batches for i in b) for batches in ranks]
    assert not set(flat[0]) & set(flat[1]) and sorted(flat[0] + flat[1]) == list(range(40))


def test_lightning_can_inject_a_distributed_sampler():
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader

    dm = _small_listops()
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):  # as the Trainer does
        loader = dm.val_dataloader()
    ds = loader.dataset
    new = _update_dataloader(loader, DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False))
    assert isinstance(new.batch_sampler, BucketBatchSampler)
    assert sum(len(b) for b in new.batch_sampler) == len(ds) // 2


# ----------------------------------------------------------------------------------------------------------------
# the DataModule: ListOps default


def _small_listops(**kw):
    opts = dict(num_train=200, num_val=50, num_test=50, max_len=30)
    dm = TextDataModule(batch_size=16, listops={**opts, **kw.pop("listops", {})}, **kw)
    dm.setup()
    return dm


def test_listops_datamodule_batches():
    dm = _small_listops()
    assert dm.num_classes == 10 and dm.class_names == [str(d) for d in range(10)]
    ctx = dm.model_inputs()
    assert ctx == {"num_classes": 10, "vocab_size": len(listops.VOCAB), "pad_id": 0, "max_len": 512}
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"tokens", "padding_mask", "label"}
    assert batch["tokens"].shape == batch["padding_mask"].shape and batch["tokens"].shape[0] == 16
    assert torch.equal(batch["tokens"] == 0, batch["padding_mask"])  # pad id 0 never occurs inside a text
    assert 0 < dm.majority_rate() < 0.5


def test_listops_bytes_tokenizer_and_length_check():
    as_bytes, as_words = _small_listops(tokenizer="bytes"), _small_listops()
    for i in (0, 7):
        text = as_words.tokenizer.decode(as_words.datasets["train"].ids[i].tolist())
        assert ByteTokenizer().decode(as_bytes.datasets["train"].ids[i].tolist()) == text
    with pytest.raises(
        ValueError,
        match=r"data.max_len \(20\) is shorter than the embedded ListOps expressions, data.listops.max_len \(30\)",
    ):
        _small_listops(max_len=20)
    with pytest.raises(ValueError, match="did you mean 'max_depth'"):
        TextDataModule(listops={"max_dept": 3})


# ----------------------------------------------------------------------------------------------------------------
# the DataModule: files

ROWS = [("a fine film", "pos"), ('dull, "very" dull', "neg"), ("great\tfun", "pos"), ("bad", "neg"), ("ok", "mid")]


def _write(path, rows, text_col="sentence", label_col="label"):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({text_col: t, label_col: y}) + "\n" for t, y in rows))
    elif path.suffix == ".tsv":  # GLUE style: no quoting
        path.write_text(f"{text_col}\t{label_col}\n" + "".join(f"{t.replace(chr(9), ' ')}\t{y}\n" for t, y in rows))
    else:
        import csv

        with path.open("w", newline="") as f:
            csv.writer(f).writerows([(text_col, label_col), *rows])
    return str(path)


def test_texts_are_read_as_the_mlm_recipe_reads_them_whitespace_as_one_space(tmp_path):
    # a multi-line review: the tokenizer's pre-tokenizer splits at spaces only, so "lovely\nreally" was one word
    # here, and [UNK] pieces under a tokenizer learned by the MLM recipe (which reads whitespace runs as a space)
    (tmp_path / "train.csv").write_text('text,label\n"lovely\nreally\tand  plot ",pos\nbad,neg\n')
    texts, _ = read_text_file(tmp_path / "train.csv", text_column="text", label_column="label")
    (tmp_path / "corpus.csv").write_text('text\n"lovely\nreally\tand  plot "\n')
    from attnzoo.data.modules.mlm import read_unlabeled

    unlabeled = read_unlabeled(str(tmp_path / "corpus.csv"), documents="lines", text_column="text", what="train")
    assert texts[0] == unlabeled[0] == "lovely really and plot"


def test_a_train_split_smaller_than_a_batch_still_trains(tmp_path):
    # a whole-batch-only train loader had no batch at all: Lightning stopped with "No training batches", exit 0
    train = _write(tmp_path / "train.csv", ROWS * 2)
    dm = TextDataModule(train=train, text_column="sentence", batch_size=64, tokenizer="bytes")
    dm.setup()
    batches = list(dm.train_dataloader())
    assert len(batches) == 1 and len(batches[0]["label"]) == len(dm.datasets["train"]) > 0


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_files_read_and_batch(tmp_path, suffix):
    train = _write(tmp_path / f"train{suffix}", ROWS * 4)
    val = _write(tmp_path / f"val{suffix}", ROWS[:3])
    dm = TextDataModule(train=train, val=val, text_column="sentence", batch_size=4, tokenizer="bytes")
    dm.setup()
    assert dm.class_names == ["mid", "neg", "pos"] and dm.tokenizer.name == "bytes"
    expect = ROWS[1][0] if suffix != ".tsv" else ROWS[1][0]
    assert ByteTokenizer().decode(dm.datasets["val"].ids[1].tolist()) == expect
    batches = list(dm.val_dataloader())
    assert sum(len(b["label"]) for b in batches) == 3
    labels = sorted(y for b in batches for y in b["label"].tolist())
    assert labels == sorted(dm.class_names.index(y) for _, y in ROWS[:3])


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_misspelled_label_column_lists_columns_found(tmp_path, suffix):
    train = _write(tmp_path / f"train{suffix}", ROWS)
    dm = TextDataModule(train=train, text_column="sentence", label_column="lable")
    with pytest.raises(ValueError) as err:
        dm.setup()
    msg = str(err.value)
    assert train in msg and "'lable'" in msg and "columns found: ['sentence', 'label']" in msg
    assert "did you mean 'label'" in msg


def test_val_and_test_texts_found_in_train_are_counted(tmp_path, caplog):
    # a val file copied from train scored the model on texts it trained on, and nothing said so
    train = _write(tmp_path / "train.csv", ROWS * 4)
    val = _write(tmp_path / "val.csv", [(ROWS[0][0].replace(" ", "  "), ROWS[0][1]), ("an unseen text", "pos")])
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        TextDataModule(train=train, val=val, test=train, text_column="sentence", tokenizer="bytes").setup()
    assert "1 of 2 val texts (50.0%) also occur in the train split" in caplog.text
    assert "test texts" not in caplog.text  # the train file itself given as test: evaluate scoring it, no leak
    # no data.val: the val part held out of a train file that repeats its rows is mostly copies of them
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        TextDataModule(train=train, text_column="sentence", tokenizer="bytes").setup()
    assert re.search(
        r"(\d+) of \1 held-out val texts \(100\.0%\) also occur in the train split .*train part", caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        TextDataModule(train=train, val=val, test=val, text_column="sentence", tokenizer="bytes").setup()
    assert "data.val and data.test are one file" in caplog.text


def test_csv_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffsentence,label\nvery good,pos\nbad,neg\n".encode())
    dm = TextDataModule(train=str(path), val=str(path), text_column="sentence")
    dm.setup()
    assert dm.class_names == ["neg", "pos"]


def test_file_errors_name_file_row_and_column(tmp_path):
    with pytest.raises(ValueError, match=r"train.csv line 3: empty text in column 'sentence'"):
        empty = _write(tmp_path / "train.csv", [("fine", "a"), ("  ", "b")])
        TextDataModule(train=empty, text_column="sentence").setup()
    train = _write(tmp_path / "t.csv", ROWS)
    val = _write(tmp_path / "v.csv", [("x", "pos"), ("y", "meh")])
    # the line of the first unseen label is named too (the README promised it)
    with pytest.raises(ValueError, match=r"v.csv line 3: labels \['meh'\] in column 'label' never occur in the train"):
        TextDataModule(train=train, val=val, text_column="sentence").setup()
    bad = tmp_path / "t.txt"
    bad.write_text("x")
    with pytest.raises(ValueError, match=r"unknown text file format '.txt'; valid: \['.csv', '.tsv', '.jsonl'\]"):
        TextDataModule(train=str(bad)).setup()
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n{"text": oops}\n')
    with pytest.raises(ValueError, match=r"t.jsonl line 2: not valid JSON"):
        TextDataModule(train=str(jsonl)).setup()


def test_held_out_val_and_truncation(tmp_path, caplog):
    train = _write(tmp_path / "train.csv", [(f"text number {i} " * (i % 7 + 1), str(i % 3)) for i in range(50)])
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm = TextDataModule(train=train, text_column="sentence", max_len=40, val_fraction=0.2)
        dm.setup()
    assert len(dm.datasets["val"]) == 10 and len(dm.datasets["train"]) == 40
    assert max(dm.datasets["train"].lengths) == 40
    assert "holding out 10 of 50" in caplog.text and "to max_len 40 tokens" in caplog.text
    with pytest.raises(ValueError, match="no test split: set data.test"):
        dm.test_dataloader()


def test_label_vocabulary_is_saved_and_reused(tmp_path):
    rows = [(f"t{i}", str(i)) for i in (2, 10, 1, 2, 10)]  # numeric labels sort numerically
    train = _write(tmp_path / "train.jsonl", rows)
    dm = TextDataModule(train=train, text_column="sentence", tokenizer="bytes")
    dm.setup()
    assert dm.class_names == ["1", "2", "10"]
    (path,) = dm.save_artifacts(tmp_path / "run")
    saved = json.loads(path.read_text())
    assert saved["class_names"] == ["1", "2", "10"] and saved["tokenizer"]["kind"] == "bytes"
    again = TextDataModule(train=_write(tmp_path / "other.jsonl", rows[:2]), text_column="sentence", labels=str(path))
    again.setup()
    assert again.class_names == ["1", "2", "10"]
    with pytest.raises(ValueError, match="never occur in data.labels"):
        TextDataModule(train=train, text_column="sentence", labels=["1", "2"]).setup()


def test_val_sampler_sees_every_example_once():
    dm = _small_listops(bucket=True)
    loader = dm.val_dataloader()
    assert isinstance(loader.batch_sampler.sampler, SequentialSampler)
    assert sum(len(b["label"]) for b in loader) == 50


def test_registered_tokenizers_build():
    for name in TOKENIZERS:
        tok = make_tokenizer(name)
        assert 0 <= tok.pad_id < tok.vocab_size and tok.describe()["pad_id"] == tok.pad_id


def test_text_recipe_on_a_user_csv_saves_its_label_vocabulary(tmp_path):
    from attnzoo.config import ConfigError, load
    from attnzoo.run import fit

    train = _write(tmp_path / "train.csv", ROWS * 4)
    recipe = "recipes/text_cls.yaml"
    quick = ["trainer.max_steps=2", "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", "run.test=false"]
    quick += ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", f"run.dir={tmp_path}"]
    files = [f"data.train={train}", "data.text_column=sentence", "data.batch_size=4", "model.depth=1"]
    run_dir = fit(load([recipe], files + quick))
    saved = json.loads((run_dir / "labels.json").read_text())
    assert saved["class_names"] == ["mid", "neg", "pos"] and saved["source"] == train
    assert load([run_dir / "config.yaml"]).tree.model.num_classes == 3  # derived from the data, recorded
    with pytest.raises(ConfigError, match=r"no label column 'lable'; columns found: \['sentence', 'label'\]"):
        fit(load([recipe], [*files, "data.label_column=lable", *quick]))


def test_a_double_quote_that_never_closes_is_named_at_the_line_it_opens(tmp_path):
    # the reader ran on to the next quote of the file: 39 rows became one text of the last row's label, silently;
    # or, with no other quote, "line 202 (the end of the file): fewer fields ... (a text holding a comma ...)"
    rows = [f"text number {i},{'pos' if i % 2 else 'neg'}" for i in range(60)]
    merged = [*rows[:10], '"an unterminated quote here,pos', *rows[10:40], 'another "stray quote,neg', *rows[40:]]
    (tmp_path / "merged.csv").write_text("text,label\n" + "\n".join(merged) + "\n")
    with pytest.raises(ValueError, match=r"merged\.csv line 12: a double quote opens a field there .*read to line 43"):
        read_text_file(tmp_path / "merged.csv", text_column="text", label_column="label")
    (tmp_path / "open.csv").write_text("text,label\n" + "\n".join([*rows[:10], '"never closed,pos', *rows[10:]]) + "\n")
    with pytest.raises(ValueError, match=r"open\.csv line 12: a double quote opens a field .*unexpected end of data"):
        read_text_file(tmp_path / "open.csv", text_column="text", label_column="label")
    fine = 'text,label\n"two\nlines, quoted",pos\nsay "hi" there,neg\n"doubled ""quote""",pos\n'
    # quotes that close, then more of the line: read as before (the lenient reader's way), not refused
    fine += '"hello, world" ,pos\n"Hi" she said,neg\nhello,"pos" \n'
    (tmp_path / "fine.csv").write_text(fine)
    texts, labels = read_text_file(tmp_path / "fine.csv", text_column="text", label_column="label")
    assert labels == ["pos", "neg", "pos", "pos", "neg", "pos"]
    assert texts[1:5] == ['say "hi" there', 'doubled "quote"', "hello, world", "Hi she said"]


def test_a_quoted_field_that_runs_over_rows_is_warned_about_and_a_semicolon_file_named(tmp_path, caplog):
    # a stray quote closed by a later one followed by a comma ('15.6",neg'): 30 rows were one text, silently
    rows = [f"text number {i},{'pos' if i % 2 else 'neg'}" for i in range(60)]
    merged = [*rows[:10], '"an unterminated quote here,pos', *rows[10:40], 'the screen is 15.6",neg', *rows[40:]]
    (tmp_path / "runon.csv").write_text("text,label\n" + "\n".join(merged) + "\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        read_text_file(tmp_path / "runon.csv", text_column="text", label_column="label")
    assert "runon.csv line 12: a quoted field runs on to line 43, and 31 of its lines look like rows" in caplog.text
    caplog.clear()  # the label first (AG News' order): the rows' first fields are what the run-on lines start with
    flipped = [",".join(reversed(r.rsplit(",", 1))) for r in rows]
    merged = [
        *flipped[:10],
        'pos,"an unterminated quote here',
        *flipped[10:40],
        'neg,the screen is 15.6"',
        *flipped[40:],
    ]
    (tmp_path / "first.csv").write_text("label,text\n" + "\n".join(merged) + "\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        read_text_file(tmp_path / "first.csv", text_column="text", label_column="label")
    assert "first.csv line 12: a quoted field runs on to line 43" in caplog.text
    caplog.clear()
    (tmp_path / "review.csv").write_text('text,label\n"A long review.\nIt goes on.\nThe end",pos\nok,neg\n')
    with caplog.at_level(logging.WARNING, logger="attnzoo"):  # lines of prose inside a quoted field: no warning
        read_text_file(tmp_path / "review.csv", text_column="text", label_column="label")
    assert "runs on" not in caplog.text
    # prose with commas on each line of a quoted field (csv.writer's output): rows end in a label, these lines not
    prose = '"First, a line.\nThen, another one.\nAnd, at last, the end.\nSigned, me",pos\n'
    (tmp_path / "prose.csv").write_text("text,label\nshort one,neg\n" + prose * 3 + "ok,neg\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        _, labels = read_text_file(tmp_path / "prose.csv", text_column="text", label_column="label")
    assert labels == ["neg", "pos", "pos", "pos", "neg"] and "runs on" not in caplog.text
    (tmp_path / "r.csv").write_text('"text";"label"\n"good";"pos"\n')  # R's write.csv2: quoted, semicolons
    with pytest.raises(ValueError, match=r"the header '\"text\";\"label\"' is one column, its names separated by semi"):
        read_text_file(tmp_path / "r.csv", text_column="text", label_column="label")


def test_a_row_with_fewer_or_more_fields_than_the_header_is_named(tmp_path):
    # "just text" under text,label was reported as "empty label"
    (tmp_path / "short.csv").write_text("text,label\nhello there,pos\njust text\n")
    with pytest.raises(ValueError, match=r"short\.csv line 3: fewer fields than the header's columns .*\['label'\]"):
        read_text_file(tmp_path / "short.csv", text_column="text", label_column="label")
    (tmp_path / "long.csv").write_text("text,label\nhello, there,pos\n")
    with pytest.raises(ValueError, match=r"long\.csv line 2: more fields than the header's columns"):
        read_text_file(tmp_path / "long.csv", text_column="text", label_column="label")
    (tmp_path / "unused.csv").write_text("text,label,note\nhello there,pos\n")  # an unused column may be left out
    assert read_text_file(tmp_path / "unused.csv", text_column="text", label_column="label") == (
        ["hello there"],
        ["pos"],
    )


def test_one_number_written_two_ways_is_refused_not_two_classes(tmp_path):
    # a pandas file with float labels concatenated with an int-labelled one: "1" and "1.0" were two classes
    (tmp_path / "mixed.csv").write_text("text,label\ngood,1\nbad,0\nfine,1.0\nawful,0.0\nok,1\n")
    with pytest.raises(ValueError) as err:
        read_text_file(tmp_path / "mixed.csv", text_column="text", label_column="label")
    msg = str(err.value)
    assert "mixed.csv: column 'label' writes one number in several ways, which would be separate classes" in msg
    assert "'1' (line 2) and '1.0' (line 4); '0' (line 3) and '0.0' (line 5); write each class one way" in msg
    (tmp_path / "mixed.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 1.0}\n')
    with pytest.raises(ValueError, match=r"mixed.jsonl: .*: '1' \(line 1\) and '1.0' \(line 2\); write"):
        read_text_file(tmp_path / "mixed.jsonl", text_column="text", label_column="label")
    # across files: the val split's "1.0" is named as the train split's "1"
    train = _write(tmp_path / "train.csv", [("good", "1"), ("bad", "0")])
    val = _write(tmp_path / "val.csv", [("bad", "0"), ("fine", "1.0")])
    with pytest.raises(
        ValueError,
        match=r"val.csv line 3: labels \['1.0'\] .*'1.0' is the number the train split \S+ writes '1'; write each",
    ):
        TextDataModule(train=train, val=val, text_column="sentence", tokenizer="bytes").setup()
    # numbers written alike, words, and codes that only a number reading would merge are classes as before
    codes = ["1", "10", "1e9x", "01x", "01", "1.1", "1.10", "1e3", "1000", "-0", "0"]  # zero-padded, sections, ...
    (tmp_path / "fine.csv").write_text("text,label\n" + "".join(f"t,{c}\n" for c in codes))
    labels = read_text_file(tmp_path / "fine.csv", text_column="text", label_column="label")[1]
    assert labels == codes
    # integers that tie as numbers ("01", "1") keep one order whatever the process's hash seed (review)
    assert label_vocabulary(["1", "2", "01", "1", "01"]) == ["01", "1", "2"]


def test_a_utf16_file_is_named_utf16_with_the_command_that_converts_it(tmp_path):
    # Excel's "Unicode Text" was told to convert from Latin-1
    for encoding, name in (("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")):
        path = tmp_path / "excel.tsv"
        path.write_bytes(("\ufefftext\tlabel\nhi\tpos\n").encode(encoding))
        with pytest.raises(ValueError) as err:
            read_text_file(path, text_column="text", label_column="label")
        msg = str(err.value)
        assert f"excel.tsv: the file is {name} text" in msg and f"iconv -f {name.lower()} -t utf-8" in msg, msg
        assert "latin1" not in msg


def test_whitespace_only_lines_are_skipped_as_blank_lines_are_and_lines_keep_their_numbers(tmp_path):
    # "   " at the end of a CSV was "fewer fields than the header's columns (a text holding a comma needs quotes)"
    (tmp_path / "t.csv").write_bytes(b"\r\ntext,label\r\nhi,pos\r\n   \r\n\r\nbye,neg\r\n   \r\n")
    assert read_text_file(tmp_path / "t.csv", text_column="text", label_column="label") == (
        ["hi", "bye"],
        ["pos", "neg"],
    )
    (tmp_path / "t.tsv").write_bytes(b"text\tlabel\nhi\tpos\n \t \n\nbye\tneg\n  \n")
    assert read_text_file(tmp_path / "t.tsv", text_column="text", label_column="label") == (
        ["hi", "bye"],
        ["pos", "neg"],
    )
    # the lines skipped still count: a bad line after them is named by its own number
    (tmp_path / "late.csv").write_text("text,label\nhi,pos\n\n  \n\nbad,\n")
    with pytest.raises(ValueError, match=r"late\.csv line 6: empty label"):
        read_text_file(tmp_path / "late.csv", text_column="text", label_column="label")
    (tmp_path / "late.csv").write_text('text,label\nhi,pos\n \n"two\nlines",\n')
    with pytest.raises(ValueError, match=r"late\.csv line 5: empty label"):  # the line the record ends on, as before
        read_text_file(tmp_path / "late.csv", text_column="text", label_column="label")
    (tmp_path / "empties.csv").write_text("text,label\nhi,pos\n,\n")  # a row of empty fields is not a blank line
    with pytest.raises(ValueError, match=r"empties\.csv line 3: empty text"):
        read_text_file(tmp_path / "empties.csv", text_column="text", label_column="label")
    # lines end at a lone "\r" too: a bad byte is named by its line
    (tmp_path / "mac.csv").write_bytes(b"text,label\rhi,pos\rcaf\xe9,neg\r")
    with pytest.raises(ValueError, match=r"mac\.csv line 3, column 4: byte\(s\) e9 are not UTF-8"):
        read_text_file(tmp_path / "mac.csv", text_column="text", label_column="label")


def test_a_tokenizer_file_that_never_saw_the_texts_counts_their_unknown_tokens(tmp_path, caplog):
    """The tokenizer of model.init_from's run (or any file) read unseen characters as its unknown token silently."""
    tok = make_tokenizer("unigram", texts=["red green blue"] * 50, vocab_size=40, lowercase=True)
    tok.save(tmp_path / "tokenizer.json")
    rows = "".join(f"{t},{i % 2}\n" for i, t in enumerate(["red xyz", "green qqq", "blue red"] * 8))
    for name in ("train", "val"):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + rows)
    data = TextDataModule(train=str(tmp_path / "train.csv"), val=str(tmp_path / "val.csv"),
                          tokenizer=str(tmp_path / "tokenizer.json"))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data.setup()
    unknown = [r for r in caplog.records if "are unknown to the tokenizer" in r.getMessage()]
    assert [r.levelno for r in unknown] == [logging.WARNING] * 2  # train and val, each well above 1%
    assert "train tokens" in unknown[0].getMessage() and "characters it never saw" in unknown[0].getMessage()


def test_a_single_class_a_class_held_out_whole_and_another_separator_are_named(tmp_path, caplog):
    # one class: "task.objective (multiclass): num_classes (1) must be >= 2", after the tokenizer was learned, naming
    # no file; a rare class drawn whole into the held-out val part: no word; a semicolon CSV: "columns found:
    # ['text;label']"
    (tmp_path / "one.csv").write_text("text,label\n" + "".join(f"text {i},pos\n" for i in range(20)))
    with pytest.raises(ValueError, match=r"one\.csv: every label of column 'label' is 'pos': classification needs"):
        TextDataModule(train=str(tmp_path / "one.csv"), tokenizer="bytes").setup()
    rows = [f"text {i},{'a' if i % 2 else 'b'}" for i in range(40)]
    (tmp_path / "rare.csv").write_text("text,label\n" + "\n".join([*rows, "odd one,rare"]) + "\n")
    for seed in range(20):  # the held-out tenth: two of each large class; the one "rare" row stays in train
        data = TextDataModule(train=str(tmp_path / "rare.csv"), tokenizer="bytes", seed=seed)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attnzoo"):
            data.setup()
        assert "odd one" in data.texts["train"]
        assert sorted(int(t.split()[1]) % 2 for t in data.texts["val"]) == [0, 0, 1, 1]
        assert "held-out val part" not in caplog.text
    (tmp_path / "ones.csv").write_text("text,label\nfirst,a\nsecond,b\nthird,c\n")  # val takes one training lacks
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        TextDataModule(train=str(tmp_path / "ones.csv"), tokenizer="bytes").setup()
    assert "class(es) " in caplog.text and "are all in the held-out val part" in caplog.text
    (tmp_path / "semi.csv").write_text("text;label\nhello;pos\n")
    with pytest.raises(ValueError, match=r"the header 'text;label' is one column, its names separated by semicolons"):
        read_text_file(tmp_path / "semi.csv", text_column="text", label_column="label")
    (tmp_path / "tabs.csv").write_text("text\tlabel\nhello\tpos\n")
    with pytest.raises(
        ValueError, match=r"separated by tabs; a \.csv file is read with commas .*rename it to tabs\.tsv"
    ):
        read_text_file(tmp_path / "tabs.csv", text_column="text", label_column="label")
    # and the other way round: a CSV saved as .tsv said only "no text column 'text'; columns found: ['text,label']"
    (tmp_path / "commas.tsv").write_text("text,label\nhello,pos\n")
    with pytest.raises(
        ValueError, match=r"separated by commas; a \.tsv file is read with tabs .*rename it to commas\.csv"
    ):
        read_text_file(tmp_path / "commas.tsv", text_column="text", label_column="label")
