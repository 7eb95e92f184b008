"""Patterns: the three views (mask_mod, dense mask, block layout) agree, built-ins mean what they say, config works."""

import pytest
import torch

from attnzoo.attention import PATTERNS, Attention, KeyPadding
from attnzoo.attention.factory import attention_layer
from attnzoo.attention.patterns import (
    BigBird,
    Causal,
    DilatedSlidingWindow,
    GlobalTokens,
    Pattern,
    RandomBlocks,
    SlidingWindow,
)
from attnzoo.attention.specs import build
from tests.helpers.patterns import EXAMPLES, PATTERN_CASES


def _block_any(dense: torch.Tensor, bq: int, bk: int) -> torch.Tensor:
    lq, lk = dense.shape
    nq, nk = -(-lq // bq), -(-lk // bk)
    padded = torch.nn.functional.pad(dense, (0, nk * bk - lk, 0, nq * bq - lq))
    return padded.view(nq, bq, nk, bk).any(dim=3).any(dim=1)


@pytest.mark.parametrize("name", list(PATTERN_CASES))
@pytest.mark.parametrize("lq, lk, bq, bk", [(1000, 1000, 128, 128), (1537, 1537, 64, 128), (300, 777, 100, 64)])
def test_block_mask_is_exact_and_layout_lists_its_blocks(name, lq, lk, bq, bk):
    pattern = PATTERN_CASES[name]
    dense = pattern.dense_mask(lq, lk)
    assert dense.shape == (lq, lk) and dense.dtype == torch.bool
    want = _block_any(dense, bq, bk)
    got = pattern.block_mask(lq, lk, bq, bk)
    assert (got | ~want).all(), "a block the pattern reads is missing from block_mask"
    assert torch.equal(got, want), "built-in block masks are exact (no needless blocks)"
    # the generic derivation from mask_mod (used for users' patterns) agrees too
    assert torch.equal(Pattern.block_mask(pattern, lq, lk, bq, bk), want)
    kv_blocks, counts = pattern.block_layout(lq, lk, bq, bk)
    for i in range(len(counts)):
        assert kv_blocks[i, : counts[i]].tolist() == want[i].nonzero().flatten().tolist()


def test_sliding_windows_mean_what_they_say():
    d = SlidingWindow(window=2).dense_mask(7, 7)
    assert d[3].nonzero().flatten().tolist() == [1, 2, 3, 4, 5]
    c = SlidingWindow(window=2, causal=True).dense_mask(7, 7)
    assert c[3].nonzero().flatten().tolist() == [1, 2, 3]
    dil = DilatedSlidingWindow(window=2, dilation=3).dense_mask(20, 20)
    assert dil[10].nonzero().flatten().tolist() == [4, 7, 10, 13, 16]
    assert DilatedSlidingWindow(window=2, dilation=3, causal=True).dense_mask(20, 20)[
        10
    ].nonzero().flatten().tolist() == [
        4,
        7,
        10,
    ]


def test_global_tokens_read_and_are_read_by_all():
    m = GlobalTokens(tokens=[5], num_prefix_tokens=1).dense_mask(12, 12)
    assert m[0].all() and m[5].all() and m[:, 0].all() and m[:, 5].all()
    assert m.sum() == 4 * 12 - 4  # rows 0, 5 and columns 0, 5, counted once
    assert GlobalTokens(tokens=[50]).dense_mask(10, 10).sum() == 0  # past the end: ignored


def test_bigbird_random_blocks_are_reproducible_and_per_seed():
    a = BigBird(window=8, num_random=2, block=16, seed=0).dense_mask(256, 256)
    b = BigBird(window=8, num_random=2, block=16, seed=0).dense_mask(256, 256)
    c = BigBird(window=8, num_random=2, block=16, seed=1).dense_mask(256, 256)
    assert torch.equal(a, b) and not torch.equal(a, c)
    rnd = RandomBlocks(num_random=2, block=16, seed=0).dense_mask(256, 256)
    per_block = rnd.view(16, 16, 16, 16)[:, 0, :, 0].sum(dim=1)  # key blocks read by each query block
    assert (per_block == 2).all()
    assert (a >= rnd).all() and (a >= SlidingWindow(window=8).dense_mask(256, 256)).all()


def test_layers_built_from_one_config_draw_their_own_random_blocks():
    def masks():
        cls = attention_layer({"pattern": {"kind": "bigbird", "window": 8, "num_random": 2, "block": 16}})
        return [cls(32, 4).pattern.dense_mask(256, 256) for _ in range(3)]

    first, again = masks(), masks()
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))  # reproducible model to model
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])  # different per layer
    assert torch.equal(first[0], BigBird(window=8, num_random=2, block=16).dense_mask(256, 256))  # layer 0: seed


