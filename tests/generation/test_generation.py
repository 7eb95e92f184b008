"""Generation over the cache equals generation by full recomputation, for every position scheme, decodable
pattern and attention kind, with GQA, padded sources of different lengths, in fp32 and bf16; beam search
against greedy and against exhaustive search; sampling filters."""

import contextlib
import itertools
import math

import pytest
import torch

from attnzoo.attention import ATTENTION_KINDS, capture_attention
from attnzoo.generation import NonFiniteScores, Steps, beam_search, filter_logits, greedy, sample
from attnzoo.models import CausalLM, Seq2Seq

VOCAB, BOS, EOS, PAD = 24, 1, 2, 0

# position schemes: absolute encodings, or attention parts (with position: none)
POSITIONS = {
    "sinusoidal": ("sinusoidal", {}),
    "learned": ("learned", {}),
    "rope": ("none", {"rotary": "rope"}),
    "alibi": ("none", {"bias": {"kind": "alibi", "bidirectional": False}}),
    "t5": ("none", {"bias": {"kind": "t5", "bidirectional": False, "num_buckets": 8, "max_distance": 16}}),
}
PATTERNS = {"causal": None, "window": {"kind": "sliding_window", "window": 3, "causal": True}}
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def seq2seq(position="sinusoidal", attention=None, **kw):
    torch.manual_seed(0)
    bias = (attention or {}).get("bias")
    if isinstance(bias, dict) and bias.get("kind") == "alibi" and bias.get("bidirectional") is False:
        # ALiBi's causal form is the decoder's: the encoder, which reads both ways, is refused it without a mask
        kw.setdefault("decoder_attention", attention)
        attention = {**attention, "bias": {**bias, "bidirectional": True}}
    kw = dict(dim=32, num_heads=4, encoder_depth=2, decoder_depth=2, max_len=32, **kw)
    net = Seq2Seq(vocab_size=VOCAB, position=position, attention=attention, tie_embeddings=False, drop_rate=0, **kw)
    return net.eval()


def lm(position="sinusoidal", attention=None):
    torch.manual_seed(0)
    net = CausalLM(
        vocab_size=VOCAB, dim=32, depth=2, num_heads=4, max_len=32, position=position, attention=attention, drop_rate=0
    )
    return net.eval()


def sources(batch=3, length=7):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, VOCAB, (batch, length), generator=g)
    lengths = torch.tensor([length, 4, 2])[:batch]
    pad = torch.arange(length)[None, :] >= lengths[:, None]  # [B, S], True = pad
    return src.masked_fill(pad, PAD), pad


def autocast(dtype):
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def _config(position, pattern, kv, kind="mha"):
    pos, parts = POSITIONS[position]
    return pos, {"kind": kind, "num_kv_heads": kv, "pattern": PATTERNS[pattern], **parts}


def stepwise_logits(model, tokens, memory=None, pad=None):
    """Logits of every position of tokens [B, T], fed one step at a time through the cache (a 2-token prompt)."""
    steps = Steps(model, memory, pad, use_cache=True)
    out = [model.decode_step(tokens[:, :2], memory, pad, steps.cache)]
    out += [model.decode_step(tokens[:, i : i + 1], memory, pad, steps.cache) for i in range(2, tokens.shape[1])]
    return torch.cat(out, dim=1).float()


CASES = [
    pytest.param(position, pattern, kv, precision, id=f"{position}-{pattern}-kv{kv}-{precision}")
    for position, pattern, precision in itertools.product(POSITIONS, PATTERNS, PRECISIONS)
    for kv in (4, 2)
]


