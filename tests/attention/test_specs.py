"""Specs and layer shapes: a context key nobody knows is an error naming it, never dropped; seq_len has one source."""

import pytest

from attnzoo.attention import factory
from attnzoo.attention.biases import BIASES
from attnzoo.attention.factory import LAYER_SHAPE_KEYS, attention_layer, layer_shape
from attnzoo.attention.specs import CONTEXT_KEYS, build, suggest
from attnzoo.layers.encoder import make_encoder


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: attention_layer({"pattern": {"kind": "global"}}, num_prefix_token=1),
            r"model.attention \(attention_layer\): unknown context key 'num_prefix_token' .*"
            r"valid: \['seq_len', 'grid_size', 'num_prefix_tokens'\]; did you mean 'num_prefix_tokens'\?",
        ),
        (lambda: attention_layer({}, max_len=64), r"unknown context key 'max_len'"),  # no attention part reads it
        (lambda: attention_layer({}, num_heads=4), r"unknown context key 'num_heads'"),  # set per layer, not by models
        (
            lambda: make_encoder(dim=32, depth=1, num_heads=4, layer_shape={"seqlen": 5}),
            r"'seqlen'.*did you mean 'seq_len'",
        ),
        (
            lambda: build("relative_2d", BIASES, "model.attention.bias", num_heads=2, grid=(2, 2)),
            r"model.attention.bias: unknown context key 'grid' .*valid: \[.*'grid_size'.*\]; did you mean 'grid_size'",
        ),
    ],
)
def test_an_unknown_context_key_raises_naming_it_and_the_valid_keys(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_layer_shape_keys_are_part_of_the_context_vocabulary():
    assert set(LAYER_SHAPE_KEYS) <= set(CONTEXT_KEYS)
    assert factory.attention_context is layer_shape and factory.MODEL_CONTEXT is LAYER_SHAPE_KEYS  # earlier names


def test_layer_shape_derives_seq_len_from_the_token_layout():
    assert layer_shape(grid_size=(3, 4), num_prefix_tokens=2) == {
        "seq_len": 14,
        "num_prefix_tokens": 2,
        "grid_size": (3, 4),
    }
    assert layer_shape(max_len=16, num_prefix_tokens=1) == {"seq_len": 17, "num_prefix_tokens": 1}
    for bad in ({}, {"grid_size": (2, 2), "max_len": 4}):
        with pytest.raises(ValueError, match="exactly one"):
            layer_shape(**bad)


def test_context_reaches_the_parts_that_name_it():
    layer = attention_layer({"kind": "linformer"}, **layer_shape(grid_size=(2, 3), num_prefix_tokens=1))(16, 2)
    assert layer.seq_len == 7
    bias = build("relative_2d", BIASES, "bias", num_heads=2, head_dim=8, grid_size=(2, 3), num_prefix_tokens=1)
    assert bias.grid_size == (2, 3) and bias.num_prefix_tokens == 1


def test_suggest_prefers_the_first_of_equally_close_choices():
    assert suggest("mah", ["mha", "talking_heads", "mla"]) == "; did you mean 'mha'?"  # as close to 'mla'
    assert suggest("sinkz", ["mha", "sinks"]) == "; did you mean 'sinks'?"
    assert suggest("xyz", ["mha", "sinks"]) == ""


def test_a_global_pattern_takes_the_class_token_from_the_layer_shape():
    # {kind: global} was refused by the config check ("needs at least one token") on a ViT with a class token, before
    # the layer shape gave it num_prefix_tokens=1: the surgery variant could not run, from scratch either
    from attnzoo.attention.patterns import PATTERNS
    from attnzoo.attention.specs import check_spec

    check_spec({"kind": "global"}, PATTERNS, "model.attention.pattern")
    layer = attention_layer({"pattern": {"kind": "global"}}, **layer_shape(grid_size=(2, 2), num_prefix_tokens=1))
    assert layer(16, 2).pattern.tokens == (0,)
    with pytest.raises(ValueError, match="needs at least one token"):  # no class token: nothing to make global
        attention_layer({"pattern": {"kind": "global"}}, **layer_shape(grid_size=(2, 2)))(16, 2)
    with pytest.raises(ValueError, match=r"model\.attention\.pattern \(global\): .*each global token position"):
        check_spec({"kind": "global", "tokens": [-1]}, PATTERNS, "model.attention.pattern")  # no context fixes it
