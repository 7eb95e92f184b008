"""The flash backend: what it refuses and why (anywhere), band detection (anywhere), kernels (CUDA + flash-attn)."""

import dataclasses

import pytest
import torch

from attnzoo.attention import AUTO_ORDER, BACKENDS, Attention, Causal, attend
from attnzoo.attention import flash as flash_module
from attnzoo.attention.backends import Request, choose_backend
from attnzoo.attention.flash import band_of
from attnzoo.attention.patterns import KeyPadding, Pattern


class Band(Pattern):
    def __init__(self, left: int, right: int) -> None:
        self.left, self.right = left, right

    def mask_mod(self, b, h, q_idx, kv_idx):
        return (kv_idx >= q_idx - self.left) & (kv_idx <= q_idx + self.right)


class Strided(Pattern):
    def mask_mod(self, b, h, q_idx, kv_idx):
        return (q_idx - kv_idx) % 2 == 0


CUDA_OK = Request("cuda", True, False, None, None, False, 64, 64, dtype=torch.bfloat16, head_dim=64)


def test_registered_and_tried_before_sdpa():
    assert "flash" in BACKENDS
    assert AUTO_ORDER.index("flash") < AUTO_ORDER.index("sdpa")


def test_refuses_cpu_with_a_clear_reason():
    req = dataclasses.replace(CUDA_OK, device_type="cpu")
    assert BACKENDS["flash"].supports(req) == "flash-attn runs on CUDA only (device=cpu)"


def test_explicit_flash_on_cpu_raises_and_auto_never_picks_it():
    x = torch.randn(1, 5, 32)
    with pytest.raises(ValueError, match=r"attention backend 'flash' cannot run this call.*CUDA only \(device=cpu\)"):
        Attention(32, 4, backend="flash")(x)
    attn = Attention(32, 4)
    attn(x)
    assert attn.backend_used == "sdpa"


def test_refuses_a_missing_package(monkeypatch):
    monkeypatch.setattr(flash_module, "flash_attn_installed", lambda: False)
    assert "flash-attn package is not installed" in BACKENDS["flash"].supports(CUDA_OK)


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(dtype=torch.float32), "needs fp16 or bf16 inputs (got torch.float32"),
        (dict(head_dim=72 + 4), "head dim <= 256 and a multiple of 8 (got 76)"),
        (dict(head_dim=512), "head dim <= 256 and a multiple of 8 (got 512)"),
        (dict(return_weights=True), "do not return attention weights"),
        (dict(bias=torch.zeros(1)), "takes no additive bias"),
        (dict(has_padding=True), "key padding"),
        (dict(pattern=Strided()), "is not dense, causal or a sliding window"),
        (dict(pattern=Causal(), lk=80), "is not dense, causal or a sliding window at Lq=64, Lk=80"),
    ],
)
def test_refusal_reasons(monkeypatch, change, reason):
    monkeypatch.setattr(flash_module, "flash_attn_installed", lambda: True)  # reach the checks past the import
    got = BACKENDS["flash"].supports(dataclasses.replace(CUDA_OK, **change))
    assert got is not None and reason in got
    with pytest.raises(ValueError, match="'flash' cannot run this call"):
        choose_backend(dataclasses.replace(CUDA_OK, **change), "flash")


@pytest.mark.parametrize(
    "pattern, n, band",
    [
        (None, 9, (-1, -1)),
        (Causal(), 9, (-1, 0)),
        (Band(2, 2), 9, (2, 2)),
        (Band(3, 0), 9, (3, 0)),
        (Band(0, 1), 9, (0, 1)),
        (Band(3, 0) & Causal(), 9, (3, 0)),
        (Band(20, 20), 9, (-1, -1)),  # wider than the sequence: unbounded
        (Band(2, 2) | Strided(), 9, None),
        (Strided(), 9, None),
        (Band(-1, 2), 9, None),  # misses the diagonal
        (Band(2, 2) & KeyPadding(torch.zeros(12, 9, dtype=torch.bool)), 9, None),  # per batch: padding, not a band
    ],
)
def test_band_detection(pattern, n, band):
    assert band_of(pattern, n, n) == band
    if band is not None and pattern is not None:  # the band read off the mask reproduces the mask
        left, right = (n if w == -1 else w for w in band)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        assert torch.equal((j >= i - left) & (j <= i + right), pattern.dense_mask(n, n))


# ---------------------------------------------------------------------------------------------- CUDA kernels
CUDA_CASES = [
    dict(pattern=None, kv=4),
    dict(pattern=Causal(), kv=2),
    dict(pattern=Band(16, 16), kv=4),
    dict(pattern=Band(32, 0), kv=1),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CUDA_CASES, ids=lambda c: f"{c['pattern']!r}-kv{c['kv']}")
def test_flash_equals_eager_forward_and_backward(case, dtype):
    pytest.importorskip("flash_attn", reason="the flash-attn package is not installed")
    q = torch.randn(2, 4, 200, 64, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(2, case["kv"], 200, 64, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(2, case["kv"], 200, 64, device="cuda", dtype=dtype, requires_grad=True)
    out, _, used = attend(q, k, v, pattern=case["pattern"], backend="auto")
    assert used == "flash"
    want, _, _ = attend(q.float(), k.float(), v.float(), pattern=case["pattern"], backend="eager")
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    ref = torch.autograd.grad(want, (q, k, v), g.float())
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a.float(), b.float(), atol=5e-2, rtol=5e-2)
