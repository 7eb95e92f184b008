"""`blocked`: block-sparse attention in plain PyTorch, so sparse patterns train on any device.

Queries are cut into blocks (64, 128 or 256 positions, whichever a cost model finds cheapest for the
pattern, see `Blocked.blocks`); each query block gathers only the key blocks its pattern reads
(`Pattern.block_layout`) and runs SDPA over them, with the pattern's exact mask (plus key padding and the
internal padding to whole blocks) inside the gathered keys. Memory and work are O(N * keys per query).
Query blocks are grouped by how many key blocks they read, so a few dense rows (global tokens) do not make
every row dense. SDPA inputs stay 4-D, [B * blocks, H, block, D]: CPU SDPA takes its flash kernel for 4-D
inputs with a bool mask and drops to its math path for 5-D ones.

Notation as in backends.py, plus nQb / nKb query / key blocks, bq / bk their sizes, nb query blocks in a
group and K key blocks each of them reads.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .backends import Request, barred_pairs, register_backend, trains
from .band import band_attention, band_reason
from .lasting import lasting
from .patterns import Pattern, num_blocks, right_padded, unpadded

Tensor = torch.Tensor


@dataclass
class Group:
    """Query blocks that read the same number K of key blocks (rows with fewer are padded, masked)."""

    q_blocks: Tensor  # long [nb]
    kv_blocks: Tensor  # long [nb, K]
    q_tok: Tensor  # long [nb, bq]: query positions (clamped to Lq - 1)
    kv_tok: Tensor  # long [nb, K * bk]: key positions (clamped to Lk - 1)
    kv_real: Tensor  # bool [nb, K * bk]: slot holds a real key (not block padding, not past Lk)
    mask: Tensor | None  # bool [nb, bq, K * bk]: the pattern inside the gathered blocks (None: per-batch)
    additive: dict = field(default_factory=dict)  # (dtype, B) -> (0/-inf mask [B * nb, 1, bq, K * bk], alive)

    def additive_mask(self, dtype, b: int) -> tuple[Tensor, Tensor | None]:
        """The pattern mask as SDPA's additive float mask, cached (SDPA would convert a bool mask every call);
        with the rows that read some key, [B * nb, 1, bq, 1], or None when all do."""
        if (dtype, b) not in self.additive:
            self.additive[(dtype, b)] = lasting(lambda: self._additive(dtype, b))
        return self.additive[(dtype, b)]

    def _additive(self, dtype, b: int) -> tuple[Tensor, Tensor | None]:
        alive = self.mask.any(dim=-1, keepdim=True)  # [nb, bq, 1]
        allowed = self.mask | ~alive
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        add = torch.where(allowed, zero, torch.tensor(float("-inf"), dtype=dtype, device=allowed.device))
        rows = None if bool(alive.all()) else alive[:, None].repeat(b, 1, 1, 1)
        return add[:, None].repeat(b, 1, 1, 1), rows


class Full(Pattern):
    """Every pair (the blocked backend's stand-in for pattern=None)."""

    def mask_mod(self, b, h, q_idx, kv_idx):
        return torch.ones_like(q_idx - kv_idx, dtype=torch.bool)

    def block_mask(self, lq, lk, block_q, block_k, device=None):
        return torch.ones(num_blocks(lq, block_q), num_blocks(lk, block_k), dtype=torch.bool, device=device)


_FULL = Full()


_densities: weakref.WeakKeyDictionary[Pattern, dict] = weakref.WeakKeyDictionary()


def block_density(pattern: Pattern, lq: int, lk: int, bq: int, bk: int) -> float:
    """The fraction of (query block, key block) pairs the pattern reads; cached per pattern object."""
    cache = _densities.setdefault(pattern, {})
    if (lq, lk, bq, bk) not in cache:
        cache[(lq, lk, bq, bk)] = float(pattern.block_mask(lq, lk, bq, bk).float().mean())
    return cache[(lq, lk, bq, bk)]


def group_rows(counts: Tensor, min_saving: float = 0.1) -> list[Tensor]:
    """Query-block indices grouped by how many key blocks they read.

    Rows in a group are padded to its widest row. Starting from one group, the narrower tail is split off where
    that saves the most padded work, as long as it saves at least `min_saving` of the group's work (each extra
    group costs a gather, a concat and a reorder).
    """
    order = torch.argsort(counts, descending=True, stable=True)
    sorted_counts = counts[order]
    n = int((sorted_counts > 0).sum())  # rows with no key block are in no group: their output stays zero
    groups, start = [], 0
    while start < n:
        width = sorted_counts[start]
        j = torch.arange(start + 1, n)
        saving = (n - j) * (width - sorted_counts[start + 1 : n])  # padded work saved by splitting before row j
        best = int(saving.argmax()) if len(j) else 0
        if not len(j) or int(saving[best]) < min_saving * (n - start) * int(width):
            groups.append(order[start:n].sort().values)
            break
        groups.append(order[start : start + 1 + best].sort().values)
        start += 1 + best
    return groups


def plan(pattern: Pattern, lq: int, lk: int, bq: int, bk: int, device) -> list[Group]:
    """The groups for one (pattern, lengths, blocks, device)."""
    bound = pattern.bind(lq, lk)
    kv_blocks, counts = bound.block_layout(lq, lk, bq, bk, device=device)  # [nQb, K], [nQb]
    out = []
    for rows in group_rows(counts.cpu()):
        rows = rows.to(device)
        width = int(counts[rows].max())
        blocks = kv_blocks[rows, :width]  # [nb, K]
        slot_used = torch.arange(width, device=device)[None, :] < counts[rows, None]  # [nb, K]
        q_pos = rows[:, None] * bq + torch.arange(bq, device=device)  # [nb, bq]
        kv_pos = (blocks[:, :, None] * bk + torch.arange(bk, device=device)).flatten(1)  # [nb, K * bk]
        kv_real = (kv_pos < lk) & slot_used.repeat_interleave(bk, dim=1)
        q_tok, kv_tok = q_pos.clamp(max=lq - 1), kv_pos.clamp(max=lk - 1)
        mask = None
        if bound.batch_size is None:
            mask = bound.dense_rows(q_tok[:, :, None], kv_tok[:, None, :]) & kv_real[:, None, :]  # [nb, bq, K*bk]
        out.append(Group(rows, blocks, q_tok, kv_tok, kv_real, mask))
    return out


class Blocked:
    """Block-sparse attention: per query block, SDPA over only the key blocks its pattern reads.

    Args:
        block_sizes: candidate block sizes (queries and keys alike); per pattern and lengths the one with the
            least estimated work is used (shorter sequences use one block of their length).
        max_density: `auto` passes this backend over when the pattern reads more than this fraction of
            key blocks (dense sdpa is faster there); an explicit `backend="blocked"` always runs.
        band: run plain sliding windows on CPU on the "band" path (keys read in place); False gathers their
            blocks as for every other pattern (what the benchmark compares it with).
    """

    name = "blocked"

    # per-block overhead of one SDPA tile, in key positions: fitted on CPU fwd+bwd (block 64 costs ~1.24x per pair
    # of block 128 at equal work), so work(b) ~ pairs read * (1 + OVERHEAD / b)
    OVERHEAD = 40

    def __init__(
        self, *, block_sizes: tuple[int, ...] = (64, 128, 256), max_density: float = 0.5, band: bool = True
    ) -> None:
        if not block_sizes or min(block_sizes) < 1:
            raise ValueError(f"block_sizes must be positive integers, got {block_sizes}")
        self.block_sizes = tuple(block_sizes)
        self.max_density = max_density
        self.band = band
        self._plans: weakref.WeakKeyDictionary[Pattern, dict] = weakref.WeakKeyDictionary()
        self._sizes: weakref.WeakKeyDictionary[Pattern, dict] = weakref.WeakKeyDictionary()

    def blocks(self, pattern: Pattern | None, lq: int, lk: int) -> tuple[int, int]:
        """(bq, bk) for this pattern and lengths: the candidate size with the least estimated work."""
        if pattern is None or pattern.batch_size is not None or len(self.block_sizes) == 1:
            b = self.block_sizes[len(self.block_sizes) // 2]
            return min(b, lq), min(b, lk)
        cache = self._sizes.setdefault(pattern, {})
        if (lq, lk) not in cache:
            work = {}
            for b in self.block_sizes:
                bq, bk = min(b, lq), min(b, lk)
                pairs = block_density(pattern, lq, lk, bq, bk) * num_blocks(lq, bq) * num_blocks(lk, bk) * bq * bk
                work[(bq, bk)] = pairs * (1 + self.OVERHEAD / b)
            cache[(lq, lk)] = min(work, key=work.get)
        return cache[(lq, lk)]

    PATHS = {
        "bias_grad": "training a learned bias: an explicit softmax over each group of blocks instead of SDPA, "
        "whose CPU kernels do not train a mask",
        "band": "self-attention with a sliding window on CPU in fp32 or bf16, no bias or dropout, key padding (if "
        "any) only at the end of rows, long enough to pay: the keys of each query block read in place (band.py)",
    }

    def supports(self, req: Request) -> str | None:
        if req.return_weights:
            return "block-sparse attention does not return attention weights"
        return None

    def path(self, req: Request) -> str | None:
        """ "bias_grad" when the call trains its bias, "band" for a plain sliding window on CPU (see `PATHS`), else
        None (SDPA per group of blocks)."""
        if trains(req.bias) and req.needs_grad:
            return "bias_grad"
        if not self.band or req.pattern is None:
            return None
        plain = req.bias is None and not (req.dropout_p or req.transform or req.return_weights)
        plain = plain and (req.right_padding or not req.has_padding)
        bq = self.blocks(req.pattern, req.lq, req.lk)[0]
        reason = band_reason(req.device_type, req.pattern, plain, req.lq, req.lk, req.dtype, bq, req.head_dim)
        return "band" if reason is None else None

    def avoid_in_auto(self, req: Request) -> str | None:
        if req.pattern is None:
            return "no pattern: nothing to skip, dense kernels are faster"
        bq, bk = self.blocks(req.pattern, req.lq, req.lk)
        density = block_density(req.pattern, req.lq, req.lk, bq, bk)
        if density > self.max_density:
            return f"the pattern reads {density:.0%} of key blocks (> {self.max_density:.0%}): dense is faster"
        return None

    def groups(self, pattern: Pattern, lq: int, lk: int, device) -> list[Group]:
        """Cached per (pattern object, lengths, device); per-batch patterns are planned on every call."""
        bq, bk = self.blocks(pattern, lq, lk)
        if pattern.batch_size is not None:
            return plan(pattern, lq, lk, bq, bk, device)
        cache = self._plans.setdefault(pattern, {})
        key = (lq, lk, bq, bk, str(device))
        if key not in cache:
            cache[key] = lasting(lambda: plan(pattern, lq, lk, bq, bk, device))
        return cache[key]

    def __call__(self, q, k, v, *, pattern, bias, key_padding_mask, dropout_p, scale, return_weights, transform=None):
        """As every backend; a kind's `transform` runs on each group of blocks (`_transformed`)."""
        if return_weights:
            raise ValueError("backend 'blocked' cannot return attention weights; use backend='eager' or 'auto'")
        pattern = _FULL if pattern is None else pattern
        b, h, lq, d = q.shape
        hkv, lk = k.shape[1], k.shape[2]
        bq, bk = self.blocks(pattern, lq, lk)
        plain = bias is None and not dropout_p and transform is None
        if self.band and band_reason(q.device.type, pattern, plain, lq, lk, q.dtype, bq, d) is None:
            keys = None if key_padding_mask is None else right_padded(key_padding_mask)
            if key_padding_mask is None or keys is not None:
                return band_attention(q, k, v, pattern=pattern, block=bq, scale=scale, keys=keys), None
        nqb, nkb = num_blocks(lq, bq), num_blocks(lk, bk)
        keep = None if key_padding_mask is None else unpadded(key_padding_mask)  # [B, Lk]
        bound = pattern.bind(lq, lk)
        groups = self.groups(pattern, lq, lk, q.device)
        if not groups:  # no query reads any key
            return _reading_nothing(q, k, v, bias), None
        # heads first, so that (batch, block) pairs are one dim to gather along and to hand to SDPA as a view
        qb = _to_blocks(q, nqb * bq, bq)  # [H, B * nQb, bq, D]
        kb, vb = _to_blocks(k, nkb * bk, bk), _to_blocks(v, nkb * bk, bk)  # [Hkv, B * nKb, bk, D]
        parts = self._gather(groups, qb, kb, vb, nqb, nkb)
        pieces = []
        for g, (qg, kg, vg) in zip(groups, parts, strict=True):  # [B * nb, H, bq, D], [B * nb, Hkv, K * bk, D] x2
            nb = len(g.q_blocks)
            add = _gathered_bias(bias, g, b, h, q.dtype)  # [B * nb, H | 1, bq, K * bk] or None
            if add is None and keep is None and g.mask is not None:  # the common case, all cached
                mask, alive = g.additive_mask(q.dtype, b)  # [B * nb, 1, bq, K * bk], [B * nb, 1, bq, 1] or None
                all_alive = alive is None
            else:
                allowed = self._allowed(bound, g, keep, b)  # [B * nb, 1, bq, K * bk]
                if add is not None and isinstance(bias, Tensor):  # -inf (a bool attn_mask): masked pairs
                    add, allowed = barred_pairs(add, allowed)  # allowed: [B * nb, H | 1, bq, K * bk]
                alive = allowed.any(dim=-1, keepdim=True)  # [B * nb, 1 | H, bq, 1]
                all_alive = bool(alive.all())
                if not all_alive:
                    allowed = allowed | ~alive  # keep kernels finite; those rows are zeroed below
                mask = allowed if add is None else add.masked_fill(~allowed, float("-inf"))
            if transform is not None:
                o = _transformed(qg, kg, vg, mask, dropout_p, scale, transform)
            elif add is not None and add.requires_grad:  # path "bias_grad": SDPA's CPU kernels do not train a mask
                o = _explicit(qg, kg, vg, mask, dropout_p, scale)
            else:
                o = F.scaled_dot_product_attention(
                    qg, kg, vg, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=hkv != h
                )  # [B * nb, H, bq, D]
            if not all_alive:
                o = o * alive
            pieces.append(o.transpose(1, 2).reshape(b, nb, bq, h, d))  # CPU SDPA's own layout: usually a view
        if len(groups) == 1 and len(groups[0].q_blocks) == nqb:
            out = pieces[0]
        else:
            rows = sum(len(g.q_blocks) for g in groups)
            if rows < nqb:  # query blocks that read nothing point at one zero block
                pieces.append(q.new_zeros(b, 1, bq, h, d))
            out = torch.cat(pieces, dim=1).index_select(1, self._positions(groups, nqb, q.device))
        out = out.reshape(b, nqb * bq, h, d)[:, :lq]  # [B, Lq, H, D]
        return out.transpose(1, 2), None  # [B, H, Lq, D]: a view, free for `Attention` to transpose back

    @staticmethod
    def _gather(groups: list[Group], qb: Tensor, kb: Tensor, vb: Tensor, nqb: int, nkb: int) -> list[tuple]:
        """Per group (q, k, v) of its blocks; one gather for all groups (one zero-fill + index_add in backward)."""
        hkv, d, bk = kb.shape[0], qb.shape[-1], kb.shape[2]
        b = qb.shape[1] // nqb
        batch = torch.arange(b, device=qb.device)
        q_rows = [(batch[:, None] * nqb + g.q_blocks).flatten() for g in groups]  # [B * nb] per group
        kv_rows = [(batch[:, None, None] * nkb + g.kv_blocks).flatten() for g in groups]  # [B * nb * K] per group
        in_order = len(groups) == 1 and len(groups[0].q_blocks) == nqb
        q_all = qb if in_order else qb.index_select(1, torch.cat(q_rows))  # [H, sum B * nb, bq, D]
        k_all = kb.index_select(1, torch.cat(kv_rows))  # [Hkv, sum B * nb * K, bk, D]
        v_all = vb.index_select(1, torch.cat(kv_rows))
        if len(groups) > 1:
            sizes, kv_sizes = [len(r) for r in q_rows], [len(r) for r in kv_rows]
            qs, ks, vs = q_all.split(sizes, dim=1), k_all.split(kv_sizes, dim=1), v_all.split(kv_sizes, dim=1)
        else:  # no split: its backward would be one more copy
            qs, ks, vs = [q_all], [k_all], [v_all]
        out = []
        for g, qg, kg, vg in zip(groups, qs, ks, vs, strict=True):
            nb, width = g.kv_blocks.shape
            out.append(
                (
                    qg.transpose(0, 1),  # [B * nb, H, bq, D]
                    kg.reshape(hkv, b * nb, width * bk, d).transpose(0, 1),  # [B * nb, Hkv, K * bk, D]
                    vg.reshape(hkv, b * nb, width * bk, d).transpose(0, 1),
                )
            )
        return out

    @staticmethod
    def _positions(groups: list[Group], nqb: int, device) -> Tensor:
        """For each query block, its place among the concatenated group outputs (or the zero block after them)."""
        order = torch.cat([g.q_blocks for g in groups])
        pos = torch.full((nqb,), len(order), dtype=torch.long, device=device)
        pos[order] = torch.arange(len(order), device=device)
        return pos

    @staticmethod
    def _allowed(bound: Pattern, g: Group, keep: Tensor | None, b: int) -> Tensor:
        nb, bq, width = len(g.q_blocks), g.q_tok.shape[1], g.kv_tok.shape[1]
        if g.mask is not None:
            allowed = g.mask[None]  # [1, nb, bq, K * bk]
        else:  # a per-batch pattern: evaluate its mask with the batch index
            zero = torch.zeros((), dtype=torch.long, device=g.q_tok.device)
            batch = torch.arange(b, device=g.q_tok.device)[:, None, None, None]
            allowed = bound.mask_mod(batch, zero, g.q_tok[None, :, :, None], g.kv_tok[None, :, None, :])
            allowed = allowed & g.kv_real[None, :, None, :]  # [B, nb, bq, K * bk]
        if keep is not None:
            allowed = allowed & keep[:, g.kv_tok][:, :, None, :]  # [B, nb, 1, K * bk]
        return allowed.expand(b, nb, bq, width).reshape(b * nb, 1, bq, width)


def _explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float, scale: float, transform=None) -> Tensor:
    """Attention over one group of blocks, written out: q [n, H, bq, D], k, v [n, Hkv, K * bk, D], `mask` bool
    (True = allowed) or additive float, [n, 1 | H, bq, K * bk]; a softmax, or a kind's `transform.weights`."""
    n, h, bq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(n, hkv, h // hkv, bq, d)  # [n, Hkv, groups, bq, D]: no copies of k and v for GQA
    scores = (qg.float() @ k.float()[:, :, None].transpose(-2, -1)) * scale  # [n, Hkv, groups, bq, K * bk]
    scores = scores.reshape(n, h, bq, -1)  # [n, H, bq, K * bk]
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    weights = (scores.softmax(dim=-1) if transform is None else transform.weights(scores)).to(q.dtype)
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights.reshape(n, hkv, h // hkv, bq, -1) @ v[:, :, None].to(q.dtype)  # [n, Hkv, groups, bq, D]
    return out.reshape(n, h, bq, d)


def _transformed(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float, scale: float, transform) -> Tensor:
    """A kind's transform over one group of blocks (shapes as `_explicit`): its fused CPU form when it has one and
    there is no dropout, else the formula written out."""
    if transform.fused is None or q.device.type != "cpu" or dropout_p:
        return _explicit(q, k, v, mask, dropout_p, scale, transform)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [n, H, K * bk, D]
    if mask.dtype == torch.bool:  # the CPU kernel takes an additive mask
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    return transform.fused(q, k, v, mask.to(q.dtype), scale, False)


def _to_blocks(x: Tensor, padded: int, block: int) -> Tensor:
    """[B, H, L, D] -> [H, B * nBlocks, block, D], zero padded to `padded` positions."""
    b, h, length, d = x.shape
    x = x.transpose(0, 1)  # [H, B, L, D]
    if padded != length:
        x = F.pad(x, (0, 0, 0, padded - length))
    return x.reshape(h, b * (padded // block), block, d)


def _reading_nothing(q: Tensor, k: Tensor, v: Tensor, bias) -> Tensor:
    """Zeros shaped as q, still a function of q, k, v and a bias tensor (zero gradients, as eager's masked softmax
    gives, not None: DDP and autograd.grad need every input used); an empty slice's sum adds 0 even to inf or NaN."""
    inputs = [q, k, v] + ([bias] if isinstance(bias, Tensor) else [])
    return q.new_zeros(q.shape) + sum((t.narrow(-1, 0, 0) if t.dim() else t.reshape(1)[:0]).sum() for t in inputs)


def _gathered_bias(bias, g: Group, b: int, h: int, dtype) -> Tensor | None:
    """The bias at the gathered (query, key) pairs: [B * nb, H | 1, bq, K * bk]."""
    if bias is None:
        return None
    nb, bq, width = len(g.q_blocks), g.q_tok.shape[1], g.kv_tok.shape[1]
    q_idx, kv_idx = g.q_tok[:, :, None], g.kv_tok[:, None, :]  # [nb, bq, 1], [nb, 1, K * bk]
    if isinstance(bias, Tensor):
        full = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))  # [B|1, H|1, Lq, Lk]
        vals = full[:, :, q_idx, kv_idx].transpose(1, 2)  # [B|1, nb, H|1, bq, K * bk]
    else:
        vals = bias.values(q_idx, kv_idx).expand(-1, nb, bq, width).transpose(0, 1)[None]  # [1, nb, H, bq, K*bk]
    heads = vals.shape[2]
    return vals.to(dtype).expand(b, nb, heads, bq, width).reshape(b * nb, heads, bq, width)


register_backend(Blocked(), before="sdpa")
