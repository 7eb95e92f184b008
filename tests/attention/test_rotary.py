"""Rotary embeddings: relative-offset invariance, an independent complex-number reference, and every
backend against eager with rotary inside `Attention` (GQA, cross-attention, odd lengths)."""

import copy

import pytest
import torch

from attnzoo.attention import BACKENDS, Attention
from attnzoo.attention.backends import Request
from attnzoo.attention.factory import attention_layer
from attnzoo.attention.rotary import ROTARY, Rotary, Rotary2D
from attnzoo.attention.specs import build

D = 16
GRID, PREFIX = (3, 5), 1


def make_rotary(name, grid=GRID, prefix=PREFIX):
    return build(name, ROTARY, f"rotary {name}", num_heads=4, head_dim=D, dim=4 * D, grid_size=grid,
                 num_prefix_tokens=prefix)  # fmt: skip


def positions(name, n, shift):
    """Query/key positions of `name`'s kind, all moved by `shift` (1D) or (shift, 2 shift) (2D grid)."""
    if name == "rope_2d":
        return make_rotary(name).grid_positions() + torch.tensor([shift, 2 * shift])
    return torch.arange(n) + shift


@pytest.mark.parametrize("name", list(ROTARY))
@pytest.mark.parametrize("shift", [1, 7, 1000])
def test_scores_depend_only_on_relative_offset(name, shift):
    rotary = make_rotary(name)
    n = PREFIX + GRID[0] * GRID[1]
    q, k = torch.randn(2, 4, n, D, dtype=torch.float64), torch.randn(2, 2, n, D, dtype=torch.float64)
    q0, k0 = rotary(q, k, positions(name, n, 0), positions(name, n, 0))
    q1, k1 = rotary(q, k, positions(name, n, shift), positions(name, n, shift))
    scores0 = q0 @ k0.repeat_interleave(2, dim=1).transpose(-2, -1)
    scores1 = q1 @ k1.repeat_interleave(2, dim=1).transpose(-2, -1)
    p = PREFIX if name == "rope_2d" else 0  # prefix tokens are not rotated: compare grid with grid
    torch.testing.assert_close(scores1[..., p:, p:], scores0[..., p:, p:], atol=1e-9, rtol=1e-9)
    assert not torch.allclose(q1, q)  # it did rotate


