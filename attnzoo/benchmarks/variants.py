"""Attention kinds fwd+bwd on CPU against dense MHA on sdpa: Linformer, DCMHA, talking heads, and the kinds
from recent research on fused kernels (gated, sinks, differential, sigmoid, mla).

Run: python -m attnzoo.bench variants   (one whole attention layer: projections included; B=1, dim 256,
4 heads of 64, fp32, CPU; N in 1024 and 4096; Linformer proj_len 256; DCMHA rank 2; mla kv_rank 128, rope_dim 32)
On a machine shared with other jobs, OMP_NUM_THREADS=1 gives steadier ratios (the threads are recorded).

Part 1 times every kind side by side (each on the backend `auto` picks, named in the table) and measures its
peak memory. Part 2 measures DCMHA's peak memory for several chunk sizes at N = 4096, which should grow with the
chunk size, not with N^2. Part 3 times talking heads and DCMHA on batches of long sequences with chunk_size
"auto" against fixed chunks of 256. Targets: gated and sinks <= 1.3x mha-sdpa, differential <= 2.5x.
"""

import torch

from attnzoo.attention import Attention
from attnzoo.attention.variants import (
    DCMHAttention,
    DifferentialAttention,
    GatedAttention,
    LinformerAttention,
    MultiHeadLatentAttention,
    SigmoidAttention,
    SinkAttention,
    TalkingHeadsAttention,
)
from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results

B, DIM, HEADS = 1, 256, 4
PROJ_LEN, CHUNK = 256, 256
KV_RANK, ROPE_DIM = 128, 32
KINDS = (
    "mha-sdpa",
    "mha-eager",
    "linformer",
    "dcmha",
    "talking_heads",
    "gated",
    "sinks",
    "differential",
    "sigmoid",
    "mla",
)
TARGETS = {"gated": 1.3, "sinks": 1.3, "differential": 2.5}


def build(kind: str, n: int, chunk: int | None = CHUNK, dim: int = DIM) -> torch.nn.Module:
    if kind == "mha-sdpa":
        return Attention(DIM, HEADS, backend="sdpa")
    if kind == "mha-eager":
        return Attention(DIM, HEADS, backend="eager")
    if kind == "gated":
        return GatedAttention(DIM, HEADS)
    if kind == "sinks":
        return SinkAttention(DIM, HEADS)
    if kind == "differential":
        return DifferentialAttention(DIM, HEADS)
    if kind == "sigmoid":
        return SigmoidAttention(DIM, HEADS, seq_len=n)
    if kind == "mla":
        return MultiHeadLatentAttention(DIM, HEADS, kv_rank=KV_RANK, rope_dim=ROPE_DIM)
    if kind == "linformer":
        return LinformerAttention(DIM, HEADS, seq_len=n, proj_len=min(PROJ_LEN, n), backend="sdpa")
    if kind == "dcmha":
        return DCMHAttention(dim, HEADS, chunk_size=chunk)
    if kind == "talking_heads":
        return TalkingHeadsAttention(dim, HEADS, chunk_size=chunk)
    raise ValueError(f"unknown kind {kind!r}; valid: {list(KINDS)}")


def make_step(spec):
    torch.manual_seed(0)
    dim, n, batch = spec.get("dim", DIM), spec["n"], spec.get("batch", B)
    layer = build(spec["kind"], n, spec.get("chunk", CHUNK), dim)
    x = torch.randn(batch, n, dim, requires_grad=True)
    pad = None  # with "pad": the last pad * N keys of every row are padding (a batch of texts)
    if spec.get("pad"):
        pad = torch.zeros(batch, n, dtype=torch.bool)
        pad[:, n - int(spec["pad"] * n) :] = True

    def step():
        layer(x, key_padding_mask=pad).sum().backward()

    step.layer = layer
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
            ratio = times[kind] / times["mha-sdpa"]
            rows.append(
                {
                    "N": n,
                    "kind": kind,
                    "backend": steps[kind].layer.backend_used,
                    "chunk": CHUNK if kind in ("dcmha", "talking_heads") else "",
                    "fwd+bwd s": times[kind],
                    "vs mha-sdpa": ratio,
                    "target": f"<= {TARGETS[kind]}x: {'met' if ratio <= TARGETS[kind] else 'missed'}"
                    if kind in TARGETS
                    else "",
                    "peak MiB": mem / 2**20,
                }
            )
            steps[kind].layer = None  # free the layer before the memory runs of the next size
        del steps
    n = sizes[-1]
    chunks = [64, 256] if args.quick else [128, 512, 2048]
    for chunk in chunks:
        mem = peak_memory_of({"suite": "variants", "kind": "dcmha", "n": n, "chunk": chunk})
        rows.append({"N": n, "kind": "dcmha (memory)", "chunk": chunk, "peak MiB": mem / 2**20})
    # part 3: chunk_size "auto" (the default) against fixed chunks of 256, on a batch of long sequences
    cases = [(2, 256, DIM, 0.0), (4, 512, 64, 0.25)]
    if not args.quick:  # this layer; and the text recipe's width (4 heads of 16) on right-padded rows
        cases = [(16, 512, DIM, 0.0), (4, 1024, DIM, 0.0), (16, 512, 64, 0.25), (4, 1024, 64, 0.25)]
    for batch, n, dim, pad in cases:
        specs = {
            (kind, chunk): {"kind": kind, "n": n, "batch": batch, "chunk": chunk, "dim": dim, "pad": pad}
            for kind in ("talking_heads", "dcmha")
            for chunk in (CHUNK, "auto")
        }
        steps = {key: make_step(spec) for key, spec in specs.items()}
        times = time_side_by_side(steps, repeats=repeats)
        for (kind, chunk), t in times.items():
            rows.append(
                {
                    "N": n,
                    "kind": f"{kind} (chunk auto, B={batch}, dim {dim}{f', {pad:.0%} padding' if pad else ''})",
                    "backend": steps[kind, chunk].layer.backend_used,
                    "chunk": chunk,
                    "fwd+bwd s": t,
                    "vs chunk 256": t / times[kind, CHUNK],
                }
            )
        del steps
    write_results(
        "variants",
        rows,
        notes=f"fwd+bwd of one attention layer (qkv + attention + proj), B={B}, dim {DIM}, {HEADS} heads of "
        f"{DIM // HEADS}, fp32, CPU. linformer: proj_len {PROJ_LEN}, heads-shared projections, sdpa on the "
        f"projected keys. dcmha: rank 2, chunked queries with per-chunk recomputation in backward. "
        f"`vs mha-sdpa` = time / dense MHA on sdpa time (same run, interleaved). The last rows: DCMHA peak "
        f"memory at N={n} for several chunk sizes. gated: elementwise gate; sinks: fused CPU kernel plus a "
        f"log-sum-exp rescaling; differential: two fused calls; sigmoid: explicit (no fused kernel, like "
        f"mha-eager); mla: kv_rank {KV_RANK}, rope_dim {ROPE_DIM}, values zero-padded to the key width. "
        f"`chunk auto` rows: talking heads and DCMHA on a batch of B sequences (width 256, or 64 with the last "
        f"quarter of every row padding) with chunk_size 'auto' (the default: chunks cut so that B x H x chunk x N "
        f"scores stay near 2^21) against fixed chunks of {CHUNK} queries, "
        f"interleaved; `vs chunk 256` = time / that of chunks of {CHUNK}.",
    )
    return rows
