"""Every attention kind (ATTENTION_KINDS) crossed with every pattern (PATTERNS) and with a per-batch pattern.

Each pair runs forward and backward with finite results and equals the same layer reading the pattern's dense
mask on the eager path; with its own parts at the identity (where it has them) it equals eager multi-head
attention. Kinds that
cannot take patterns (linformer) refuse every one with a clear error.
"""

import inspect

import pytest
import torch

from attnzoo.attention import ATTENTION_KINDS, BACKENDS, PATTERNS, Attention, Causal, KeyPadding
from attnzoo.attention.backends import Request
from attnzoo.attention.factory import attention_layer
from attnzoo.attention.patterns import Pattern
from tests.helpers.kinds import randomize_extras, reduces_to_mha, to_mha

DIM, HEADS, L = 32, 4, 20
# each pattern sparse at 20 tokens (random blocks and BigBird need several blocks to draw from); a new entry in
# PATTERNS needs a line here (the test below says so)
SMALL = {
    "causal": {},
    "sliding_window": {"window": 2},
    "dilated": {"window": 2, "dilation": 3},
    "global": {"tokens": [7]},
    "bigbird": {"window": 1, "global_tokens": [0], "num_random": 1, "block": 4},
    "block_local": {"block": 6},
    "random_blocks": {"num_random": 2, "block": 4, "seed": 5},
}


class Fixed(Pattern):
    """A dense bool mask [Lq, Lk] as a pattern: what the pattern under test means, with nothing to bind."""

    def __init__(self, mask: torch.Tensor) -> None:
        self.mask = mask

    def mask_mod(self, b, h, q_idx, kv_idx):
        return self.mask[q_idx, kv_idx]


def make(kind: str, pattern, **options) -> Attention:
    cfg = {"kind": kind, "qkv_bias": True, "pattern": pattern, **options}
    if "chunk_size" in inspect.signature(ATTENTION_KINDS[kind]).parameters:
        cfg["chunk_size"] = 6  # several chunks, the last one short
    return attention_layer(cfg, seq_len=L, num_prefix_tokens=1)(DIM, HEADS)


def takes_patterns(kind: str) -> bool:
    try:
        make(kind, "causal")
    except ValueError:
        return False
    return True


def padding() -> torch.Tensor:
    pad = torch.zeros(2, L, dtype=torch.bool)
    pad[1, 13:] = True  # the second sequence has 13 real tokens
    return pad


def run(layer: Attention, x: torch.Tensor, pad: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(out, dx, d every parameter) of one forward and backward."""
    x = x.detach().clone().requires_grad_()
    out = layer(x, key_padding_mask=pad)
    params = [p for p in layer.parameters() if p.requires_grad]
    return (out, *torch.autograd.grad(out, [x, *params], grad))


def test_every_pattern_has_a_small_example():
    assert set(SMALL) == set(PATTERNS), f"add (or drop) small examples for {sorted(set(PATTERNS) ^ set(SMALL))}"


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_kind_with_pattern_equals_its_dense_mask_forward_and_backward(kind, name):
    spec = {"kind": name, **SMALL[name]}
    if not takes_patterns(kind):
        with pytest.raises(ValueError, match=f"attention kind '{kind}' cannot use a pattern"):
            make(kind, spec)
        return
    torch.manual_seed(0)
    layer = make(kind, spec)
    randomize_extras(layer)
    dense = layer.pattern.dense_mask(L, L)
    assert not dense.all(), f"{name}: the example should leave some pairs out at {L} tokens"
    ref = make(kind, None, backend="eager")
    ref.load_state_dict(layer.state_dict())
    ref.pattern = Fixed(dense)
    x, pad = torch.randn(2, L, DIM), padding()
    grad = torch.randn(2, L, DIM)
    got, want = run(layer, x, pad, grad), run(ref, x, pad, grad)
    assert all(torch.isfinite(t).all() for t in got)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
    # the kind's own parts at the identity: eager multi-head attention with the dense mask (kinds whose math differs
    # from it are checked against their formulas with patterns in test_formulas.py)
    if not reduces_to_mha(kind):
        return
    to_mha(layer)
    mha = Attention(DIM, HEADS, qkv_bias=True, pattern=Fixed(dense), backend="eager")
    mha.load_state_dict(layer.state_dict(), strict=False)
    torch.testing.assert_close(layer(x, key_padding_mask=pad), mha(x, key_padding_mask=pad), atol=1e-5, rtol=1e-5)


TRAINS_ON_CPU = [
    b for b in BACKENDS if BACKENDS[b].supports(Request("cpu", True, False, None, None, False, L, L)) is None
]


@pytest.mark.parametrize(
    "kind, backend",
    [(k, "auto") for k in ATTENTION_KINDS if takes_patterns(k)] + [("mha", b) for b in TRAINS_ON_CPU],
)
def test_per_batch_pattern_reads_each_sequences_own_mask(kind, backend):
    # padding given as a pattern (KeyPadding, per batch element) equals padding given as key_padding_mask
    torch.manual_seed(0)
    pad = padding()
    layer = make(kind, None, backend=backend)
    randomize_extras(layer)
    x, grad = torch.randn(2, L, DIM), torch.randn(2, L, DIM)
    layer.pattern = KeyPadding(pad) & Causal()
    got = run(layer, x, None, grad)
    layer.pattern = Causal()
    want = run(layer, x, pad, grad)
    assert all(torch.isfinite(t).all() for t in got)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
