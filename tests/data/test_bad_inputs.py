"""Bad inputs give an error naming the file/key/value (never a traceback from deep inside a worker).

Covers image folders (corrupt, truncated, unusual modes), WAV files, text files, config values, pattern windows
and checkpoints of another shape. Each case counts as one "input tried" in the reliability report.
"""

import io
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from attnzoo.attention.patterns import DilatedSlidingWindow, SlidingWindow
from attnzoo.config import ConfigError, load
from attnzoo.data.formats.audio_io import AudioFileError, probe_wav, read_wav
from attnzoo.data.formats.image_io import ImageFileError, load_rgb
from attnzoo.data.formats.text_files import read_text_file
from attnzoo.data.modules.image import ImageDataModule
from attnzoo.data.modules.text import TextDataModule
from attnzoo.run.checkpoint_io import check_checkpoint_shapes
from tests.helpers import VIT


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG" if img.mode != "CMYK" else "JPEG")
    return buf.getvalue()


def _folder(root, bad_name=None, bad_bytes=b""):
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), color=(60 * i, 20, 90)).save(root / c / f"{i}.png")
    if bad_name:
        (root / "a" / bad_name).write_bytes(bad_bytes)


def test_a_corrupt_image_in_a_folder_is_named_at_setup(tmp_path):
    _folder(tmp_path, "broken.png", b"not an image at all")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5)
    with pytest.raises(ValueError, match=r"1 unreadable image file\(s\): .*broken\.png"):
        data.setup()


def test_a_float_image_with_nan_pixels_is_named_at_setup_or_skipped(tmp_path):
    # scaled to 8 bits, one NaN pixel made the whole image black, with only numpy's "invalid value in cast" warning
    from attnzoo.data.formats.image_io import load_rgb

    _folder(tmp_path)
    values = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    values[0, 0] = np.nan
    Image.fromarray(values, mode="F").save(tmp_path / "a" / "nan.tif")
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5)
    with pytest.raises(ImageFileError, match=r"nan\.tif \(1 of 64 pixels are NaN or infinite\)"):
        data.setup()
    with pytest.raises(ImageFileError, match=r"nan\.tif: 1 of 64 pixels are NaN or infinite"):
        load_rgb(str(tmp_path / "a" / "nan.tif"))
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5, on_bad_image="skip")
    data.setup()
    assert data.skipped == [str(tmp_path / "a" / "nan.tif")]
    values[0, 0] = 0.5  # the same image without it reads, scaled by its type's range
    Image.fromarray(values, mode="F").save(tmp_path / "a" / "nan.tif")
    assert np.asarray(load_rgb(str(tmp_path / "a" / "nan.tif")))[0, 0, 0] == 128


