"""Loading a layer's tensors into one with other key/value heads (`attnzoo.attention.kv_heads`), for every kind that
keeps `Attention`'s projections, self- and cross-attention: fewer heads are the group means of the checkpoint's rows
and biases (checked against means taken here row by row), a checkpoint whose heads agree within each group gives the
same outputs (so the groups are the heads attention reads together), more heads repeat them exactly, and head counts
that do not divide each other are refused."""

import pytest
import torch

from attnzoo.attention import ATTENTION_KINDS, Attention
from tests.helpers.kinds import DIM, HEADS, build

KINDS = [k for k in ATTENTION_KINDS if k != "mla"]  # mla shares one latent among all heads: no k/v heads to regroup
D = DIM // HEADS


def _layers(kind, cross, kv_from, kv_to):
    torch.manual_seed(0)
    source = build(kind, seq_len=8, cross=cross, kv=kv_from, chunk_size=4).eval()
    with torch.no_grad():
        for p in source.parameters():  # every tensor away from its init (biases, gates, sinks, mixings)
            p.add_(torch.randn_like(p) * 0.1)
    return source, build(kind, seq_len=8, cross=cross, kv=kv_to, chunk_size=4).eval()


def _inputs(cross):
    torch.manual_seed(1)
    return torch.randn(2, 8, DIM), (torch.randn(2, 8, 24) if cross else None)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("kv", [2, 1])
def test_fewer_heads_load_the_group_means_of_the_rows_and_biases(kind, cross, kv):
    source, layer = _layers(kind, cross, HEADS, kv)
    layer.load_state_dict(source.state_dict())
    name, first = ("kv", 0) if cross else ("qkv", DIM)  # where the key rows start
    group = HEADS // kv
    for part in ("weight", "bias"):
        theirs, mine = source.state_dict()[f"{name}.{part}"], layer.state_dict()[f"{name}.{part}"]
        if not cross:
            torch.testing.assert_close(mine[:DIM], theirs[:DIM], rtol=0, atol=0)  # the queries as they were
        for which in range(2):  # keys, then values
            start, start_mine = first + which * HEADS * D, first + which * kv * D
            for j in range(kv):
                for r in range(D):
                    rows = [theirs[start + (j * group + i) * D + r] for i in range(group)]
                    want = sum(rows) / group
                    torch.testing.assert_close(mine[start_mine + j * D + r], want, rtol=1e-6, atol=1e-7)
    x, context = _inputs(cross)
    assert torch.isfinite(layer(x, context)).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("kv", [2, 1])
def test_heads_that_agree_within_each_group_give_the_same_outputs(kind, cross, kv):
    source, layer = _layers(kind, cross, HEADS, kv)
    name, first = ("kv", 0) if cross else ("qkv", DIM)
    with torch.no_grad():
        for t in (getattr(source, name).weight, getattr(source, name).bias):
            heads = t[first:].view(2, HEADS, D, *t.shape[1:])  # [k or v, H, D, ...]
            for h in range(HEADS):
                heads[:, h] = heads[:, h - h % (HEADS // kv)]  # each head as the first of its group
    layer.load_state_dict(source.state_dict())
    x, context = _inputs(cross)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, context), source(x, context), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_more_heads_repeat_the_checkpoints_and_compute_what_it_did(kind, cross):
    source, layer = _layers(kind, cross, 2, HEADS)
    layer.load_state_dict(source.state_dict())
    x, context = _inputs(cross)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, context), source(x, context), atol=1e-5, rtol=1e-5)


def test_head_counts_that_do_not_divide_each_other_are_refused():
    source = Attention(48, 12, num_kv_heads=4, qkv_bias=True)
    with pytest.raises(ValueError, match=r"qkv.weight holds 4 key/value heads and this layer has num_kv_heads 6"):
        Attention(48, 12, num_kv_heads=6, qkv_bias=True).load_state_dict(source.state_dict())


def test_another_width_is_left_for_load_state_dict_to_refuse():
    with pytest.raises(RuntimeError, match="size mismatch for qkv.weight"):
        Attention(32, 4, num_kv_heads=2).load_state_dict(Attention(48, 4).state_dict())
