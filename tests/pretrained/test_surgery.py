"""Attention surgery on a pretrained start: `model.attention` overrides on a model loaded from a small random BERT
or ViT folder. num_kv_heads equal to the heads reproduces the checkpoint exactly; fewer heads load the group means of
the checkpoint's key and value heads (taken here from the source's own tensors) and run; a count that does not divide
the heads stops before training; a fit starts from the folder with 2 key/value heads. Each attention kind either
starts equal to the checkpoint's attention (and the log says so) or changes the function (and the log says that)."""

import json
import logging

import pytest
import torch
from torch import nn

from attnzoo import pretrained
from attnzoo.attention import ATTENTION_KINDS, Attention
from attnzoo.attention.factory import attention_layer
from attnzoo.config import ConfigError, load
from attnzoo.pretrained import surgery
from attnzoo.pretrained.transfer import transfer
from attnzoo.run import build, fit
from attnzoo.tasks import TASKS
from tests.helpers import QUICK, ROOT, smoke_overrides
from tests.helpers.hf import SIZES, save_encoder, save_vit

TEXT = ROOT / "recipes" / "text_cls.yaml"
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu", "run.baseline=false"]
HEADS, DEPTH = SIZES["num_attention_heads"], SIZES["num_hidden_layers"]
D = SIZES["hidden_size"] // HEADS


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{family: (folder, the transformers model or None)} of a small random BERT and ViT."""
    root = tmp_path_factory.mktemp("models")
    save_vit(root / "vit")
    return {"bert": (root / "bert", save_encoder("bert", root / "bert")), "vit": (root / "vit", None)}


def _features(net, family):
    """The encoder's output [B, L, C] on fixed inputs (texts with padding, or images)."""
    torch.manual_seed(2)
    with torch.no_grad():
        if family == "vit":
            return net.eval().forward_features(torch.randn(2, 3, 32, 32))
        tokens, padding = torch.randint(5, 60, (2, 20)), torch.zeros(2, 20, dtype=torch.bool)
        padding[1, 14:] = True
        return net.eval().features(tokens, padding)


def _source_kv(folders, family, layer):
    """The checkpoint's key and value rows and biases of `layer`, per head: 4 x [H, D, ...] (weight k, v; bias k, v)."""
    folder, hf = folders[family]
    if hf is not None:  # BERT: transformers' own modules
        own = hf.encoder.layer[layer].attention.self
        tensors = [own.key.weight, own.value.weight, own.key.bias, own.value.bias]
    else:  # ViT: the converter's qkv rows (equal to transformers', tests/pretrained/test_vit.py)
        state = pretrained.convert(folder).state_dict
        w, b = (state[f"encoder.blocks.{layer}.attn.qkv.{p}"] for p in ("weight", "bias"))
        c = SIZES["hidden_size"]
        tensors = [w[c : 2 * c], w[2 * c :], b[c : 2 * c], b[2 * c :]]
    return [t.detach().view(HEADS, D, *t.shape[1:]) for t in tensors]


def _group_means(heads, kv):
    """[H, D, ...] -> [kv D, ...]: head j the mean of heads j g .. j g + g - 1 (g = H / kv), summed one by one."""
    g = HEADS // kv
    means = []
    for j in range(kv):
        total = heads[j * g].clone()
        for i in range(1, g):
            total += heads[j * g + i]
        means.append(total / g)
    return torch.cat(means)


