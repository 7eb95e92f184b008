"""Generated scenes and the text-image DataModule: correct answers, no text prior, JSONL reading and its errors."""

import collections
import json
import logging
import re

import numpy as np
import pytest
import torch

from attnzoo.data.embedded.scenes import COLORS, QUESTION_KINDS, SceneGenerator, write_jsonl
from attnzoo.data.modules.text_image import TextImageDataModule
from attnzoo.data.tokenizers.tokenize import ByteTokenizer


def _answer(ex):
    """Answer the question from the scene's items, independently of the generator."""
    items = ex.items
    if m := re.fullmatch(r"what color is the shape left of the (\w+) (\w+)\?", ex.text):
        (ref,) = [it for it in items if (it.color, it.shape) == m.groups()]
        (left,) = [it for it in items if (it.row, it.col) == (ref.row, ref.col - 1)]
        return left.color
    if m := re.fullmatch(r"is there a (\w+) (\w+)\?", ex.text):
        return "yes" if any((it.color, it.shape) == m.groups() for it in items) else "no"
    if m := re.fullmatch(r"how many (\w+)s are there\?", ex.text):
        return str(sum(it.shape == m.group(1) for it in items))
    if m := re.fullmatch(r"how many (\w+) shapes are there\?", ex.text):
        return str(sum(it.color == m.group(1) for it in items))
    if m := re.fullmatch(r"a (\w+) (\w+) (\w+)", ex.text):
        return "match" if any((it.size, it.color, it.shape) == m.groups() for it in items) else "mismatch"
    m = re.fullmatch(r"a (\w+) (\w+) left of a (\w+) (\w+)", ex.text)
    a, b = m.groups()[:2], m.groups()[2:]
    cells = {(it.row, it.col): it for it in items}
    pairs = [((x.color, x.shape), (y.color, y.shape)) for (r, c), y in cells.items() if (x := cells.get((r, c - 1)))]
    return "match" if (a, b) in pairs else "mismatch"


@pytest.mark.parametrize("task", ["vqa", "match"])
def test_scene_answers_are_right_and_deterministic(task):
    gen = SceneGenerator(task=task, seed=3)
    examples = gen.examples(400, split="val")
    assert [_answer(ex) for ex in examples] == [ex.label for ex in examples]
    assert set(ex.label for ex in examples) == set(gen.class_names)
    again = SceneGenerator(task=task, seed=3)
    assert again.examples(400, split="val") == examples
    np.testing.assert_array_equal(
        again.images(examples[:20], image_size=32, split="val"), gen.images(examples[:20], image_size=32, split="val")
    )
    assert SceneGenerator(task=task, seed=4).examples(50, split="val") != examples[:50]


def test_text_alone_predicts_no_better_than_chance():
    gen = SceneGenerator(task="vqa", seed=0)
    train, val = gen.examples(4000, split="train"), gen.examples(1000, split="val")
    assert collections.Counter(ex.kind for ex in train).keys() == set(QUESTION_KINDS)
    by_text = collections.defaultdict(collections.Counter)
    by_kind = collections.defaultdict(collections.Counter)
    for ex in train:
        by_text[ex.text][ex.label] += 1
        by_kind[ex.kind][ex.label] += 1
    # the best a text-only model can do: the most frequent training answer of the same question (or kind)
    guess = [(by_text.get(ex.text) or by_kind[ex.kind]).most_common(1)[0][0] for ex in val]
    accuracy = np.mean([g == ex.label for g, ex in zip(guess, val, strict=True)])
    chance = np.mean([1 / len(by_kind[ex.kind]) for ex in val])  # ~ (1/5 + 1/2 + 1/4 + 1/4) / 4
    assert accuracy < chance + 0.06, (accuracy, chance)


def test_held_out_pairs_only_in_validation():
    gen = SceneGenerator(task="vqa", held_out=3, seed=1)
    names = [f"{c} {s}" for c, s in gen.held_out_pairs]
    assert len(names) == 3
    assert not any(n in ex.text for ex in gen.examples(2000, split="train") for n in names)
    assert any(n in ex.text for ex in gen.examples(500, split="val") for n in names)


