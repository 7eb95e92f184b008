"""Text-image fusion model: padding invariance, gating, cross-attention maps, argument errors."""

import pytest
import torch

from attnzoo.models.text_image import CROSS_FUSIONS, FUSIONS, IMAGE_POSITIONS, POOLING, TextImageNet

SMALL = dict(num_classes=5, img_size=16, patch_size=4, image_dim=32, text_dim=32, num_heads=4, max_len=24)


def _net(**kw) -> TextImageNet:
    return TextImageNet(**{**SMALL, **kw}).eval()


def _inputs(b=3, lengths=(7, 4, 9)):
    image = torch.randn(b, 3, 16, 16)
    tokens = torch.randint(1, 257, (b, max(lengths)))
    pad = torch.arange(max(lengths))[None] >= torch.tensor(lengths)[:, None]
    return image, tokens.masked_fill(pad, 0), pad


@pytest.mark.parametrize("fusion", CROSS_FUSIONS)
@pytest.mark.parametrize("pooling", POOLING)
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_extra_padding_leaves_real_tokens_unchanged(fusion, pooling, gated, backend):
    attn = {"backend": backend}
    net = _net(fusion=fusion, pooling=pooling, gated=gated, attention=attn, cross_attention=attn)
    if gated:  # open the gates so the cross-attention branches matter
        for block in [*net.cross_blocks, *getattr(net, "image_cross_blocks", [])]:
            torch.nn.init.constant_(block.attn_gate, 0.7)
            torch.nn.init.constant_(block.mlp_gate, 0.7)
    image, tokens, pad = _inputs()
    more = torch.cat([tokens, torch.randint(1, 257, (3, 8))], dim=1)  # garbage ids under the mask
    more_pad = torch.cat([pad, torch.ones(3, 8, dtype=torch.bool)], dim=1)
    logits, maps = net(image, tokens, pad, return_cross_attention=True)
    logits2, maps2 = net(image, more, more_pad, return_cross_attention=True)
    torch.testing.assert_close(logits2, logits, atol=1e-5, rtol=1e-5)
    for m, m2 in zip(maps, maps2, strict=True):
        real = ~pad[:, None, :, None]  # [B, 1, L, 1]
        torch.testing.assert_close(m2[:, :, : tokens.shape[1]] * real, m * real, atol=1e-6, rtol=1e-5)
    # one example alone (no padding at all) gives the same logits as inside the padded batch
    alone = net(image[1:2], tokens[1:2, :4], None)
    torch.testing.assert_close(alone, logits[1:2], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fusion", CROSS_FUSIONS)
@pytest.mark.parametrize("image_pos", IMAGE_POSITIONS)
def test_forward_backward_and_maps(image_pos, fusion):
    net = _net(image_pos=image_pos, fusion_depth=3, fusion=fusion).train()
    image, tokens, pad = _inputs()
    logits, maps = net(image, tokens, pad, return_cross_attention=True)
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    assert len(maps) == 3 and all(m.shape == (3, 4, tokens.shape[1], 16) for m in maps)  # [B, H, L, N]
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 4, tokens.shape[1]))
    logits.square().sum().backward()
    missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing


