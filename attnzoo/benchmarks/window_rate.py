"""The blocked sliding window against the machine's matmul rate, one thread: how much of the time is useful work.

Run: python -m attnzoo.bench window_rate   (B=1, H=4, D=64, W=256, N=16384, fp32, CPU, 1 thread; --quick: N=4096)

Useful FLOPs count only the (query, key) pairs the window allows (|i - j| <= W): 4 * D per pair for the forward
(Q K^T and P V) times 2.5 for forward + backward, the count issue 28 used. The matmul rate is the best of three
fp32 [4096, 256] x [256, 4096] products in the same process, measured between the attention repeats, so that the
machine's load hits both alike. `sdpa` is dense SDPA over the same q, k, v (one repeat: it is slow), for the speed-up.
Two paths of the blocked backend are timed, interleaved: `band` (what `blocked` runs for a plain sliding window on
CPU: keys read in place, band.py) and `gathered` (`Blocked(band=False)`: the key blocks gathered, as for every other
pattern, and as before the band path). `kernel b` rows are the ceiling of torch's CPU flash kernel itself for blocks
of b queries: its forward + backward ops called as band.py calls them, each block reading the m * b keys a window's
block must read (m = 2 * ceil(W / b) + 1) as overlapping views, with no mask and nothing else around them (no
padding, no copies, no folding of the key gradients), counted in the same useful FLOPs.
"""

from __future__ import annotations

import time

import torch

from attnzoo.attention import SlidingWindow, attend
from attnzoo.attention.backends import BACKENDS
from attnzoo.attention.blocked import Blocked
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
    if method.startswith("kernel"):
        return _kernel_step(n, int(method.split()[1]), g)
    q, k, v = (torch.randn(B, H, n, D, generator=g, requires_grad=True) for _ in range(3))

    def step():
        if method == "gathered":
            out, _ = GATHERED(
                q,
                k,
                v,
                pattern=SlidingWindow(window=WINDOW),
                bias=None,
                key_padding_mask=None,
                dropout_p=0.0,
                scale=D**-0.5,
                return_weights=False,
            )
        else:
            pattern, backend = (SlidingWindow(window=WINDOW), "blocked") if method == "band" else (None, "sdpa")
            out, _, used = attend(q, k, v, pattern=pattern, backend=backend)
            assert used == ("blocked[band]" if method == "band" else backend), used
        out.sum().backward()
        q.grad = k.grad = v.grad = None

    return step


GATHERED = Blocked(band=False)


def _kernel_step(n: int, bq: int, g: torch.Generator):
    """The CPU flash kernel's forward + backward alone, as the band path calls it (queries [n / bq, H, bq, D] over
    overlapping views of the keys, [n / bq, H, m * bq, D]) but with no mask, no padding and nothing around it."""
    m = 2 * -(-WINDOW // bq) + 1
    blocks = B * n // bq
    q = torch.randn(blocks * bq, H, D, generator=g)
    k, v = (torch.randn((blocks + m - 1) * bq, H, D, generator=g) for _ in range(2))
    qv = q.view(blocks, bq, H, D).transpose(1, 2)  # [n / bq, H, bq, D]
    kv, vv = (x.as_strided((blocks, H, m * bq, D), (bq * H * D, D, H * D, 1)) for x in (k, v))
    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default

    def step():
        out, lse = fwd(qv, kv, vv, 0.0, False, scale=D**-0.5)
        bwd(torch.ones_like(out), qv, kv, vv, out, lse, 0.0, False, scale=D**-0.5)

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
        methods = ("band", "gathered", "kernel 64", "kernel 128", "kernel 256")
        steps = {m: make_step({"n": n, "method": m}) for m in methods}
        for step in steps.values():
            step()  # warm-up: plans and caches the blocks
        times, rates = {m: [] for m in methods}, []
        for _ in range(repeats):
            rates.append(matmul_rate())
            for m in methods:
                times[m].append(_cpu_seconds(steps[m]))
        rate = max(rates)
        dense = _cpu_seconds(make_step({"n": n, "method": "sdpa"}))
        flops = useful_flops(n)
        bq, bk = BACKENDS["blocked"].blocks(SlidingWindow(window=WINDOW), n, n)
        rows = []
        for m in methods:
            t = sorted(times[m])[len(times[m]) // 2]
            rows.append(
                {
                    "N": n,
                    "path": m,
                    "blocks": f"{bq}x{bk}" if not m.startswith("kernel") else f"{m.split()[1]}x{m.split()[1]}",
                    "window CPU s": t,
                    "matmul GFLOP/s": rate / 1e9,
                    "useful GFLOP/s": flops / t / 1e9,
                    "fraction of matmul rate": flops / t / rate,
                    "dense sdpa CPU s": dense,
                    "sdpa/window": dense / t,
                }
            )
            print(rows[-1], flush=True)
        notes = (
            f"B={B}, H={H}, D={D}, sliding window W={WINDOW} through `blocked`, fp32, CPU, 1 thread; times are CPU "
            f"seconds of one forward + backward (median of {repeats}, the paths interleaved; dense sdpa: one). "
            f"`band`: the path `blocked` takes for a plain sliding window on CPU (keys read in place); `gathered`: "
            f"`Blocked(band=False)`, the key blocks gathered (the path before band); `kernel b`: torch's CPU flash "
            f"kernel's ops alone over blocks of b queries, each reading the (2 ceil(W / b) + 1) b keys a window's "
            f"block reads, in place and unmasked: what any blocking into b-query blocks over this kernel can reach "
            f"at most. Useful FLOPs: allowed pairs x 4 x D x 2.5; the matmul rate: the best of the fp32 "
            f"4096x256x4096 products measured between repeats."
        )
        write_results("window_rate", rows, notes=notes)
        return rows
    finally:
        torch.set_num_threads(threads)
