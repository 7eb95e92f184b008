"""Incremental decoding: cached greedy decoding vs recomputing the prefix at every step, and KV-cache memory.

Run: python -m attnzoo.bench decode   (a decoder-only model: 4 layers, width 256, 4 heads of 64, vocabulary 1,000;
greedy decoding of 512 tokens from a 1-token prompt, batch 1, fp32, CPU, 1 thread; --quick: 64 tokens)

Timing rows (also: the same GPT-2 weights decoded by Hugging Face `generate` and by attnzoo, batch 1 and 8,
when `transformers` is installed, which must produce the same tokens; and beam search, beam 4, on the translation
recipe's model shape): MHA through the cache (full, and a causal sliding window of 64), GQA (1
key/value head) and MLA (latent attention, decoding in the latent space) through the cache, against MHA
recomputing the whole prefix at every step; cached and recomputed runs must produce the same tokens (MHA and MLA).
Memory rows: bytes held by the cache (`DecodingCache.nbytes()`, keys and values of every layer; for MLA its latent
and rotary key) after 128, 256 and 512 tokens, for MHA, GQA with 2 and 1 key/value heads, the sliding window and MLA.
"""

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from attnzoo.benchmarks.harness import time_side_by_side, write_results
from attnzoo.generation import beam_search, greedy
from attnzoo.models import CausalLM, Seq2Seq

DIM, DEPTH, HEADS, VOCAB, WINDOW = 256, 4, 4, 1000, 64
KV_RANK, ROPE_DIM = 128, 32
WINDOWED, MLA = f"MHA, causal window {WINDOW}", f"MLA (latent {KV_RANK}, rotary key {ROPE_DIM})"
VARIANTS = {  # name -> attention config
    "MHA": {},
    "GQA (2 kv heads)": {"num_kv_heads": 2},
    "GQA (1 kv head)": {"num_kv_heads": 1},
    WINDOWED: {"pattern": {"kind": "sliding_window", "window": WINDOW - 1, "causal": True}},
    MLA: {"kind": "mla", "kv_rank": KV_RANK, "rope_dim": ROPE_DIM},
}


def model(attention: dict, max_len: int) -> CausalLM:
    torch.manual_seed(0)
    net = CausalLM(
        vocab_size=VOCAB, dim=DIM, depth=DEPTH, num_heads=HEADS, max_len=max_len, attention=attention, drop_rate=0
    )
    return net.eval()


# beam search on the translation recipe's model (recipes/translation.yaml: width 128, 2 + 2 layers, 4 heads, MLP ratio
# 2, vocabulary 2,000, tied embeddings), random weights: a batch of 24-token sources, beam 4
TRANSLATION = {"vocab_size": 2000, "dim": 128, "encoder_depth": 2, "decoder_depth": 2, "num_heads": 4, "mlp_ratio": 2.0}
BEAM, BEAM_SOURCES, BEAM_SOURCE_LEN = 4, 16, 24


def beam_step(tokens: int, device: str = "cpu") -> Callable[[], Any]:
    """Beam search (beam 4) of up to `tokens` tokens for 16 sources through a random model of the translation
    recipe's shape. EOS is token 2: a random model rarely ends a hypothesis early, so the work is nearly fixed."""
    torch.manual_seed(0)
    net = Seq2Seq(**TRANSLATION, max_len=max(tokens, BEAM_SOURCE_LEN) + 1, drop_rate=0).eval().to(device)
    src = torch.randint(3, TRANSLATION["vocab_size"], (BEAM_SOURCES, BEAM_SOURCE_LEN)).to(device)
    return lambda: beam_search(net, src=src, bos_id=1, eos_id=2, max_new_tokens=tokens, beam_size=BEAM).tokens


def make_step(spec):
    net = model(VARIANTS[spec["variant"]], spec["tokens"] + 1)
    prompt = torch.ones(1, 1, dtype=torch.long)
    return lambda: greedy(net, prompt=prompt, max_new_tokens=spec["tokens"], use_cache=spec["cache"])


def _cpu_timed(fn, samples: list):
    def timed():
        t0 = time.process_time()
        out = fn()
        samples.append(time.process_time() - t0)
        return out

    return timed


