"""Cross-attention map drawing: word spans over byte tokens, PNG output, shape errors."""

import pytest
import torch
from PIL import Image

from attnzoo.data.modules.text_image import TextImageDataModule
from attnzoo.drawing.cross_attention import draw_cross_attention, text_image_maps, word_spans
from attnzoo.models.text_image import TextImageNet


def test_word_spans_follow_utf8_bytes():
    assert word_spans("is there a red cube?", 20) == [
        ("is", 0, 2),
        ("there", 3, 8),
        ("a", 9, 10),
        ("red", 11, 14),
        ("cube?", 15, 20),
    ]
    assert word_spans("déjà vu", 8) == [("déjà", 0, 6)]  # "vu" (bytes 7-8) ends past 8 tokens
    assert word_spans("a  b", 4) == [("a", 0, 1), ("b", 3, 4)]


def test_text_image_maps_writes_one_png_per_example(tmp_path):
    dm = TextImageDataModule(num_train=8, num_val=8, batch_size=4, image_size=32)
    dm.setup("fit")
    net = TextImageNet(**{**dm.model_inputs(), "patch_size": 8, "image_dim": 32, "text_dim": 32, "fusion_depth": 2})
    batch = next(iter(dm.val_dataloader()))
    paths = text_image_maps(net, batch, dm.datasets["val"].texts[:4], tmp_path, class_names=dm.class_names, count=2)
    assert [p.name for p in paths] == ["cross_attention_000.png", "cross_attention_001.png"]
    with Image.open(paths[0]) as img:
        width, height = img.size
    assert width > 300 and height > 300  # 3 columns (image + 2 layers), a row per word


def test_draw_rejects_maps_of_the_wrong_shape(tmp_path):
    image = torch.zeros(3, 16, 16)
    with pytest.raises(ValueError, match=r"maps\[0\] has shape \(2, 5, 9\); expected \[H, L>=5, N=16\]"):
        draw_cross_attention(image, "hello", [torch.rand(2, 5, 9)], grid_size=(4, 4), path=tmp_path / "x.png")
    with pytest.raises(ValueError, match="maps is empty"):
        draw_cross_attention(image, "hello", [], grid_size=(4, 4), path=tmp_path / "x.png")


def test_an_empty_text_draws_the_image_without_a_nan_column(tmp_path, monkeypatch):
    # the "all tokens" column of a text with no token averaged nothing: a heat map of NaN, labelled "max nan"
    from attnzoo.drawing import cross_attention

    figures = []
    monkeypatch.setattr(cross_attention, "save_figure", lambda fig, path, title: figures.append(fig) or path)
    maps = [torch.rand(2, 4, 16)]
    draw_cross_attention(torch.zeros(3, 16, 16), "", maps, grid_size=(4, 4), path=tmp_path / "x.png", length=0)
    draw_cross_attention(torch.zeros(3, 16, 16), "red", maps, grid_size=(4, 4), path=tmp_path / "y.png")
    labels = [[ax.get_xlabel() for ax in fig.axes] for fig in figures]
    assert len(labels[0]) == 1 and "no tokens" in figures[0].axes[0].get_title()
    assert len(labels[1]) == 3 and not any("nan" in label for label in labels[1])


def test_offset_spans_find_the_tokens_of_each_word():
    from attnzoo.drawing.cross_attention import offset_spans

    text = "how many circles are there?"
    offsets = [(0, 3), (4, 8), (9, 15), (15, 16), (17, 20), (21, 26), (26, 27)]  # "circle" + "s", "there" + "?"
    assert offset_spans(text, offsets) == [
        ("how", 0, 1), ("many", 1, 2), ("circles", 2, 4), ("are", 4, 5), ("there?", 5, 7)
    ]  # fmt: skip


def test_a_question_longer_than_max_len_of_byte_tokens_draws_the_bytes_the_model_read(tmp_path):
    """With byte tokens the drawn length was the text's bytes, not the tokens kept (data.max_len): a shape error."""
    dm = TextImageDataModule(num_train=8, num_val=8, batch_size=4, image_size=32, tokenizer="bytes", max_len=6)
    dm.setup("fit")
    net = TextImageNet(**{**dm.model_inputs(), "patch_size": 8, "image_dim": 32, "text_dim": 32, "fusion_depth": 1})
    batch = next(iter(dm.val_dataloader()))
    texts = dm.datasets["val"].texts[:4]
    assert len(texts[0].encode()) > 6 and batch["tokens"].shape[1] == 6
    paths = text_image_maps(net, batch, texts, tmp_path, class_names=dm.class_names, count=1)
    assert [p.name for p in paths] == ["cross_attention_000.png"]