def test_images_show_the_items():
    gen = SceneGenerator(seed=0)
    examples = gen.examples(30, split="train")
    images = gen.images(examples, image_size=48, split="train")
    for ex, img in zip(examples, images, strict=True):
        present = {c for c, rgb in COLORS.items() if (img.reshape(-1, 3) == rgb).all(-1).any()}
        assert present == {it.color for it in ex.items}


def _dm(**kw):
    dm = TextImageDataModule(**{"num_train": 64, "num_val": 32, "batch_size": 16, **kw})
    dm.setup("fit")
    return dm


def test_scene_batches_follow_the_contract():
    dm = _dm()
    batch = next(iter(dm.train_dataloader()))
    assert batch["image"].shape == (16, 3, 48, 48) and batch["image"].dtype == torch.float32
    assert -1.0 <= batch["image"].min() and batch["image"].max() <= 1.0
    tokens, pad = batch["tokens"], batch["padding_mask"]
    assert tokens.dtype == torch.long and pad.dtype == torch.bool and tokens.shape == pad.shape
    assert ((tokens == 0) == pad).all() and (~pad).sum(1).min() > 0
    assert batch["label"].shape == (16,) and batch["label"].max() < dm.num_classes
    assert dm.model_inputs() == {
        "num_classes": len(dm.class_names),
        "img_size": 48,
        "in_chans": 3,
        "vocab_size": 257,
        "pad_id": 0,
        "max_len": 64,
    }
    blank = _dm(blank_image=True)
    assert (next(iter(blank.train_dataloader()))["image"] == 0).all()
    assert blank.datasets["val"].texts == dm.datasets["val"].texts  # the same data, only without the image


def _write(tmp_path, task="vqa", n=12):  # vqa readers get `classes`: 12 answers need not cover every class
    gen = SceneGenerator(task=task, seed=0)
    paths = {}
    for split in ("train", "val"):
        examples = gen.examples(n, split=split)
        paths[split] = write_jsonl(tmp_path, examples, gen.images(examples, image_size=32, split=split), name=split)
    return gen, paths


@pytest.mark.parametrize("task", ["vqa", "match"])
def test_jsonl_round_trip(tmp_path, task):
    gen, paths = _write(tmp_path, task)
    dm = _dm(task=task, train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=gen.class_names)
    examples = gen.examples(12, split="val")
    images = gen.images(examples, image_size=32, split="val")
    item = dm.datasets["val"][5]
    assert item["tokens"] == ByteTokenizer().encode(examples[5].text)
    assert dm.class_names[item["label"]] == examples[5].label
    expected = torch.from_numpy(images[5]).permute(2, 0, 1).float() / 127.5 - 1.0
    torch.testing.assert_close(item["image"], expected)


def test_image_paths_written_on_windows_are_read_with_slashes(tmp_path, caplog):
    # "train\\00000.png" named no file here: every pair was refused as a missing image
    gen, paths = _write(tmp_path)
    lines = paths["train"].read_text().replace('"train/', '"train\\\\')
    assert "\\\\" in lines
    paths["train"].write_text(lines)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm = _dm(train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=gen.class_names)
    examples = gen.examples(12, split="train")
    expected = torch.from_numpy(gen.images(examples, image_size=32, split="train")[3]).permute(2, 0, 1) / 127.5 - 1
    torch.testing.assert_close(dm.datasets["train"][3]["image"], expected.float())
    assert "12 image paths written with backslashes (a Windows folder separator) read with /" in caplog.text


def test_jsonl_images_are_resized(tmp_path):
    _, paths = _write(tmp_path)
    dm = _dm(
        train=str(paths["train"]),
        val=str(paths["val"]),
        image_size=16,
        classes=list(COLORS) + ["no", "yes", "0", "1", "2", "3"],
    )
    assert dm.datasets["train"][0]["image"].shape == (3, 16, 16)
    assert dm.class_names[:5] == list(COLORS)


