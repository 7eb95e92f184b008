"""CPU attention with a dense additive bias that needs gradients (a learned relative table), for `sdpa`.

On CPU, `F.scaled_dot_product_attention` takes its fused flash kernel only when `attn_mask` needs no
gradient; a learned bias drops it to the math path, which materializes scores, weights and their
gradients ([B, H, Lq, Lk] each). Here the forward runs the fused kernel on the detached bias (it also
returns the log-sum-exp of each query row), and the backward recomputes the weights in query-row chunks
that stay in cache, giving dq, dk, dv and the bias gradient dS = P * (dP - rowsum(dO * O)).

Notation: B batch, H heads, Lq/Lk lengths, D head dim, c rows per chunk.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor

_CHUNK_ELEMENTS = 1 << 23  # scores per chunk (B * H * c * Lk), 32 MiB in fp32: few, large ops


def supported(q: Tensor, bias: Tensor, dropout_p: float) -> bool:
    """True when `sdpa_with_bias_grad` can run this call (CPU, no dropout, bias needing a gradient)."""
    return (
        q.device.type == "cpu"
        and dropout_p == 0.0
        and bias.requires_grad
        and torch.is_grad_enabled()
        and q.dtype in (torch.float32, torch.bfloat16, torch.float16)
    )


class _SdpaBiasGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=bias.detach(), scale=scale
        )  # out [B, H, Lq, D], lse [B, H, Lq] (fp32)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, out, lse = ctx.saved_tensors
        scale = ctx.scale
        b, h, lq, d = q.shape
        lk = k.shape[-2]
        f32 = torch.float32
        q3 = q.to(f32).reshape(b * h, lq, d)
        k3 = k.to(f32).reshape(b * h, lk, d)
        v3 = v.to(f32).reshape(b * h, lk, d)
        do3 = dout.to(f32).reshape(b * h, lq, d)
        lse3 = lse.reshape(b * h, lq, 1)
        delta = (do3 * out.to(f32).reshape(b * h, lq, d)).sum(-1, keepdim=True)  # [BH, Lq, 1]
        dq = torch.empty_like(q3)
        dk = torch.zeros_like(k3)
        dv = torch.zeros_like(v3)
        dbias = torch.empty(bias.shape, device=bias.device, dtype=bias.dtype)
        direct = dbias.dtype == f32 and tuple(bias.shape[:2]) == (b, h)  # dS can be written into dbias in place
        full = bias.expand(b, h, lq, lk)
        rows = max(1, min(lq, _CHUNK_ELEMENTS // (b * h * lk)))
        scores = torch.empty(b * h, rows, lk, dtype=f32, device=q.device)  # reused by every chunk
        grads = None if direct else torch.empty_like(scores)
        for r0 in range(0, lq, rows):
            r1 = min(lq, r0 + rows)
            c = r1 - r0
            s = scores[:, :c]
            s.view(b, h, c, lk).copy_(full[:, :, r0:r1])
            s.baddbmm_(q3[:, r0:r1], k3.transpose(1, 2), alpha=scale)  # scores [BH, c, Lk]
            p = s.sub_(lse3[:, r0:r1]).exp_()  # weights
            dv.baddbmm_(p.transpose(1, 2), do3[:, r0:r1])
            ds = dbias[:, :, r0:r1].view(b * h, c, lk) if direct else grads[:, :c]
            torch.bmm(do3[:, r0:r1], v3.transpose(1, 2), out=ds)
            ds.sub_(delta[:, r0:r1]).mul_(p)  # dScores = P * (dP - rowsum(dO * O))
            dq[:, r0:r1] = torch.bmm(ds, k3)
            dk.baddbmm_(ds.transpose(1, 2), q3[:, r0:r1])
            if not direct:
                dbias[..., r0:r1, :] = ds.view(b, h, c, lk).sum_to_size(*bias.shape[:-2], c, lk)
        dq = (dq * scale).view(b, h, lq, d).to(q.dtype)
        dk = (dk * scale).view(b, h, lk, d).to(k.dtype)
        return dq, dk, dv.view(b, h, lk, d).to(v.dtype), dbias, None


def sdpa_with_bias_grad(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Attention over q [B, H, Lq, D], k, v [B, H, Lk, D] plus `bias` (broadcastable to [B, H, Lq, Lk])."""
    if bias.dim() < 4:
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))  # [1|B, 1|H, Lq, Lk]
    return _SdpaBiasGrad.apply(q, k, v, bias.to(q.dtype), scale)