def _assert_pooled(net, folders, family, kv):
    c = SIZES["hidden_size"]
    for layer in range(DEPTH):
        attn = net.encoder.blocks[layer].attn
        assert attn.num_kv_heads == kv
        wk, wv, bk, bv = _source_kv(folders, family, layer)
        w, b = attn.qkv.weight.detach(), attn.qkv.bias.detach()
        for got, want in (
            (w[c : c + kv * D], wk),
            (w[c + kv * D :], wv),
            (b[c : c + kv * D], bk),
            (b[c + kv * D :], bv),
        ):
            torch.testing.assert_close(got, _group_means(want, kv), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("family", ["bert", "vit"])
def test_as_many_kv_heads_as_heads_reproduces_the_checkpoint_exactly(folders, family):
    folder, hf = folders[family]
    want = _features(pretrained.load(folder, num_classes=3), family)
    got = _features(pretrained.load(folder, num_classes=3, attention={"num_kv_heads": HEADS}), family)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if hf is not None:  # and transformers' own outputs
        torch.manual_seed(2)
        tokens, padding = torch.randint(5, 60, (2, 20)), torch.zeros(2, 20, dtype=torch.bool)
        padding[1, 14:] = True
        with torch.no_grad():
            theirs = hf(input_ids=tokens, attention_mask=(~padding).long()).last_hidden_state
        torch.testing.assert_close(got[~padding], theirs[~padding], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "vit"])
@pytest.mark.parametrize("kv", [2, 1])
def test_fewer_kv_heads_load_the_group_means_and_run(folders, family, kv, caplog):
    folder, _ = folders[family]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        net = pretrained.load(folder, num_classes=3, attention={"num_kv_heads": kv})
    _assert_pooled(net, folders, family, kv)
    out = _features(net, family)
    assert out.shape == _features(pretrained.load(folder, num_classes=3), family).shape
    assert torch.isfinite(out).all()
    assert f"attention: k/v heads mean-pooled {HEADS} -> {kv} in {DEPTH} layers" in caplog.text


def _smoke():
    return [o for o in smoke_overrides(load([TEXT])) if o.startswith("data.")]