def test_missing_or_unreadable_image(tmp_path):
    gen, paths = _write(tmp_path)
    lines = paths["train"].read_text().splitlines()
    (tmp_path / json.loads(lines[2])["image"]).unlink()
    (tmp_path / json.loads(lines[4])["image"]).write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"train\.jsonl:3: image .*train/00002\.png does not exist"):
        _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), on_bad_image="skip", classes=gen.class_names)
    assert dm.skipped == {"train": 2} and len(dm.datasets["train"]) == 10
    (tmp_path / json.loads(lines[2])["image"]).write_bytes(b"")
    with pytest.raises(
        ValueError, match=r"train\.jsonl:3: image .*train/00002\.png cannot be read \(empty file \(0 bytes\)\)"
    ):
        _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    # the path as the line names it, not where a link leads (imgs -> ../elsewhere/imgs)
    folder = json.loads(lines[2])["image"].split("/")[0]
    (tmp_path / folder).rename(tmp_path / "elsewhere")
    (tmp_path / folder).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=rf"image {tmp_path}/{folder}/00002\.png cannot be read"):
        _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    # texts that are all empty, for a tokenizer learned from them (10: two images are bad, and skipped)
    paths["train"].write_text("\n".join(json.dumps({**json.loads(line), "text": ""}) for line in lines) + "\n")
    with pytest.raises(
        ValueError,
        match=r"data\.tokenizer 'bpe' is learned from the training texts, and all 10 of "
        r"them are empty: give texts, or data\.tokenizer=bytes",
    ):
        _dm(
            train=str(paths["train"]),
            val=str(paths["val"]),
            classes=gen.class_names,
            tokenizer="bpe",
            on_bad_image="skip",
        )


@pytest.mark.parametrize(
    ("image", "message"),
    [  # both said "image <folder> does not exist": "" is the JSONL file's own folder
        ("", r"train\.jsonl:3: image path '' is empty; give the image file, relative to "),
        ("train", r"train\.jsonl:3: image .*train is a folder, not an image file"),
    ],
    ids=["empty", "folder"],
)
def test_an_image_path_that_is_empty_or_a_folder_is_named(tmp_path, image, message):
    gen, paths = _write(tmp_path)
    lines = paths["train"].read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "image": image})
    paths["train"].write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message + r".*data\.on_bad_image=skip"):
        _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), on_bad_image="skip", classes=gen.class_names)
    assert dm.skipped == {"train": 1} and len(dm.datasets["train"]) == 11


def test_image_paths_written_relative_to_the_current_folder_are_explained(tmp_path, monkeypatch):
    # the images sit beside data/, the lines name them from the folder the command runs in: the message said only
    # "image data/train/00000.png does not exist (data.on_bad_image=skip leaves such pairs out)", and skip drops all
    gen, paths = _write(tmp_path)
    (tmp_path / "data").mkdir()
    moved = paths["train"].rename(tmp_path / "data" / "train.jsonl")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as err:
        _dm(train="data/train.jsonl", val=str(paths["val"]), classes=gen.class_names)
    message = str(err.value)
    assert message.startswith("data/train.jsonl:1: image data/train/00000.png does not exist"), message
    hint = (
        "image paths are relative to the JSONL file's folder, data; train/00000.png is a file relative to the "
        f"current folder, {tmp_path}: write the paths relative to data, or absolute"
    )
    assert hint in message, message
    assert "on_bad_image=skip" not in message
    moved.write_text(moved.read_text().replace('"train/', '"nowhere/'))  # missing from both folders
    with pytest.raises(ValueError, match=r"relative to the JSONL file's folder; data\.on_bad_image=skip leaves"):
        _dm(train="data/train.jsonl", val=str(paths["val"]), classes=gen.class_names)