def test_a_truncated_image_is_named_at_setup_or_skipped(tmp_path, caplog):
    whole = _png(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    _folder(tmp_path, "cut.png", whole[: len(whole) // 2])  # the header is intact: only decoding finds it
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5, shuffle=False)
    with pytest.raises(ImageFileError, match=r"cut\.png \(OSError: image file is truncated.*on_bad_image=skip"):
        data.setup()  # before training, not mid-epoch
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5, on_bad_image="skip")
    with caplog.at_level("WARNING", logger="attnzoo"):
        data.setup()
    assert data.skipped == [str(tmp_path / "a" / "cut.png")] and "skipped 1 unreadable image" in caplog.text
    assert len(data.splits["train"]) + len(data.splits["val"]) == 6  # the 6 whole images, all readable
    for split in ("train", "val"):
        for i in range(len(data.splits[split])):
            data.splits[split][i]


def _palette() -> Image.Image:
    img = Image.new("P", (6, 4), 0)
    img.putpalette([128, 128, 128] * 256)
    return img


MODES = {
    "L": Image.new("L", (6, 4), 128),
    "LA": Image.new("LA", (6, 4), (128, 10)),
    "RGBA": Image.new("RGBA", (6, 4), (128, 128, 128, 0)),
    "P": _palette(),
    "CMYK": Image.new("CMYK", (6, 4), (0, 0, 0, 127)),
    "I;16": Image.fromarray(np.full((4, 6), 32896, dtype=np.uint16)),  # 128/255 of the 16-bit range
    "I": Image.fromarray(np.full((4, 6), 32896, dtype=np.int32)),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_unusual_image_modes_read_as_8bit_rgb_at_their_brightness(mode, tmp_path):
    path = tmp_path / f"x.{ {'CMYK': 'jpg', 'I': 'tif'}.get(mode, 'png') }"
    MODES[mode].save(path)
    img = load_rgb(str(path))
    assert img.mode == "RGB" and img.size == (6, 4)
    assert np.abs(np.asarray(img).astype(int) - 128).max() <= 3, np.asarray(img)[0, 0]  # not clipped to white


@pytest.mark.parametrize("suffix", ["pgm", "tif", "png"])
def test_a_dark_16_bit_image_is_scaled_by_its_type_not_by_its_brightest_pixel(suffix, tmp_path):
    # a 16-bit PGM opens as mode "I": whose pixels all stayed at or below 255 was scaled as 8 bits, 257 times brighter
    # than the same file as PNG (and than a PGM of the same folder with one brighter pixel)
    dark = np.full((4, 6), 200, dtype=np.uint16)  # 200 / 65535: black
    Image.fromarray(dark).save(tmp_path / f"dark.{suffix}")
    assert np.asarray(load_rgb(str(tmp_path / f"dark.{suffix}"))).max() <= 1


def test_float_images_in_0_255_are_scaled_by_255_not_by_their_own_maximum(tmp_path):
    Image.fromarray(np.full((4, 6), 64.0, dtype=np.float32)).save(tmp_path / "f.tif")
    assert abs(int(np.asarray(load_rgb(str(tmp_path / "f.tif"))).mean()) - 64) <= 1  # was 255: stretched to white


WAV_HEADER = (
    b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00"
)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "not a RIFF/WAVE file"),
        (b"garbage bytes, no header", "not a RIFF/WAVE file"),
        (WAV_HEADER + b"data\x00\x08\x00\x00" + b"\x00" * 100, "x.wav"),  # data chunk cut short
        (WAV_HEADER[:30], "x.wav"),  # header cut short
        (b"RIFF\x00\x00\x00\x00WAVEjunk", "x.wav: cannot read as WAV"),  # no chunks: scipy's UnboundLocalError
    ],
    ids=["empty", "garbage", "truncated_data", "truncated_header", "no_chunks"],
)
def test_bad_wav_files_are_named(content, match, tmp_path):
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(AudioFileError, match=match):
        read_wav(tmp_path / "x.wav")


def _wav(*, tag=1, channels=1, rate=16000, block_align=2, bits=16, samples=None) -> bytes:
    """A WAV file with these fmt chunk values (the byte rate agrees with them, as scipy checks) and samples (default:
    100 bytes of zeros)."""
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block_align, block_align, bits)
    payload = b"\x00" * 100 if samples is None else samples.tobytes()
    body = b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("reader", [read_wav, probe_wav], ids=["read", "probe"])
@pytest.mark.parametrize(
    "fields, match",
    [  # scipy divided by 0 (channels, the bytes of a sample), had no dtype (9 bytes), or read a 0 rate / 0 bits
        ({"channels": 0}, r"gives channels 0; channels, sample rate and bits per sample must each be >= 1"),
        ({"rate": 0}, r"gives sample rate 0;"),
        ({"bits": 0}, r"gives bits 0;"),
        ({"block_align": 0}, r"gives block align 0 for 1 channel\(s\);.* must be 1 to 8"),
        ({"channels": 2, "block_align": 1}, r"gives block align 1 for 2 channel\(s\)"),
        ({"block_align": 9}, r"gives block align 9 for 1 channel\(s\)"),
    ],
    ids=["channels_0", "rate_0", "bits_0", "block_align_0", "block_align_under_channels", "sample_of_9_bytes"],
)
def test_wav_fmt_values_that_leave_no_sample_are_named(fields, match, reader, tmp_path):
    (tmp_path / "x.wav").write_bytes(_wav(**fields))
    with pytest.raises(AudioFileError, match=r"x\.wav: cannot read as WAV \(its fmt chunk " + match):
        reader(tmp_path / "x.wav")