def test_a_kv_head_count_that_does_not_divide_the_heads_stops_before_training(folders, tmp_path):
    overrides = [*_smoke(), *PINNED, f"model.init_from={folders['bert'][0]}", "model.attention.num_kv_heads=3",
                 f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    said = rf"model.attention.num_kv_heads: 3 \(set in .* have {HEADS} heads.*give one of "
    with pytest.raises(ConfigError, match=said):
        fit(load([TEXT], overrides))
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_init_from_a_bert_folder_with_two_kv_heads(folders, tmp_path, caplog):
    folder = folders["bert"][0]
    overrides = [*_smoke(), *PINNED, f"model.init_from={folder}", "model.attention.num_kv_heads=2"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data, task, cfg = build(load([TEXT], overrides))
    attention = cfg.section("model")["attention"]
    assert attention["num_kv_heads"] == 2 and attention["qkv_bias"]  # the command line's, and BERT's own
    _assert_pooled(task.net, folders, "bert", 2)
    line = f"k/v heads mean-pooled {HEADS} -> 2 in {DEPTH} layers (groups of 2 averaged; it changes the function)"
    assert task.net.started_from["attention"] == [line]
    assert task.net.started_from["new"] == ["head.weight", "head.bias"]
    assert f"model.init_from: bert (HF) {folder}: " in caplog.text and f"attention: {line}" in caplog.text
    batch = next(iter(data.train_dataloader()))
    task.net.train()(**TASKS[cfg.section("task")["kind"]].net_inputs(batch)).logsumexp(-1).sum().backward()
    assert task.net.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    # the same start through fit: it trains, and the run summary says what the start did
    small = [*QUICK, "trainer.num_threads=1", "trainer.max_epochs=1", "trainer.num_sanity_val_steps=0",
             "run.test=false", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    run_dir = fit(load([TEXT], [*overrides, *small]))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["init_from"]["attention"] == [line]


@pytest.mark.parametrize("family", ["bert", "vit"])
@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_each_kind_starts_equal_to_the_checkpoint_or_the_log_says_it_changes_the_function(folders, family, kind,
                                                                                         caplog):  # fmt: skip
    folder, _ = folders[family]
    if kind == "mla":
        with pytest.raises(ValueError, match=r"cannot start attention kind 'mla'.*projects with kv, proj, q, and the "
                                             r"checkpoint's with proj, qkv"):  # fmt: skip
            pretrained.load(folder, num_classes=3, attention={"kind": kind})
        return
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        net = pretrained.load(folder, num_classes=3, attention={"kind": kind})
    got, want = _features(net, family), _features(pretrained.load(folder, num_classes=3), family)
    said = [line for line in caplog.text.splitlines() if f"kind {kind!r} in place of 'mha' in {DEPTH} layers" in line]
    if kind == "mha":
        assert not said and "attention:" not in caplog.text
    elif ATTENTION_KINDS[kind].starts_as_mha:
        assert len(said) == 1 and said[0].endswith("it starts equal to the checkpoint's attention")
    else:
        assert len(said) == 1 and said[0].endswith("it changes the function")
    if ATTENTION_KINDS[kind].starts_as_mha:
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    else:
        assert (got - want).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("attention", "line"),
    [
        (
            {"kind": "gated"},
            "kind 'gated' in place of 'mha' in 2 layers: gate starts fresh (weights and biases at 0: a "
            "gate of 0.5 for every input, and proj.weight doubled); it starts equal to the checkpoint's "
            "attention",
        ),  # fmt: skip
        (
            {"kind": "sinks"},
            "kind 'sinks' in place of 'mha' in 2 layers: sinks starts fresh (sink logits at 0: a "
            "softmax plus one); it changes the function",
        ),  # fmt: skip
        (
            {"kind": "sigmoid"},
            "kind 'sigmoid' in place of 'mha' in 2 layers: nothing new (elementwise sigmoids instead "
            "of the softmax); it changes the function",
        ),  # fmt: skip
        ({"bias": "t5"}, "bias.table starts fresh in 2 layers; it changes the function"),
        ({"bias": "alibi"}, "bias 'alibi' added in 2 layers (it has no tensors); it changes the function"),
        ({"rotary": "rope"}, "rotary 'rope' added in 2 layers (it has no tensors); it changes the function"),  # unsaid
        (  # a pattern made of parts is named whole
            {"pattern": {"kind": "bigbird", "window": 4, "global_tokens": [0], "num_random": 1, "block": 4}},
            "pattern 'bigbird' added in 2 layers (it masks scores, no tensors)",
        ),
        (  # unsaid before: summary.json's init_from.attention was empty
            {"pattern": {"kind": "sliding_window", "window": 8}},
            "pattern 'sliding_window' added in 2 layers (it masks scores, no tensors); it changes the function where a "
            "query would read keys it leaves out",
        ),
        (
            {"num_kv_heads": 1, "kind": "talking_heads"},
            "k/v heads mean-pooled 4 -> 1 in 2 layers (groups of 4 averaged; it changes the function)",
        ),  # fmt: skip
    ],
)
def test_the_log_says_what_an_attention_override_carried_over_and_what_starts_fresh(folders, attention, line, caplog):
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        pretrained.load(folders["bert"][0], num_classes=3, attention=attention)
    assert f"attention: {line}" in caplog.text
    assert "pattern 'global'" not in caplog.text  # no line for a part of BigBird's pattern


def test_a_run_of_another_kind_is_named_as_the_source(folders):
    folder = folders["bert"][0]
    gated = pretrained.load(folder, num_classes=3, attention={"kind": "gated"}).state_dict()
    again = transfer(pretrained.load(folder, num_classes=3, attention={"kind": "gated"}), gated, source="run",
                     source_kind="gated")  # fmt: skip
    assert again.attention == [] and again.new == [] and again.dropped == []
    mha = transfer(pretrained.load(folder, num_classes=3), gated, source="run", source_kind="gated")
    assert mha.attention == ["kind 'mha' in place of 'gated' in 2 layers: nothing new; it changes the function"]
    assert mha.dropped == [f"encoder.blocks.{i}.attn.gate.{p}" for i in range(DEPTH) for p in ("weight", "bias")]


class Scaled(Attention):
    """A user's own kind that says nothing about starting from a multi-head checkpoint."""


def test_a_users_own_kind_is_named_and_not_claimed_to_start_equal():
    net = nn.ModuleDict({"attn": Scaled(32, 4)})
    state = {f"attn.{k}": v for k, v in Attention(32, 4).state_dict().items()}
    assert surgery.changes(net, state, []) == [
        "kind 'Scaled' in place of 'mha' in 1 layer: nothing new; it may change the function (its class does not set "
        "starts_as_mha)"
    ]
    assert surgery.kind_name(Attention.configure(qkv_bias=True)(32, 4)) == "mha"  # timm's attn_layer wrappers
    assert surgery.kind_name(attention_layer({"kind": "gated"})(32, 4)) == "gated"


def test_the_checkpoints_biases_are_read_from_each_of_its_attention_sections():
    """A seq2seq checkpoint's ALiBi sits in its decoder's section: loading it into the same model notes no change."""
    from attnzoo.pretrained.transfer import source_biases

    options = {"attention": {"kind": "mha"}, "decoder_attention": {"bias": "alibi"}, "cross_attention": {"bias": None}}
    assert source_biases(options) == {"alibi"}
    assert source_biases({"attention": {"bias": {"kind": "t5", "num_buckets": 8}}}) == {"t5"}
    assert source_biases({"attention": {"rotary": "rope"}}) == {"rope"}  # a rope run into a rope model: no change
    assert source_biases({"attention": {"pattern": {"kind": "bigbird", "window": 4}}}) == {"bigbird"}


@pytest.mark.parametrize(
    ("after", "line"),
    [
        ({"rotary": "rope"},
         "model.attention.pattern 'sliding_window' of the checkpoint removed; it changes the function"),
        ({"pattern": {"kind": "sliding_window", "window": 1}, "rotary": "rope"},
         "model.attention.pattern: {'kind': 'sliding_window', 'window': 4} there, {'kind': 'sliding_window', 'window': "
         "1} here; it changes the function"),
        ({"pattern": {"kind": "sliding_window", "window": 4}, "rotary": {"kind": "rope", "base": 100}},
         "model.attention.rotary: 'rope' there, {'kind': 'rope', 'base': 100} here; it changes the function"),
        ({"pattern": {"kind": "sliding_window", "window": 4}, "rotary": "rope", "qk_norm": True},
         "model.attention.qk_norm: False there, True here; it changes the function"),
    ],
)  # fmt: skip
def test_a_part_of_the_checkpoints_attention_removed_or_given_other_options_is_named(folders, after, line):
    """An attnzoo run trained with a window of 4 and rope: the pattern removed, the window made 1, rope's base or
    qk_norm changed, each changed the outputs with no word in the log or in summary.json's init_from.attention."""
    before = {"pattern": {"kind": "sliding_window", "window": 4}, "rotary": "rope"}
    net = pretrained.load(folders["bert"][0], num_classes=3, attention=before)
    source = {"attention": before}
    done = transfer(pretrained.load(folders["bert"][0], num_classes=3, attention=after), net.state_dict(),
                    source="run", options=source, target={"attention": after})  # fmt: skip
    assert line in done.attention, done.attention
    same = transfer(pretrained.load(folders["bert"][0], num_classes=3, attention=before), net.state_dict(),
                    source="run", options=source,
                    target={"attention": {**before, "rotary": {"kind": "rope", "base": 10000.0}}})  # fmt: skip
    assert same.attention == []  # rope's default base, spelled out: the same function
    bigbird = {"kind": "bigbird", "window": 8, "global_tokens": [0]}  # the default global tokens (0,), as a list
    assert surgery.option_changes({"attention": {"pattern": bigbird}},
                                  {"attention": {"pattern": {"kind": "bigbird", "window": 8}}}) == []  # fmt: skip