@pytest.mark.parametrize(
    ("name", "content", "other"),
    [
        ("train.csv", "image,text,label\ntrain/00000.png,is it red?,yes\n", ", not CSV"),
        ("train.tsv", "image\ttext\tlabel\n", ", not TSV"),
        ("train.txt", "train/00000.png is it red? yes\n", ""),  # a first line that is no JSON object
    ],
    ids=["csv", "tsv", "text_line"],
)
def test_a_file_that_is_not_jsonl_says_what_text_image_data_looks_like(tmp_path, name, content, other):
    _, paths = _write(tmp_path)
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError) as err:
        _dm(train=str(tmp_path / name), val=str(paths["val"]))
    message = str(err.value)
    assert f"{name}:1: not valid JSON" in message and f"text-image data is JSONL{other}: one JSON object a" in message
    assert "keys image (a path relative to the JSONL file), text and label" in message, message


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"bad\.jsonl:2: not valid JSON"),
        (  # the keys the line has are named: a file of other names (caption, answer) is rewritten
            '{"image": "train/00000.png", "caption": "hi", "label": "red"}',
            r"bad\.jsonl:2: missing key\(s\) \['text'\]; the line has \['caption', 'image', 'label'\], each line needs",
        ),
        ('["a", "b"]', r"bad\.jsonl:2: expected an object"),
        ('{"image": "train/00000.png", "text": "hi", "label": "pink"}', r"bad\.jsonl:2: label 'pink' is not an answer"),
        # a null or list label became a class "None" or "['red', 'green']"
        ('{"image": "train/00000.png", "text": "hi", "label": null}', r"bad\.jsonl:2: label None is not a label"),
        (
            '{"image": "train/00000.png", "text": "hi", "label": ["red"]}',
            r"bad\.jsonl:2: label \['red'\] is not a label",
        ),
    ],
)
def test_bad_jsonl_lines_name_file_and_line(tmp_path, line, message):
    _, paths = _write(tmp_path)
    first = paths["train"].read_text().splitlines()[0]
    (tmp_path / "bad.jsonl").write_text(first + "\n" + line + "\n")
    with pytest.raises(ValueError, match=message):
        _dm(train=str(paths["train"]), val=str(tmp_path / "bad.jsonl"))


def test_match_labels(tmp_path):
    _, paths = _write(tmp_path, task="match")
    rec = json.loads(paths["train"].read_text().splitlines()[0])
    values = (True, 0, "match", "true", "False", "1")  # the strings as a CSV-to-JSONL tool writes them
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps({**rec, "label": v}) for v in values) + "\n")
    dm = _dm(task="match", train=str(tmp_path / "m.jsonl"), val=str(paths["val"]))
    assert [dm.datasets["train"][i]["label"] for i in range(6)] == [1, 0, 1, 1, 0, 1]
    (tmp_path / "m.jsonl").write_text(json.dumps({**rec, "label": "yes"}) + "\n")
    with pytest.raises(ValueError, match=r"m\.jsonl:1: match label 'yes' is not one of true/false, 1/0, match/mis"):
        _dm(task="match", train=str(tmp_path / "m.jsonl"), val=str(paths["val"]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(task="caption"), r"data.task 'caption' is not one of"),
        (dict(train="a.jsonl"), r"data.train \(a.jsonl\) and data.val \(None\) go together"),
        (dict(train="a.jsonl", val="b.jsonl"), r"JSONL file not found: a.jsonl"),
        (dict(on_bad_image="ignore"), r"data.on_bad_image 'ignore' is not one of"),
        (dict(batch_size=0), r"data.batch_size \(0\) must be >= 1"),
        (dict(tokenizer="bites"), r"data.tokenizer: unknown 'bites'.*did you mean 'bytes'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _dm(**kwargs)


def test_long_texts_are_cut(caplog):
    dm = _dm(max_len=12)
    assert max(len(t) for t in dm.datasets["train"].tokens) == 12
    assert "texts to data.max_len=12 tokens" in caplog.text


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    from PIL import Image

    gen, paths = _write(tmp_path)
    first = tmp_path / json.loads(paths["train"].read_text().splitlines()[0])["image"]
    ramp = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)  # a 16-bit grayscale PNG
    Image.fromarray(ramp).save(first)
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=gen.class_names)
    image = dm.datasets["train"][0]["image"]  # [3, 32, 32] in [-1, 1]
    assert image.min() == -1.0 and image.max() == 1.0
    assert (image[0] < 0).float().mean() > 0.4  # a ramp: about half below the midpoint, not all clipped to white


def test_augment_shifts_training_images_only_and_never_flips():
    dm = _dm(augment=True)
    train, val = dm.datasets["train"], dm.datasets["val"]
    assert train.shift == 3 and val.shift == 0  # 48 px: up to 48 // 16 px
    torch.manual_seed(0)
    plain = dm.datasets["train"].images[0]
    plain = torch.tensor(plain).permute(2, 0, 1).float() / 127.5 - 1.0
    views = [train[0]["image"] for _ in range(8)]
    assert any(not torch.equal(v, plain) for v in views)
    for v in views:  # a shifted copy: some offset (dy, dx) within +-3 matches the plain image on the overlap
        found = False
        for dy in range(-3, 4):
            for dx in range(-3, 4):
                a = v[:, max(0, -dy) : 48 - max(0, dy), max(0, -dx) : 48 - max(0, dx)]
                b = plain[:, max(0, dy) : 48 + min(0, dy), max(0, dx) : 48 + min(0, dx)]
                found |= torch.equal(a, b)
        assert found
    assert torch.equal(val[0]["image"], val[0]["image"])  # evaluation images are fixed
    features, _ = dm.baseline_features("train")  # the baseline sees the images unshifted
    np.testing.assert_array_equal(features["pixels"][0], plain.flatten().numpy())