@pytest.mark.parametrize("position, pattern, kv, precision", CASES)
def test_seq2seq_cached_greedy_equals_recomputation(position, pattern, kv, precision):
    pos, attention = _config(position, pattern, kv)
    model = seq2seq(pos, attention)
    src, pad = sources()
    dtype = PRECISIONS[precision]
    with autocast(dtype), torch.no_grad():
        kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=12)  # no EOS: every row runs 12 steps
        cached, recomputed = greedy(model, **kw), greedy(model, **kw, use_cache=False)
        assert torch.equal(cached, recomputed)
        # logits of a random target: step by step through the cache vs one full forward
        tokens = torch.randint(3, VOCAB, (3, 14), generator=torch.Generator().manual_seed(3))
        memory = model.encode(src, pad)
        full = model.decode_step(tokens, memory, pad).float()
        steps = stepwise_logits(model, tokens, memory, pad)
    tol = 1e-5 if dtype is None else 0.1
    torch.testing.assert_close(steps, full, atol=tol, rtol=tol)
    assert len(set(cached.flatten().tolist())) > 1  # not a constant: the comparison has something to compare


def test_post_norm_seq2seq_with_decoder_positions_decodes_over_the_cache():
    """BART's layout (`attnzoo.pretrained.hf_bart`): post-norm blocks, a position table and embedding norm per
    stack, a logits bias."""
    bart = dict(norm="post", scale_embeddings=False, embed_norm=True, decoder_positions=True, logits_bias=True)
    model = seq2seq("learned", None, **bart)
    src, pad = sources()
    with torch.no_grad():
        model.logits_bias.normal_(0.0, 0.1)
        kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=12)
        cached = greedy(model, **kw)
        assert torch.equal(cached, greedy(model, **kw, use_cache=False))
        tokens = torch.randint(3, VOCAB, (3, 14), generator=torch.Generator().manual_seed(3))
        memory = model.encode(src, pad)
        full = model.decode_step(tokens, memory, pad)
        torch.testing.assert_close(stepwise_logits(model, tokens, memory, pad), full, atol=1e-5, rtol=1e-5)
    assert len(set(cached.flatten().tolist())) > 1


@pytest.mark.parametrize("position, pattern, kv, precision", [c for c in CASES if c.values[2] == 2])
def test_lm_cached_greedy_equals_recomputation(position, pattern, kv, precision):
    pos, attention = _config(position, pattern, kv)
    model = lm(pos, attention)
    prompt = torch.randint(3, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))
    with autocast(PRECISIONS[precision]), torch.no_grad():
        kw = dict(prompt=prompt, max_new_tokens=14)
        assert torch.equal(greedy(model, **kw), greedy(model, **kw, use_cache=False))


@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_every_attention_kind_decodes_or_refuses(kind):
    pos, attention = _config("rope", "window", 2, kind)
    try:
        model = seq2seq(pos, attention, cross_attention={"kind": kind})
    except ValueError as err:  # a kind that cannot be a decoder's (causal) self-attention says so when built
        assert kind in str(err) or "pattern" in str(err)
        return
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=10)
    assert torch.equal(greedy(model, **kw), greedy(model, **kw, use_cache=False))


def test_padded_rows_decode_as_they_do_alone():
    model = seq2seq("sinusoidal", {"num_kv_heads": 2})
    src, pad = sources()
    kw = dict(bos_id=BOS, eos_id=EOS, max_new_tokens=10)
    together = greedy(model, src=src, src_padding_mask=pad, **kw)
    for i, n in enumerate((~pad).sum(dim=1).tolist()):
        alone = greedy(model, src=src[i : i + 1, :n], **kw)
        assert torch.equal(together[i, : alone.shape[1]], alone[0])


@pytest.mark.parametrize("length_penalty, early_stopping", [(0.0, True), (1.0, True), (0.0, False), (0.6, True)])
def test_beam_of_one_is_greedy(length_penalty, early_stopping):
    model = seq2seq("sinusoidal", {"num_kv_heads": 2})
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=12)
    want = greedy(model, **kw)
    got = beam_search(model, **kw, beam_size=1, length_penalty=length_penalty, early_stopping=early_stopping)
    assert torch.equal(got.tokens, want[:, : got.tokens.shape[1]])
    assert (want[:, got.tokens.shape[1] :] == PAD).all()


