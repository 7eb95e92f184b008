"""`flex`: FlexAttention (`torch.nn.attention.flex_attention`) driven by a pattern's mask_mod and block layout.

BlockMasks are built from `Pattern.block_layout` (O(blocks), not an O(N^2) mask sweep) and cached per
(pattern, lengths, device); key padding joins as a per-batch `KeyPadding` pattern (a fresh BlockMask per call,
since padding is data). `flex_attention` is compiled once per process and device (torch.compile; on CPU
with static shapes, so each new length compiles once). On this torch, flex has no backward on CPU: it serves
CPU inference and CUDA training.
"""

from __future__ import annotations

import logging
import weakref

import torch

from .backends import Request, register_backend
from .biases import Bias
from .blocked import _FULL, block_density
from .lasting import lasting
from .patterns import KeyPadding, Pattern

Tensor = torch.Tensor
BLOCK = 128  # FlexAttention's default tile
log = logging.getLogger("attnzoo")
# Triton tiles that fit a GPU's shared memory where the default ones do not (a learned bias's gradient on an H100 at
# head dim 64 asked for 240 KiB of the 227 available): smaller forward and backward blocks, one pipeline stage.
# Each divides BLOCK, and BLOCK_N1 % BLOCK_M1 == BLOCK_M2 % BLOCK_N2 == 0 as the backward kernel requires
SMALL_TILES = {
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_M1": 32,
    "BLOCK_N1": 64,
    "BLOCK_M2": 64,
    "BLOCK_N2": 32,
    "num_stages": 1,
    "num_warps": 4,
}


_FLEX_MODULE: list = []  # [torch's flex_attention module, or None], filled on first use


def _flex_module():
    # asked on every call `auto` decides: kept in a plain global (not functools.cache, whose wrapper Dynamo warns
    # about each time a compiled net traces `auto`)
    if not _FLEX_MODULE:
        try:
            from torch.nn.attention import flex_attention
        except ImportError:
            flex_attention = None
        _FLEX_MODULE.append(flex_attention)
    return _FLEX_MODULE[0]


