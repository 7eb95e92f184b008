"""Every attention kind in ATTENTION_KINDS: respects key padding, stays finite, returns weights, plugs into timm's
VisionTransformer and trains in attnzoo's ViT; kinds that can be set to compute plain multi-head attention equal it
(forward and backward). Kinds that cannot are checked against their explicit formulas in test_formulas.py."""

import itertools

import pytest
import torch

from attnzoo.attention import ATTENTION_KINDS, Attention, Causal, capture_attention
from tests.helpers.kinds import DIM, HEADS, build, layer_class, randomize_extras, reduces_to_mha, to_mha

KINDS = list(ATTENTION_KINDS)


def supports_pattern(kind: str) -> bool:
    try:
        build(kind, seq_len=8, causal=True)
    except ValueError:
        return False
    return True


def test_every_kind_is_reachable_from_config_and_turns_into_mha():
    assert {"mha", "talking_heads", "dcmha", "linformer"} <= set(REDUCIBLE)
    for kind in KINDS:
        layer = build(kind, seq_len=8)
        assert isinstance(layer, ATTENTION_KINDS[kind]) and isinstance(layer, Attention)
    for kind in REDUCIBLE:
        layer = build(kind, seq_len=8)
        randomize_extras(layer)
        to_mha(layer)
        ref = Attention(DIM, HEADS, qkv_bias=True, backend="eager")
        ref.load_state_dict(layer.state_dict(), strict=False)
        x = torch.randn(1, 8, DIM)
        torch.testing.assert_close(layer(x), ref(x), atol=1e-5, rtol=1e-5, msg=f"{kind}: to_mha() does not give MHA")


REDUCIBLE = [k for k in KINDS if reduces_to_mha(k)]

CASES = [
    dict(cross=c, kv=kv, causal=cz, lq=lq, lk=lk)
    for c, kv, cz, (lq, lk) in itertools.product([False, True], [4, 2], [False, True], [(9, 9), (5, 12)])
    if (c or lq == lk) and not (c and cz)
]


@pytest.mark.parametrize(
    "kind, case",
    [(k, c) for k in REDUCIBLE for c in CASES if not (c["causal"] and not supports_pattern(k))],
    ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}{x}" for k, x in v.items()),
)
def test_identity_kind_equals_mha_forward_and_backward(kind, case):
    layer = build(kind, seq_len=case["lk"], cross=case["cross"], kv=case["kv"], causal=case["causal"], chunk_size=4)
    randomize_extras(layer)
    to_mha(layer)
    ref = Attention(
        DIM,
        HEADS,
        num_kv_heads=case["kv"],
        qkv_bias=True,
        context_dim=24 if case["cross"] else None,
        pattern=Causal() if case["causal"] else None,
        backend="eager",
    )
    missing, _ = ref.load_state_dict(layer.state_dict(), strict=False)
    assert not missing
    x = torch.randn(2, case["lq"], DIM, requires_grad=True)
    ctx = torch.randn(2, case["lk"], 24, requires_grad=True) if case["cross"] else None
    x2 = x.detach().clone().requires_grad_()
    ctx2 = ctx.detach().clone().requires_grad_() if ctx is not None else None
    out, want = layer(x, ctx), ref(x2, ctx2)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    want.backward(g)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-4)
    if ctx is not None:
        torch.testing.assert_close(ctx.grad, ctx2.grad, atol=1e-5, rtol=1e-4)
    params = dict(layer.named_parameters())
    for name, p in ref.named_parameters():
        torch.testing.assert_close(params[name].grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("kind", [k for k in REDUCIBLE if k != "mha"])  # mha has no parameters of its own
def test_random_extras_change_the_output(kind):
    # guards the identity test: the kind's own parameters do act
    layer = build(kind, seq_len=9, chunk_size=4)
    ref = Attention(DIM, HEADS, qkv_bias=True)
    ref.load_state_dict(layer.state_dict(), strict=False)
    randomize_extras(layer)
    x = torch.randn(2, 9, DIM)
    assert (layer(x) - ref(x)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cross", [False, True])
def test_padding_equals_the_unpadded_sequence(kind, cross):
    lk, real = 11, 6
    layer = build(kind, seq_len=lk, cross=cross, chunk_size=4)
    randomize_extras(layer)
    x = torch.randn(2, 11, DIM)
    ctx = torch.randn(2, lk, 24) if cross else None
    pad = torch.zeros(2, lk, dtype=torch.bool)
    pad[0, real:] = True
    out = layer(x, ctx, key_padding_mask=pad)
    # the padded sequence gives what its unpadded self gives, at every query
    alone = layer(x[:1], ctx[:1, :real]) if cross else layer(x[:1, :real])
    keep = slice(None) if cross else slice(0, real)
    torch.testing.assert_close(out[0, keep], alone[0], atol=1e-5, rtol=1e-5)
    # and what sits in the padding changes nothing but the padded queries themselves
    noisy_x, noisy_ctx = x.clone(), (ctx.clone() if cross else None)
    if cross:
        noisy_ctx[0, real:] = 1e3 * torch.randn(lk - real, 24)
    else:
        noisy_x[0, real:] = 1e3 * torch.randn(lk - real, DIM)
    torch.testing.assert_close(layer(noisy_x, noisy_ctx, key_padding_mask=pad)[0, keep], out[0, keep])
    # backward: a loss on real positions sends no gradient into the padding
    x_grad = noisy_x.clone().requires_grad_()
    ctx_grad = noisy_ctx.clone().requires_grad_() if cross else None
    layer(x_grad, ctx_grad, key_padding_mask=pad)[0, keep].sum().backward()
    padded = ctx_grad.grad[0, real:] if cross else x_grad.grad[0, real:]
    assert (padded == 0).all()


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "linformer"])  # linformer takes no mask at call time
def test_a_bool_attn_mask_equals_the_same_mask_as_a_pattern_and_a_row_it_empties_is_finite(kind):
    # talking heads and DCMHA mixed the -inf of a bool attn_mask across heads before masking: NaN in every row the
    # mask touched once their mixing weights left the identity, and in a row the mask emptied even at the identity
    layer = build(kind, seq_len=6, chunk_size=4)
    randomize_extras(layer)
    x = torch.randn(2, 6, DIM, requires_grad=True)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(layer(x, attn_mask=causal), layer(x, is_causal=True), atol=1e-5, rtol=1e-5)
    empty = torch.ones(6, 6, dtype=torch.bool)
    empty[2] = False
    out = layer(x, attn_mask=empty)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    per_head = torch.ones(1, HEADS, 6, 6, dtype=torch.bool)
    per_head[0, 0, :, 3] = False  # key 3 barred for head 0 only: mixing heads after the softmax carried weight onto it
    _, weights = layer(x.detach(), attn_mask=per_head, return_weights=True)
    assert (weights[:, 0, :, 3] == 0).all()


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "linformer"])
@pytest.mark.parametrize("masked", [-1e9, torch.finfo(torch.float32).min])
def test_a_float_attn_mask_of_large_negatives_masks_as_the_bool_one(kind, masked):
    # a float mask in Hugging Face's style (a large finite negative where masked, 0 elsewhere): talking heads and
    # DCMHA mixed it across heads with the scores, so a masked key kept weight (or the row overflowed to NaN)
    layer = build(kind, seq_len=6, chunk_size=4)
    randomize_extras(layer)
    if kind == "talking_heads":  # mixing rows of a negative sum turned the mask's large negatives into large positives
        with torch.no_grad():
            layer.pre.static.copy_(-layer.pre.static.abs())
    x = torch.randn(2, 6, DIM)
    keep = torch.rand(2, HEADS, 6, 6) > 0.4  # a mask of each head's own: head mixing after the softmax too
    keep[..., 0] = True  # every row keeps a key
    floats = torch.zeros(2, HEADS, 6, 6).masked_fill(~keep, masked)
    want, want_w = layer(x, attn_mask=keep, return_weights=True)
    got, got_w = layer(x, attn_mask=floats, return_weights=True)
    assert torch.isfinite(got).all()
    assert (got_w.masked_select(~keep.expand_as(got_w)).abs() < 1e-6).all()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("autocast", [False, True])