@pytest.mark.parametrize("reader", [read_wav, probe_wav], ids=["read", "probe"])
def test_a_compressed_wav_is_named_by_its_format_not_by_its_header_fields(reader, tmp_path):
    """An IMA ADPCM file (block align 256, 4 bits) was refused for its sample size, not for its format."""
    (tmp_path / "x.wav").write_bytes(_wav(tag=0x11, block_align=256, bits=4))
    with pytest.raises(AudioFileError, match=r"x\.wav: cannot read as WAV .*Unknown wave file format"):
        reader(tmp_path / "x.wav")


@pytest.mark.parametrize("reader", [read_wav, probe_wav], ids=["read", "probe"])
@pytest.mark.parametrize(
    "samples",
    [np.array([0.1, np.nan], "<f4"), np.array([0.1, -np.inf], "<f4"), np.array([0.1, 1e300], "<f8")],
    ids=["nan", "inf", "float64_beyond_float32"],
)
def test_non_finite_float_samples_are_named_when_probed_and_when_read(samples, reader, tmp_path):
    size = samples.dtype.itemsize
    (tmp_path / "x.wav").write_bytes(_wav(tag=3, block_align=size, bits=8 * size, samples=samples))
    with pytest.raises(AudioFileError, match=r"x\.wav: WAV file holds NaN or infinite samples"):
        reader(tmp_path / "x.wav")


@pytest.mark.parametrize(
    "content, match",
    [
        ("text,label\nhello,pos\n   ,neg\n", "line 3: empty text in column 'text'"),
        ("text,label\nhello,pos\nbye,\n", "line 3: empty label in column 'label'"),
        ("text\nhello\n", "label"),  # no label column at all
        ("text,label\n", "no examples"),
        ("text,label,text\nhello,pos,ZZZ\n", r"column\(s\) \['text'\] more than once"),  # the last one was read
        ('{"text": "hi", "label": "pos"}\n{"text": "a", "text": "b", "label": "neg"}\n', r"line 2: .*'text'\] appear"),
        ('{"text": 12345, "label": "pos"}\n', "line 1: the text in column 'text' is not a string: 12345"),
        ('{"text": "hi", "label": [1, 2]}\n', r"line 1: the label in column 'label' is not one value: \[1, 2\]"),
    ],
    ids=[
        "empty_text",
        "empty_label",
        "missing_label_column",
        "no_rows",
        "two_columns_named_alike",
        "jsonl_key_twice",
        "jsonl_number_as_text",
        "jsonl_list_as_label",
    ],
)
def test_bad_text_files_are_named(content, match, tmp_path):
    path = tmp_path / ("t.jsonl" if content.startswith("{") else "t.csv")
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        read_text_file(path, text_column="text", label_column="label")


def test_repeated_names_of_columns_the_reader_does_not_use_are_fine(tmp_path):
    # a spreadsheet export's empty trailing columns, an unused column twice, a nested object's repeated key
    (tmp_path / "t.csv").write_text("text,label,,,note,note\nhello,pos,,,a,b\n")
    assert read_text_file(tmp_path / "t.csv", text_column="text", label_column="label") == (["hello"], ["pos"])
    (tmp_path / "t.jsonl").write_text('{"text": "hi", "label": "pos", "meta": {"a": 1, "a": 2}, "x": 1, "x": 2}\n')
    assert read_text_file(tmp_path / "t.jsonl", text_column="text", label_column="label") == (["hi"], ["pos"])


