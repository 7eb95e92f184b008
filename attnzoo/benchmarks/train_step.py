"""Training step (forward, loss, backward, SGD step) of attnzoo's ViT vs timm's VisionTransformer of the same
shape, same weights and same batches, in fp32 and bf16 autocast, timed side by side.

Run: python -m attnzoo.bench train_step   (ViT: 64x64 images, patch 8 -> 65 tokens, width 192, depth 4, 3 heads,
batch 16, CPU, 1 thread; --quick: depth 2, batch 8)
"""

import contextlib

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

from attnzoo.benchmarks.harness import time_side_by_side, write_results
from attnzoo.models.vit import ViT, timm_to_attnzoo

SHAPE = dict(img_size=64, patch_size=8, in_chans=3, num_classes=10, embed_dim=192, num_heads=3, mlp_ratio=4.0)
IMPLS = ("attnzoo", "timm")
PRECISIONS = ("fp32", "bf16-mixed")


def make_models(depth):
    theirs = VisionTransformer(**SHAPE, depth=depth, qkv_bias=True, global_pool="token")
    ours = ViT(**SHAPE, depth=depth, global_pool="token")
    ours.load_state_dict(timm_to_attnzoo(theirs.state_dict()))
    return {"attnzoo": ours.train(), "timm": theirs.train()}


def make_step(spec, model=None, batch=None):
    """One training step of `spec['impl']` in `spec['precision']` on a fixed batch."""
    if model is None:
        model = make_models(spec["depth"])[spec["impl"]]
    if batch is None:
        g = torch.Generator().manual_seed(0)
        batch = (
            torch.randn(spec["batch"], 3, 64, 64, generator=g),
            torch.randint(0, 10, (spec["batch"],), generator=g),
        )
    image, label = batch
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    autocast = spec["precision"] == "bf16-mixed"

    def step():
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            loss = F.cross_entropy(model(image), label)
        loss.backward()
        opt.step()

    return step


def run(args):
    torch.set_num_threads(1)  # a loaded 2-core machine: one thread per process is the stable setting
    depth, batch = (2, 8) if args.quick else (4, 16)
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(batch, 3, 64, 64, generator=g), torch.randint(0, 10, (batch,), generator=g))
    models = make_models(depth)
    steps = {
        (impl, p): make_step({"impl": impl, "precision": p}, models[impl], data) for p in PRECISIONS for impl in IMPLS
    }
    times = time_side_by_side(
        {f"{i}/{p}": s for (i, p), s in steps.items()}, repeats=2 if args.quick else args.repeats, warmup=1
    )
    rows = []
    for p in PRECISIONS:
        ours, theirs = times[f"attnzoo/{p}"], times[f"timm/{p}"]
        rows.append(
            {
                "precision": p,
                "attnzoo s/step": ours,
                "timm s/step": theirs,
                "attnzoo img/s": batch / ours,
                "timm img/s": batch / theirs,
                "attnzoo/timm throughput": theirs / ours,
                "fp32/this time (attnzoo)": times["attnzoo/fp32"] / ours,
            }
        )
    write_results(
        "train_step",
        rows,
        notes=f"ViT 64x64/8 (65 tokens), width 192, depth {depth}, 3 heads, batch {batch}, CPU, 1 thread, "
        "same weights and batch; medians of interleaved steps. `attnzoo/timm throughput` >= 1 means attnzoo "
        "is as fast; `fp32/this time` < 1 means slower than fp32.",
    )
    return rows