@pytest.mark.parametrize("lq, lk", [(1, 1), (7, 7), (5, 12)])
def test_rotary_matches_complex_multiplication(lq, lk):
    # channel c pairs with c + D/2 as the complex number x_c + i x_{c+D/2}, turned by e^{i p theta_c}
    rotary = Rotary(head_dim=D, base=500.0)
    q, k = torch.randn(1, 2, lq, D, dtype=torch.float64), torch.randn(1, 1, lk, D, dtype=torch.float64)
    got_q, got_k = rotary(q, k)
    theta = 500.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    for x, got in ((q, got_q), (k, got_k)):
        z = torch.complex(x[..., : D // 2], x[..., D // 2 :])
        turned = z * torch.polar(torch.ones((), dtype=torch.float64), torch.arange(x.shape[-2])[:, None] * theta)
        torch.testing.assert_close(got, torch.cat([turned.real, turned.imag], -1), atol=1e-5, rtol=1e-5)


def test_rotary_2d_leaves_prefix_tokens_and_uses_rows_and_columns():
    rotary = Rotary2D(head_dim=D, grid_size=(2, 3), num_prefix_tokens=2)
    x = torch.randn(1, 1, 8, D)
    out, _ = rotary(x, x)
    assert torch.equal(out[..., :2, :], x[..., :2, :])  # prefix untouched
    assert torch.equal(out[..., 2, :], x[..., 2, :])  # grid (0, 0): angle zero
    rows_only, _ = rotary(x, x, torch.tensor([[1, 0]] * 6), torch.tensor([[1, 0]] * 6))
    cols_only, _ = rotary(x, x, torch.tensor([[0, 1]] * 6), torch.tensor([[0, 1]] * 6))
    # the row turns channels [0, D/4) with [D/2, 3D/4); the column the other quarter pairs
    assert torch.equal(rows_only[..., 2:, D // 4 : D // 2], x[..., 2:, D // 4 : D // 2])
    assert torch.equal(cols_only[..., 2:, : D // 4], x[..., 2:, : D // 4])
    assert not torch.equal(rows_only[..., 2:, : D // 4], x[..., 2:, : D // 4])


def _claims(backend, n, lk):
    return (
        BACKENDS[backend].supports(
            Request(
                device_type="cpu",
                needs_grad=True,
                return_weights=False,
                pattern=None,
                bias=None,
                has_padding=False,
                lq=n,
                lk=lk,
            )
        )
        is None
    )


CASES = [  # (rotary, lq, lk, num_kv_heads, cross)
    ("rope", 1, 1, 4, False),
    ("rope", 9, 9, 2, False),
    ("rope", 33, 33, 1, False),
    ("rope", 7, 12, 2, True),
    ("rope_2d", 16, 16, 2, False),
]


@pytest.mark.parametrize(
    "backend, name, lq, lk, kv, cross",
    [(b, *case) for b in BACKENDS if b != "eager" for case in CASES if _claims(b, case[1], case[2])],
)
def test_backend_equals_eager_with_rotary(backend, name, lq, lk, kv, cross):
    ref = Attention(4 * D, 4, num_kv_heads=kv, context_dim=24 if cross else None, rotary=make_rotary(name),
                    qk_norm=True, backend="eager")  # fmt: skip
    fast = copy.deepcopy(ref)
    fast.backend = backend
    x = torch.randn(2, lq, 4 * D, requires_grad=True)
    ctx = torch.randn(2, lk, 24, requires_grad=True) if cross else None
    out_ref = ref(x, ctx)
    x2 = x.detach().clone().requires_grad_()
    ctx2 = ctx.detach().clone().requires_grad_() if cross else None
    out = fast(x2, ctx2)
    assert fast.backend_used == backend
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    inputs_ref = [t for t in (x, ctx) if t is not None]
    inputs = [t for t in (x2, ctx2) if t is not None]
    for a, b in zip(torch.autograd.grad(out, [*inputs, *fast.parameters()], g),
                    torch.autograd.grad(out_ref, [*inputs_ref, *ref.parameters()], g), strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_rotary_changes_attention_and_half_precision_stays_close():
    attn = attention_layer({"rotary": "rope"})(4 * D, 4)
    plain = Attention(4 * D, 4)
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(2, 10, 4 * D)
    assert not torch.allclose(attn(x), plain(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attn(x)
    assert (low.float() - attn(x)).abs().max() < 3e-2


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Rotary(head_dim=7), r"even head_dim; got 7"),
        (lambda: Rotary2D(head_dim=6, grid_size=2), r"divisible by 4; got 6"),
        (lambda: Rotary2D(head_dim=8, grid_size=(2, 0)), r"grid_size must be a positive int"),
        (lambda: Rotary2D(head_dim=8, grid_size=2)(torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)),
         r"got query tokens 5.*set_grid_size"),
        (lambda: Rotary(head_dim=8)(torch.randn(1, 1, 5, 6), torch.randn(1, 1, 5, 6)), r"head_dim 8; got q 6"),
        # base 0 or below gave nan angles: nan outputs (eager), nan gradients (sdpa), no word of the cause
        *[(lambda b=base: Rotary(head_dim=8, base=b), rf"rotary base must be a finite number > 1.*got {base}")
          for base in (0, -10.0, 1, float("nan"), float("inf"))],
        (lambda: Rotary2D(head_dim=8, grid_size=2, base=0.5), r"rotary base must be a finite number > 1.*got 0.5"),
    ],
)  # fmt: skip
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()