def test_beam_search_over_the_cache_equals_recomputation():
    model = seq2seq("none", {"num_kv_heads": 2, "rotary": "rope"})
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=10, beam_size=4)
    a, b = beam_search(model, **kw), beam_search(model, **kw, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.scores, b.scores)
    assert all(1 <= len(h) <= 4 and h == sorted(h, reverse=True) for h in a.hypotheses)


def test_beam_search_beats_greedy_on_its_own_score():
    model = seq2seq("sinusoidal")
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=10, length_penalty=0.0)
    wide, narrow = beam_search(model, **kw, beam_size=5), beam_search(model, **kw, beam_size=1)
    assert (wide.scores >= narrow.scores - 1e-5).all()


def _sequence_scores(model, src, pad, vocab, max_len, alpha):
    """Every hypothesis (ending in EOS, or max_len tokens without one) of each input, scored by full recomputation."""
    memory = model.encode(src, pad)
    out = [{} for _ in range(src.shape[0])]
    others = [t for t in range(vocab) if t != EOS]
    ended = [(*body, EOS) for n in range(max_len) for body in itertools.product(others, repeat=n)]
    for hyp in ended + list(itertools.product(others, repeat=max_len)):
        tokens = torch.tensor([[BOS, *hyp]] * src.shape[0])
        log_probs = model.decode_step(tokens[:, :-1], memory, pad).float().log_softmax(dim=-1)  # [B, T, V]
        total = log_probs.gather(2, tokens[:, 1:, None]).squeeze(2).sum(dim=1)  # [B]
        for i in range(src.shape[0]):
            out[i][hyp] = float(total[i]) / len(hyp) ** alpha
    return out


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.5])
def test_beam_search_finds_the_best_hypothesis_of_a_tiny_model(alpha):
    vocab, max_len = 5, 3
    torch.manual_seed(3)
    model = Seq2Seq(vocab_size=vocab, dim=16, num_heads=2, encoder_depth=1, decoder_depth=1, max_len=8, drop_rate=0)
    model.eval()
    with torch.no_grad():  # a flatter distribution: many hypotheses compete
        model.embed.embed.weight.mul_(0.5)
    src = torch.tensor([[3, 4, 3], [4, 3, 0]])
    pad = src == PAD
    with torch.no_grad():
        exhaustive = _sequence_scores(model, src, pad, vocab, max_len, alpha)
    # 2K >= every candidate of a step and K >= every live prefix: nothing is pruned, so the search is exact
    width = (vocab - 1) ** (max_len - 1) * vocab
    out = beam_search(
        model,
        src=src,
        src_padding_mask=pad,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        max_new_tokens=max_len,
        beam_size=width,
        length_penalty=alpha,
        early_stopping=False,
    )
    for i, scores in enumerate(exhaustive):
        best = max(scores, key=scores.get)
        found = out.hypotheses[i][0]
        assert tuple(found.tokens.tolist()) == best
        assert math.isclose(found.score, scores[best], rel_tol=1e-5, abs_tol=1e-6)
        for h in out.hypotheses[i]:  # every kept hypothesis carries its true score
            assert math.isclose(h.score, scores[tuple(h.tokens.tolist())], rel_tol=1e-5, abs_tol=1e-6)
    # a narrow beam finds something no better
    narrow = beam_search(
        model,
        src=src,
        src_padding_mask=pad,
        bos_id=BOS,
        eos_id=EOS,
        max_new_tokens=max_len,
        beam_size=2,
        length_penalty=alpha,
    )
    assert (narrow.scores <= out.scores + 1e-6).all()


def test_lm_generates_from_a_prompt_with_every_search():
    model = lm("none", {"bias": "alibi", "pattern": {"kind": "sliding_window", "window": 4}})
    prompt = torch.randint(3, VOCAB, (2, 3), generator=torch.Generator().manual_seed(4))
    out = beam_search(model, prompt=prompt, eos_id=EOS, max_new_tokens=8, beam_size=3)
    assert out.tokens.shape[0] == 2 and len(out.hypotheses) == 2
    g = sample(model, prompt=prompt, max_new_tokens=8, generator=torch.Generator().manual_seed(0))
    assert g.shape == (2, 8)


