"""Which kernel path the sdpa backend takes for which bias, pattern, dtype, grad mode and device, and that it
says so: `attend`'s returned name, `Attention.backend_used` and `auto`'s log name the path ("sdpa[...]")."""

import logging

import pytest
import torch

from attnzoo.attention import BACKENDS, Attention, Causal, attend, sdpa_bias
from attnzoo.attention import backends as backends_module
from attnzoo.attention.backends import Request, choose_backend
from attnzoo.attention.biases import BIASES
from attnzoo.attention.specs import build

HEADS, D, N = 4, 8, 13  # N = 1 prefix token + a 3 x 4 grid
KERNELS = {  # path -> the sdpa_bias function that runs it
    "table_grad": "sdpa_with_relative_bias",
    "hankel_table": "sdpa_with_fixed_sequence_bias",
    "bias_grad": "sdpa_with_bias_grad",
}


def make(name: str):
    if name == "none":
        return None
    if name.startswith("tensor"):  # a dense bias tensor, learned or fixed
        return torch.randn(HEADS, N, N, requires_grad=name == "tensor learned")
    bias = build(name.split()[0], BIASES, "bias", num_heads=HEADS, head_dim=D, grid_size=(3, 4), num_prefix_tokens=1)
    return bias.requires_grad_(False) if name.endswith("frozen") else bias


def spy(fn, path: str, ran: list[str]):
    def call(*args, **kwargs):
        ran.append(path)
        return fn(*args, **kwargs)

    return call


# (bias, grad mode, dtype, attention dropout) -> the name `attend` reports
CASES = [
    ("none", True, torch.float32, 0.0, "sdpa"),
    ("alibi", True, torch.float32, 0.0, "sdpa[hankel_table]"),
    ("alibi", False, torch.bfloat16, 0.0, "sdpa[hankel_table]"),
    ("t5", True, torch.float32, 0.0, "sdpa[table_grad]"),
    ("t5", True, torch.bfloat16, 0.0, "sdpa[table_grad]"),
    ("t5", False, torch.float32, 0.0, "sdpa[hankel_table]"),  # inference: the table is fixed
    ("t5 frozen", True, torch.float32, 0.0, "sdpa[hankel_table]"),
    ("t5", True, torch.float32, 0.1, "sdpa"),  # no dropout in sdpa_bias: the dense bias, trained by autograd
    ("t5", True, torch.float64, 0.0, "sdpa"),  # a dtype the fused CPU kernel does not take: likewise
    ("relative_2d", True, torch.float32, 0.0, "sdpa[table_grad]"),
    ("relative_2d", False, torch.float32, 0.0, "sdpa"),  # a fixed 2D table is one dense mask
    ("tensor learned", True, torch.float32, 0.0, "sdpa[bias_grad]"),
    ("tensor learned", False, torch.float32, 0.0, "sdpa"),
    ("tensor fixed", True, torch.float32, 0.0, "sdpa"),
]


@pytest.mark.parametrize("masked", [False, True], ids=["full", "causal+padding"])
@pytest.mark.parametrize("name, grad, dtype, dropout, want", CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_each_case_runs_and_reports_its_path(monkeypatch, name, grad, dtype, dropout, want, masked):
    ran = []
    for path, fn in KERNELS.items():
        real = getattr(sdpa_bias, fn)
        monkeypatch.setattr(
            sdpa_bias, fn, lambda *a, _real=real, _path=path, **kw: ran.append(_path) or _real(*a, **kw)
        )
    monkeypatch.setattr(backends_module, "_logged", set())  # so this call logs
    bias = make(name)
    q, k, v = (torch.randn(2, HEADS, N, D, dtype=dtype, requires_grad=grad) for _ in range(3))
    kw = dict(bias=bias)
    if masked:
        pad = torch.zeros(2, N, dtype=torch.bool)
        pad[1, N - 4 :] = True
        kw.update(pattern=Causal(), key_padding_mask=pad)
    with torch.set_grad_enabled(grad):
        req = Request("cpu", grad, False, kw.get("pattern"), bias, masked, N, N, dropout, dtype, D)
        assert choose_backend(req, "sdpa") == want  # decided from the request alone, asked for or
        got, _, used = attend(q, k, v, dropout_p=dropout, backend="auto", **kw)  # picked by auto
    assert used == want
    assert ran == ([want.removeprefix("sdpa[").removesuffix("]")] if "[" in want else [])  # what ran is named
    leaves = [q, k, v, *([bias] if isinstance(bias, torch.Tensor) else getattr(bias, "parameters", list)())]
    leaves = [t for t in leaves if t.requires_grad]
    if dropout:  # random: the bias still trains
        (grad_bias,) = torch.autograd.grad(got.square().sum(), list(bias.parameters()))
        assert grad_bias.abs().sum() > 0
        return
    want_out, _, _ = attend(q, k, v, backend="eager", **kw)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got, want_out, **tol)
    if grad:
        g = torch.randn_like(got)
        for a, e in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want_out, leaves, g), strict=True):
            torch.testing.assert_close(a, e, **tol)