def test_auto_values_follow_the_data(tmp_path):
    from attnzoo.data.modules import defaults

    dm = _dm(augment="auto")
    chosen = {k: v for k, (v, _) in dm.auto_values().items()}
    assert chosen["data.augment"] is False and dm.datasets["train"].shift == 0  # the embedded scenes
    assert chosen["trainer.max_epochs"] == defaults.EMBEDDED_SCENE_EPOCHS
    assert set(defaults.TEXT_IMAGE_KEYS) <= set(chosen)
    gen, paths = _write(tmp_path)
    files = _dm(
        augment="auto", train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=gen.class_names
    )
    chosen = {k: v for k, (v, _) in files.auto_values().items()}
    assert chosen["data.augment"] is True and files.datasets["train"].shift == 2
    small = defaults.text_image_run(embedded=False, num_train=1000, batch_size=64)  # 16 steps an epoch
    large = defaults.text_image_run(embedded=False, num_train=50000, batch_size=64)
    assert small["trainer.max_epochs"][0] > large["trainer.max_epochs"][0] >= 10
    assert small["run.early_stopping.patience"][0] >= large["run.early_stopping.patience"][0] >= 5


def test_learned_tokenizer_keeps_question_words_whole_and_is_saved_with_the_run(tmp_path):
    dm = TextImageDataModule(num_train=64, num_val=32, batch_size=16, tokenizer="bpe")
    assert dm.tokenizer is None  # learned in setup, from the train split only
    inputs = dm.model_inputs()  # sets up
    tok = dm.tokenizer
    assert inputs["vocab_size"] == tok.vocab_size < 300 and inputs["pad_id"] == tok.pad_id
    ids = tok.encode("how many circles are there?")
    assert len(ids) <= 6  # "how", "many", "circles", "are", "there", "?": a word is one token
    labels, saved = dm.save_artifacts(tmp_path)
    assert saved == tmp_path / "tokenizer.json" and labels == tmp_path / "labels.json"
    again = _dm(tokenizer=str(saved))  # what a command loading the run does
    again.setup()
    assert again.datasets["val"].tokens == dm.datasets["val"].tokens
    assert _dm().save_artifacts(tmp_path / "bytes") == [tmp_path / "bytes" / "labels.json"]  # no tokenizer to keep
    # a tokenizer file given: the run keeps a copy of it (it loaded only while the file stayed where it was)
    given = _dm(tokenizer=str(saved)).save_artifacts(tmp_path / "given")
    assert given == [tmp_path / "given" / "labels.json", tmp_path / "given" / "tokenizer.json"]
    assert given[1].read_text() == saved.read_text()


def test_other_data_numbers_its_answers_as_the_run_did(tmp_path):
    # evaluate rebuilt the answer order from the train.jsonl the config names: a file edited since (or other data
    # holding a subset of the answers) silently renumbered them
    gen, paths = _write(tmp_path)
    run = _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    (saved, *_) = run.save_artifacts(tmp_path / "run")
    assert json.loads(saved.read_text())["class_names"] == run.class_names
    lines = paths["train"].read_text().splitlines()
    first = json.loads(lines[0])["label"]
    subset = tmp_path / "subset.jsonl"
    subset.write_text("\n".join(line for line in lines if json.loads(line)["label"] == first) + "\n")
    other = _dm(train=str(subset), val=str(subset), classes=str(saved))  # what evaluate passes: data.classes
    assert other.class_names == run.class_names
    assert set(other.datasets["val"].labels) == {run.class_names.index(first)}
    with pytest.raises(ValueError, match=r"data.classes: no such file"):
        _dm(train=str(subset), val=str(subset), classes=str(tmp_path / "nope.json"))