def test_a_text_longer_than_the_csv_modules_field_limit_is_read(tmp_path):
    long = "word " * 40_000  # 200,000 characters: past csv's default limit of 131,072
    (tmp_path / "t.csv").write_text(f'text,label\n"{long}",pos\nshort,neg\n')
    texts, labels = read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")
    assert texts[0].split() == long.split() and labels == ["pos", "neg"]


@pytest.mark.parametrize(
    "override, match",
    [
        ("data.batch_size=many", "data.batch_size"),
        ("model.depth=1.5", "model.depth"),
        ("trainer.max_epochs=[1]", r"trainer.max_epochs: \[1\] is not a valid int"),
    ],
)
def test_config_values_of_the_wrong_type(override, match):
    with pytest.raises(ConfigError, match=match):
        load([VIT], [override])


@pytest.mark.parametrize(
    ("override", "match"),
    [  # a traceback from numpy's seeding, torch.set_num_threads, or OmegaConf after validation passed them
        ("seed=-1", r"seed: -1 is not an int from 0 to 2\*\*32 - 1"),
        ("seed=4294967296", r"seed: 4294967296 is not an int from 0"),
        ("trainer.num_threads=0", r"trainer.num_threads: 0 .*a number of threads >= 1"),  # 0 was ignored
        ("trainer.num_threads=-1", r"trainer.num_threads: -1"),
        ("run.name=${foo}", r"run.name: Interpolation key 'foo' not found \(set in the command line"),
    ],
)
def test_values_that_failed_after_validation_are_config_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        load([VIT], [override])


@pytest.mark.parametrize("make", [lambda: SlidingWindow(window=-1), lambda: DilatedSlidingWindow(window=-3)])
def test_negative_windows(make):
    with pytest.raises(ValueError, match="window"):
        make()


def test_a_window_longer_than_the_sequence_is_full_attention():
    # decided: legal (a recipe's window outliving a short input is normal), it degenerates to dense attention
    assert SlidingWindow(window=50).dense_mask(7, 7).all()


def test_a_checkpoint_of_another_shape_names_the_keys(tmp_path):
    small, big = torch.nn.Linear(4, 3), torch.nn.Sequential(torch.nn.Linear(4, 5))
    torch.save({"state_dict": small.state_dict()}, tmp_path / "c.ckpt")
    with pytest.raises(ValueError, match=r"missing from the checkpoint: \['0.bias', '0.weight'\]"):
        check_checkpoint_shapes(tmp_path / "c.ckpt", big)
    with pytest.raises(ValueError, match=r"weight \[3, 4\] in the checkpoint vs \[5, 4\] here"):
        check_checkpoint_shapes(tmp_path / "c.ckpt", torch.nn.Linear(4, 5))
    check_checkpoint_shapes(tmp_path / "c.ckpt", torch.nn.Linear(4, 3))  # the same shape passes
    (tmp_path / "bad.ckpt").write_bytes(b"not a zip archive")
    with pytest.raises(ValueError, match="bad.ckpt' is not a checkpoint: it is not a PyTorch checkpoint file"):
        check_checkpoint_shapes(tmp_path / "bad.ckpt", small)
    # a checkpoint cut short (a copy that did not finish) was "not a PyTorch checkpoint file"
    whole = (tmp_path / "c.ckpt").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match="cut.ckpt' is not a checkpoint: the file is cut short or damaged"):
        check_checkpoint_shapes(tmp_path / "cut.ckpt", small)