def test_random_blocks_need_lengths():
    with pytest.raises(ValueError, match="bind"):
        RandomBlocks().mask_mod(0, 0, torch.arange(3), torch.arange(3))


def test_key_padding_pattern_is_per_batch_and_composes():
    pad = torch.tensor([[False, False, True], [False, True, True]])
    m = (KeyPadding(pad) & Causal()).dense_mask(3, 3)
    assert m.shape == (2, 3, 3)
    assert m[1].tolist() == [[True, False, False], [True, False, False], [True, False, False]]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"kind": "sliding_window", "window": -1}, r"window \(-1\) must be an int >= 0"),
        ({"kind": "sliding_window", "widow": 3}, r"did you mean 'window'"),
        ({"kind": "dilated", "window": 4, "dilation": 0}, r"dilation \(0\) must be an int >= 1"),
        ({"kind": "global"}, r"needs at least one token"),
        ({"kind": "bigbird", "block": 0}, r"block \(0\) must be an int >= 1"),
        ({"kind": "bigbird", "global_tokens": 1}, r"global tokens: 1 is not a list of token positions; give a list"),
        ({"kind": "slidng_window"}, r"did you mean 'sliding_window'"),
    ],
)
def test_bad_pattern_configs(spec, match):
    with pytest.raises(ValueError, match=match):
        build(spec, PATTERNS, "model.attention.pattern")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_short_names_work_through_attention_layer(name):
    cls = attention_layer({"pattern": {"kind": name, **EXAMPLES[name]}, "backend": "blocked"}, num_prefix_tokens=1)
    attn = cls(32, 4)
    assert isinstance(attn, Attention) and isinstance(attn.pattern, PATTERNS[name])
    x = torch.randn(2, 130, 32)
    ref = Attention(32, 4, pattern=attn.pattern, backend="eager")
    ref.load_state_dict(attn.state_dict())
    torch.testing.assert_close(attn(x), ref(x), atol=1e-5, rtol=1e-5)


def test_global_tokens_on_flex_after_the_recompile_limit_match_eager():
    """Once Dynamo's recompile limit was reached it traces the whole flex call, and refused the token set filling
    its lookup table inside mask_mod ("Unsafe side effect"): the layer stopped with an error."""
    import torch._dynamo

    torch.manual_seed(0)
    window = Attention(32, 4, pattern=SlidingWindow(window=16), backend="flex").eval()
    pattern = GlobalTokens(tokens=[0]) | SlidingWindow(window=16)
    flex = Attention(32, 4, pattern=pattern, backend="flex").eval()
    eager = Attention(32, 4, pattern=pattern, backend="eager").eval()
    eager.load_state_dict(flex.state_dict())
    x = torch.randn(2, 40, 32)
    with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):  # torch's own way to set it for a while
        for length in (40, 50, 60):  # past the limit
            window(torch.randn(2, length, 32))
        torch.testing.assert_close(flex(x), eager(x), atol=1e-5, rtol=1e-5)