def test_image_matters_and_gates_start_closed():
    image, tokens, pad = _inputs()
    other = torch.randn_like(image)
    open_net = _net()
    assert not torch.allclose(open_net(image, tokens, pad), open_net(other, tokens, pad), atol=1e-4)
    gated = _net(gated=True)  # gates at 0: the image has no effect yet, but the gates get gradients
    torch.testing.assert_close(gated(image, tokens, pad), gated(other, tokens, pad))
    gated(image, tokens, pad).square().sum().backward()
    assert all(block.attn_gate.grad.abs() > 0 for block in gated.cross_blocks)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_bf16_autocast_is_finite_with_padding(fusion):
    net = _net(fusion=fusion)
    image, tokens, pad = _inputs()
    pad[0] = True  # an example with no real token at all
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(image, tokens, pad)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(img_size=18), r"img_size \(18\) must be divisible by patch_size \(4\)"),
        (dict(image_pos="rope"), r"image_pos 'rope' is not one of"),
        (dict(pooling="max"), r"pooling 'max' is not one of"),
        (dict(fusion="image"), r"fusion 'image' is not one of \('text', 'both', 'film'\)"),
        (dict(fusion="film", gated=True), r"gated .* needs fusion 'text' or 'both'; 'film' has none"),
        (dict(fusion="both", image_depth=0), r"image_depth \(0\) must be >= 1 \(0 only with fusion 'film'\)"),
        (dict(fusion="film", patch_size=3, img_size=18), r"fusion 'film' needs a power-of-2 patch_size >= 2, got 3"),
        (dict(fusion_depth=0), r"fusion_depth \(0\) must be an int >= 1"),
        (dict(cross_attention={"bakend": "eager"}), r"model.cross_attention: unknown option 'bakend'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _net(**kwargs)


def test_bad_inputs():
    net = _net()
    image, tokens, pad = _inputs()
    with pytest.raises(ValueError, match=r"image of size \(20, 20\); this model was built for 16"):
        net(torch.randn(3, 3, 20, 20), tokens, pad)
    with pytest.raises(ValueError, match=r"text of 30 tokens; this model takes at most max_len=24"):
        net(image, torch.ones(3, 30, dtype=torch.long), None)
    with pytest.raises(ValueError, match=r"padding_mask must have the shape of tokens"):
        net(image, tokens, pad[:, :2])


def test_grad_checkpointing_is_identical():
    net = _net().train()
    image, tokens, pad = _inputs()

    def run():
        net.zero_grad()
        out = net(image, tokens, pad)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    ref = run()
    net.set_grad_checkpointing(True)
    got = run()
    torch.testing.assert_close(got[0], ref[0], atol=0, rtol=0)
    for a, b in zip(got[1], ref[1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("image_attention", [{"bias": "relative_2d"}, {"rotary": "rope_2d"}])
def test_image_attention_takes_2d_positions_the_text_side_cannot(image_attention):
    from attnzoo.attention.biases import RelativeBias2D

    net = _net(image_pos="none", image_attention=image_attention).train()
    image, tokens, pad = _inputs()
    net(image, tokens, pad).sum().backward()
    image_attn = [m for m in net.image_encoder.modules() if hasattr(m, "rotary")]
    text_attn = [m for m in net.text_encoder.modules() if hasattr(m, "rotary")]
    assert image_attn and text_attn
    if "bias" in image_attention:
        assert all(isinstance(m.bias, RelativeBias2D) and m.bias.table.grad is not None for m in image_attn)
        assert all(m.bias is None for m in text_attn)
    else:
        assert all(m.rotary is not None for m in image_attn) and all(m.rotary is None for m in text_attn)


def test_fusion_self_attention_continues_the_text_layer_indices():
    # every text self-attention layer, encoder then fusion, has its own index: its own random blocks
    net = _net(text_depth=2, fusion_depth=2, attention={"pattern": {"kind": "random_blocks", "block": 4}})
    layers = [b.attn for b in net.text_encoder.blocks] + [b.attn for b in net.text_blocks]
    assert [a.pattern.layer_index for a in layers] == [0, 1, 2, 3]


def test_patches_read_the_question_with_fusion_both():
    """With fusion "both" the patches attend to the real text tokens only, and what they make of it reaches the
    logits: the patch half of the head's input changes with the question, not with the padding under the mask."""
    net = _net(fusion="both")
    image, tokens, pad = _inputs()
    seen = {}
    net.image_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("patches", o.detach()))
    net(image, tokens, pad)
    first = seen["patches"]
    garbage = tokens.masked_fill(pad, 7)  # other ids under the mask
    net(image, garbage, pad)
    torch.testing.assert_close(seen["patches"], first, atol=1e-5, rtol=1e-5)
    other = tokens.roll(1, dims=0)  # each image gets another example's question
    net(image, other, pad.roll(1, dims=0))
    assert not torch.allclose(seen["patches"], first, atol=1e-4)
    assert net.head.in_features == SMALL["text_dim"] + SMALL["image_dim"]


# -- fusion "film": the question steers the convolutional stem, a relation MLP reads each cell --------------------


@pytest.mark.parametrize("image_depth", [0, 1])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_film_padding_changes_no_logit(image_depth, backend):
    attn = {"backend": backend}
    net = _net(fusion="film", image_depth=image_depth, attention=attn)
    image, tokens, pad = _inputs()
    more = torch.cat([tokens, torch.randint(1, 257, (3, 8))], dim=1)  # garbage ids under the mask
    more_pad = torch.cat([pad, torch.ones(3, 8, dtype=torch.bool)], dim=1)
    logits, maps = net(image, tokens, pad, return_cross_attention=True)
    assert maps == []  # no cross-attention to draw
    torch.testing.assert_close(net(image, more, more_pad), logits, atol=1e-5, rtol=1e-5)
    alone = net(image[1:2], tokens[1:2, :4], None)  # one example without any padding
    torch.testing.assert_close(alone, logits[1:2], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("image_pos", IMAGE_POSITIONS)
def test_film_forward_backward_reach_every_parameter(image_pos):
    net = _net(fusion="film", image_depth=1, image_pos=image_pos).train()
    for film in net.film_stem.films:  # leave the identity start, so the question's gradient path is not zero
        torch.nn.init.normal_(film.weight, std=0.1)
    image, tokens, pad = _inputs()
    logits = net(image, tokens, pad)
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    logits.square().sum().backward()
    missing = [n for n, p in net.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert not missing, missing
    assert (net.cell_pos is None) == (image_pos == "none")


def test_film_cells_are_computed_for_the_question():
    """The stem's FiLM starts at the identity (the cells do not depend on the question); once it has learned
    anything, another question gives other cells, while the image alone still decides the identity start."""
    net = _net(fusion="film")
    image, tokens, pad = _inputs()
    seen = {}
    net.image_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("cells", o.detach()))
    other = tokens.roll(1, dims=0), pad.roll(1, dims=0)  # each image gets another example's question
    net(image, tokens, pad)
    first = seen["cells"]
    net(image, *other)
    torch.testing.assert_close(seen["cells"], first)  # identity start
    for film in net.film_stem.films:
        torch.nn.init.normal_(film.weight, std=0.1)
    net(image, tokens, pad)
    first = seen["cells"]
    net(image, tokens.masked_fill(pad, 7), pad)  # other ids under the mask change nothing
    torch.testing.assert_close(seen["cells"], first, atol=1e-5, rtol=1e-5)
    net(image, *other)
    assert not torch.allclose(seen["cells"], first, atol=1e-4)
    assert seen["cells"].shape == (3, 16, SMALL["image_dim"])  # a 4x4 grid of cells


def test_the_recipe_header_cross_attention_commands_build_that_design():
    from pathlib import Path

    from attnzoo.config import load
    from attnzoo.run import build

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "text_image.yaml"
    commands = [line for line in recipe.read_text().splitlines() if line.startswith("#   python")]
    lines = [line for line in commands if "fusion=both" in line]
    assert len(lines) == 2
    for line in lines:
        overrides = line.split("text_image.yaml", 1)[1].split("#")[0].split()  # the command's own overrides
        net = build(load([recipe], [*overrides, "data.num_train=32", "data.num_val=8"]))[1].net
        assert net.fusion == "both" and len(net.image_encoder.encoder.blocks) == 2 and len(net.cross_blocks) == 2
        assert hasattr(net.cross_blocks[0], "attn_gate") == ("model.gated=true" in overrides)
    default = build(load([recipe], ["data.num_train=32", "data.num_val=8"]))[1].net
    assert default.fusion == "film" and default.cell_encoder is None and not hasattr(default, "cross_blocks")


@pytest.mark.parametrize("fusion", FUSIONS)
def test_a_batch_of_empty_texts_is_one_position_of_padding_and_gives_finite_logits(fusion):
    # every caption of a batch empty (batch size 1 with an empty caption, viz of such an example): the collate made
    # [B, 0] tokens, which no attention could reshape
    from attnzoo.data.modules.text_image import Collate

    items = [{"image": torch.randn(3, 16, 16), "tokens": [], "label": i} for i in range(2)]
    batch = Collate(pad_id=0)(items)
    assert batch["tokens"].shape == (2, 1) and batch["padding_mask"].all()
    logits = _net(fusion=fusion)(batch["image"], batch["tokens"], batch["padding_mask"])
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()


@pytest.mark.parametrize("kind", ["sigmoid", "linformer"])
def test_cross_attention_kinds_sized_by_their_keys_get_the_number_of_keys(kind):
    """sigmoid (b = -log n) and linformer (projections of n keys) stopped the build: the model passed no seq_len to
    cross-attention, and the error said attnzoo's models pass it."""
    import math

    net = _net(fusion="both", cross_attention={"kind": kind})
    logits = net(*_inputs())
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    text_side, image_side = net.cross_blocks[0].attn, net.image_cross_blocks[0].attn
    if kind == "sigmoid":  # the text reads 4 x 4 patches; the patches read up to max_len text tokens
        assert (text_side.b, image_side.b) == pytest.approx((-math.log(16), -math.log(24)))
