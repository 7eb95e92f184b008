"""Bad inputs give an error naming the file/key/value (never a traceback from deep inside a worker).

Covers image folders (corrupt, truncated, unusual modes), WAV files, text files, config values, pattern windows
and checkpoints of another shape. Each case counts as one "input tried" in the reliability report.
"""

import io

import numpy as np
import pytest
import torch
from PIL import Image

from attnzoo.attention.patterns import DilatedSlidingWindow, SlidingWindow
from attnzoo.config import ConfigError, load
from attnzoo.data.audio_io import AudioFileError, read_wav
from attnzoo.data.image import ImageDataModule
from attnzoo.data.image_io import ImageFileError, load_rgb
from attnzoo.data.text_files import read_text_file
from attnzoo.run.reliability import check_checkpoint_shapes
from tests.run.test_reliability import VIT


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


def test_a_truncated_image_is_named_when_read(tmp_path):
    whole = _png(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    _folder(tmp_path, "cut.png", whole[: len(whole) // 2])
    data = ImageDataModule(dataset="folder", root=str(tmp_path), img_size=8, val_fraction=0.5, shuffle=False)
    data.setup()  # the header is intact: found when its pixels are read
    with pytest.raises(ImageFileError, match=r"cut\.png: truncated or corrupt image"):
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
    ],
    ids=["empty", "garbage", "truncated_data", "truncated_header"],
)
def test_bad_wav_files_are_named(content, match, tmp_path):
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(AudioFileError, match=match):
        read_wav(tmp_path / "x.wav")


@pytest.mark.parametrize(
    "content, match",
    [
        ("text,label\nhello,pos\n   ,neg\n", "line 3: empty text in column 'text'"),
        ("text,label\nhello,pos\nbye,\n", "line 3: empty label in column 'label'"),
        ("text\nhello\n", "label"),  # no label column at all
        ("text,label\n", "no examples"),
    ],
    ids=["empty_text", "empty_label", "missing_label_column", "no_rows"],
)
def test_bad_text_files_are_named(content, match, tmp_path):
    (tmp_path / "t.csv").write_text(content)
    with pytest.raises(ValueError, match=match):
        read_text_file(tmp_path / "t.csv", text_column="text", label_column="label")


@pytest.mark.parametrize(
    "override, match",
    [("data.batch_size=many", "data.batch_size"), ("model.depth=1.5", "model.depth"), ("trainer.max_epochs=[1]", "")],
)
def test_config_values_of_the_wrong_type(override, match):
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
    (tmp_path / "bad.ckpt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="cannot be read"):
        check_checkpoint_shapes(tmp_path / "bad.ckpt", small)