class Flex:
    """FlexAttention backend.

    Args:
        compile: run `flex_attention` through torch.compile (fused kernels). Without it torch runs an unfused
            reference that materializes all scores; tests use it to check this wiring cheaply.
        max_density: `auto` passes this backend over when the pattern reads more than this fraction of blocks.
    """

    name = "flex"

    def __init__(self, *, compile: bool = True, max_density: float = 0.5) -> None:
        self.compile = compile
        self.max_density = max_density
        self._fns: dict[str, object] = {}
        self.small_tiles: set[tuple] = set()  # (device, head dim, dtype) whose default tiles did not fit the GPU
        self._masks: weakref.WeakKeyDictionary[Pattern, dict] = weakref.WeakKeyDictionary()

    def supports(self, req: Request) -> str | None:
        if _flex_module() is None:
            return f"torch {torch.__version__} has no FlexAttention"
        if req.return_weights:
            return "FlexAttention does not return attention weights"
        if req.device_type == "cpu" and req.needs_grad:
            return (
                f"FlexAttention has no backward on CPU (torch {torch.__version__}); "
                "use backend='blocked' to train sparse patterns on CPU"
            )
        if req.dropout_p > 0:
            return "FlexAttention has no attention dropout; use backend='blocked' (or set attn_drop=0)"
        if req.device_type == "cuda" and 0 < req.head_dim < 16:
            return f"FlexAttention's CUDA kernel needs a head dimension of at least 16 (got {req.head_dim})"
        if req.transform is not None:
            if req.transform.rescale is None:
                return f"kind {req.transform.name!r} has no FlexAttention form (score_mod and rescale)"
            if req.device_type == "cpu" and self.compile:
                return "compiled FlexAttention on CPU cannot return the log-sum-exp (torch 2.14); use blocked (or auto)"
        return None

    def avoid_in_auto(self, req: Request) -> str | None:
        if req.transform is not None:  # a kind's transform: no dense fused kernel to prefer off the CPU
            return None
        if req.device_type == "cpu":
            return "on CPU flex compiles per new shape (~20 s); 'blocked' needs no compile (ask for 'flex' to use it)"
        if req.pattern is None:
            return "no pattern: dense kernels are faster"
        density = block_density(req.pattern, req.lq, req.lk, BLOCK, BLOCK)
        if density > self.max_density:
            return f"the pattern reads {density:.0%} of key blocks (> {self.max_density:.0%}): dense is faster"
        return None

    def block_mask(self, pattern: Pattern, lq: int, lk: int, device) -> object:
        """The BlockMask of `pattern` (bound to the lengths); cached unless the pattern is per-batch."""
        if pattern.batch_size is not None:
            return _build(pattern.bind(lq, lk), lq, lk, device)
        cache = self._masks.setdefault(pattern, {})
        key = (lq, lk, str(device))
        if key not in cache:  # flex saves the BlockMask's tensors for backward: made outside inference mode
            cache[key] = lasting(lambda: _build(pattern.bind(lq, lk), lq, lk, device))
        return cache[key]

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights, transform=None):
        if return_weights or dropout_p > 0:
            raise ValueError("backend 'flex' returns no weights and has no dropout; use 'eager' or 'blocked'")
        call = dict(pattern=pattern, bias=bias, key_padding_mask=key_padding_mask, scale=scale)
        if transform is None:
            return self.run(q, k, v, **call)[0], None
        out, lse = self.run(q, k, v, **call, then=transform.score_mod, return_lse=True)  # lse [B, H, Lq]
        return out * transform.rescale(lse)[..., None].to(out.dtype), None

    def run(
        self, q, k, v, *, pattern, bias, key_padding_mask, scale, then=None, return_lse=False
    ) -> tuple[Tensor, Tensor | None]:
        """(out [B, H, Lq, D], log-sum-exp of each row's scores [B, H, Lq] or None).

        `then(score, b, h, q_idx, kv_idx)`, when given, maps each score after the bias (a kind's
        `Transform.score_mod`); `return_lse` for a transform's `rescale` (compiled flex on CPU cannot return it
        in torch 2.14). A row with no allowed key gets
        zeros and a log-sum-exp of -inf.
        """
        lq, lk = q.shape[-2], k.shape[-2]
        pattern = _FULL if pattern is None else pattern
        if key_padding_mask is not None:
            pattern = pattern.bind(lq, lk) & KeyPadding(key_padding_mask)
        block_mask = self.block_mask(pattern, lq, lk, q.device)
        score_mod = _score_mod(bias, lq, lk, q.device, q.dtype)
        if then is not None:
            score_mod = _then(score_mod, then)
        k, v = k.to(q.dtype), v.to(q.dtype)
        # a query with no allowed key gets zeros from flex itself (its softmax denominator is guarded); the tests
        # hold it to that, since CPU-compiled flex cannot return the log-sum-exp to check rows here
        aux = {"return_aux": _flex_module().AuxRequest(lse=True)} if return_lse else {}
        call = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1], **aux)
        # smaller tiles on CUDA: from the start when a learned bias trains (its kernels' default tiles did not fit an
        # H100), and for the shapes whose default forward tiles did not (the error comes when the kernel compiles,
        # at the first call). A backward compiles at the first loss.backward(), outside this call: a backward whose
        # default tiles do not fit fails there, with Inductor's error naming kernel_options
        shape = (q.device, q.shape[-1], q.dtype)
        small = q.is_cuda and (shape in self.small_tiles or (torch.is_grad_enabled() and _learned(bias)))
        try:
            out = self._flex(q.device.type)(q, k, v, **call, **({"kernel_options": SMALL_TILES} if small else {}))
        except Exception as err:  # Inductor's error when no tile configuration fits the GPU's shared memory
            if small or not q.is_cuda or not _out_of_resources(err):
                raise
            log.warning("flex: the default Triton tiles do not fit this GPU (%s); using smaller ones", _first(err))
            self.small_tiles.add(shape)
            out = self._flex(q.device.type)(q, k, v, **call, kernel_options=SMALL_TILES)
        # out: [B, H, Lq, D], or (that, AuxOutput with lse [B, H, Lq])
        return (out[0], out[1].lse) if return_lse else (out, None)

    def _flex(self, device_type: str):
        # CPU: static shapes, since torch 2.14's inductor emits C++ that does not build for dynamic-shape CPU flex
        # kernels (each new length compiles once instead)
        if device_type not in self._fns:
            fn = _flex_module().flex_attention
            dynamic = False if device_type == "cpu" else None
            self._fns[device_type] = torch.compile(fn, dynamic=dynamic) if self.compile else fn
        return self._fns[device_type]


