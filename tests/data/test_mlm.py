"""Masked-language-model data: BERT's masking (shares, labels, specials, fixed eval masks) and `MLMDataModule` reading
the same files as the text and language-model recipes (.txt lines or files, the text column of CSV/TSV/JSONL)."""

import json
import logging

import pytest
import torch

from attnzoo.data.modules.batching import IGNORE_INDEX
from attnzoo.data.modules.masking import MaskingCollate, mask_tokens
from attnzoo.data.modules.mlm import MLMDataModule, embedded_texts

SPECIALS = [0, 1, 2, 3, 4]
MASK = 4


def _batch(b=64, length=200, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, vocab, (b, length), generator=g)
    lengths = torch.randint(1, length + 1, (b,), generator=g)
    padding = torch.arange(length)[None, :] >= lengths[:, None]
    return tokens.masked_fill(padding, 0), padding


def test_bert_masking_picks_15_percent_and_splits_them_80_10_10():
    tokens, padding = _batch()
    replacements = torch.arange(5, 50)
    inputs, labels = mask_tokens(tokens, ~padding, mask_id=MASK, replacements=replacements,
                                 generator=torch.Generator().manual_seed(1))  # fmt: skip
    picked = labels != IGNORE_INDEX
    assert (labels[picked] == tokens[picked]).all()
    assert not picked[padding].any() and (inputs[padding] == 0).all()  # padding is never picked nor changed
    assert (inputs[~picked] == tokens[~picked]).all()  # only picked positions change
    share = picked.sum() / (~padding).sum()
    assert 0.13 < share < 0.17, share
    masked = (inputs[picked] == MASK).float().mean()
    kept = (inputs[picked] == tokens[picked]).float().mean()  # kept on purpose, or a random draw of the same token
    assert 0.77 < masked < 0.83 and 0.08 < kept < 0.14, (masked, kept)
    assert ((inputs[picked] != MASK) & (inputs[picked] != tokens[picked])).float().mean() > 0.07  # random tokens
    assert not torch.isin(inputs[picked & (inputs != MASK)], torch.tensor(SPECIALS)).any()


def test_every_text_gets_a_pick_so_no_batch_is_without_a_loss():
    tokens, padding = _batch(b=256, length=3)
    _, labels = mask_tokens(tokens, ~padding, mask_id=MASK, replacements=torch.arange(5, 50), rate=0.01)
    assert ((labels != IGNORE_INDEX).sum(1) >= 1).all()


def _items(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(5, 40, (int(torch.randint(3, 30, (1,), generator=g)),), generator=g), torch.tensor(i))
            for i in range(n)]  # fmt: skip


def test_eval_masks_are_fixed_per_text_whatever_the_batch():
    collate = MaskingCollate(pad_id=0, mask_id=MASK, vocab_size=40, specials=SPECIALS, fixed_seed=7)
    items = _items()
    whole = collate(items)
    alone = collate(items[5:6])
    length = len(items[5][0])
    assert torch.equal(whole["tokens"][5, :length], alone["tokens"][0])
    assert torch.equal(whole["labels"][5, :length], alone["labels"][0])
    assert torch.equal(collate(items)["tokens"], whole["tokens"])  # every evaluation: the same positions
    other = MaskingCollate(pad_id=0, mask_id=MASK, vocab_size=40, specials=SPECIALS, fixed_seed=8)(items)
    assert not torch.equal(other["labels"], whole["labels"])


def test_training_masks_are_new_each_batch_and_follow_the_seeded_random_state():
    collate = MaskingCollate(pad_id=0, mask_id=MASK, vocab_size=40, specials=SPECIALS)
    items = _items()
    torch.manual_seed(3)
    first, second = collate(items), collate(items)
    assert not torch.equal(first["labels"], second["labels"])
    torch.manual_seed(3)
    assert torch.equal(collate(items)["tokens"], first["tokens"])
    assert set(first) == {"tokens", "padding_mask", "labels"}


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1])
def test_a_mask_rate_outside_0_1_is_refused(rate):
    with pytest.raises(ValueError, match=r"data.mask_rate"):
        MaskingCollate(pad_id=0, mask_id=MASK, vocab_size=40, specials=SPECIALS, rate=rate)


LINES = [f"the {w} number {i} is kept in a box" for i in range(60) for w in ("red", "blue")]


def _write(path, kind):
    if kind == "txt":
        path.write_text("\n".join(LINES) + "\n\n")
    elif kind == "csv":
        path.write_text("label,text\n" + "".join(f"{i % 2},{t}\n" for i, t in enumerate(LINES)))
    elif kind == "tsv":
        path.write_text("sentence\n" + "".join(f"{t}\n" for t in LINES))  # no label column at all
    else:
        path.write_text("".join(json.dumps({"text": t, "label": "x"}) + "\n" for t in LINES))


