"""The blocked sliding window against the machine's matmul rate, one thread: how much of the time is useful work.

Run: python -m attnzoo.bench window_rate   (B=1, H=4, D=64, W=256, N=16384, fp32, CPU, 1 thread; --quick: N=4096)

Useful FLOPs count only the (query, key) pairs the window allows (|i - j| <= W): 4 * D per pair for the forward
(Q K^T and P V) times 2.5 for forward + backward, the count issue 28 used. The matmul rate is the best of three
fp32 [4096, 256] x [256, 4096] products in the same process, measured between the attention repeats, so that the
machine's load hits both alike. `sdpa` is dense SDPA over the same q, k, v (one repeat: it is slow), for the speed-up.
"""

from __future__ import annotations

import time

import torch

from attnzoo.attention import SlidingWindow, attend
from attnzoo.attention.backends import BACKENDS
from attnzoo.benchmarks.harness import write_results

B, H, D, WINDOW = 1, 4, 64, 256


def useful_flops(n: int, window: int = WINDOW) -> float:
    """Forward + backward FLOPs of the allowed pairs only."""
    idx = torch.arange(n)
    pairs = int(((idx + window).clamp(max=n - 1) - (idx - window).clamp(min=0) + 1).sum())
    return pairs * 4 * D * B * H * 2.5


def matmul_rate() -> float:
    """FLOP/s of one fp32 GEMM of attention's size class (CPU time)."""
    a, b = torch.randn(4096, 256), torch.randn(256, 4096)
    a @ b
    start = time.process_time()
    for _ in range(5):
        a @ b
    return 5 * 2 * 4096 * 256 * 4096 / (time.process_time() - start)


def make_step(spec):
    n, method = spec["n"], spec["method"]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, generator=g, requires_grad=True) for _ in range(3))
    pattern, backend = (SlidingWindow(window=WINDOW), "blocked") if method == "window" else (None, "sdpa")

    def step():
        out, _, used = attend(q, k, v, pattern=pattern, backend=backend)
        assert used == backend
        out.sum().backward()
        q.grad = k.grad = v.grad = None

    return step


def _cpu_seconds(step) -> float:
    start = time.process_time()
    step()
    return time.process_time() - start


def run(args):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        n = 4096 if args.quick else 16384
        repeats = 2 if args.quick else args.repeats
        window = make_step({"n": n, "method": "window"})
        window()  # warm-up: plans and caches the blocks
        times, rates = [], []
        for _ in range(repeats):
            rates.append(matmul_rate())
            times.append(_cpu_seconds(window))
        t, rate = sorted(times)[len(times) // 2], max(rates)
        dense = _cpu_seconds(make_step({"n": n, "method": "sdpa"}))
        flops = useful_flops(n)
        bq, bk = BACKENDS["blocked"].blocks(SlidingWindow(window=WINDOW), n, n)
        rows = [
            {
                "N": n,
                "blocks": f"{bq}x{bk}",
                "window CPU s": t,
                "matmul GFLOP/s": rate / 1e9,
                "useful GFLOP/s": flops / t / 1e9,
                "fraction of matmul rate": flops / t / rate,
                "dense sdpa CPU s": dense,
                "sdpa/window": dense / t,
            }
        ]
        print(rows[0], flush=True)
        notes = (
            f"B={B}, H={H}, D={D}, sliding window W={WINDOW} through `blocked`, fp32, CPU, 1 thread; times are CPU "
            f"seconds of one forward + backward (median of {repeats}; dense sdpa: one). Useful FLOPs: allowed pairs x "
            f"4 x D x 2.5; the matmul rate: the best of the fp32 4096x256x4096 products measured between repeats."
        )
        write_results("window_rate", rows, notes=notes)
        return rows
    finally:
        torch.set_num_threads(threads)
