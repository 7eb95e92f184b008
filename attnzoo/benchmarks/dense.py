"""Dense attention fwd+bwd: attnzoo eager vs attnzoo sdpa vs a direct F.scaled_dot_product_attention call.

Run: python -m attnzoo.bench dense   (B=1, H=4, D=64, fp32, CPU, N in 1024 and 4096)
"""

import torch
import torch.nn.functional as F

from attnzoo.attention import attend
from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results

B, H, D = 1, 4, 64
METHODS = ("eager", "sdpa", "direct")


def make_step(spec):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, spec["n"], D, generator=g, requires_grad=True) for _ in range(3))
    method = spec["method"]

    def step():
        if method == "direct":
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out, _, _ = attend(q, k, v, backend=method)
        out.sum().backward()

    return step


def run(args):
    sizes = [256, 512] if args.quick else [1024, 4096]
    rows = []
    for n in sizes:
        steps = {m: make_step({"n": n, "method": m}) for m in METHODS}
        times = time_side_by_side(steps, repeats=2 if args.quick else args.repeats)
        for m in METHODS:
            mem = peak_memory_of({"suite": "dense", "n": n, "method": m})
            rows.append(
                {
                    "N": n,
                    "method": m,
                    "fwd+bwd s": times[m],
                    "peak MiB": mem / 2**20,
                    "vs direct": times[m] / times["direct"],
                    "eager/this": times["eager"] / times[m],
                }
            )
    write_results(
        "dense",
        rows,
        notes="fwd+bwd of one attention call, B=1, H=4, D=64, fp32, CPU; "
        "`vs direct` = time / direct F.scaled_dot_product_attention time",
    )
    return rows
