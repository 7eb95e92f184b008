"""Activation checkpointing of attnzoo's Encoder: peak memory and step time of none / full / every k-th block /
attention only, side by side.

Run: python -m attnzoo.bench checkpointing   (depth 12, 1,024 tokens, width 192, 3 heads, batch 1, fp32, CPU,
1 thread; --quick: depth 4, 256 tokens)
"""

import torch

from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results
from attnzoo.layers.encoder import make_encoder

WIDTH, HEADS = 192, 3
# variant -> Encoder.set_grad_checkpointing arguments (None: off)
VARIANTS = {
    "none": None,
    "full": {"every": 1},
    "every 2nd block": {"every": 2},
    "attention only": {"every": 1, "attention_only": True},
}


def make_step(spec):
    """fwd+bwd of the encoder on a fixed input; gradients accumulate in place (allocated by the warm-up step)."""
    torch.manual_seed(0)
    enc = make_encoder(dim=WIDTH, depth=spec["depth"], num_heads=HEADS).train()
    mode = VARIANTS[spec["variant"]]
    if mode is not None:
        enc.set_grad_checkpointing(True, **mode)
    x = torch.randn(1, spec["tokens"], WIDTH, requires_grad=True)

    def step():
        enc(x).square().mean().backward()

    return step


def run(args):
    torch.set_num_threads(1)
    depth, tokens = (4, 256) if args.quick else (12, 1024)
    steps = {v: make_step({"depth": depth, "tokens": tokens, "variant": v}) for v in VARIANTS}
    times = time_side_by_side(steps, repeats=2 if args.quick else args.repeats)
    rows = []
    mems = {}
    for v in VARIANTS:
        mems[v] = peak_memory_of({"suite": "checkpointing", "depth": depth, "tokens": tokens, "variant": v})
    for v in VARIANTS:
        rows.append(
            {
                "variant": v,
                "fwd+bwd s": times[v],
                "peak MiB": mems[v] / 2**20,
                "memory vs none": mems[v] / mems["none"],
                "time vs none": times[v] / times["none"],
            }
        )
    write_results(
        "checkpointing",
        rows,
        notes=f"Encoder depth {depth}, {tokens} tokens, width {WIDTH}, {HEADS} heads, batch 1, fp32, CPU, 1 thread. "
        "`peak MiB`: peak growth of resident memory during one fwd+bwd in a fresh process (weights and "
        "gradient buffers exist before the step, so this is activation + transient memory).",
    )
    return rows
