"""GPT-2 (Hugging Face) -> CausalLM: a small random GPT2LMHeadModel saved to disk converts exactly (logits within
1e-5 in fp32, right padding, greedy generation), and checkpoints that do not fit say which file and tensor."""

import pytest
import tokenizers
import torch
import transformers

from attnzoo.generation import greedy
from attnzoo.models import MODELS
from attnzoo.pretrained import hf_gpt2

VOCAB, EOS = 97, 96


def _gpt2(tmp_path, safe=True, **config):
    """A random GPT-2 with weights large enough that greedy choices are clear, saved in tmp_path."""
    base = dict(vocab_size=VOCAB, n_positions=24, n_embd=32, n_layer=2, n_head=4, bos_token_id=EOS, eos_token_id=EOS)
    cfg = transformers.GPT2Config(**{**base, **config}, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # LayerNorm scales and biases too: every tensor is checked
            p.normal_(1.0 if name.endswith("ln_1.weight") or "ln_2.weight" in name else 0.0, 0.3)
    model.save_pretrained(tmp_path)
    if not safe:  # the older format: a pickled state dict, read with weights_only=True
        (tmp_path / "model.safetensors").unlink()
        torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    return model


def _converted(path):
    c = hf_gpt2.convert(path)
    model = MODELS[c.model_kind](**c.options)
    model.load_state_dict(c.state_dict)  # strict
    return c, model.eval()


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_logits_equal_hf(tmp_path, safe, act):
    hf = _gpt2(tmp_path, safe, activation_function=act, layer_norm_epsilon=1e-6)
    assert hf_gpt2.matches(tmp_path)
    c, model = _converted(tmp_path)
    assert c.model_kind == "lm" and c.options["norm_eps"] == 1e-6 and c.tokenizer is None
    tokens = torch.randint(0, VOCAB, (3, 24))
    with torch.no_grad():
        want = hf(tokens).logits
        got = model(tokens)
    assert want.abs().max() > 1.0  # logits far from uniform: a wrong tensor would show
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_right_padding_matches_hf_attention_mask(tmp_path):
    hf = _gpt2(tmp_path)
    _, model = _converted(tmp_path)
    tokens = torch.randint(0, VOCAB - 1, (2, 10))
    mask = torch.ones_like(tokens)
    mask[0, 6:] = 0  # row 0: 6 real tokens, then padding
    tokens[0, 6:] = EOS
    with torch.no_grad():
        want = hf(tokens, attention_mask=mask).logits
        got = model(tokens)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=0)


def test_the_padding_token_embedding_trains(tmp_path):
    _gpt2(tmp_path)
    c, model = _converted(tmp_path)
    assert c.options["pad_id"] == EOS  # GPT-2 has no padding token: end of text pads, as in HF generate
    model(torch.tensor([[EOS, 3, EOS]])).sum().backward()
    assert model.embed.embed.weight.grad[EOS].abs().sum() > 0


def test_untied_head(tmp_path):
    hf = _gpt2(tmp_path, tie_word_embeddings=False)
    c, model = _converted(tmp_path)
    assert c.options["tie_embeddings"] is False
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), hf(tokens).logits, atol=1e-5, rtol=0)


def test_greedy_generation_equals_hf_generate(tmp_path):
    hf = _gpt2(tmp_path)
    _, model = _converted(tmp_path)
    prompt = torch.randint(0, VOCAB - 1, (2, 5))
    with torch.no_grad():
        want = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=EOS,
            eos_token_id=EOS,
        )[:, 5:]
    got = greedy(model, prompt=prompt, eos_id=EOS, pad_id=EOS, max_new_tokens=8)
    assert torch.equal(got, want[:, : got.shape[1]]) and (want[:, got.shape[1] :] == EOS).all()
    assert len(set(got.flatten().tolist())) > 2  # a real sequence, not one token repeated


def test_tokenizer_comes_along(tmp_path):
    _gpt2(tmp_path)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    tok.save(str(tmp_path / "tokenizer.json"))
    assert hf_gpt2.convert(tmp_path).tokenizer == tmp_path / "tokenizer.json"


def test_wrong_checkpoints_name_file_and_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    _gpt2(tmp_path)
    file = tmp_path / "model.safetensors"
    state = load_file(file)
    state["transformer.h.1.mlp.c_fc.weight"] = torch.zeros(32, 64)
    save_file(state, file)
    with pytest.raises(ValueError, match=r"model.safetensors.*'transformer.h.1.mlp.c_fc.weight' has shape \[32, 64\]"):
        hf_gpt2.convert(tmp_path)
    del state["transformer.h.1.mlp.c_fc.weight"]
    save_file(state, file)
    with pytest.raises(ValueError, match=r"'transformer.h.1.mlp.c_fc.weight' is missing"):
        hf_gpt2.convert(tmp_path)
    file.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        hf_gpt2.convert(tmp_path)


def test_refuses_what_it_cannot_reproduce(tmp_path):
    _gpt2(tmp_path, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True is not supported"):
        hf_gpt2.convert(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert not hf_gpt2.matches(tmp_path)
    assert not hf_gpt2.matches(tmp_path / "nowhere")


def test_shorter_max_len_and_attention_that_starts_equal(tmp_path, caplog):
    """A recipe's shorter max_len keeps the first positions (exact); attention overrides that start as the original
    (a window longer than the text, as many kv heads as heads, another backend) reproduce its logits."""
    hf = _gpt2(tmp_path)
    c = hf_gpt2.convert(tmp_path)
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        want = hf(tokens).logits
    same = [
        {},
        {"pattern": {"kind": "sliding_window", "window": 16}},
        {"num_kv_heads": 4, "backend": "sdpa"},
    ]
    for attention in same:
        model = MODELS["lm"](**{**c.options, "max_len": 16, "attention": {**c.options["attention"], **attention}})
        with caplog.at_level("INFO", logger="attnzoo"):
            model.load_state_dict(c.state_dict)
        assert "kept the first 16 of 24 loaded positions" in caplog.text
        with torch.no_grad():
            torch.testing.assert_close(model.eval()(tokens), want, atol=1e-5, rtol=0)
