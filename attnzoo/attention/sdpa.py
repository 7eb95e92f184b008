"""`sdpa`: `F.scaled_dot_product_attention`, torch's fused kernels, and on CPU the bias paths of `sdpa_bias.py`.

A kind's `Transform` runs here through its `fused` form (torch's CPU flash kernel, which returns the log-sum-exp
that public sdpa does not), on CPU and without attention dropout.

Notation as in `backends.py`: q [B, H, Lq, D], k and v [B, Hkv, Lk, D].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import sdpa_bias
from .backends import Request, dense_bias, is_plain_causal, register_backend, repeat_kv, rescued_mask, trains

Tensor = torch.Tensor


class Sdpa:
    """`F.scaled_dot_product_attention` (flash / memory-efficient / cuDNN on GPU, flash on CPU), and on CPU three
    paths of `sdpa_bias.py` for biases, named in `PATHS` and reported as "sdpa[<path>]" (`auto`'s log, the
    name `attend` returns, `Attention.backend_used`). Plain "sdpa" is torch's kernel, with or without a mask."""

    name = "sdpa"
    PATHS = {
        "table_grad": "CPU training of a learned table over offsets (T5, relative_2d): the fused forward, and a "
        "chunked backward that sums each chunk's score gradient into the table (sdpa_with_relative_bias)",
        "hankel_table": "CPU, a 1D table over offsets that is not trained (ALiBi, a frozen T5, inference): "
        "read in place as a Hankel view by the fused kernel (sdpa_with_fixed_sequence_bias)",
        "bias_grad": "CPU training of any other learned bias: the fused forward on the dense bias, and a "
        "chunked backward (sdpa_with_bias_grad)",
    }

    def supports(self, req: Request) -> str | None:
        if req.return_weights:
            return "fused kernels do not return attention weights"
        if req.transform is not None:
            kind = req.transform.name
            if req.transform.fused is None:
                return f"the sdpa kernels compute a softmax inside, and kind {kind!r} has no fused form"
            if req.device_type != "cpu":
                return (
                    f"torch's public sdpa returns no log-sum-exp, and kind {kind!r} uses the CPU kernel that does; "
                    f"on {req.device_type} use flex"
                )
            if req.dropout_p:
                return "the fused CPU kernel runs without attention dropout here; use eager or blocked"
        return None

    def path(self, req: Request) -> str | None:
        """The path of `PATHS` that runs `req`, or None for torch's kernel."""
        trained = trains(req.bias) and req.needs_grad  # needs_grad: grad mode is on
        return _sdpa_path(req.device_type, req.dtype, req.bias, trained, req.lq, req.lk, req.dropout_p)[0]

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights, transform=None):
        if return_weights:
            raise ValueError("backend 'sdpa' cannot return attention weights; use backend='eager' or 'auto'")
        if transform is not None:
            return _fused_transform(q, k, v, transform, pattern, bias, key_padding_mask, scale), None
        lq, lk = q.shape[-2], k.shape[-2]
        gqa = q.shape[1] != k.shape[1]
        groups = q.shape[1] // k.shape[1]
        trained = trains(bias) and torch.is_grad_enabled()
        path, relative = _sdpa_path(q.device.type, q.dtype, bias, trained, lq, lk, dropout_p)
        if path in ("table_grad", "hankel_table"):
            # a table over offsets, never made dense whole (sdpa_bias.py): a learned one gets its gradient reduced
            # chunk by chunk; a fixed 1D one is read in place as a view
            allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)
            if path == "table_grad":
                out = sdpa_bias.sdpa_with_relative_bias(
                    q, repeat_kv(k, groups), repeat_kv(v, groups), **relative, allowed=allowed, scale=scale
                )
            else:
                out = sdpa_bias.sdpa_with_fixed_sequence_bias(
                    q, k, v, relative["table"], allowed=allowed, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
                )
            return (out if alive is None else out * alive), None
        b = dense_bias(bias, lq, lk, q.device, q.dtype)
        if b is None and key_padding_mask is None and (pattern is None or is_plain_causal(pattern, lq, lk)):
            causal = pattern is not None
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=causal, scale=scale, enable_gqa=gqa
            ), None
        allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)
        if b is None:
            mask = allowed
        else:
            mask = b.to(q.dtype)
            if allowed is not None:
                mask = mask.masked_fill(~allowed, float("-inf"))
        if path == "bias_grad":  # the fused kernel plus a chunked backward, not the math path (see sdpa_bias.py)
            out = sdpa_bias.sdpa_with_bias_grad(q, repeat_kv(k, groups), repeat_kv(v, groups), mask, scale)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
            )
        if alive is not None:
            out = out * alive
        return out, None


def _sdpa_path(
    device_type: str, dtype: torch.dtype | None, bias: Any, trained: bool, lq: int, lk: int, dropout_p: float
) -> tuple[str | None, dict[str, Any] | None]:
    """(`Sdpa.PATHS` key or None, the bias's table over offsets or None) for a call; `trained`: the call trains
    `bias` (grad mode on and the bias needs a gradient)."""
    if device_type != "cpu" or bias is None:
        return None, None
    # sdpa_bias computes a bias gradient without dropout, in the float dtypes it takes
    learned = trained and not dropout_p and dtype in sdpa_bias.DTYPES
    relative = None if isinstance(bias, Tensor) or not hasattr(bias, "relative") else bias.relative(lq, lk)
    if relative is None:
        return ("bias_grad" if learned else None), None
    if learned:
        return "table_grad", relative
    sequence = relative["grid_q"][0] == relative["grid_k"][0] == 1 and not relative["num_prefix_tokens"]
    if sequence and not trained:  # the view detaches the table: only for a table that takes no gradient here
        return "hankel_table", relative
    return None, relative


def _fused_transform(q, k, v, transform, pattern, bias, key_padding_mask, scale) -> Tensor:
    """A kind's `Transform.fused` on the whole call, masks and bias as torch's kernel takes them."""
    lq, lk = q.shape[-2], k.shape[-2]
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # the CPU kernel wants H heads everywhere
    extra = dense_bias(bias, lq, lk, q.device, q.dtype)  # [1|B, 1|H, Lq, Lk] or None
    if extra is None and key_padding_mask is None and (pattern is None or is_plain_causal(pattern, lq, lk)):
        return transform.fused(q, k, v, None, scale, pattern is not None)
    allowed, alive = rescued_mask(pattern, key_padding_mask, lq, lk, q.device)  # rows with no key opened
    mask = additive(allowed, q.dtype) if extra is None else extra.to(q.dtype)
    if extra is not None and allowed is not None:
        mask = mask.masked_fill(~allowed, float("-inf"))
    out = transform.fused(q, k, v, mask, scale, False)
    return out if alive is None else out * alive


def additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool allowed mask as the additive float mask the CPU kernel takes (0 allowed, -inf not)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


register_backend(Sdpa(), before="eager")