def _build(bound: Pattern, lq: int, lk: int, device):
    """BlockMask from the pattern's block layout and a bounds-safe mask_mod."""
    flex = _flex_module()
    kv_blocks, counts = bound.block_layout(lq, lk, BLOCK, BLOCK, device=device)  # [nQb, K], [nQb]
    batch = 1 if bound.batch_size is None else bound.batch_size
    nkb = -(-lk // BLOCK)
    kv_blocks = torch.nn.functional.pad(kv_blocks, (0, nkb - kv_blocks.shape[1]))  # [nQb, nKb]: CPU flex wants all

    def mask_mod(b, h, q_idx, kv_idx):
        inside = (q_idx < lq) & (kv_idx < lk)
        return inside & bound.mask_mod(b, h, q_idx.clamp(max=lq - 1), kv_idx.clamp(max=lk - 1))

    # one eager call on the device first: lookup tensors a pattern makes on first use (global tokens' flags) are
    # then made here, not inside the compiled kernel, where Inductor cannot lower them on CUDA
    probe = torch.zeros(1, dtype=torch.int32, device=device)
    lasting(lambda: mask_mod(probe, probe, probe, probe))
    return flex.BlockMask.from_kv_blocks(
        counts.to(torch.int32).expand(batch, 1, -1).contiguous(),  # [B|1, 1, nQb]
        kv_blocks.to(torch.int32).expand(batch, 1, -1, -1).contiguous(),  # [B|1, 1, nQb, nKb]
        BLOCK_SIZE=BLOCK,
        mask_mod=mask_mod,
        seq_lengths=(lq, lk),
    )


def _learned(bias) -> bool:
    """The bias has a tensor that trains: its score_mod captures it, and flex's kernels compute its gradient."""
    if bias is None:
        return False
    if isinstance(bias, Tensor):
        return bias.requires_grad
    return isinstance(bias, torch.nn.Module) and any(p.requires_grad for p in bias.parameters())


def _out_of_resources(err: BaseException) -> bool:
    text = str(err)
    return "out of resource" in text or "No valid triton configs" in text


def _first(err: BaseException) -> str:
    return next((line for line in str(err).splitlines() if "out of resource" in line), str(err)[:200]).strip()


def _then(first, then):
    """The score_mod applying `first` (or nothing) and then `then`."""
    if first is None:
        return then

    def both(score, b, h, q_idx, kv_idx):
        return then(first(score, b, h, q_idx, kv_idx), b, h, q_idx, kv_idx)

    return both


def _score_mod(bias, lq: int, lk: int, device, dtype):
    """A flex score_mod adding `bias`: the module's own `score_mod` when it has one, else a dense table lookup."""
    if bias is None:
        return None
    if not isinstance(bias, Tensor) and type(bias).score_mod is not Bias.score_mod:
        inner = bias.score_mod(lq, lk)
        shared = getattr(bias, "num_heads", None) == 1  # one head's values for every head

        def bounded(score, b, h, q_idx, kv_idx):  # flex may visit indices past the lengths inside the last block
            return inner(score, b, h * 0 if shared else h, q_idx.clamp(max=lq - 1), kv_idx.clamp(max=lk - 1))

        return bounded
    if not isinstance(bias, Tensor):
        table = bias.dense(lq, lk, device=device, dtype=torch.float32)  # [H, Lq, Lk]
    else:
        table = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape)).to(torch.float32)  # [B|1, H|1, Lq, Lk]
    per_batch = table.dim() == 4 and table.shape[0] > 1
    per_head = table.shape[-3] > 1
    table = table if table.dim() == 4 else table[None]  # [B|1, H|1, Lq, Lk]

    def score_mod(score, b, h, q_idx, kv_idx):
        bi = b if per_batch else 0
        hi = h if per_head else 0
        return score + table[bi, hi, q_idx.clamp(max=lq - 1), kv_idx.clamp(max=lk - 1)]

    return score_mod


register_backend(Flex(), before="blocked")
