"""Language-model data: the embedded text, reading files, splits without leakage, blocks and their labels."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from attnzoo.data import DATAMODULES
from attnzoo.data.modules.batching import IGNORE_INDEX
from attnzoo.data.modules.lm import (
    BlockDataset,
    LMDataModule,
    embedded_documents,
    read_documents,
    remove_seen_paragraphs,
)
from attnzoo.data.tokenizers.factory import make_tokenizer
from attnzoo.run.paths import fingerprint
from tests.helpers import runs_inside


def _docs(n: int) -> list[str]:
    return [f"document {i} talks about topic {i % 7} at some length, then stops." for i in range(n)]


def test_embedded_text_is_real_prose():
    docs = embedded_documents()
    assert len(docs) > 50 and sum(len(d) for d in docs) > 200_000
    assert any(d.startswith('The "if" statement') for d in docs)


def test_blocks_and_labels():
    stream = torch.arange(10, 33, dtype=torch.int32)  # 23 tokens: 22 predictions, blocks of 8 -> 3 blocks
    ds = BlockDataset(stream, block_size=8, pad_id=0)
    assert len(ds) == 3
    items = [ds[i] for i in range(3)]
    for item in items:
        assert item["tokens"].shape == item["labels"].shape == item["padding_mask"].shape == (8,)
        real = ~item["padding_mask"]
        assert (item["labels"][real] == item["tokens"][real] + 1).all()  # the next token
    assert items[1]["tokens"][0] == items[0]["labels"][-1]  # blocks continue the stream
    assert items[2]["padding_mask"].tolist() == [False] * 6 + [True] * 2
    assert items[2]["labels"][6:].tolist() == [IGNORE_INDEX] * 2 and items[2]["tokens"][6:].tolist() == [0, 0]
    with pytest.raises(IndexError):
        ds[3]


def test_documents_from_lines_files_and_directories(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("first line\n\nsecond line\n")
    (tmp_path / "d" / "b.txt").write_text("third line\n")
    (tmp_path / "d" / "skip.md").write_text("not text\n")
    assert read_documents(str(tmp_path / "d"), documents="lines") == ["first line", "second line", "third line"]
    assert read_documents([str(tmp_path / "d" / "b.txt")], documents="files") == ["third line"]
    with pytest.raises(ValueError, match=r"data.train: no such file or directory '.*missing.txt'"):
        read_documents(str(tmp_path / "missing.txt"), documents="lines")


def test_blank_files_left_out_of_documents_are_named(tmp_path, caplog):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a document\n")
    for name in ("empty.txt", "blank.txt"):
        (tmp_path / "d" / name).write_text("" if name == "empty.txt" else " \n\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        assert read_documents(str(tmp_path / "d"), documents="files", what="val") == ["a document"]
    named = f"{tmp_path / 'd' / 'blank.txt'}; {tmp_path / 'd' / 'empty.txt'}"  # the paths: names repeat in subfolders
    assert f"data.val: 2 empty or blank file(s) left out (data.documents=files): {named}" in caplog.text


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nanother\ncaf\xe9 au lait\n")
    with pytest.raises(ValueError, match=r"bad.txt line 3: bytes that are not UTF-8"):
        LMDataModule(train=str(path)).setup()


def test_held_out_documents_and_no_leakage(tmp_path, caplog):
    docs = _docs(200) + ["a line that repeats"] * 20
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(docs))
    dm = LMDataModule(train=str(path), documents="lines", vocab_size=200, block_size=16, seed=3)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm.setup()
    train = set(dm.docs["train"])
    for split in ("val", "test"):
        assert dm.docs[split] and not train & set(dm.docs[split])
    assert "a line that repeats" in train and "removed" in caplog.text
    chars = {k: sum(len(d) for d in v) for k, v in dm.docs.items()}
    assert 0.03 < chars["test"] / sum(chars.values()) < 0.08
    again = LMDataModule(train=str(path), documents="lines", vocab_size=200, block_size=16, seed=3)
    again.setup()
    assert again.docs == dm.docs and torch.equal(again.datasets["val"].stream, dm.datasets["val"].stream)


@pytest.mark.parametrize("seed", range(6))
def test_a_held_out_part_stays_near_its_share_beside_a_few_long_documents(tmp_path, seed):
    # two lines of a corpus as long as the rest together: a draw that reached one made val about half the corpus
    docs = _docs(300) + ["long line " + "word " * 2000, "another long line " + "word " * 2000]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(docs))
    dm = LMDataModule(train=str(path), documents="lines", vocab_size=200, block_size=16, seed=seed)
    dm.setup()
    chars = {k: sum(len(d) for d in v) for k, v in dm.docs.items()}
    for split in ("val", "test"):
        assert 0.02 < chars[split] / sum(chars.values()) < 0.08, (split, chars)


def test_remove_seen_paragraphs():
    train = ["alpha\n\nbeta", "gamma"]
    kept, removed = remove_seen_paragraphs(["beta\n\ndelta", "gamma", "epsilon"], train)
    assert kept == ["delta", "epsilon"] and removed == 2


def test_a_val_file_with_windows_line_endings_loses_the_paragraphs_train_holds(tmp_path):
    """ "\r\n\r\n" did not split paragraphs: a val paragraph also in train stayed in the held-out score."""
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "a.txt").write_bytes(b"seen paragraph, two lines\r\nlong.\r\n\r\nonly in train.\r\n")
    (tmp_path / "val.txt").write_bytes(b"seen paragraph, two lines\nlong.\n\nnew in val.\r\n\r\nagain new.")
    train = read_documents(str(tmp_path / "train"), documents="files")
    val = read_documents(str(tmp_path / "val.txt"), documents="files", what="val")
    assert train[0].count("\r") == 3  # read as written: the runs made before read the same documents
    kept, removed = remove_seen_paragraphs(val, train)
    assert removed == 1 and kept == ["new in val.\n\nagain new."]
    assert remove_seen_paragraphs(train, ["other"]) == (train, 0)  # nothing removed: the document as read


def test_stream_and_batches(tmp_path):
    (tmp_path / "train.txt").write_text("\n".join(_docs(60)))
    (tmp_path / "val.txt").write_text("a new document about topic 3.\n")
    (tmp_path / "test.txt").write_text("another document, at length.\n")
    dm = DATAMODULES["lm"](
        train=str(tmp_path / "train.txt"),
        val=str(tmp_path / "val.txt"),
        test=str(tmp_path / "test.txt"),
        vocab_size=150,
        block_size=12,
        batch_size=4,
    )
    dm.setup()
    tok = dm.tokenizer
    assert dm.model_inputs() == {"vocab_size": tok.vocab_size, "pad_id": 0, "bos_id": 2, "eos_id": 3, "max_len": 12}
    val = dm.datasets["val"].stream.tolist()
    assert val == [tok.bos_id, *tok.encode("a new document about topic 3."), tok.eos_id]
    train = dm.datasets["train"].stream
    assert (train == tok.bos_id).sum() == (train == tok.eos_id).sum() == 60
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == batch["labels"].shape == (4, 12) and batch["tokens"].dtype == torch.long
    assert len(dm.train_dataloader()) == len(dm.datasets["train"]) // 4
    ids = dm.encode_prompt("document 5 talks")
    assert ids[0] == tok.bos_id and dm.decode(ids) == "document 5 talks"
    assert dm.decode([*ids, tok.eos_id, *tok.encode("after the end")]) == "document 5 talks"


def test_embedded_default_and_artifacts(tmp_path):
    dm = LMDataModule(vocab_size=300, block_size=64)
    dm.setup()
    assert {"train", "val", "test"} == set(dm.datasets) and all(len(d) > 0 for d in dm.datasets.values())
    assert "Language Reference" in dm.sources["train"]
    saved = dm.save_artifacts(tmp_path)
    assert [p.name for p in saved] == ["tokenizer.json", "lm.json"]
    record = json.loads(saved[1].read_text())
    assert record["block_size"] == 64 and record["tokens"]["train"] == len(dm.datasets["train"].stream)
    again = LMDataModule(vocab_size=300, block_size=64, tokenizer=str(saved[0]))
    again.setup()
    assert torch.equal(again.datasets["test"].stream, dm.datasets["test"].stream)
    chosen = dm.auto_values()  # the embedded text keeps the recipe's measured settings
    assert chosen["data.split_digits"][0] is False and chosen["trainer.max_epochs"][0] == 6


def test_files_get_digits_split_and_an_epoch_budget(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Line {i} holds {i * 37} items and {i % 7} boxes.\n" for i in range(400)))
    dm = LMDataModule(train=str(corpus), vocab_size=200, block_size=16, batch_size=8)
    dm.setup()
    chosen = dm.auto_values()
    assert chosen["data.split_digits"][0] is True
    assert [p for p in dm.tokenizer.tokens("holds 1295 items") if p.strip("▁").isdigit()] == ["1", "2", "9", "5"]
    steps = len(dm.datasets["train"]) // 8  # per epoch: the loader drops the last partial batch
    assert len(dm.train_dataloader()) == steps
    assert chosen["trainer.max_epochs"][0] == min(100, max(5, -(-3000 // steps)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"documents": "paragraphs"}, r"data.documents: 'paragraphs' is not one of \['lines', 'files'\]"),
        ({"block_size": 1}, r"data.block_size \(1\) must be >= 2"),
        ({"val_fraction": 1.0}, r"data.val_fraction \(1.0\) must be in \(0, 1\)"),
        ({"val": "v.txt"}, "given without data.train"),
    ],
)
def test_option_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LMDataModule(**kwargs)


def test_bytes_tokenizer(tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(_docs(30)))
    dm = LMDataModule(train=str(tmp_path / "t.txt"), tokenizer="bytes", block_size=32)
    dm.setup()
    assert dm.model_inputs()["vocab_size"] == 259 and dm.save_artifacts(tmp_path / "run")[0].name == "lm.json"
    assert dm.decode(dm.datasets["train"].stream[:20]).startswith("document ")


def test_val_given_as_the_train_file_warns_that_val_is_the_test_split(tmp_path, caplog):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(_docs(200)))
    dm = LMDataModule(train=str(path), val=str(path), documents="lines", vocab_size=200, block_size=16)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm.setup()
    assert dm.docs["val"] == dm.docs["test"]
    assert "the val split is identical to the test split (data.val is the train file)" in caplog.text
    caplog.clear()
    (tmp_path / "val.txt").write_text("a new document about topic 3.\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        LMDataModule(train=str(path), val=str(tmp_path / "val.txt"), vocab_size=200, block_size=16).setup()
    assert "identical" not in caplog.text


def test_a_folders_txt_files_in_any_letter_case_are_read_and_a_csv_is_refused(tmp_path, caplog):
    # C.TXT was left out without a word; a CSV given to the LM recipe trained on its header and label column
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("first line\n")
    (tmp_path / "d" / "sub" / "b.txt").write_text("second line\n")
    (tmp_path / "d" / "C.TXT").write_text("third line\n")
    (tmp_path / "d" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "d" / ".ipynb_checkpoints" / "a-checkpoint.txt").write_text("a copy\n")
    (tmp_path / "d" / "notes.md").write_text("not read\n")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        docs = read_documents(str(tmp_path / "d"), documents="lines")
    assert sorted(docs) == ["first line", "second line", "third line"]
    assert "3 .txt file(s) under" in caplog.text and "not read (not .txt): notes.md" in caplog.text
    (tmp_path / "t.csv").write_text("text,label\nhello there,pos\n")
    with pytest.raises(ValueError, match=r"data.train: '.*t\.csv' is a \.csv file of columns.*data.text_column"):
        read_documents(str(tmp_path / "t.csv"), documents="lines")


def test_runs_made_inside_a_folder_of_texts_are_not_read(tmp_path):
    # data.train=. in a folder of .txt files: the second run trained on the first one's examples.txt
    (tmp_path / "a.txt").write_text("first line\n")
    listing = fingerprint(tmp_path, "data.train")
    runs_inside(tmp_path)
    assert read_documents(str(tmp_path), documents="lines") == ["first line"]
    assert fingerprint(tmp_path, "data.train") == listing  # a resume sees the data unchanged


def test_a_tokenizer_file_is_not_said_to_split_digits(tmp_path, caplog):
    """With GPT-2's tokenizer.json (model.init_from) split_digits auto was logged and recorded as True beside a line
    saying it had no effect on that tokenizer."""
    (tmp_path / "t.txt").write_text("\n".join(_docs(30)))
    tok = make_tokenizer("bpe", texts=_docs(30), vocab_size=200)
    tok.save(tmp_path / "tokenizer.json")
    dm = LMDataModule(train=str(tmp_path / "t.txt"), tokenizer=str(tmp_path / "tokenizer.json"), block_size=16)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm.setup()
    value, why = dm.chosen["data.split_digits"]
    assert value is False and why.startswith(f"not used: data.tokenizer '{tmp_path / 'tokenizer.json'}'")
    assert "no effect" not in caplog.text


def test_one_file_as_every_split_is_an_error_unless_evaluate_reads_a_test_file_alone(tmp_path):
    # train = val = test trained and picked its best checkpoint on its training text once the evaluate-only case
    # was inferred from the paths
    from attnzoo.data.modules.lm import LMDataModule

    f = tmp_path / "one.txt"
    f.write_text("".join(f"line {i} of some text here\n" for i in range(30)))
    with pytest.raises(ValueError, match="every paragraph of .*one.txt occurs in train"):
        LMDataModule(train=str(f), val=str(f), test=str(f), tokenizer="bytes").setup()
    alone = LMDataModule(train=str(f), val=str(f), test=str(f), tokenizer="bytes", test_only=True)
    alone.setup()
    assert len(alone.docs["test"]) == 30
    with pytest.raises(ValueError, match="data.test_only: train .* must be the test file"):
        LMDataModule(train=str(f), test=str(f), tokenizer="bytes", test_only=True)


@pytest.mark.parametrize("kind", ["lm", "mlm"])
def test_a_split_of_text_the_tokenizer_never_saw_is_said_unknown_by_its_share(kind, tmp_path, caplog):
    """A val file in another script read as ~95% unknown tokens, which are easy to predict: val/ppl 6 against a test
    ppl of 126, and no word of it in the log (the translation, text and text-image data said so)."""
    from attnzoo.data.modules.mlm import MLMDataModule

    english = tmp_path / "train.txt"
    english.write_text("".join(f"the {w} sat on the mat number {i} today\n" for i, w in
                               enumerate(["cat", "dog", "bird", "fish"] * 60)))  # fmt: skip
    chinese = tmp_path / "val.txt"
    chinese.write_text("".join(f"今天天气很好我们去公园散步第{i}次\n" for i in range(40)))
    with caplog.at_level("WARNING", logger="attnzoo"):
        if kind == "lm":
            LMDataModule(train=str(english), val=str(chinese), documents="lines", vocab_size=80,
                         block_size=16).setup()  # fmt: skip
        else:
            MLMDataModule(train=str(english), val=str(chinese), vocab_size=80, max_len=16).setup()
    said = [r.getMessage() for r in caplog.records if "unknown to the tokenizer" in r.getMessage()]
    assert len(said) == 1 and " val tokens (" in said[0], said


def test_too_few_documents_say_what_to_give(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("a single long line of text without a newline in it at all " * 20)
    with pytest.raises(
        ValueError,
        match=r"too few documents \(1\) .*: give data.test=<file> and data.val=<file>, "
        r"or more documents \(data.documents='lines': each non-blank line is one\)",
    ):
        LMDataModule(train=str(one), documents="lines").setup()


def test_a_utf16_text_file_is_named_as_such_with_the_command_that_converts_it(tmp_path):
    """It was "line 1: bytes that are not UTF-8 (invalid start byte)"; the translation reader named UTF-16."""
    wide = tmp_path / "notes.txt"
    wide.write_bytes("first line of text\nsecond line of text\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"notes\.txt: the file is UTF-16 text .*iconv -f utf-16 -t utf-8 notes\.txt"):
        LMDataModule(train=str(wide), documents="lines").setup()


def test_a_folder_without_txt_files_names_what_it_holds(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("some text\n")
    with pytest.raises(ValueError, match=r"no \.txt files under .*notes' \(it holds a\.md: the text files must end"):
        LMDataModule(train=str(tmp_path / "notes")).setup()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \.txt files under .*empty'$"):
        LMDataModule(train=str(tmp_path / "empty")).setup()


def test_hard_wrapped_lines_read_as_documents_are_warned_about(tmp_path, caplog):
    # Debian's copyright files, wrapped at 72 columns: 27k "documents" of half a sentence each, without a word
    import logging
    import textwrap

    prose = " ".join(f"Sentence number {i} says something about the licence of the package." for i in range(60))
    (tmp_path / "wrapped.txt").write_text(textwrap.fill(prose, 60) + "\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        read_documents(str(tmp_path / "wrapped.txt"), documents="lines")
    assert "lines end mid-sentence" in caplog.text and "data.documents=files reads each file as one" in caplog.text
    caplog.clear()  # a line per sentence (or paragraph): nothing to say
    (tmp_path / "lines.txt").write_text("\n".join(f"Sentence {i} ends here." for i in range(60)) + "\n")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        read_documents(str(tmp_path / "lines.txt"), documents="lines")
    assert "mid-sentence" not in caplog.text
