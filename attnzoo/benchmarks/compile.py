"""torch.compile (`trainer.compile=true`) on attnzoo's ViT: training step time eager vs compiled, side by side,
plus the one-off compile time.

Run: python -m attnzoo.bench compile   (the train_step ViT at depth 2, batch 16, fp32, CPU, 1 thread, inductor;
--quick: batch 4)
"""

import time

import torch

from attnzoo.benchmarks.harness import load_suite, time_side_by_side, write_results
from attnzoo.run.switches import compile_net

_train_step = load_suite("train_step")  # the same model and step as the train_step suite
make_models, make_step = _train_step.make_models, _train_step.make_step


def run(args):
    torch.set_num_threads(1)
    batch = 4 if args.quick else 16
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(batch, 3, 64, 64, generator=g), torch.randint(0, 10, (batch,), generator=g))
    eager = make_models(2)["attnzoo"]
    compiled = make_models(2)["attnzoo"]
    compiled.load_state_dict(eager.state_dict())
    compile_net(compiled)
    steps = {name: make_step({"precision": "fp32"}, m, data) for name, m in (("eager", eager), ("compiled", compiled))}
    t0 = time.perf_counter()
    steps["compiled"]()  # compiles forward and backward
    compile_seconds = time.perf_counter() - t0
    times = time_side_by_side(steps, repeats=2 if args.quick else args.repeats)
    rows = [
        {"variant": v, "s/step": times[v], "speedup vs eager": times["eager"] / times[v]} for v in ("eager", "compiled")
    ]
    rows[1]["first step incl. compile s"] = compile_seconds
    write_results(
        "compile",
        rows,
        notes=f"attnzoo ViT 64x64/8 (65 tokens), width 192, depth 2, batch {batch}, fp32 training step, CPU, "
        "1 thread, torch.compile default (inductor).",
    )
    return rows