def test_sampling_over_the_cache_equals_recomputation_and_top_k_1_is_greedy():
    model = seq2seq("learned", {"num_kv_heads": 2})
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=10)
    a = sample(model, **kw, temperature=1.5, top_p=0.9, generator=torch.Generator().manual_seed(5))
    b = sample(model, **kw, temperature=1.5, top_p=0.9, generator=torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(a, b)
    assert torch.equal(sample(model, **kw, top_k=1), greedy(model, **kw))


def test_cross_attention_weights_are_captured_while_decoding():
    model = seq2seq("sinusoidal", {"num_kv_heads": 2})
    src, pad = sources()
    with capture_attention() as records:
        out = greedy(model, src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=4)
    cross = [w for w in records if w.shape[-1] == src.shape[1] and w.shape[-2] == 1]  # [B, H, 1, S] per layer and step
    assert len(cross) == 2 * 4 and out.shape == (3, 4)
    for w in cross:
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
        assert (w.masked_select(pad[:, None, None, :]) == 0).all()  # padded source tokens get no weight


def test_filter_logits_keeps_the_top_k_and_the_nucleus():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 3.0]])
    kept = lambda out: set(torch.nonzero(out[0].isfinite()).flatten().tolist())
    assert kept(filter_logits(logits, top_k=2)) == {0, 4}
    probs = logits.softmax(-1)[0]  # sorted: 4 (.64), 0 (.24), 1 (.09), ...
    assert kept(filter_logits(logits, top_p=float(probs[4]) - 0.01)) == {4}
    assert kept(filter_logits(logits, top_p=float(probs[4] + probs[0]) - 0.01)) == {4, 0}
    assert kept(filter_logits(logits, top_p=float(probs[4] + probs[0]) + 0.01)) == {4, 0, 1}
    assert kept(filter_logits(logits, top_k=3, top_p=1.0)) == {4, 0, 1}
    # top_p 1 keeps every token: over a GPT-2-sized vocabulary an fp32 running sum reached 1 before the tail
    wide = torch.randn(2, 50257, generator=torch.Generator().manual_seed(0)) * 3
    assert filter_logits(wide, top_p=1.0).isfinite().all()
    # tied logits: top_k keeps k of them (it kept every tie: top_k=1 sampled among equals)
    tied = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 2.0, 2.0, 2.0]])
    for k in (1, 2):
        assert (filter_logits(tied, top_k=k).isfinite().sum(-1) == k).all()
        assert filter_logits(tied, top_k=k).amax(-1).tolist() == [1.0, 2.0]
    for bad in (dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            filter_logits(logits, **bad)


def test_generation_errors_are_clear():
    model = seq2seq()
    src, pad = sources()
    with pytest.raises(ValueError, match="Linear cannot generate: it needs new_cache"):
        greedy(torch.nn.Linear(2, 2), prompt=src, max_new_tokens=3)
    with pytest.raises(ValueError, match="give a prompt"):
        greedy(model, src=src, max_new_tokens=3)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        greedy(model, src=src, bos_id=BOS, max_new_tokens=0)
    for temperature in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="temperature must be a number > 0"):
            sample(model, src=src, bos_id=BOS, max_new_tokens=3, temperature=temperature)
    with pytest.raises(ValueError, match="beam_size must be an int >= 1"):
        beam_search(model, src=src, bos_id=BOS, eos_id=EOS, max_new_tokens=3, beam_size=0)
    with pytest.raises(ValueError, match="call model.eval"):
        greedy(model.train(), src=src, bos_id=BOS, max_new_tokens=3)
    with pytest.raises(ValueError, match="has no encode"):
        greedy(lm(), src=src, bos_id=BOS, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"the prompt has 33 tokens; the model reads at most 32 \(max_len\)"):
        greedy(lm(), prompt=torch.full((1, 33), 3), max_new_tokens=1)
    # an id no logit stands for: no row would ever end (beam search and greedy ran to max_new_tokens)
    model.eval()
    for eos_id in (VOCAB, -1):
        with pytest.raises(ValueError, match=rf"eos_id must be a token id in \[0, {VOCAB}\).*got {eos_id}"):
            greedy(model, src=src, bos_id=BOS, eos_id=eos_id, max_new_tokens=3)
        with pytest.raises(ValueError, match=rf"eos_id must be a token id in \[0, {VOCAB}\).*got {eos_id}"):
            beam_search(model, src=src, bos_id=BOS, eos_id=eos_id, max_new_tokens=3)
    for alpha in (float("nan"), float("inf"), "1"):
        with pytest.raises(ValueError, match=r"length_penalty \(.*\) must be a finite number"):
            beam_search(model, src=src, bos_id=BOS, eos_id=EOS, max_new_tokens=3, length_penalty=alpha)
    for alpha in (400, -11.0):  # length ** 400 overflowed: OverflowError from the score, after training
        with pytest.raises(ValueError, match=rf"length_penalty \({alpha}\) must be within \+-10"):
            beam_search(model, src=src, bos_id=BOS, eos_id=EOS, max_new_tokens=3, length_penalty=alpha)