def test_fully_padded_sequence_is_finite(kind, autocast):
    layer = build(kind, seq_len=7, chunk_size=3)
    randomize_extras(layer)
    x = torch.randn(2, 7, DIM, requires_grad=True)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1] = True
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = layer(x, key_padding_mask=pad)
    assert torch.isfinite(out).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_autocast_close_to_fp32(kind):
    layer = build(kind, seq_len=20, chunk_size=8)
    randomize_extras(layer)
    x = torch.randn(2, 20, DIM)
    ref = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = layer(x)
    assert low.dtype == torch.bfloat16
    assert (low.float() - ref).abs().max() < 2e-2 * ref.abs().max()  # relative: random extras scale outputs up


@pytest.mark.parametrize("kind", KINDS)
def test_return_weights_and_capture(kind):
    layer = build(kind, seq_len=9, chunk_size=4)
    x = torch.randn(2, 9, DIM)
    out, w = layer(x, return_weights=True)
    assert w.shape[:3] == (2, HEADS, 9)
    torch.testing.assert_close(out, layer(x), atol=1e-5, rtol=1e-5)
    with capture_attention() as maps:
        layer(x)
    torch.testing.assert_close(maps[0], w)


@pytest.mark.parametrize("kind", KINDS)
def test_plugs_into_timm_vision_transformer(kind):
    from timm.models.vision_transformer import VisionTransformer

    cfg = dict(img_size=32, patch_size=8, embed_dim=DIM, depth=2, num_heads=HEADS, num_classes=5, qkv_bias=True)
    theirs = VisionTransformer(**cfg).eval()
    ours = VisionTransformer(**cfg, attn_layer=layer_class(kind, seq_len=17, chunk_size=8))
    assert all(isinstance(b.attn, ATTENTION_KINDS[kind]) for b in ours.blocks)
    missing, unexpected = ours.load_state_dict(theirs.state_dict(), strict=False)
    assert all(".attn." in name for name in missing + unexpected)
    if kind != "mla":  # mla's projections differ from timm's (latents); every other kind loads timm's q, k, v
        assert not unexpected
    x = torch.randn(2, 3, 32, 32)
    ours.train()
    ours(x).sum().backward()  # trains, its own parameters included
    params = dict(ours.named_parameters())
    assert all(params[n].grad is not None for n in missing)
    assert not missing or sum(params[n].grad.abs().sum() for n in missing) > 0
    if kind not in REDUCIBLE:
        return
    for block in ours.blocks:
        to_mha(block.attn)
    ours.eval()
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_trains_in_attnzoo_vit(kind):
    from attnzoo.models import vit

    model = vit(
        img_size=16,
        patch_size=4,
        in_chans=1,
        num_classes=3,
        embed_dim=DIM,
        depth=1,
        num_heads=HEADS,
        attention={"kind": kind},
    )  # linformer takes seq_len (17 tokens) from the model
    assert isinstance(model.encoder.blocks[0].attn, ATTENTION_KINDS[kind])
    model(torch.randn(2, 1, 16, 16)).sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