@pytest.mark.parametrize(
    "override, match",
    [
        ("model.num_heads=0", r"model.num_heads: 0 \(set in the command line .*\) must be >= 1"),
        (
            "model.num_heads=5",
            r"model.embed_dim \(64, set in .*vit.yaml\) is not divisible by model.num_heads \(5, set",
        ),
        ("model.embed_dim=0", r"model.embed_dim: 0 .* must be >= 1"),
        ("task.optimizer.lr=-1", r"task.optimizer.lr: -1 must be >= 0"),
        ("task.optimizer.betas=[0.9,1.5]", r"task.optimizer: .*Invalid beta parameter"),
        ("task.optimizer.betas=[0.9]", r"task.optimizer.betas: \[0.9\]; expected two numbers"),
        ("task.optimizer.weight_decay=-1", r"task.optimizer.weight_decay: -1 must be >= 0"),
        ("model.patch_size=0", r"model.patch_size: 0 .* must be > 0"),
        ("model.mlp_ratio=0", r"model.mlp_ratio: 0 .* must be > 0"),
        ("model.drop_path_rate=2.0", r"model.drop_path_rate: 2.0 .* give a value in \[0, 1\)"),
        ("trainer.gradient_clip_val=-1", r"trainer.gradient_clip_val: -1 .* must be >= 0"),
        ("trainer.accumulate_grad_batches=0", r"trainer.accumulate_grad_batches: 0 .* must be >= 1"),
        ("trainer.check_val_every_n_epoch=0", r"trainer.check_val_every_n_epoch: 0 .* must be >= 1"),
        ("run.save_every_n_steps=-1", r"run.save_every_n_steps: -1 .* must be >= 1"),
        ("task.optimizer=null", r"task.optimizer: None .* is not an optimizer; give a mapping such as \{kind: adamw"),
        ("task.scheduler.warmup=-1", r"task.scheduler \(cosine\): warmup \(-1\) must be >= 0"),
        ("trainer.max_epochs=0", r"trainer.max_epochs: 0 .* trains nothing"),
        ("trainer.max_steps=0", r"trainer.max_steps: 0 .* trains nothing"),
        ("trainer.limit_train_batches=0", r"trainer.limit_train_batches: 0 .* trains nothing"),
        ("model.attention.pattern={kind: slidng_window, window: 4}", r"pattern.kind: unknown 'slidng_window'.*did you"),
        (
            "model.attention.pattern={kind: sliding_window, windw: 4}",
            r"takes no argument 'windw'.*did you mean 'window'",
        ),
        (
            "model.attention.pattern={kind: sliding_window, window: -4}",
            r"pattern \(sliding_window\): window \(-4\) must be",
        ),
        ("model.attention.bias={kind: alibi, bidirectionl: true}", r"bias: 'alibi' takes no argument 'bidirectionl'"),
    ],
)
def test_config_values_that_would_fail_in_training_stop_at_load_naming_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load([VIT], [override])


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: 0\ndata:\n  kind: image\n   batch_size: 3\n")
    with pytest.raises(ConfigError) as err:
        load([path])
    message = str(err.value)
    assert message.startswith(f"{path}, line 4, column 14: YAML syntax error: mapping values are not allowed")
    assert "\n" not in message and "batch_size: 3" in message and len(message) < 300
    path.write_text("data: {kind: image\n")
    with pytest.raises(ConfigError, match=r"line 2, column 1: .*while parsing a flow mapping at line 1"):
        load([path])


@pytest.mark.parametrize(
    "name, content, where",
    [
        ("t.csv", b"text,label\nhello,pos\ncaf\xe9 au lait,neg\n", "line 3, column 4"),
        ("t.jsonl", b'{"text": "hello", "label": "pos"}\n{"text": "caf\xe9", "label": "neg"}\n', "line 2, column 14"),
    ],
)
def test_non_utf8_bytes_in_a_text_file_name_the_file_line_and_column(name, content, where, tmp_path):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=rf"{name} {where}: byte\(s\) e9 are not UTF-8"):
        read_text_file(tmp_path / name, text_column="text", label_column="label")


