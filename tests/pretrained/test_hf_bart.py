"""BART (Hugging Face) -> Seq2Seq: a small random BartForConditionalGeneration saved to disk converts exactly (encoder
hidden states and decoder logits within 1e-5 in fp32, with padded sources; greedy generation gives HF's tokens), the
translation recipe starts from it, and checkpoints that do not fit say which file and tensor."""

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from attnzoo.generation import greedy
from attnzoo.models import MODELS
from attnzoo.pretrained import convert, hf_bart
from tests.helpers import QUICK, ROOT
from tests.helpers.hf import save_bart

TEXTS = ["The meeting is on Monday, 3 March.", "Das Treffen ist am Montag, 3. März."] * 10
BOS, PAD, EOS, SPECIALS = 0, 1, 2, 5  # tests.helpers.hf.BART_SPECIALS: <s>, <pad>, </s>, <unk>, <mask>


def _converted(path, **overrides):
    c = hf_bart.convert(path)
    model = MODELS[c.model_kind](**{**c.options, **overrides})
    model.load_state_dict(c.state_dict)  # strict
    return c, model.eval()


def _source(vocab: int):
    """Three sources of 9, 6 and 3 tokens, right-padded: (ids [3, 9], HF attention mask, attnzoo padding mask)."""
    torch.manual_seed(1)
    ids = torch.randint(SPECIALS, vocab, (3, 9))
    padding = torch.arange(9)[None] >= torch.tensor([9, 6, 3])[:, None]  # [3, 9], True = pad
    return ids.masked_fill(padding, PAD), (~padding).long(), padding


@pytest.mark.parametrize("scale_embedding", [False, True])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_hidden_states_and_logits_equal_transformers(tmp_path, scale_embedding, backend):
    hf = save_bart(tmp_path, TEXTS, scale_embedding=scale_embedding)
    assert hf_bart.matches(tmp_path)
    c = convert(tmp_path)
    parts = {k: {**c.options[k], "backend": backend} for k in ("attention", "cross_attention")}
    _, model = _converted(tmp_path, **parts)
    src, mask, padding = _source(hf.config.vocab_size)
    tgt = torch.randint(SPECIALS, hf.config.vocab_size, (3, 7))
    tgt[:, 0] = BOS
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt)
        memory = model.encode(src, padding)
        logits = model(src, tgt, padding)
    real = ~padding
    torch.testing.assert_close(memory[real], want.encoder_last_hidden_state[real], atol=1e-5, rtol=0)
    assert want.logits.abs().max() > 1.0  # logits far from uniform: a misplaced tensor would show
    torch.testing.assert_close(logits, want.logits, atol=1e-5, rtol=0)


def test_greedy_generation_equals_hf_generate(tmp_path):
    hf = save_bart(tmp_path, TEXTS, std=0.1, tie_word_embeddings=False)  # random tied models repeat their input token
    _, model = _converted(tmp_path)
    src, mask, padding = _source(hf.config.vocab_size)
    with torch.no_grad():  # </s> made likelier in both: rows end at different steps (one runs to the limit)
        hf.final_logits_bias[0, EOS] += 1.0
        model.logits_bias[EOS] += 1.0
        want = hf.generate(input_ids=src, attention_mask=mask, decoder_start_token_id=BOS, max_new_tokens=10,
                           do_sample=False, num_beams=1, no_repeat_ngram_size=0, repetition_penalty=1.0,
                           forced_bos_token_id=None, forced_eos_token_id=None, min_length=0, eos_token_id=EOS,
                           pad_token_id=PAD)[:, 1:]  # fmt: skip  # HF's rows start with the start token
    got = greedy(model, src=src, src_padding_mask=padding, bos_id=BOS, eos_id=EOS, pad_id=PAD, max_new_tokens=10)
    assert torch.equal(got, want[:, : got.shape[1]]) and (want[:, got.shape[1] :] == PAD).all()
    assert len(set(got.flatten().tolist())) > 3  # real sequences, not one token repeated
    ended = [(row == EOS).nonzero()[0].item() if (row == EOS).any() else None for row in got]
    assert None in ended and len(set(ended)) == 3, got  # rows end at different steps, and one never


