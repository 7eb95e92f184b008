"""Long-sequence attention fwd+bwd: dense sdpa and eager vs sparse patterns through the blocked backend (and flex fwd).

Run: python -m attnzoo.bench sparse   (B=1, H=4, D=64, fp32, CPU; N in 1024, 4096, 16384, and 65536 for sparse)

Methods: `sdpa` and `eager` are full attention; `window` is a sliding window W=256 (|i - j| <= 256) through
`blocked` (on its `band` path, keys read in place, from N=4096; at N=1024 the gathered blocks); `bigbird` is
BigBird (W=64 window, global token 0, 3 random blocks of 64) through `blocked`;
`flex-window-fwd` is the window through compiled FlexAttention, forward only (no CPU backward on this torch).
Timings of one N are interleaved (`time_side_by_side`); memory is the peak extra RSS of one step in a fresh process.
"""

from __future__ import annotations

import math

import torch

from attnzoo.attention import BigBird, SlidingWindow, attend
from attnzoo.attention.backends import backend_name
from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results

B, H, D = 1, 4, 64
WINDOW = 256
EAGER_LIMIT = 8 * 2**30  # eager keeps ~5 fp32 [B, H, N, N] tensors alive through backward
METHODS = ("sdpa", "eager", "window", "bigbird", "flex-window-fwd")
SPARSE = ("window", "bigbird", "flex-window-fwd")


def eager_bytes(n: int) -> int:
    return 5 * B * H * n * n * 4


def pattern_of(method: str):
    if method in ("window", "flex-window-fwd"):
        return SlidingWindow(window=WINDOW)
    if method == "bigbird":
        return BigBird(window=64, global_tokens=(0,), num_random=3, block=64, seed=0)
    return None


def make_step(spec):
    n, method = spec["n"], spec["method"]
    forward_only = method.endswith("-fwd")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, generator=g, requires_grad=not forward_only) for _ in range(3))
    pattern = pattern_of(method)
    backend = {"sdpa": "sdpa", "eager": "eager", "flex-window-fwd": "flex"}.get(method, "blocked")

    def step():
        out, _, used = attend(q, k, v, pattern=pattern, backend=backend)
        assert backend_name(used) == backend, used  # the window runs on blocked's band path from N=4096
        if not forward_only:
            out.sum().backward()
            q.grad = k.grad = v.grad = None

    return step


def methods_at(n: int, quick: bool) -> list[str]:
    big = n > (4096 if quick else 16384)
    return [m for m in METHODS if not (big and m not in SPARSE)]


def run(args):
    sizes = [512, 1024, 4096] if args.quick else [1024, 4096, 16384, 65536]
    repeats = 2 if args.quick else args.repeats
    rows, mem = [], {}
    for n in sizes:
        methods = methods_at(n, args.quick)
        skipped = {}
        if "eager" in methods and eager_bytes(n) > EAGER_LIMIT:
            skipped["eager"] = f"skipped: needs ~{eager_bytes(n) / 2**30:.0f} GiB"
        steps = {m: make_step({"n": n, "method": m}) for m in methods if m not in skipped}
        reps = repeats if n <= 16384 else max(1, repeats // 2)
        times = time_side_by_side(steps, repeats=reps, warmup=1)
        for m in methods:
            if m in skipped:
                rows.append({"N": n, "method": m, "s": skipped[m], "peak MiB": "", "sdpa/this": ""})
                continue
            mem[(n, m)] = peak_memory_of({"suite": "sparse", "n": n, "method": m})
            rows.append(
                {
                    "N": n,
                    "method": m,
                    "s": times[m],
                    "peak MiB": mem[(n, m)] / 2**20,
                    "sdpa/this": times["sdpa"] / times[m] if "sdpa" in times else "",
                }
            )
        print(f"N={n}: " + ", ".join(f"{m} {t:.3g}s" for m, t in times.items()), flush=True)
    exponents = []
    for m in ("window", "bigbird"):
        pts = [(n, mem[(n, m)]) for n in sizes if (n, m) in mem and n >= 4096]
        if len(pts) >= 2:
            (n0, m0), (n1, m1) = pts[0], pts[-1]
            exponents.append(f"{m}: {math.log(m1 / m0) / math.log(n1 / n0):.2f} (N {n0}..{n1})")
    notes = (
        f"B={B}, H={H}, D={D}, fp32, CPU. `s` = median seconds of fwd+bwd (`-fwd`: forward only); "
        f"`sdpa/this` = speed-up over dense sdpa at the same N (measured side by side). "
        f"window = sliding window W={WINDOW} via blocked (its band path from N=4096); bigbird = window 64 + "
        f"global token 0 + 3 random 64-blocks via blocked. Dense methods are not run past N=16384; eager is "
        f"skipped where it would need > {EAGER_LIMIT / 2**30:.0f} GiB. Fitted peak-memory exponent (log-log "
        f"slope): " + "; ".join(exponents)
    )
    write_results("sparse", rows, notes=notes)
    return rows