def random_gpt2(tokens: int, *, depth: int = DEPTH, dim: int = DIM, heads: int = HEADS, vocab: int = VOCAB):
    """(Hugging Face GPT2LMHeadModel with random weights, no dropout and no end token, attnzoo's conversion of it by
    `attnzoo.pretrained.load`), both in eval mode, for `tokens` positions."""
    import transformers

    from attnzoo.pretrained import load

    config = transformers.GPT2Config(vocab_size=vocab, n_positions=tokens + 1, n_embd=dim, n_layer=depth,
                                     n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=None, eos_token_id=None)  # fmt: skip  # no early end
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.generation_config.pad_token_id = 0
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = load(folder).eval()
    return hf, ours


def hf_steps(tokens: int, batch: int) -> dict[str, Callable[[], Any]] | None:
    """{name: greedy decoding of `tokens` tokens at `batch`}: Hugging Face GPT-2's `generate` and attnzoo's cached
    greedy decoding of the same weights (a random GPT2LMHeadModel of the decoder's shape, converted by
    `attnzoo.pretrained.hf_gpt2`); None without `transformers`."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    hf, ours = random_gpt2(tokens)
    prompt = torch.ones(batch, 1, dtype=torch.long)
    mask = torch.ones_like(prompt)

    def theirs():
        with torch.no_grad():
            out = hf.generate(prompt, attention_mask=mask, max_new_tokens=tokens, do_sample=False, num_beams=1)
        return out[:, prompt.shape[1] :]  # the generated tokens

    def mine():
        return greedy(ours, prompt=prompt, max_new_tokens=tokens, use_cache=True)

    if not torch.equal(mine(), theirs()):
        raise RuntimeError(f"attnzoo and Hugging Face decoded different tokens from the same GPT-2 (batch {batch})")
    return {
        f"GPT-2 shape, attnzoo cached greedy, batch {batch}": mine,
        f"GPT-2 shape, Hugging Face generate, batch {batch}": theirs,
    }


def cache_bytes(attention: dict, tokens: int) -> int:
    """Bytes the cache holds after decoding `tokens` tokens."""
    net = model(attention, tokens + 1)
    cache = net.new_cache()
    with torch.no_grad():
        net.decode_step(torch.ones(1, 1, dtype=torch.long), cache=cache)
        for _ in range(tokens - 1):
            net.decode_step(torch.ones(1, 1, dtype=torch.long), cache=cache)
    return cache.nbytes()


def run(args):
    torch.set_num_threads(1)
    tokens = 64 if args.quick else 512
    timed = {
        "MHA, cached": {"variant": "MHA", "tokens": tokens, "cache": True},
        "GQA (1 kv head), cached": {"variant": "GQA (1 kv head)", "tokens": tokens, "cache": True},
        f"{WINDOWED}, cached": {"variant": WINDOWED, "tokens": tokens, "cache": True},
        f"{MLA}, cached": {"variant": MLA, "tokens": tokens, "cache": True},
        "MHA, recompute the prefix": {"variant": "MHA", "tokens": tokens, "cache": False},
    }
    steps = {name: make_step(spec) for name, spec in timed.items()}
    mla_recomputed = make_step({"variant": MLA, "tokens": tokens, "cache": False})()
    for cached, recomputed in (
        ("MHA, cached", steps["MHA, recompute the prefix"]()),
        (f"{MLA}, cached", mla_recomputed),
    ):
        if not torch.equal(steps[cached](), recomputed):
            raise RuntimeError(f"{cached} and recomputed greedy decoding produced different tokens")
    cpu = {name: [] for name in steps}  # CPU seconds of this process per call: less hit by other jobs than wall time
    steps = {name: _cpu_timed(fn, cpu[name]) for name, fn in steps.items()}
    times = time_side_by_side(steps, repeats=2 if args.quick else min(args.repeats, 3), warmup=0)
    recompute = times["MHA, recompute the prefix"]
    rows = [
        {
            "measure": "time",
            "variant": name,
            "tokens": tokens,
            "seconds": times[name],
            "tokens/s": tokens / times[name],
            "speedup vs recompute": recompute / times[name],
            "CPU s": statistics.median(cpu[name]),
            "CPU speedup": statistics.median(cpu["MHA, recompute the prefix"]) / statistics.median(cpu[name]),
        }
        for name in timed
    ]
    # the same GPT-2 weights through attnzoo and through Hugging Face, side by side: --repeats interleaved pairs (at
    # batch 8 both are bound by memory bandwidth, which they share with whatever else runs on the machine)
    for batch in (1, 8):
        pair = hf_steps(tokens, batch)
        if pair is None:
            break
        pair_cpu = {name: [] for name in pair}
        pair = {name: _cpu_timed(fn, pair_cpu[name]) for name, fn in pair.items()}
        pair_times = time_side_by_side(pair, repeats=2 if args.quick else args.repeats, warmup=1)
        pair_cpu = {name: statistics.median(samples[1:]) for name, samples in pair_cpu.items()}  # warm-up left out
        (ours, theirs) = pair
        for name in pair:
            rows.append({
                "measure": "time vs Hugging Face",
                "variant": name,
                "tokens": tokens * batch,
                "seconds": pair_times[name],
                "tokens/s": tokens * batch / pair_times[name],
                "speedup vs Hugging Face": pair_times[theirs] / pair_times[name],
                "CPU s": pair_cpu[name],
                "CPU speedup vs Hugging Face": pair_cpu[theirs] / pair_cpu[name],
            })  # fmt: skip
    beam_tokens = 8 if args.quick else 48
    beam_cpu: list[float] = []
    beam = {f"translation shape, beam {BEAM}, {BEAM_SOURCES} sources": _cpu_timed(beam_step(beam_tokens), beam_cpu)}
    beam_times = time_side_by_side(beam, repeats=2 if args.quick else min(args.repeats, 3), warmup=1)
    for name, seconds in beam_times.items():
        rows.append({
            "measure": "beam search",
            "variant": name,
            "tokens": beam_tokens * BEAM_SOURCES,
            "seconds": seconds,
            "tokens/s": beam_tokens * BEAM_SOURCES / seconds,
            "CPU s": statistics.median(beam_cpu[1:]),  # the warm-up call left out
        })  # fmt: skip
    lengths = (16, 32, 64) if args.quick else (128, 256, 512)
    for name, attention in VARIANTS.items():
        for n in lengths:
            nbytes = cache_bytes(attention, n)
            rows.append(
                {
                    "measure": "cache memory",
                    "variant": name,
                    "tokens": n,
                    "cache KiB": nbytes / 1024,
                    "bytes/token": nbytes / n,
                }
            )
    write_results(
        "decode",
        rows,
        notes=(
            f"Decoder-only model: {DEPTH} layers, width {DIM}, {HEADS} heads of {DIM // HEADS}, vocabulary {VOCAB}; "
            f"greedy decoding of {tokens} tokens from a 1-token prompt, batch 1, fp32, CPU, 1 thread (median of "
            "interleaved runs; `CPU s`: this process's CPU time, less hit by other jobs on a shared machine). Cached "
            "and recomputed decoding produced the same tokens (MHA, MLA). `bytes/token`: bytes "
            "the KV cache holds (keys and values of every layer) divided by the tokens decoded: constant (O(length) "
            f"memory) for a full cache, falling as 1/length for the window of {WINDOW} keys (O(W) memory). MLA "
            f"keeps {KV_RANK} + {ROPE_DIM} numbers per token and layer (2 x {DIM} for MHA). `time vs Hugging Face`: "
            "one random GPT-2 of this shape (learned positions, tanh GELU), decoded greedily by `transformers`' "
            "`generate` and, converted by `attnzoo.pretrained`, by attnzoo's cached `greedy`, at batch 1 and 8 "
            "(tokens: generated in all rows; the two produced the same tokens). `beam search`: "
            f"`beam_search` (beam {BEAM}) of {BEAM_SOURCES} random {BEAM_SOURCE_LEN}-token sources through a random "
            "model of the translation recipe's shape (recipes/translation.yaml: width 128, 2 + 2 layers, 4 heads, "
            "vocabulary 2,000), up to the tokens shown (per source x sources)."
        ),
    )
    return rows
