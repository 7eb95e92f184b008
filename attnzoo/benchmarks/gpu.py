"""Attention on a CUDA GPU: dense, sliding window (flex, blocked, sdpa), biases, and decoding against Hugging Face.

Run: python -m attnzoo.bench gpu   (needs a CUDA device; attention calls in bf16, B=2, H=8, D=64, fwd+bwd)

Rows of `measure: fwd+bwd` time one attention call forward and backward through `attend()` (`direct` is a plain
F.scaled_dot_product_attention call with no mask, the dense reference). Each timed sample runs the call several
times and synchronizes once; variants of one size are interleaved (`time_side_by_side`). `first call s` is the
warm-up call: for flex it includes compiling the kernels. `peak MiB` is the CUDA allocator's high-water mark of one
call over what was allocated before it.
Sizes: dense N 1024, 4096, 16384 (eager up to 4096); sliding window |i - j| <= 256 at N 4096 and 16384; ALiBi and
a learned T5 bias at N 4096.
Rows of `measure: decode` are cached greedy decoding of random GPT-2 weights (fp32, 128 new tokens from a 1-token
prompt) through attnzoo (`attnzoo.pretrained.load` of the saved model) and through Hugging Face `generate`, batch 1
and 8, at two shapes: the CPU decode suite's (4 layers, width 256) and GPT-2 small (12 layers, width 768);
`same tokens` says whether both decoded the same tokens. `measure: beam` is beam search (beam 4) on the translation
recipe's model shape. A part that fails is reported in its row's `error` and the others still run.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from attnzoo.attention import SlidingWindow, attend
from attnzoo.attention.biases import ALiBi, T5RelativeBias
from attnzoo.benchmarks.harness import time_side_by_side, write_results

B, H, D = 2, 8, 64
WINDOW = 256
DTYPE = torch.bfloat16
EAGER_MAX = 4096  # eager keeps several [B, H, N, N] tensors through backward


def _sync(fn: Callable[[], Any], inner: int) -> Callable[[], None]:
    def timed():
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()

    return timed


def _inner(n: int) -> int:
    return max(1, 8192 // n) * 4  # short calls are repeated so launch jitter does not dominate a sample


def _peak_mib(fn: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def attention_step(n: int, method: str, pattern=None, bias=None) -> Callable[[], None]:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=DTYPE, generator=g).requires_grad_() for _ in range(3))
    grad = torch.randn(B, H, n, D, device="cuda", dtype=DTYPE, generator=g)
    if bias is not None:
        bias = bias.cuda()

    def step():
        if method == "direct":
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out, _, _ = attend(q, k, v, pattern=pattern, bias=bias, backend=method)
        out.backward(grad)

    return step


def _fwd_bwd_rows(label: str, n: int, steps: dict[str, Callable[[], None]], repeats: int) -> list[dict[str, Any]]:
    rows, first, peak = [], {}, {}
    for name, fn in list(steps.items()):
        try:
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            first[name] = time.perf_counter() - t0
            peak[name] = _peak_mib(fn)
        except Exception as err:  # reported in its row; the other variants still run
            rows.append({"measure": "fwd+bwd", "case": label, "N": n, "method": name, "error": _short(err)})
            del steps[name]
    inner = _inner(n)
    times = time_side_by_side({k: _sync(fn, inner) for k, fn in steps.items()}, repeats=repeats, warmup=1)
    ref = times.get("direct")
    for name, seconds in times.items():
        per_call = seconds / inner
        row = {"measure": "fwd+bwd", "case": label, "N": n, "method": name, "ms": per_call * 1e3}
        if ref:
            row["vs direct dense"] = ref / inner / per_call
        row.update({"first call s": first[name], "peak MiB": peak[name]})
        rows.append(row)
    return rows


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def attention_rows(args) -> list[dict[str, Any]]:
    repeats = 2 if args.quick else args.repeats
    rows = []
    for n in (512, 1024) if args.quick else (1024, 4096, 16384):
        methods = ("eager", "sdpa", "direct") if n <= EAGER_MAX else ("sdpa", "direct")
        rows += _fwd_bwd_rows("dense", n, {m: attention_step(n, m) for m in methods}, repeats)
    window = SlidingWindow(window=WINDOW)
    for n in (1024,) if args.quick else (4096, 16384):
        steps = {m: attention_step(n, m, pattern=window) for m in ("flex", "blocked", "sdpa")}
        steps["direct"] = attention_step(n, "direct")
        rows += _fwd_bwd_rows(f"window {WINDOW}", n, steps, repeats)
    n = 1024 if args.quick else 4096
    for label, make in (("ALiBi", lambda: ALiBi(num_heads=H)), ("T5 learned", lambda: T5RelativeBias(num_heads=H))):
        methods = ("eager", "sdpa", "flex") if n <= EAGER_MAX else ("sdpa", "flex")
        steps = {m: attention_step(n, m, bias=make()) for m in methods}
        steps["direct"] = attention_step(n, "direct")
        rows += _fwd_bwd_rows(label, n, steps, repeats)
    return rows


SHAPES = {"4 layers, width 256": (4, 256, 4, 1000), "GPT-2 small": (12, 768, 12, 50257)}


def decode_pair(shape: str, tokens: int, batch: int) -> tuple[dict[str, Callable[[], Any]], bool]:
    from attnzoo.benchmarks.decode import random_gpt2
    from attnzoo.generation import greedy

    depth, dim, heads, vocab = SHAPES[shape]
    hf, ours = random_gpt2(tokens, depth=depth, dim=dim, heads=heads, vocab=vocab)
    hf, ours = hf.cuda(), ours.cuda()
    prompt = torch.ones(batch, 1, dtype=torch.long, device="cuda")
    mask = torch.ones_like(prompt)

    def theirs():
        with torch.no_grad():
            out = hf.generate(prompt, attention_mask=mask, max_new_tokens=tokens, do_sample=False, num_beams=1)
        torch.cuda.synchronize()
        return out[:, 1:]

    def mine():
        out = greedy(ours, prompt=prompt, max_new_tokens=tokens, use_cache=True)
        torch.cuda.synchronize()
        return out

    same = torch.equal(mine(), theirs())
    return {"attnzoo cached greedy": mine, "Hugging Face generate": theirs}, same


def decode_rows(args) -> list[dict[str, Any]]:
    tokens = 32 if args.quick else 128
    rows = []
    for shape in SHAPES:
        for batch in (1, 8):
            try:
                pair, same = decode_pair(shape, tokens, batch)
            except Exception as err:
                rows.append({"measure": "decode", "case": f"{shape}, batch {batch}", "error": _short(err)})
                traceback.print_exc()
                continue
            times = time_side_by_side(pair, repeats=2 if args.quick else args.repeats, warmup=1)
            for name, seconds in times.items():
                rows.append({
                    "measure": "decode",
                    "case": f"{shape}, batch {batch}",
                    "method": name,
                    "tokens/s": tokens * batch / seconds,
                    "vs Hugging Face": times["Hugging Face generate"] / seconds,
                    "same tokens": same,
                })  # fmt: skip
    try:
        from attnzoo.benchmarks.decode import BEAM, BEAM_SOURCES, beam_step

        beam_tokens = 8 if args.quick else 48
        step = beam_step(beam_tokens, device="cuda")
        seconds = time_side_by_side({"beam": _sync(step, 1)}, repeats=2 if args.quick else 3, warmup=1)["beam"]
        rows.append({
            "measure": "beam",
            "case": f"translation shape, beam {BEAM}, {BEAM_SOURCES} sources",
            "method": "attnzoo beam_search",
            "tokens/s": beam_tokens * BEAM_SOURCES / seconds,
        })  # fmt: skip
    except Exception as err:
        rows.append({"measure": "beam", "error": _short(err)})
        traceback.print_exc()
    return rows


def run(args):
    if not torch.cuda.is_available():
        raise SystemExit("attnzoo bench gpu: needs a CUDA device (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 decoding compares like with like
    rows = attention_rows(args) + decode_rows(args)
    write_results(
        "gpu",
        rows,
        notes="attention: bf16, B=2, H=8, D=64, one call forward and backward; `vs direct dense` = time of a plain "
        f"unmasked F.scaled_dot_product_attention call / this time. decode: fp32, {32 if args.quick else 128} new "
        "tokens, random GPT-2 weights",
    )
    return rows
