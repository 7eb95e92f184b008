"""Every kind loaded with a multi-head layer's tensors (what `model.init_from` does with an attention override): the
kinds that say they start as that layer (`starts_as_mha`: gated, talking heads, DCMHA) compute what it computed,
whatever init a model gave their own parts before loading; the others compute something else, as they say."""

import pytest
import torch
from timm.layers import trunc_normal_
from torch import nn

from attnzoo.attention import ATTENTION_KINDS, Attention
from tests.helpers.kinds import DIM, HEADS, build

KINDS = [k for k in ATTENTION_KINDS if k != "mla"]  # mla has projections of its own (refused by pretrained.transfer)
SAME = [k for k in KINDS if ATTENTION_KINDS[k].starts_as_mha]


def _reinit(layer: nn.Module) -> None:
    """Every Linear drawn again, as attnzoo's ViT and AST initialise their modules after building them."""
    for m in layer.modules():
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.normal_(m.bias, std=0.02)


def test_the_kinds_that_start_as_mha():
    assert set(SAME) == {"mha", "gated", "talking_heads", "dcmha"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_a_kind_loaded_from_mha_says_whether_it_computes_the_same(kind, cross):
    torch.manual_seed(0)
    mha = Attention(DIM, HEADS, qkv_bias=True, context_dim=24 if cross else None).eval()
    layer = build(kind, seq_len=8, cross=cross, chunk_size=4).eval()
    _reinit(layer)
    missing, unexpected = layer.load_state_dict(mha.state_dict(), strict=False)
    assert not unexpected
    if kind in SAME:
        assert not missing  # the load hook gave the kind's own tensors their starting values
    own = {k for k in layer.state_dict() if k not in mha.state_dict()}
    assert not own or ATTENTION_KINDS[kind].mha_start  # the log says how a kind's own tensors start
    x, context = torch.randn(2, 8, DIM), (torch.randn(2, 8, 24) if cross else None)
    with torch.no_grad():
        got, want = layer(x, context), mha(x, context)
    if kind in SAME:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    else:
        assert (got - want).abs().max() > 1e-3


def test_a_gated_layer_starts_at_half_gates_and_a_doubled_projection():
    mha = Attention(DIM, HEADS, qkv_bias=True)
    layer = build("gated", seq_len=8)
    layer.load_state_dict(mha.state_dict())
    assert not layer.gate.weight.any() and not layer.gate.bias.any()
    torch.testing.assert_close(layer.proj.weight, 2 * mha.proj.weight, rtol=0, atol=0)
    torch.testing.assert_close(layer.proj.bias, mha.proj.bias, rtol=0, atol=0)
    again = build("gated", seq_len=8)
    again.load_state_dict(layer.state_dict())  # a gated layer's own tensors load as they are
    torch.testing.assert_close(again.proj.weight, layer.proj.weight, rtol=0, atol=0)
