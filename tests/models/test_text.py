"""Text classifier: padding changes nothing (every position kind, pooling and backend), shapes, errors, learning."""

import pytest
import torch

from attnzoo.attention.attention import ATTENTION_KINDS
from attnzoo.attention.biases import BIASES
from attnzoo.attention.positions import POSITIONS
from attnzoo.attention.rotary import ROTARY
from attnzoo.attention.specs import build
from attnzoo.data.modules.batching import PadCollate
from attnzoo.models.text import POOLINGS, TextClassifier

BACKENDS = ["eager", "sdpa"]
CONTEXT = {"num_heads": 4, "head_dim": 8, "dim": 32, "max_len": 201, "num_prefix_tokens": 1}


def _sequence_kinds(table: dict, what: str) -> list[str]:
    """The kinds of `table` that build from what a text model knows (1D ones; 2D ones need a grid)."""
    kinds = []
    for kind in table:
        try:
            build(kind, table, what, **CONTEXT)
        except ValueError:
            continue
        kinds.append(kind)
    return kinds


POSITION_KINDS = _sequence_kinds(POSITIONS, "model.position")
# attention parts and kinds a text model can use; none may let padding change a sequence's result
ATTENTION = {
    **{f"bias={k}": {"bias": k} for k in _sequence_kinds(BIASES, "bias")},
    **{f"rotary={k}": {"rotary": k} for k in _sequence_kinds(ROTARY, "rotary")},
    **{f"kind={k}": {"kind": k} for k in ATTENTION_KINDS if k != "mha"},
    "sliding_window+blocked": {"pattern": {"kind": "sliding_window", "window": 4}, "backend": "blocked"},
}


def _model(position="sinusoidal", pooling="cls", backend="eager", attention=None, **kw):
    attention = {"backend": backend, **(attention or {})}
    model = TextClassifier(
        vocab_size=50,
        num_classes=5,
        pad_id=0,
        max_len=200,
        dim=32,
        depth=2,
        num_heads=4,
        position=position,
        pooling=pooling,
        attention=attention,
        **kw,
    )
    return model.eval()