SEARCHES = {
    "greedy": lambda model, prompt, **kw: greedy(model, prompt=prompt, eos_id=EOS, max_new_tokens=4, **kw),
    "sample": lambda model, prompt, **kw: sample(
        model, prompt=prompt, eos_id=EOS, max_new_tokens=4, generator=torch.Generator().manual_seed(0), **kw
    ),
    "beam": lambda model, prompt, **kw: (
        beam_search(model, prompt=prompt, eos_id=EOS, max_new_tokens=4, beam_size=2, **kw).tokens
    ),
}
MASKED = 5  # a token a model may score -inf (never to be chosen)


def _scores_edited(model, value):
    """`model` whose decode_step scores token MASKED as `value` (None: every token -inf)."""
    step = model.decode_step

    def edited(*args, **kwargs):
        logits = step(*args, **kwargs).clone()  # [B, L, V]
        if value is None:
            return torch.full_like(logits, float("-inf"))
        logits[..., MASKED] = value
        return logits

    model.decode_step = edited
    return model


@pytest.mark.parametrize("search", list(SEARCHES))
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("broken", ["nan_weights", "inf_score", "all_minus_inf"])
def test_non_finite_scores_stop_every_search_with_a_clear_error(search, use_cache, broken):
    # sampling stopped in torch.multinomial's raw RuntimeError, beam search in an IndexError, and greedy returned
    # tokens chosen from NaN (or +inf, half precision's overflow) as if they were the model's
    model = lm()
    if broken == "nan_weights":
        with torch.no_grad():
            for param in model.parameters():
                param.fill_(float("nan"))
    else:
        model = _scores_edited(model, float("inf") if broken == "inf_score" else None)
    prompt = torch.randint(3, VOCAB, (2, 3), generator=torch.Generator().manual_seed(4))
    with pytest.raises(NonFiniteScores, match="scores are NaN or infinite.*weights are not finite.*half precision"):
        SEARCHES[search](model, prompt, use_cache=use_cache)


@pytest.mark.parametrize("search", list(SEARCHES))
def test_a_token_scored_minus_inf_is_never_chosen_and_no_error(search):
    prompt = torch.randint(3, VOCAB, (2, 3), generator=torch.Generator().manual_seed(4))
    out = SEARCHES[search](_scores_edited(lm(), float("-inf")), prompt)
    assert out.shape[0] == 2 and not (out == MASKED).any()


