"""Attention kinds fwd+bwd on CPU: Linformer and DCMHA (and talking heads) against dense MHA on sdpa.

Run: python -m attnzoo.bench variants   (one whole attention layer: projections included; B=1, dim 256,
4 heads of 64, fp32, CPU; N in 1024 and 4096; Linformer proj_len 256; DCMHA rank 2)

Part 1 times every kind side by side and measures its peak memory. Part 2 measures DCMHA's peak memory for
several chunk sizes at N = 4096, which should grow with the chunk size, not with N^2.
"""

import torch

from attnzoo.attention import Attention
from attnzoo.attention.variants import DCMHAttention, LinformerAttention, TalkingHeadsAttention
from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results

B, DIM, HEADS = 1, 256, 4
PROJ_LEN, CHUNK = 256, 256
KINDS = ("mha-sdpa", "linformer", "dcmha", "talking_heads")


def build(kind: str, n: int, chunk: int | None = CHUNK) -> torch.nn.Module:
    if kind == "mha-sdpa":
        return Attention(DIM, HEADS, backend="sdpa")
    if kind == "linformer":
        return LinformerAttention(DIM, HEADS, seq_len=n, proj_len=min(PROJ_LEN, n), backend="sdpa")
    if kind == "dcmha":
        return DCMHAttention(DIM, HEADS, chunk_size=chunk)
    if kind == "talking_heads":
        return TalkingHeadsAttention(DIM, HEADS, chunk_size=chunk)
    raise ValueError(f"unknown kind {kind!r}; valid: {list(KINDS)}")


def make_step(spec):
    torch.manual_seed(0)
    layer = build(spec["kind"], spec["n"], spec.get("chunk", CHUNK))
    x = torch.randn(B, spec["n"], DIM, requires_grad=True)

    def step():
        layer(x).sum().backward()

    return step


def run(args):
    sizes = [256, 512] if args.quick else [1024, 4096]
    repeats = 2 if args.quick else args.repeats
    rows = []
    for n in sizes:
        steps = {kind: make_step({"kind": kind, "n": n}) for kind in KINDS}
        times = time_side_by_side(steps, repeats=repeats)
        for kind in KINDS:
            mem = peak_memory_of({"suite": "variants", "kind": kind, "n": n})
            rows.append(
                {
                    "N": n,
                    "kind": kind,
                    "chunk": CHUNK if kind in ("dcmha", "talking_heads") else "",
                    "fwd+bwd s": times[kind],
                    "vs mha-sdpa": times[kind] / times["mha-sdpa"],
                    "peak MiB": mem / 2**20,
                }
            )
    n = sizes[-1]
    chunks = [64, 256] if args.quick else [128, 512, 2048]
    for chunk in chunks:
        mem = peak_memory_of({"suite": "variants", "kind": "dcmha", "n": n, "chunk": chunk})
        rows.append({"N": n, "kind": "dcmha (memory)", "chunk": chunk, "peak MiB": mem / 2**20})
    write_results(
        "variants",
        rows,
        notes=f"fwd+bwd of one attention layer (qkv + attention + proj), B={B}, dim {DIM}, {HEADS} heads of "
        f"{DIM // HEADS}, fp32, CPU. linformer: proj_len {PROJ_LEN}, heads-shared projections, sdpa on the "
        f"projected keys. dcmha: rank 2, chunked queries with per-chunk recomputation in backward. "
        f"`vs mha-sdpa` = time / dense MHA on sdpa time (same run, interleaved). The last rows: DCMHA peak "
        f"memory at N={n} for several chunk sizes.",
    )
    return rows
