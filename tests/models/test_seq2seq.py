"""Seq2Seq and CausalLM: teacher forcing, tied embeddings, checkpointing parity, BART's options (post-norm, an
embedding norm, a position table per stack, a fixed logits bias), and a tiny model that learns to copy and then
generates its targets over the cache."""

import pytest
import torch
import torch.nn.functional as F

from attnzoo.generation import beam_search, greedy
from attnzoo.models import MODELS, CausalLM, Seq2Seq

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
# the options a converted BART sets (attnzoo.pretrained.hf_bart)
BART = dict(norm="post", scale_embeddings=False, embed_norm=True, decoder_positions=True, logits_bias=True)


def test_registered_as_model_kinds():
    assert MODELS["seq2seq"] is Seq2Seq and MODELS["lm"] is CausalLM


@pytest.mark.parametrize("options", [{}, BART], ids=["default", "bart"])
def test_teacher_forcing_is_the_decoder_over_the_encoded_source(options):
    model = Seq2Seq(vocab_size=VOCAB, dim=32, num_heads=4, encoder_depth=1, decoder_depth=2, max_len=16, **options)
    model.eval()
    src = torch.randint(3, VOCAB, (2, 6))
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    tgt_in = torch.randint(3, VOCAB, (2, 5))
    with torch.no_grad():
        logits = model(src, tgt_in, pad)
        assert logits.shape == (2, 5, VOCAB)
        torch.testing.assert_close(logits, model.decode_step(tgt_in, model.encode(src, pad), pad))
        padded = torch.cat([tgt_in, torch.full((2, 3), PAD)], dim=1)  # right padding changes no earlier logit
        torch.testing.assert_close(model(src, padded, pad)[:, :5], logits)


@pytest.mark.parametrize("cls", [Seq2Seq, CausalLM])
def test_tied_embeddings_have_no_separate_head(cls):
    tied = cls(vocab_size=VOCAB, dim=32, num_heads=4, max_len=16)
    untied = cls(vocab_size=VOCAB, dim=32, num_heads=4, max_len=16, tie_embeddings=False)
    assert tied.head is None and not any(k.startswith("head.") for k in tied.state_dict())
    assert untied.head.weight.shape == (VOCAB, 32)
    assert not tied.embed.embed.weight[PAD].detach().any()  # the padding row starts at zero


@pytest.mark.parametrize("options", [{}, BART], ids=["default", "bart"])
def test_checkpointing_gives_identical_logits_and_grads(options):
    torch.manual_seed(0)
    sizes = dict(dim=32, num_heads=4, encoder_depth=2, decoder_depth=2, max_len=16)
    model = Seq2Seq(vocab_size=VOCAB, **sizes, drop_rate=0, **options)
    src, tgt_in = torch.randint(3, VOCAB, (2, 6)), torch.randint(3, VOCAB, (2, 5))

    def run():
        model.zero_grad()
        out = model(src, tgt_in)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    out_off, grads_off = run()
    model.set_grad_checkpointing(True)
    out_on, grads_on = run()
    assert torch.equal(out_on, out_off)
    for a, b in zip(grads_on, grads_off, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_bart_options_build_their_parts_and_the_defaults_none():
    from attnzoo.layers import DecoderBlock, PostNormBlock, PostNormDecoderBlock, TransformerBlock

    sizes = dict(vocab_size=VOCAB, dim=32, num_heads=4, encoder_depth=1, decoder_depth=1, max_len=16)
    default, bart = Seq2Seq(**sizes), Seq2Seq(**sizes, position="learned", **BART)
    assert {k for k in bart.state_dict()} - {k for k in default.state_dict()} == {
        "embed.norm.weight", "embed.norm.bias", "tgt_positions.pos_embed.table", "tgt_positions.norm.weight",
        "tgt_positions.norm.bias", "logits_bias", "embed.pos_embed.table",
    }  # fmt: skip
    assert {k for k in default.state_dict()} - {k for k in bart.state_dict()} == {
        "encoder.norm.weight", "encoder.norm.bias", "decoder.norm.weight", "decoder.norm.bias",
    }  # fmt: skip  # post-norm stacks end in a norm of their own
    assert type(default.encoder.blocks[0]) is TransformerBlock and type(default.decoder.blocks[0]) is DecoderBlock
    assert type(bart.encoder.blocks[0]) is PostNormBlock and type(bart.decoder.blocks[0]) is PostNormDecoderBlock
    assert default.embed.scale == 32**0.5 and bart.embed.scale == 1.0
    assert "logits_bias" not in dict(bart.named_parameters())  # a buffer: it does not train
    with torch.no_grad():
        bart.logits_bias[3] = 100.0
        assert (bart.eval()(torch.tensor([[4, 5]]), torch.tensor([[BOS, 6]])).argmax(-1) == 3).all()
    with pytest.raises(ValueError, match=r"model.norm: unknown 'sandwich'; valid: \['pre', 'post'\]"):
        Seq2Seq(**sizes, norm="sandwich")


def test_max_len_is_enforced_with_a_clear_error():
    model = CausalLM(vocab_size=VOCAB, dim=32, num_heads=4, depth=1, max_len=8, position="learned").eval()
    with pytest.raises(ValueError, match=r"positions up to 9 exceed the model's max_len \(8\)"):
        model(torch.ones(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="CausalLM has no encoder"):
        model.decode_step(torch.ones(1, 2, dtype=torch.long), torch.zeros(1, 2, 32))


def test_a_tiny_model_learns_to_copy_and_generates_it():
    torch.manual_seed(0)
    model = Seq2Seq(
        vocab_size=VOCAB,
        dim=32,
        num_heads=4,
        encoder_depth=1,
        decoder_depth=1,
        max_len=12,
        drop_rate=0,
        attention={"num_kv_heads": 2, "rotary": "rope"},
        position="none",
    )
    src = torch.randint(3, VOCAB, (8, 5))
    src[4:, 3:] = PAD  # four sources of 3 tokens
    pad = src == PAD
    tgt = [s[s != PAD].tolist() for s in src]
    tgt_in = torch.full((8, 6), PAD)
    labels = torch.full((8, 6), -100)
    for i, t in enumerate(tgt):
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS, *t])
        labels[i, : len(t) + 1] = torch.tensor([*t, EOS])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = F.cross_entropy(model(src, tgt_in, pad).flatten(0, 1), labels.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    model.eval()
    out = greedy(model, src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, pad_id=PAD, max_new_tokens=8)
    beams = beam_search(model, src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=8, beam_size=3)
    for i, t in enumerate(tgt):
        assert out[i, : len(t) + 1].tolist() == [*t, EOS]
        assert beams.hypotheses[i][0].tokens.tolist() == [*t, EOS]