def test_generation_stops_at_the_models_max_len():
    # greedy(max_new_tokens=40) on a 32-position model ran 29 steps, then raised and lost them (documented: stops)
    prompt = torch.randint(3, VOCAB, (2, 3), generator=torch.Generator().manual_seed(4))
    model = lm()
    out = greedy(model, prompt=prompt, max_new_tokens=40)
    assert out.shape == (2, 32 - 3 + 1)  # the last token generated is never fed: 30 fit after a 3-token prompt
    assert torch.equal(out, greedy(model, prompt=prompt, max_new_tokens=40, use_cache=False))
    assert torch.equal(greedy(model, prompt=prompt, max_new_tokens=5), out[:, :5])
    beams = beam_search(model, prompt=prompt, eos_id=EOS, max_new_tokens=40, beam_size=2)
    assert beams.tokens.shape[1] <= 30
    src, pad = sources()
    translated = greedy(seq2seq(), src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=50)
    assert translated.shape[1] <= 32


def test_a_tiny_temperature_samples_the_most_likely_token():
    # temperature 1e-45 passed the > 0 check and failed inside torch.multinomial (inf / nan probabilities)
    model = seq2seq("learned", {"num_kv_heads": 2})
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, eos_id=EOS, max_new_tokens=6)
    for temperature in (1e-200, 1e-46, 1e-45, 1e-8):  # 1e-46 and below are 0 in fp32
        assert torch.equal(sample(model, **kw, temperature=temperature), greedy(model, **kw))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_cached_decoding_reads_input_major_weights_and_puts_them_back(mode):
    model = seq2seq("sinusoidal", {"num_kv_heads": 2})
    params = dict(model.named_parameters())
    before = {name: p.detach().clone() for name, p in params.items()}
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    layouts = []  # per decoder call: every linear weight input-major (the transpose of a contiguous [in, out])
    hook = model.decoder.register_forward_pre_hook(
        lambda *_: layouts.append(all(w.t().is_contiguous() and not w.is_contiguous() for w in linears))
    )
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=5)
    with mode():
        cached, recomputed = greedy(model, **kw), greedy(model, **kw, use_cache=False)
    hook.remove()
    assert layouts == [True] * 5 + [False] * 5  # the reference recomputation reads the weights as they are
    assert torch.equal(cached, recomputed)
    assert dict(model.named_parameters()) == params  # the same parameter objects, row-major again, same values
    for name, p in params.items():
        assert p.is_contiguous() and not p.is_inference() and torch.equal(p, before[name]), name
    model.train()
    model(src, cached.clone(), pad).sum().backward()  # still trains (no inference tensor left in a parameter)
    assert all(p.grad is not None for p in linears)


@pytest.mark.cuda
@pytest.mark.parametrize("position, pattern", list(itertools.product(POSITIONS, PATTERNS)))
def test_cuda_decoding_equals_recomputation_and_the_cpu(position, pattern):
    # on a GPU the cache's one-query steps and the full forward take different kernels; fp32 tokens must still match
    # recomputation and the CPU's, bf16 autocast logits stay close
    pos, attention = _config(position, pattern, 2)
    model = seq2seq(pos, attention)
    src, pad = sources()
    kw = dict(src=src, src_padding_mask=pad, bos_id=BOS, max_new_tokens=12)
    with torch.no_grad():
        on_cpu = greedy(model, **kw)
        model.cuda()
        kw.update(src=src.cuda(), src_padding_mask=pad.cuda())
        cached = greedy(model, **kw)
        assert cached.device.type == "cuda"
        assert torch.equal(cached, greedy(model, **kw, use_cache=False)) and torch.equal(cached.cpu(), on_cpu)
        beams = [beam_search(model, **kw, eos_id=EOS, beam_size=3, use_cache=c) for c in (True, False)]
        assert torch.equal(beams[0].tokens, beams[1].tokens)
        tokens = torch.randint(3, VOCAB, (3, 14), generator=torch.Generator().manual_seed(3)).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            memory = model.encode(kw["src"], kw["src_padding_mask"])
            full = model.decode_step(tokens, memory, kw["src_padding_mask"]).float()
            steps = stepwise_logits(model, tokens, memory, kw["src_padding_mask"])
    assert torch.isfinite(full).all()
    torch.testing.assert_close(steps, full, atol=0.1, rtol=0.1)