def test_auto_logs_the_path(monkeypatch, caplog):
    monkeypatch.setattr(backends_module, "_logged", set())
    q = torch.randn(1, HEADS, N, D)
    with caplog.at_level(logging.INFO, logger="attnzoo"), torch.no_grad():
        attend(q, q, q, bias=make("alibi"))
    assert "attention backend auto -> sdpa[hankel_table] for device=cpu, inference" in caplog.text
    assert "not flash: " in caplog.text  # with a bias, why not another backend is said


def test_auto_on_dense_attention_names_its_choice_without_the_others_reasons(monkeypatch, caplog):
    # every generate/translate call printed two ~400-character lines on why not flex, blocked or flash: the dense
    # case has no choice to explain; the reasons go to the debug log
    monkeypatch.setattr(backends_module, "_logged", set())
    q = torch.randn(1, HEADS, N, D)
    with caplog.at_level(logging.DEBUG, logger="attnzoo"), torch.no_grad():
        attend(q, q, q)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info == ["attention backend auto -> sdpa for device=cpu, inference, pattern=full, bias=none, weights=False"]
    assert any("not flash: " in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def test_backend_used_names_the_path():
    attn = Attention(HEADS * D, HEADS, bias=make("t5"))
    attn(torch.randn(2, N, HEADS * D))
    assert attn.backend_used == "sdpa[table_grad]"  # what run summaries list under attention_backends
    with torch.no_grad():
        attn(torch.randn(2, N, HEADS * D))
    assert attn.backend_used == "sdpa[hankel_table]"


@pytest.mark.parametrize("name", ["t5", "alibi", "relative_2d", "tensor learned"])
def test_every_path_is_cpu_only(name):
    req = Request("cuda", True, False, None, make(name), False, N, N, dtype=torch.bfloat16, head_dim=D)
    assert BACKENDS["sdpa"].path(req) is None and choose_backend(req, "sdpa") == "sdpa"


def test_paths_are_named_in_the_capability_table():
    assert set(BACKENDS["sdpa"].PATHS) == set(KERNELS)


def test_choosing_the_path_makes_no_second_table(monkeypatch):
    bias = make("t5")
    made = []
    real = type(bias)._relative
    monkeypatch.setattr(type(bias), "_relative", lambda self, lq, lk: made.append(lq) or real(self, lq, lk))
    q = torch.randn(1, HEADS, N, D, requires_grad=True)
    assert attend(q, q, q, bias=bias)[2] == "sdpa[table_grad]"
    assert made == [N]
    with bias.once_per_call():  # an encoder's shared bias: one table for every layer
        attend(q, q, q, bias=bias)
        attend(q, q, q, bias=bias)
    assert made == [N, N]


def _strided(*shape: int) -> torch.Tensor:
    """A [B, H, L, D] tensor whose last dimension is not unit-stride (a transpose of [B, H, D, L])."""
    return torch.randn(*shape[:2], shape[3], shape[2]).transpose(-1, -2).requires_grad_()


@pytest.mark.parametrize("backend", ["sdpa", "blocked"])
@pytest.mark.parametrize("case", ["t5", "tensor learned", "sinks"])
def test_fused_cpu_paths_equal_eager_on_queries_whose_last_dimension_is_strided(case, backend):
    """The raw CPU flash op (sdpa_bias, sinks) misreads a last dimension of stride > 1, which F.sdpa copes with:
    a query that is a transposed view (and rotary's head dimension 2) must give eager's output and gradients."""
    from attnzoo.attention.biases import T5RelativeBias
    from attnzoo.attention.variants import SinkAttention
    from attnzoo.attention.variants.sinks import SinkWeights

    torch.manual_seed(0)
    b, h, n, d = 2, 2, 40, 8
    q, k, v = _strided(b, h, n, d), torch.randn(b, h, n, d, requires_grad=True), _strided(b, h, n, d)
    options = {
        "t5": {"bias": T5RelativeBias(num_heads=h)},
        "tensor learned": {"bias": torch.randn(1, h, n, n, requires_grad=True)},
        "sinks": {"transform": SinkWeights(SinkAttention(h * d, h))},
    }[case]
    out, _, used = attend(q, k, v, backend=backend, **options)
    ref = attend(q, k, v, backend="eager", **options)[0]
    assert used != "eager" and used.startswith(backend)
    grads = torch.autograd.grad((out * out.detach().cos()).sum(), (q, k, v))
    want = torch.autograd.grad((ref * ref.detach().cos()).sum(), (q, k, v))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, expected in zip(grads, want, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_sinks_with_rotary_of_head_dimension_two_equal_eager():
    from attnzoo.attention.rotary import Rotary
    from attnzoo.attention.variants import SinkAttention

    torch.manual_seed(0)
    x = torch.randn(1, 18, 4)
    eager = SinkAttention(4, 2, backend="eager", rotary=Rotary(head_dim=2))
    fused = SinkAttention(4, 2, backend="sdpa", rotary=Rotary(head_dim=2))
    fused.load_state_dict(eager.state_dict())
    for _ in range(2):
        torch.testing.assert_close(fused(x), eager(x), rtol=1e-5, atol=1e-5)