def test_untied_head_and_a_bart_model_without_one(tmp_path):
    hf = save_bart(tmp_path / "untied", TEXTS, tie_word_embeddings=False)
    c, model = _converted(tmp_path / "untied")
    assert c.options["tie_embeddings"] is False and "head.weight" in c.state_dict
    src, mask, padding = _source(hf.config.vocab_size)
    tgt = torch.randint(SPECIALS, hf.config.vocab_size, (3, 5))
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt, padding), want, atol=1e-5, rtol=0)
    hf.model.save_pretrained(tmp_path / "bare")  # BartModel: no `model.` prefix, no final_logits_bias
    config = {**hf.model.config.to_dict(), "tie_word_embeddings": True}  # a BartModel has no head to untie
    (tmp_path / "bare" / "config.json").write_text(json.dumps(config))
    c, model = _converted(tmp_path / "bare")
    assert torch.equal(c.state_dict["logits_bias"], torch.zeros(hf.config.vocab_size))
    with torch.no_grad():
        want = hf.model.encoder(input_ids=src, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(model.encode(src, padding)[~padding], want[~padding], atol=1e-5, rtol=0)


def test_the_conversion_brings_the_tokenizer_and_the_registry_finds_it(tmp_path):
    save_bart(tmp_path, TEXTS)
    c = convert(tmp_path)
    assert (c.model_kind, c.tokenizer, c.source) == ("seq2seq", tmp_path / "tokenizer.json", f"bart (Hugging Face) "
                                                                                             f"{tmp_path}")  # fmt: skip
    assert (c.options["norm"], c.options["scale_embeddings"], c.options["pad_id"]) == ("post", False, PAD)
    table = c.state_dict["tgt_positions.pos_embed.table"]
    assert table.shape == (1, 80, 32)  # rows 2 .. 82 of BART's table of 82


def test_a_folder_without_tokenizer_json_converts_and_says_what_is_missing(tmp_path, caplog):
    save_bart(tmp_path, TEXTS)
    (tmp_path / "tokenizer.json").unlink()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert hf_bart.convert(tmp_path).tokenizer is None
    assert "has no tokenizer.json, vocab.txt or vocab.json + merges.txt" in caplog.text
    assert "copy it from where the model was downloaded" in caplog.text


def test_wrong_checkpoints_name_file_and_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    save_bart(tmp_path, TEXTS)
    file = tmp_path / "model.safetensors"
    state = load_file(file)
    key = "model.decoder.layers.1.encoder_attn.k_proj.weight"
    state[key] = torch.zeros(32, 16)
    save_file(state, file)
    with pytest.raises(ValueError, match=rf"model.safetensors.*'{key}' has shape \[32, 16\]"):
        hf_bart.convert(tmp_path)
    del state[key]
    save_file(state, file)
    with pytest.raises(ValueError, match=rf"'{key}' is missing"):
        hf_bart.convert(tmp_path)


def test_source_and_target_tables_that_differ_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    save_bart(tmp_path, TEXTS, tie_word_embeddings=False)  # all three tables saved, equal
    file = tmp_path / "model.safetensors"
    state = load_file(file)
    state["model.decoder.embed_tokens.weight"] = state["model.decoder.embed_tokens.weight"] + 1
    save_file(state, file)
    with pytest.raises(ValueError, match=r"'model.decoder.embed_tokens.weight' differs from 'model.shared.weight'"):
        hf_bart.convert(tmp_path)


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"normalize_before": True}, "normalize_before=True is not supported"),
        ({"activation_function": "relu"}, "activation_function='relu' is not supported"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads=2 is not supported"),
        ({"model_type": "mbart"}, None),
    ],
)
def test_refuses_what_it_cannot_reproduce(tmp_path, config, error):
    save_bart(tmp_path, TEXTS)
    file = tmp_path / "config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **config}))
    if error is None:
        assert not hf_bart.matches(tmp_path)
        return
    with pytest.raises(ValueError, match=error):
        hf_bart.convert(tmp_path)


