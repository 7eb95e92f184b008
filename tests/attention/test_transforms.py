"""The one backend chooser for kinds whose weights are not a softmax: they declare a `Transform`, the capability
table in backends.py picks the backend (reporting "backend[kind]"), and refuses what cannot run with its reason.
A new kind declared with only a `weights` formula runs on every backend that takes a formula, and is refused by
the others."""

import ast
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnzoo.attention import BACKENDS, Attention, SlidingWindow, attend
from attnzoo.attention.backends import Request, Transform, choose_backend
from attnzoo.attention.variants.sigmoid import SigmoidWeights
from attnzoo.attention.variants.sinks import SinkWeights

DIM, HEADS = 32, 4
WINDOW = SlidingWindow(window=16)  # sparse at 640 tokens: blocked's kind of call


def sinks(trains: bool = True) -> SinkWeights:
    return SinkWeights(SimpleNamespace(sinks=torch.zeros(HEADS, requires_grad=trains)))


def sigmoid() -> SigmoidWeights:
    return SigmoidWeights(SimpleNamespace(b=-2.0))


def req(transform, *, device="cpu", grad=True, weights=False, pattern=None, dropout=0.0, length=640) -> Request:
    return Request(
        device, grad, weights, pattern, None, False, length, length, dropout, torch.float32, 16, transform=transform
    )


@pytest.mark.parametrize(
    "transform, options, chosen",
    [
        (sinks, {}, "sdpa[sinks]"),  # CPU training: torch's fused CPU kernel, which gives the log-sum-exp
        (sinks, {"pattern": WINDOW}, "blocked[sinks]"),
        (sinks, {"dropout": 0.1}, "eager[sinks]"),  # the fused kernel has no dropout, blocked skips dense calls
        (sinks, {"weights": True}, "eager[sinks]"),
        (sinks, {"device": "cuda", "grad": False}, "flex[sinks]"),  # off CPU: flex's log-sum-exp
        (sigmoid, {}, "eager[sigmoid]"),  # no fused sigmoid kernel
        (sigmoid, {"pattern": WINDOW}, "blocked[sigmoid]"),
    ],
)
def test_auto_reports_the_backend_it_picks_for_a_kind(transform, options, chosen, caplog):
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        assert choose_backend(req(transform(), **options)) == chosen
    # logged once per distinct situation (an earlier test may have logged this one already)
    assert all(chosen in r.getMessage() for r in caplog.records if "auto ->" in r.getMessage())


@pytest.mark.parametrize(
    "transform, backend, options, match",
    [
        (sigmoid, "sdpa", {}, "kind 'sigmoid' on backend 'sdpa' cannot run this call .*compute a softmax inside"),
        (sigmoid, "flash", {}, "kind 'sigmoid' on backend 'flash' cannot run this call .*compute a softmax inside"),
        (sinks, "flash", {}, "kind 'sinks' on backend 'flash' cannot run this call .*takes no sink logits"),
        (sinks, "sdpa", {"device": "cuda"}, "returns no log-sum-exp.*on cuda use flex"),
        (sinks, "sdpa", {"dropout": 0.1}, "without attention dropout"),
        (sinks, "sdpa", {"weights": True}, "do not return attention weights"),
        (sinks, "flex", {"grad": False}, "compiled FlexAttention on CPU cannot return the log-sum-exp"),
        (sigmoid, "blocked", {"weights": True}, "does not return attention weights"),
    ],
)
def test_an_impossible_backend_for_a_kind_is_refused_with_its_reason(transform, backend, options, match):
    with pytest.raises(ValueError, match=match):
        choose_backend(req(transform(), **options), backend)


class ReluWeights(Transform):
    """A kind written as a formula and nothing else: relu of the scores (masked pairs score -inf: weight 0)."""

    name = "relu"

    def __init__(self, layer) -> None:
        pass

    def weights(self, scores):
        return torch.relu(scores) * 0.1


class ReluAttention(Attention):
    transform_class = ReluWeights


@pytest.mark.parametrize("backend, pattern", [("eager", None), ("blocked", WINDOW), ("blocked", None)])
def test_a_new_kind_is_one_transform_and_runs_on_the_backends_that_take_a_formula(backend, pattern):
    torch.manual_seed(0)
    ref = ReluAttention(DIM, HEADS, backend="eager", pattern=pattern)
    layer = ReluAttention(DIM, HEADS, backend=backend, pattern=pattern)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 300, DIM, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out, want = layer(x), ref(x2)
    assert layer.backend_used == f"{backend}[relu]"
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
    out.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-4)


def test_a_new_kind_is_refused_where_it_has_no_form():
    x = torch.randn(2, 16, DIM)
    with pytest.raises(ValueError, match="kind 'relu' on backend 'sdpa' cannot run this call.*has no fused form"):
        ReluAttention(DIM, HEADS, backend="sdpa")(x)
    with torch.no_grad(), pytest.raises(ValueError, match="kind 'relu' on backend 'flex'.*no FlexAttention form"):
        ReluAttention(DIM, HEADS, backend="flex")(x)
    layer = ReluAttention(DIM, HEADS)  # auto, inference: the sdpa and flex refusals are skipped, not fatal
    with torch.no_grad():
        layer(x)
    assert layer.backend_used == "eager[relu]"


def test_attend_takes_a_transform_directly():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, 40, 8) for _ in range(3))
    s = sinks(trains=False)
    out, weights, used = attend(q, k, v, backend="eager", return_weights=True, transform=s)
    assert used == "eager[sinks]" and bool((weights.sum(-1) < 1).all())  # the sink takes some of every row
    fused, _, used = attend(q, k, v, backend="sdpa", transform=s)
    assert used == "sdpa[sinks]"
    torch.testing.assert_close(fused, out, atol=1e-5, rtol=1e-4)


def test_kinds_choose_no_backend_of_their_own():
    # the capability table in backends.py is the one chooser: no attention kind reads the table or calls a backend
    variants = Path(__file__).parents[2] / "attnzoo" / "attention" / "variants"
    for path in variants.glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        assert not names & {"BACKENDS", "AUTO_ORDER", "choose_backend"}, path.name
    assert set(BACKENDS) >= {"eager", "sdpa", "blocked", "flex"}