@pytest.mark.parametrize("damage", ["cut_short", "bad_checksum"])
def test_an_image_that_cannot_be_decoded_is_found_when_checked(damage, tmp_path):
    # PIL's verify() passed a JPEG cut short (training then stopped mid-epoch) and raised SyntaxError for a PNG with a
    # bad chunk checksum (a traceback at setup, even with on_bad_image=skip)
    import io

    from PIL import Image

    from attnzoo.data.modules.text_image import _check_image

    rgb = (np.arange(64 * 64 * 3) % 251).astype(np.uint8).reshape(64, 64, 3)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG" if damage == "cut_short" else "PNG")
    data = bytearray(buf.getvalue())
    if damage == "cut_short":
        data = data[: len(data) * 6 // 10]
    else:
        at = data.index(b"IDAT") + 8
        data[at] ^= 0xFF
    path = tmp_path / ("x.jpg" if damage == "cut_short" else "x.png")
    path.write_bytes(bytes(data))
    assert _check_image(path).startswith("cannot be read")
    Image.fromarray(rgb).save(tmp_path / "fine.png")
    assert _check_image(tmp_path / "fine.png") is None


def test_an_image_several_records_share_is_checked_once(tmp_path, monkeypatch):
    # the check decodes every pixel now: VQA-style data asks many questions about one image
    from attnzoo.data.modules import text_image

    gen, paths = _write(tmp_path)
    lines = paths["train"].read_text().splitlines()
    first = json.loads(lines[0])
    paths["train"].write_text("\n".join([*lines, *(json.dumps({**first, "text": f"q{i}"}) for i in range(5))]) + "\n")
    calls = []  # every decode: the check's of an image read from disk, the keeping's of one kept in memory
    read, check = text_image.load_rgb, text_image.unreadable_images
    monkeypatch.setattr(text_image, "load_rgb", lambda path: calls.append(str(path)) or read(path))
    monkeypatch.setattr(text_image, "unreadable_images", lambda ps: calls.extend(map(str, ps)) or check(ps))
    _dm(train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=gen.class_names)
    assert len(calls) == len(set(calls)) and calls.count(str((paths["train"].parent / first["image"]).resolve())) == 1


def test_image_files_are_decoded_and_resized_once_not_on_every_access(tmp_path, monkeypatch, caplog):
    # each access decoded the file at full size: 4000 x 3000 photos made an epoch ~100x slower than 64 px ones
    from attnzoo.data.modules import text_image

    caplog.set_level(logging.INFO, logger="attnzoo")
    gen, paths = _write(tmp_path)
    reads = []
    real = text_image.load_rgb
    monkeypatch.setattr(text_image, "load_rgb", lambda path: reads.append(path) or real(path))
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), image_size=16, classes=gen.class_names)
    assert len(reads) == len(set(reads)) == 24  # 12 + 12 distinct files, at setup
    first = [dm.datasets["train"][i]["image"] for i in range(12)]
    second = [dm.datasets["train"][i]["image"] for i in range(12)]
    assert len(reads) == 24 and all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert first[0].shape == (3, 16, 16) and "24 image files decoded and resized to 16 px once" in caplog.text
    monkeypatch.setattr(text_image, "MEMORY_BYTES", 16 * 16 * 3 * 20)  # 20 fit: the other 4 are read on access
    reads.clear()
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), image_size=16, classes=gen.class_names)
    dm.datasets["val"][11]["image"]
    assert len(reads) == 21 and "; 4 others are read from disk each epoch" in caplog.text


