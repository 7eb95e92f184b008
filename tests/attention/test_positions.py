"""Absolute encodings (the paper's sinusoid, 2D sin-cos, learned tables and their resampling) and running a
ViT with 2D position modules at another grid size."""

import math

import pytest
import torch

from attnzoo.attention.factory import attention_layer
from attnzoo.attention.positions import POSITIONS, Learned, SinCos2D, Sinusoidal, set_grid_size, sinusoidal
from attnzoo.attention.specs import build


@pytest.mark.parametrize("name", list(POSITIONS))
@pytest.mark.parametrize("grid, prefix", [((3, 5), 1), ((4, 4), 0)])
def test_every_encoding_builds_from_context_and_keeps_shape(name, grid, prefix):
    module = build(name, POSITIONS, f"positions {name}", dim=32, grid_size=grid, num_prefix_tokens=prefix)
    x = torch.randn(2, prefix + grid[0] * grid[1], 32)
    out = (module or torch.nn.Identity())(x)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_sinusoidal_is_the_papers_formula():
    pe = sinusoidal(50, 16)
    for pos, i in [(0, 0), (1, 0), (7, 3), (49, 7), (13, 5)]:
        angle = pos / 10000 ** (2 * i / 16)
        assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    x = torch.zeros(1, 9, 16)
    torch.testing.assert_close(Sinusoidal(dim=16)(x)[0], pe[:9])


def test_sincos_2d_zeros_prefix_and_encodes_rows_and_columns():
    enc = SinCos2D(dim=16, grid_size=(2, 3), num_prefix_tokens=1).encoding()
    assert enc.shape == (7, 16) and (enc[0] == 0).all()
    grid = enc[1:].view(2, 3, 16)
    assert not torch.equal(grid[0, 0], grid[1, 0]) and not torch.equal(grid[0, 0], grid[0, 1])
    # two tokens in the same row share the row channels, and in the same column the column channels
    same_row = (grid[0, 0] == grid[0, 2]).nonzero().flatten().tolist()
    same_col = (grid[0, 1] == grid[1, 1]).nonzero().flatten().tolist()
    assert same_row and same_col and not set(same_row) & set(same_col)


def test_learned_1d_serves_shorter_sequences_and_refuses_longer():
    pos = Learned(dim=8, max_len=10)
    x = torch.zeros(2, 6, 8)
    torch.testing.assert_close(pos(x), pos.table[:, :6].expand(2, 6, 8))
    with pytest.raises(ValueError, match="12 tokens exceed max_len 10"):
        pos(torch.zeros(1, 12, 8))


def test_learned_grid_resamples_in_forward_and_on_load():
    pos = Learned(dim=8, grid_size=(4, 4), num_prefix_tokens=1)
    x = torch.zeros(1, 17, 8)
    before = pos(x)
    pos.set_grid_size((6, 5))
    wider = pos(torch.zeros(1, 31, 8))
    assert wider.shape == (1, 31, 8) and torch.equal(wider[:, 0], before[:, 0])  # prefix row kept
    wider.sum().backward()
    assert pos.table.grad.abs().sum() > 0  # fine-tuning at the new grid trains the original table
    pos.set_grid_size((4, 4))
    assert torch.equal(pos(x), before)
    # a checkpoint of another grid loads into a model built for a new one: square (ViT) or same rows (AST)
    Learned(dim=8, grid_size=(6, 6), num_prefix_tokens=1).load_state_dict(pos.state_dict())
    ast = Learned(dim=8, grid_size=(3, 10), num_prefix_tokens=2)
    Learned(dim=8, grid_size=(3, 7), num_prefix_tokens=2).load_state_dict(ast.state_dict())


def test_vit_with_2d_positions_runs_at_another_grid_and_is_unchanged_at_the_trained_one():
    # attnzoo/models/vit.py was not on main when this was written: timm's ViT with attnzoo attention
    from timm.models.vision_transformer import VisionTransformer

    grid = (4, 4)
    attn = attention_layer({"bias": "relative_2d", "rotary": "rope_2d", "backend": "sdpa"}, grid_size=grid,
                           num_prefix_tokens=1)  # fmt: skip
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=3,
                            attn_layer=attn, dynamic_img_size=True).eval()  # fmt: skip
    x = torch.randn(2, 3, 32, 32)
    before = vit(x)
    assert set_grid_size(vit, (6, 5)) == 4  # a bias and a rotary per block
    other = vit(torch.randn(2, 3, 48, 40))
    assert other.shape == (2, 3) and torch.isfinite(other).all()
    set_grid_size(vit, grid)
    assert torch.equal(vit(x), before)
    with pytest.raises(ValueError, match="set_grid_size"):
        vit(torch.randn(1, 3, 48, 48))  # the grid was not set: an error, not a silent guess


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Sinusoidal(dim=7), r"even dim; got 7"),
        (lambda: SinCos2D(dim=10, grid_size=3), r"divisible by 4; got 10"),
        (lambda: Learned(dim=8), r"exactly one of max_len, grid_size"),
        (lambda: Learned(dim=8, max_len=4).set_grid_size(2), r"1D Learned position table has no grid"),
        (lambda: SinCos2D(dim=8, grid_size=2)(torch.zeros(1, 5, 8)), r"5 tokens, but grid \(2, 2\).*set_grid_size"),
        (lambda: Sinusoidal(dim=8)(torch.zeros(5, 8)), r"expects x \[B, L, 8\]; got \[5, 8\]"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_attnzoo_vit_with_relative_2d_fine_tunes_at_another_image_size():
    from attnzoo.models.vit import ViT

    cfg = dict(patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=3, pos_embed="none",
               attention={"bias": "relative_2d", "backend": "sdpa"})  # fmt: skip
    small = ViT(img_size=32, **cfg).eval()  # 4 x 4 patches + cls
    x = torch.randn(2, 3, 32, 32)
    before = small(x)
    big = ViT(img_size=48, **cfg)  # 6 x 6 patches: each block's 7 x 7 table is resized to 11 x 11 on load
    big.load_state_dict(small.state_dict())
    big(torch.randn(2, 3, 48, 48)).sum().backward()
    table = big.encoder.blocks[0].attn.bias.table
    assert table.shape == (4, 11, 11) and table.grad.abs().sum() > 0
    again = ViT(img_size=32, **cfg).eval()
    again.load_state_dict(small.state_dict())
    assert torch.equal(again(x), before)