def test_global_token_membership_while_compiling_makes_no_tensor():
    # inside a compiled net (trainer.compile) the token set is first asked while Dynamo traces: it compares with each
    # token instead of making its lookup tensor there (which Inductor cannot lower inside flex's mask_mod on CUDA)
    pattern = GlobalTokens(tokens=[3, 9, 700])
    idx = torch.arange(1000)
    graphs = []

    def backend(gm, example_inputs):  # records the traced graph and runs it as traced
        graphs.append(str(gm.graph))
        return gm.forward

    got = torch.compile(lambda i: pattern._set.contains(i), backend=backend, fullgraph=True)(idx)
    assert not pattern._set._flags and graphs and not any(op in graphs[0] for op in ("zeros", "setitem", "index_put"))
    assert torch.equal(got, (idx == 3) | (idx == 9) | (idx == 700))
    assert torch.equal(pattern._set.contains(idx), got) and list(pattern._set._flags) == [idx.device]


class _StripesPattern(Pattern):
    def mask_mod(self, b, h, q_idx, kv_idx):
        return (q_idx - kv_idx) % 2 == 0


class _StripesObject:  # a user's own pattern that only has mask_mod (README: "needs only mask_mod")
    def mask_mod(self, b, h, q_idx, kv_idx):
        return (q_idx - kv_idx) % 2 == 0


def _stripes(b, h, q_idx, kv_idx):  # the FlexAttention mask_mod function itself
    return (q_idx - kv_idx) % 2 == 0


@pytest.mark.parametrize("backend", ["eager", "sdpa", "blocked", "auto"])
@pytest.mark.parametrize("own", [_StripesObject(), _stripes], ids=["object", "function"])
def test_an_own_pattern_with_only_mask_mod_matches_the_same_rule_as_a_pattern_subclass(backend, own):
    """An object with only `mask_mod` was accepted when the layer was built and failed at its first call
    ("'Stripes' object has no attribute 'batch_size'" / "... 'dense_mask'")."""
    torch.manual_seed(0)
    reference = Attention(32, 4, pattern=_StripesPattern(), backend="eager")
    layer = Attention(32, 4, pattern=own, backend=backend)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(2, 12, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    expected, out = reference(x), layer(x2)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    expected.square().sum().backward()
    out.square().sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(layer.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-5, rtol=1e-5)
    # combined with a built-in, as a subclass is
    both = Attention(32, 4, pattern=Causal() & own, backend=backend)
    assert both.pattern.dense_mask(5, 5).equal(
        torch.ones(5, 5, dtype=torch.bool).tril() & _StripesPattern().dense_mask(5, 5)
    )


def test_an_own_pattern_keeps_what_it_defines_and_a_module_is_not_taken_for_one():
    from torch import nn

    from attnzoo.attention.patterns import as_pattern

    class Halves:  # depends on the lengths: each query reads the keys of its half (its own bind and block mask)
        def __init__(self, lk=None):
            self.lk = lk

        def bind(self, lq, lk):
            return Halves(lk)

        def mask_mod(self, b, h, q_idx, kv_idx):
            return (q_idx < self.lk // 2) == (kv_idx < self.lk // 2)

        def block_mask(self, lq, lk, block_q, block_k, device=None):
            return torch.ones(-(-lq // block_q), -(-lk // block_k), dtype=torch.bool)

    own = as_pattern(Halves())
    assert own.dense_mask(4, 4).equal(torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]).bool())
    assert own.block_mask(8, 8, 4, 4).all()  # its own (a superset), not the one derived from mask_mod
    assert not (Causal() & own).causal_only  # a rule of the lengths, not of positions: it cannot decode
    assert (Causal() & _stripes).causal_only
    with pytest.raises(TypeError, match=r"pattern: expected a pattern .*got Linear"):
        Attention(32, 4, pattern=nn.Linear(2, 2))  # a module passed by mistake: refused when built, as before