def _check_padding_invariance(model):
    short, long = torch.randint(1, 50, (7,)), torch.randint(1, 50, (150,))
    batch = PadCollate(pad_id=0)([(short, torch.tensor(0)), (long, torch.tensor(1))])
    alone = model(short[None])
    together = model(batch["tokens"], batch["padding_mask"])
    torch.testing.assert_close(together[0], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(together[1], model(long[None])[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("position", POSITION_KINDS)
def test_padding_does_not_change_logits(position, pooling, backend):
    _check_padding_invariance(_model(position, pooling, backend))


@pytest.mark.parametrize("attention", ATTENTION.values(), ids=ATTENTION.keys())
def test_padding_does_not_change_logits_with_attention_variants(attention):
    _check_padding_invariance(_model("none", "mean", "auto", attention))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_tokens_get_no_gradient_and_logits_are_finite(backend):
    model = _model(backend=backend, pooling="mean").train()
    tokens = torch.randint(1, 50, (3, 20))
    pad = torch.zeros(3, 20, dtype=torch.bool)
    pad[0, 5:] = True
    pad[1, 12:] = True
    tokens[pad] = 0
    logits = model(tokens, pad)
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    assert model.embed.weight.grad[0].abs().sum() == 0  # the pad embedding is never trained
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_backends_agree_forward_and_backward():
    eager, sdpa = _model(backend="eager").train(), _model(backend="sdpa").train()
    sdpa.load_state_dict(eager.state_dict())
    tokens = torch.randint(1, 50, (4, 30))
    pad = torch.arange(30)[None] >= torch.tensor([30, 3, 17, 25])[:, None]
    outs = []
    for model in (eager, sdpa):
        logits = model(tokens, pad)
        logits.square().sum().backward()
        outs.append((logits, [p.grad for p in model.parameters()]))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(outs[1][1], outs[0][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_grad_checkpointing_gives_identical_gradients():
    model = _model(backend="sdpa").train()
    tokens = torch.randint(1, 50, (3, 20))
    pad = torch.arange(20)[None] >= torch.tensor([20, 5, 12])[:, None]

    def run():
        model.zero_grad()
        logits = model(tokens, pad)
        logits.square().sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    ref = run()
    model.set_grad_checkpointing(True)
    assert model.encoder.checkpoint_every == 1
    got = run()
    torch.testing.assert_close(got[0], ref[0], atol=0, rtol=0)
    for a, b in zip(got[1], ref[1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match=r"model.position.kind: unknown 'rope'"):
        _model(position="rope")
    with pytest.raises(ValueError, match=r"model.pooling: unknown 'max'"):
        _model(pooling="max")
    with pytest.raises(ValueError, match=r"pad_id \(50\)"):
        TextClassifier(vocab_size=50, num_classes=2, pad_id=50)
    model = _model()
    with pytest.raises(ValueError, match=r"201 tokens exceed the model's max_len \(200\)"):
        model(torch.ones(1, 201, dtype=torch.long))
    with pytest.raises(ValueError, match="must match tokens"):
        model(torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 6, dtype=torch.bool))


def test_learns_listops_examples():
    """A few optimizer steps on a fixed ListOps batch cut the loss: the pieces train together."""
    from attnzoo.data.modules.text import TextDataModule

    dm = TextDataModule(batch_size=32, listops={"num_train": 32, "num_val": 8, "num_test": 8, "max_len": 20})
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    labels = batch.pop("label")
    model = TextClassifier(**dm.model_inputs(), dim=32, depth=1, num_heads=2).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(25):
        loss = torch.nn.functional.cross_entropy(model(**batch), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.slow
def test_listops_4k_trains_with_sliding_window_on_cpu(tmp_path):
    """The long overlay: >= 4,096 tokens, sliding-window attention on the blocked backend, a few optimizer steps."""
    import json

    from attnzoo.config import load
    from attnzoo.run import fit

    files = ["recipes/text_cls.yaml", "configs/data/listops_4k.yaml", "configs/attention/sliding_window.yaml"]
    small = ["data.listops.num_train=16", "data.listops.num_val=4", "data.listops.num_test=4", "run.test=false"]
    small += ["trainer.limit_train_batches=3", "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0"]
    cfg = load(files, [*small, "trainer.enable_progress_bar=false", f"run.dir={tmp_path}"])
    run_dir = fit(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    # right-padded batches of a plain window on CPU: the band path (keys read in place)
    assert summary["global_step"] == 3 and set(summary["attention_backends"]) == {"blocked[band]"}
    assert cfg.tree.data.listops.min_len >= 4096


BERT_STYLE = {"norm": "post", "norm_eps": 1e-12, "token_types": 2, "embed_norm": True, "pooler": True}


@pytest.mark.parametrize("pooling", POOLINGS)
def test_bert_style_options_keep_padding_invariance(pooling):
    _check_padding_invariance(_model("learned", pooling, "sdpa", **BERT_STYLE))


@pytest.mark.parametrize("attention_only", [False, True])
def test_post_norm_blocks_checkpoint_with_identical_gradients(attention_only):
    model = _model("learned", "first", "sdpa", **BERT_STYLE).train()
    tokens = torch.randint(1, 50, (3, 20))
    pad = torch.arange(20)[None] >= torch.tensor([20, 5, 12])[:, None]
    types = (torch.arange(20)[None] >= 10).long().expand(3, -1)

    def run():
        model.zero_grad()
        logits = model(tokens, pad, types)
        logits.square().sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    ref = run()
    model.set_grad_checkpointing(True, attention_only=attention_only)
    got = run()
    torch.testing.assert_close(got[0], ref[0], atol=0, rtol=0)
    for a, b in zip(got[1], ref[1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert model.type_embed.weight.grad[1].abs().sum() > 0  # the second segment's row is used


def test_bert_style_options_are_checked_and_the_defaults_add_no_tensors():
    with pytest.raises(ValueError, match=r"model.norm: unknown 'sandwich'; valid: \['pre', 'post'\]"):
        _model(norm="sandwich")
    with pytest.raises(ValueError, match="no token-type table"):
        _model()(torch.ones(1, 4, dtype=torch.long), token_types=torch.zeros(1, 4, dtype=torch.long))
    default, bert = _model().state_dict(), _model(**BERT_STYLE).state_dict()
    assert not any(k.startswith(("type_embed", "embed_norm", "pooler")) for k in default)
    assert "encoder.norm.weight" in default and "encoder.norm.weight" not in bert  # post-norm: no final norm
    assert set(bert) - set(default) == {"type_embed.weight", "embed_norm.weight", "embed_norm.bias", "pooler.weight",
                                        "pooler.bias"}  # fmt: skip