@pytest.mark.parametrize("kind", ["txt", "csv", "tsv", "jsonl"])
def test_unlabeled_text_is_read_from_every_format_and_held_out(kind, tmp_path):
    path = tmp_path / f"corpus.{kind}"
    _write(path, kind)
    column = "sentence" if kind == "tsv" else "text"
    data = MLMDataModule(train=str(path), text_column=column, vocab_size=60, batch_size=8)
    data.setup()
    assert {k: len(v) for k, v in data.texts.items()} == {"train": 108, "val": 6, "test": 6}
    assert sorted(sum(data.texts.values(), [])) == sorted(LINES)  # every text once, labels never read as text
    assert data.chosen["data.tokenizer"][0] == "unigram" and data.chosen["data.lowercase"][0] is True
    batch = next(iter(data.train_dataloader()))
    assert batch["tokens"].shape == batch["labels"].shape == batch["padding_mask"].shape
    assert (batch["labels"] != IGNORE_INDEX).any()
    assert data.model_inputs() == {"vocab_size": data.tokenizer.vocab_size, "pad_id": 0, "max_len": 512}
    saved = data.save_artifacts(tmp_path / "run")
    assert [p.name for p in saved] == ["tokenizer.json", "mlm.json"]


def test_long_texts_are_cut_into_pieces_of_max_len(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(LINES[:40]) + "\n" + "\n".join(LINES))
    data = MLMDataModule(train=str(path), vocab_size=60, max_len=16, tokenizer="bytes", val_fraction=0.01,
                         test_fraction=0.01)  # fmt: skip
    with pytest.raises(ValueError, match=r"data.tokenizer 'bytes' has no token to mask with"):
        data.setup()
    data = MLMDataModule(train=str(path), vocab_size=60, max_len=16)
    data.setup()
    pieces = [len(x) for split in data.datasets.values() for x in split.ids]
    assert max(pieces) == 16 and len(pieces) > sum(len(v) for v in data.texts.values())


def test_a_missing_text_column_names_the_columns_found(tmp_path):
    path = tmp_path / "train.csv"
    _write(path, "csv")
    with pytest.raises(ValueError, match=r"no text column 'sentence'; columns found: \['label', 'text'\]"):
        MLMDataModule(train=str(path), text_column="sentence").setup()
    # one JSONL line of many without the key: that line is to correct ("did you mean 'txt'? (set data.text_column)"
    # would have broken the others)
    lines = [json.dumps({"text": t}) for t in LINES[:20]]
    lines[10] = json.dumps({"txt": "a text under another key"})
    (tmp_path / "one.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"one\.jsonl line 11: no text key 'text', which the lines before it have; "
                                         r"this line's keys: \['txt'\]: correct the line"):  # fmt: skip
        MLMDataModule(train=str(tmp_path / "one.jsonl"), vocab_size=60).setup()


def test_the_embedded_text_is_the_language_reference_one_paragraph_a_text():
    texts = embedded_texts()
    assert len(texts) > 1000 and all(t and "\n" not in t for t in texts)
    assert any("for" in t and "statement" in t for t in texts)


def test_held_out_texts_seen_in_train_are_removed_and_val_as_the_train_file_warns(tmp_path, caplog):
    """val/ppl picked the best checkpoint on training text: the embedded reference repeats ~40% of its held-out
    paragraphs in train, and data.val set to the train file gave no warning (the LM recipe removes and warns)."""
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES + LINES[:30]) + "\n")  # the first 30 lines twice
    data = MLMDataModule(train=str(path), vocab_size=60, batch_size=8)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data.setup()
    seen = set(data.texts["train"])
    assert data.texts["val"] and data.texts["test"] and not seen & set(data.texts["val"] + data.texts["test"])
    assert "holding out 8 (val) and 8 (test) of 150 train texts" in caplog.text  # a fixed draw from the seed
    assert "removed 1 paragraphs of val that occur verbatim in train" in caplog.text
    assert "removed 2 paragraphs of test that occur verbatim in train" in caplog.text
    assert (len(data.texts["val"]), len(data.texts["test"])) == (7, 6)
    record = json.loads(data.save_artifacts(tmp_path / "run")[-1].read_text())
    assert record["paragraphs_removed_as_seen_in_train"] == {"val": 1, "test": 2}
    caplog.clear()
    data = MLMDataModule(train=str(path), val=str(path), vocab_size=60, batch_size=8)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        data.setup()
    assert data.texts["val"] == data.texts["test"]
    assert "the val split is identical to the test split (data.val is the train file)" in caplog.text