def test_a_jsonl_of_image_text_pairs_with_non_utf8_bytes_is_named(tmp_path):
    from attnzoo.data.modules.text_image import TextImageDataModule

    path = tmp_path / "train.jsonl"
    path.write_bytes(b'{"image": "a.png", "text": "r\xf6d", "label": "x"}\n')
    data = TextImageDataModule(train=str(path), val=str(path))
    with pytest.raises(ValueError, match=r"train.jsonl line 1, column 30: byte\(s\) f6 are not UTF-8"):
        data.setup()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ImageDataModule(img_size=0), r"data.img_size \(0\) must be >= 1"),
        (lambda: ImageDataModule(eval_batch_size=0), r"data.eval_batch_size \(0\) must be >= 1"),  # was: batch_size
        (lambda: TextDataModule(listops={"num_train": 0}), r"data.listops.num_train \(0\) must be an int >= 1"),
        (lambda: TextDataModule(listops={"num_val": 0}), r"data.listops.num_val \(0\) must be an int >= 1"),
    ],
)
def test_data_sizes_that_failed_deep_in_a_loader_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_pretrained_file_that_is_not_a_checkpoint_is_named(tmp_path):
    from attnzoo.pretrained import convert

    (tmp_path / "vit.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"'.*vit.pth' is not a readable checkpoint \(UnpicklingError"):
        convert(tmp_path / "vit.pth")


def test_a_pickled_model_and_a_dict_without_tensors_are_named_as_such(tmp_path):
    # a whole pickled model gave torch's weights_only text with its terminal colour codes, cut at its first line;
    # a dict of other things "holds no state dict of tensors" without its keys
    from attnzoo.pretrained.converted import read_weights

    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pth")
    whole = r"other than tensors \(torch.nn.modules.linear.Linear: .*state_dict\(\)"
    with pytest.raises(ValueError, match=whole) as err:
        read_weights(tmp_path / "model.pth")
    assert "\x1b" not in str(err.value)
    torch.save({"epoch": 3, "optimizer": {"lr": 0.1}}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match=r"its keys: \['epoch', 'optimizer'\].*under 'state_dict' or 'model'"):
        read_weights(tmp_path / "other.pth")
    torch.save({"model": torch.nn.Linear(2, 2).state_dict()}, tmp_path / "deit.pth")  # DeiT's checkpoints
    assert sorted(read_weights(tmp_path / "deit.pth")) == ["bias", "weight"]


def test_text_labels_that_differ_only_in_case_are_named(tmp_path, caplog):
    from attnzoo.data.formats.text_files import read_text_file

    (tmp_path / "t.csv").write_text("text,label\nfirst text,Sports\nsecond text,sports\nthird,news\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")
    assert "column 'label' has labels that differ only in case, each a class of its own: 'Sports' (line 2) and " \
           "'sports' (line 3)" in caplog.text  # fmt: skip


def test_labels_that_mark_a_missing_value_are_named(tmp_path, caplog):
    # pandas' NaN written out as "nan", a spreadsheet's NA: each became a class of its own without a word
    from attnzoo.data.formats.text_files import read_text_file

    (tmp_path / "t.csv").write_text("text,label\na,sports\nb,NA\nc,news\nd,nan\ne,NA\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        _, labels = read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")
    assert labels.count("NA") == 2  # still read: "NA" may be a class of the user's (North America)
    assert "column 'label' has the label(s) 'NA' (line 3) and 'nan' (line 5), which spreadsheets and pandas write " \
           "for a missing value" in caplog.text  # fmt: skip


def test_labels_that_differ_in_how_an_accent_is_encoded_are_named(tmp_path, caplog):
    from attnzoo.data.formats.text_files import read_text_file

    (tmp_path / "t.csv").write_text("text,label\nfirst text,caf\u00e9\nsecond text,cafe\u0301\nthird,neg\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")
    assert "differ only in case, each a class of its own: 'caf\u00e9' (line 2) and 'cafe\u0301' (line 3)" in caplog.text
    assert "differ in how an accent is encoded: Unicode NFC and NFD" in caplog.text


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_a_header_row_repeated_inside_a_file_is_named_not_read_as_a_class(tmp_path, bom):
    from attnzoo.data.formats.text_files import read_text_file

    (tmp_path / "t.csv").write_text(f"text,label\na,pos\nb,neg\n{bom}text,label\nc,pos\n")
    with pytest.raises(ValueError, match=r"t\.csv line 4: the header again \(text, label\), which would be read"):
        read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")