def test_fit_starts_from_a_saved_bart_and_the_summary_names_it(tmp_path):
    save_bart(tmp_path / "bart", TEXTS)
    small = ["data.num_train=64", "data.num_val=8", "data.num_test=8", "data.batch_size=16", "task.beam_size=2",
             "trainer.limit_train_batches=2", "trainer.num_sanity_val_steps=0", "run.baseline=false"]  # fmt: skip
    command = [sys.executable, "-m", "attnzoo.fit", "--config", str(ROOT / "recipes" / "translation.yaml"),
               f"model.init_from={tmp_path / 'bart'}", "trainer.max_epochs=1", *small, *QUICK,
               f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary_file,) = (tmp_path / "runs").rglob("summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["finished"] and summary["init_from"]["source"] == f"bart (Hugging Face) {tmp_path / 'bart'}"
    assert summary["init_from"]["new"] == [] and summary["init_from"]["tokenizer"] == str(tmp_path / "bart" /
                                                                                          "tokenizer.json")  # fmt: skip
    config = (summary_file.parent / "config.yaml").read_text()
    assert "norm: post" in config and "decoder_positions: true" in config
    assert (summary_file.parent / "tokenizer.json").read_text() == (tmp_path / "bart" / "tokenizer.json").read_text()


def test_overrides_of_the_decoder_and_cross_attention_keep_barts_biases_and_start_equal(tmp_path):
    # decoder_attention / cross_attention overrides replaced the checkpoint's whole section: its q/k/v biases were
    # dropped (listed, not refused) while the log said the layer starts equal; a qkv_bias: false did the same
    from attnzoo.pretrained import load

    hf = save_bart(tmp_path, TEXTS)
    src, _, padding = _source(hf.config.vocab_size)
    tgt = torch.randint(SPECIALS, hf.config.vocab_size, (3, 7))
    with torch.no_grad():
        want = load(tmp_path).eval()(src, tgt, padding)
        for override in (
            {"decoder_attention": {"kind": "gated"}},
            {"decoder_attention": {"pattern": "causal"}},
            {"cross_attention": {"num_kv_heads": 4}},
        ):
            got = load(tmp_path, **override).eval()(src, tgt, padding)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0, msg=str(override))
    # the override kept BART's biases but not its decoder self-attention's dropout (0.1 here; without one: 0.1)
    drops = {
        load(tmp_path, **o).decoder.blocks[0].attn.proj_drop.p for o in ({}, {"decoder_attention": {"kind": "gated"}})
    }
    assert drops == {hf.config.dropout}
    with pytest.raises(ValueError, match=r"does not fit this model: its tensor 'encoder\.blocks\.0\.attn\.qkv\.bias' "
                                         r"has no place here .*leave the attention's qkv_bias out"):  # fmt: skip
        load(tmp_path, attention={"qkv_bias": False})


def test_a_pattern_on_cross_attention_is_refused_before_training():
    # it trained, then failed at the first validation's beam search (a cache reads the whole source)
    with pytest.raises(ValueError, match=r"model.cross_attention.pattern: .*decodes with a cache"):
        MODELS["seq2seq"].check_config({"cross_attention": {"pattern": {"kind": "sliding_window", "window": 2}}})


def test_a_decoder_attention_override_on_the_command_line_keeps_barts_decoder_biases(tmp_path):
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_bart(tmp_path / "bart", TEXTS)
    recipe = ROOT / "recipes" / "translation.yaml"
    small = ["data.num_train=64", "data.num_val=8", "data.num_test=8", "run.baseline=false", *QUICK]
    cfg = load_config([recipe], [*small, f"model.init_from={tmp_path / 'bart'}", "model.decoder_attention.kind=gated"])
    _, task, built = build(cfg)
    decoder = built.section("model")["decoder_attention"]
    assert decoder["kind"] == "gated" and decoder["qkv_bias"] is True
    assert task.net.started_from["dropped"] == [] and task.net.started_from["new"] == [
        f"decoder.blocks.{i}.attn.gate.{p}" for i in range(2) for p in ("weight", "bias")
    ]


def test_a_start_with_fewer_layers_loads_the_first_and_a_from_scratch_decoder_keeps_its_own_layout(tmp_path):
    # the projection refusal fired on the blocks a shallower model leaves out (review); and the decoder's layout
    # must not follow model.attention in a model built from scratch (runs saved before would not load)
    from attnzoo.pretrained import load

    save_bart(tmp_path, TEXTS)
    assert len(load(tmp_path, decoder_depth=1).decoder.blocks) == 1
    scratch = MODELS["seq2seq"](
        vocab_size=50, dim=32, num_heads=4, attention={"qkv_bias": True}, decoder_attention={"pattern": "causal"}
    )
    assert "decoder.blocks.0.attn.qkv.bias" not in scratch.state_dict()
    for empty in ({"kind": "none"}, False, "none", None):  # a cross-attention "pattern" that names none is fine
        MODELS["seq2seq"].check_config({"cross_attention": {"pattern": empty}})