def test_answers_are_stripped_as_text_classification_strips_its_labels(tmp_path):
    # "yes " was a class of its own beside "yes", in the classes collected and in the answers looked up
    _, paths = _write(tmp_path)
    rec = json.loads(paths["train"].read_text().splitlines()[0])
    labels = ["yes", "yes ", " no", "no\t", "red"]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({**rec, "label": y}) + "\n" for y in labels))
    (tmp_path / "v.jsonl").write_text(json.dumps({**rec, "label": " red "}) + "\n")
    dm = _dm(train=str(tmp_path / "t.jsonl"), val=str(tmp_path / "v.jsonl"))
    assert dm.class_names == ["no", "red", "yes"]
    assert [dm.datasets["train"][i]["label"] for i in range(5)] == [2, 2, 0, 0, 1]
    assert dm.datasets["val"][0]["label"] == 1
    other = _dm(train=str(tmp_path / "v.jsonl"), val=str(tmp_path / "t.jsonl"), classes=["no", "red", "yes"])
    assert [other.datasets["val"][i]["label"] for i in range(5)] == [2, 2, 0, 0, 1]  # as evaluate looks them up
    (tmp_path / "v.jsonl").write_text(json.dumps({**rec, "label": "  "}) + "\n")  # stripped, it would be a class ""
    with pytest.raises(ValueError, match=r"v\.jsonl:1: empty label '  '"):
        _dm(train=str(tmp_path / "t.jsonl"), val=str(tmp_path / "v.jsonl"))


def test_classes_the_data_fixes_refuse_a_list_of_others_and_take_their_own(tmp_path):
    """data.classes=[foo,bar] with the embedded scenes (or data.task=match) was ignored, and config.yaml kept it."""
    with pytest.raises(ValueError, match=r"data.classes \['foo', 'bar'\] are not the embedded scenes' answers"):
        _dm(classes=["foo", "bar"])
    own = _dm().class_names
    assert _dm(classes=own).class_names == own  # evaluate passes the run's labels.json
    _, paths = _write(tmp_path, "match")
    with pytest.raises(ValueError, match=r"are not the answers of data.task=match, \['mismatch', 'match'\]"):
        _dm(task="match", train=str(paths["train"]), val=str(paths["val"]), image_size=32, classes=["yes", "no"])


def test_jsonl_labels_written_several_ways_are_one_class_refused_or_named(tmp_path, caplog):
    # JSON true and "true" were the classes "True" and "true", 1 and 1.0 "1" and "1.0", and "Red" and "red" two
    # classes: all silently (labels.json ["1", "1.0", "Red", "True", ...]); now 1 and 1.0 are refused, the others
    # named
    import json

    _, paths = _write(tmp_path)
    lines = {split: [json.loads(line) for line in paths[split].read_text().splitlines()] for split in paths}

    def rewrite(*labels):  # train cycles through `labels`, val answers the first
        for split, records in lines.items():
            for i, rec in enumerate(records):
                rec["label"] = labels[i % len(labels)] if split == "train" else labels[0]
            paths[split].write_text("".join(json.dumps(rec) + "\n" for rec in records))

    def data():
        return TextImageDataModule(train=str(paths["train"]), val=str(paths["val"]), image_size=32, batch_size=4)

    rewrite(True, "true")  # JSON true is the class "True" (as runs trained on it have it): named beside "true"
    with caplog.at_level("WARNING", logger="attnzoo"):
        data().setup("fit")
    assert "differ only in case, each a class of its own: 'True' (line 1) and 'true' (line 2)" in caplog.text
    caplog.clear()
    rewrite(1, 1.0)
    with pytest.raises(ValueError, match=r"train.jsonl: label writes one number in several ways.*'1' \(line 1\) and "
                                         r"'1.0' \(line 2\)"):  # fmt: skip
        data().setup("fit")
    rewrite("Red", "red", "red")
    with caplog.at_level("WARNING", logger="attnzoo"):
        data().setup("fit")
    assert "labels that differ only in case, each a class of its own: 'Red' (line 1) and 'red' (line 2)" in caplog.text


def test_each_jsonl_image_kept_in_memory_is_decoded_once(tmp_path, monkeypatch):
    # checked (decoded), then decoded again to resize and keep: a third of setup's time on photos
    import attnzoo.data.modules.text_image as module

    gen, paths = _write(tmp_path)
    opened = []
    monkeypatch.setattr(module, "load_rgb", lambda path, real=module.load_rgb: opened.append(path) or real(path))
    monkeypatch.setattr(
        module, "unreadable_images", lambda ps, real=module.unreadable_images: opened.extend(ps) or real(ps)
    )
    dm = _dm(train=str(paths["train"]), val=str(paths["val"]), classes=gen.class_names)
    images = {
        str((tmp_path / json.loads(line)["image"]).resolve())
        for p in paths.values()
        for line in p.read_text().splitlines()
    }
    assert sorted(opened) == sorted(images) and len(dm.datasets["train"]) == 12
