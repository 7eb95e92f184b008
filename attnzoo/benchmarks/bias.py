"""Position biases, fwd+bwd of one attention call: fixed and learned biases on sdpa and eager, vs plain sdpa.

Run: python -m attnzoo.bench bias   (N=4096, B=1, H=4, D=64, CPU; fp32 and bf16 inputs)

Rows: `plain` is a direct F.scaled_dot_product_attention call (no bias). `gather+sdpa` is the baseline this
suite was written against: a learned T5 table gathered through an [N, N] bucket index into a dense bias and
passed to F.scaled_dot_product_attention (autograd takes the math path and a scatter over N^2 indices);
`gather+eager` adds the same gathered bias on the eager backend.
The attnzoo rows go through `attend()` with a bias module. `*-bias-only` rows time just building the dense
bias and back-propagating a gradient into the table. `bias MiB` is the largest bias tensor one call
materializes (CPU sdpa builds a learned 2D table's bias in chunks of query rows and reads 1D tables, T5 or
ALiBi, learned or fixed, as a view: queries go in reversed, so the bias of query i and key j is table[i + j]).
"""

import torch
import torch.nn.functional as F

from attnzoo.attention import attend, sdpa_bias
from attnzoo.attention.biases import ALiBi, RelativeBias2D, T5RelativeBias
from attnzoo.benchmarks.harness import peak_memory_of, time_side_by_side, write_results

B, H, D = 1, 4, 64
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
VARIANTS = (
    "plain",
    "gather+sdpa t5",
    "gather+eager t5",
    "eager t5",
    "sdpa t5",
    "eager 2d",
    "sdpa 2d",
    "sdpa alibi",
    "sdpa t5 frozen",
    "gather t5 bias-only",
    "toeplitz t5 bias-only",
)


def _bias(variant, n):
    if "t5" in variant:
        bias = T5RelativeBias(num_heads=H)
        if "frozen" in variant:
            bias.requires_grad_(False)
        return bias
    if "2d" in variant:
        rows = int(n**0.5)
        while n % rows:
            rows -= 1
        return RelativeBias2D(num_heads=H, grid_size=(rows, n // rows))  # 64 x 64 patches at N=4096
    if "alibi" in variant:
        return ALiBi(num_heads=H)
    return None


def make_step(spec):
    n, variant, dtype = spec["n"], spec["variant"], DTYPES[spec["dtype"]]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, generator=g).to(dtype).requires_grad_() for _ in range(3))
    bias = _bias(variant, n)
    if variant.startswith("gather"):
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        index = bias.buckets(rel)  # [N, N] bucket of each pair, built once (as a cached index would be)

        def gathered():
            return bias.table[index].permute(2, 0, 1)[None].to(dtype)  # [1, H, N, N]

    def step():
        if variant == "plain":
            out = F.scaled_dot_product_attention(q, k, v)
        elif variant == "gather+sdpa t5":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=gathered())
        elif variant == "gather+eager t5":
            out, _, _ = attend(q, k, v, bias=gathered(), backend="eager")
        elif variant.endswith("bias-only"):
            dense = gathered() if variant.startswith("gather") else bias.dense(n, n, dtype=dtype)
            dense.float().sum().backward()
            return
        else:
            out, _, _ = attend(q, k, v, bias=bias, backend=variant.split()[0])
        out.float().sum().backward()

    return step


def _bias_mib(variant, n, dtype):
    """The largest bias tensor one call materializes: the dense [H, N, N], except on sdpa (CPU), where a learned
    2D table is built a chunk of query rows at a time and 1D tables (T5, ALiBi) are read as a view."""
    size = torch.empty((), dtype=DTYPES[dtype]).element_size() / 2**20
    if variant in ("plain", "sdpa t5", "sdpa alibi", "sdpa t5 frozen"):
        return 0.0
    if variant == "sdpa 2d":
        return sdpa_bias._FORWARD_CHUNK_ELEMENTS * size
    return H * n * n * size


def run(args):
    n = 1024 if args.quick else 4096
    repeats = 2 if args.quick else args.repeats
    rows = []
    for dtype in DTYPES:
        steps = {v: make_step({"n": n, "variant": v, "dtype": dtype}) for v in VARIANTS}
        times = time_side_by_side(steps, repeats=repeats)
        for variant in VARIANTS:
            mem = peak_memory_of({"suite": "bias", "n": n, "variant": variant, "dtype": dtype})
            rows.append(
                {
                    "N": n,
                    "dtype": dtype,
                    "variant": variant,
                    "fwd+bwd s": times[variant],
                    "vs plain": times[variant] / times["plain"],
                    "eager/this": times["eager 2d" if "2d" in variant else "eager t5"] / times[variant],
                    "gather+eager/this": times["gather+eager t5"] / times[variant],
                    "bias MiB": _bias_mib(variant, n, dtype),
                    "peak MiB": mem / 2**20,
                }
            )
    write_results(
        "bias",
        rows,
        notes=f"fwd+bwd of one attention call with a position bias, B={B}, H={H}, D={D}, CPU; "
        "`vs plain` = time / plain F.scaled_dot_product_attention; `eager/this` = attnzoo eager with the same "
        "kind of bias (t5 or 2d) / this; `gather+eager/this` = the pre-attnzoo eager baseline (gathered T5 "
        "bias) / this. `bias MiB`: the largest bias tensor one call materializes (sdpa: a chunk of query rows for "
        "a learned 2D table, a view of the table for 1D ones). Targets: fixed bias (alibi, t5 frozen) <= 1.15x plain; "
        "learned t5/2d on sdpa <= 3x plain "
        "and >= 1.6x faster than eager with the bias. bf16 rows feed bf16 q, k, v (as from autocast linears).",
    )
    return rows
