"""Greedy decoding and sampling (temperature, top-k, top-p), batched, over the KV cache.

Notation: B rows, P prompt tokens, T generated tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..util.checks import finite_number
from .steps import Decodes, Steps, check_token_id, prepare

Tensor = torch.Tensor


@torch.no_grad()
def greedy(
    model: Decodes,
    *,
    src: Tensor | None = None,
    src_padding_mask: Tensor | None = None,
    prompt: Tensor | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int = 0,
    max_new_tokens: int,
    use_cache: bool = True,
) -> Tensor:
    """The most likely next token at every step.

    Args:
        model: a `Decodes` model (`attnzoo.generation.steps`), in eval mode.
        src, src_padding_mask: the source [B, S] and its padding (True = pad), for an encoder-decoder.
        prompt: the first tokens [B, P] of every row; default a column of `bos_id`.
        eos_id: a row ends after this token (None: rows run to max_new_tokens).
        pad_id: what fills a row after its EOS.
        max_new_tokens: the most tokens generated per row.
        use_cache: decode over the KV cache (False: recompute the whole prefix every step).

    Returns:
        The generated tokens [B, T] (T <= max_new_tokens; stops when every row has ended), EOS included.
    """
    start = dict(src=src, src_padding_mask=src_padding_mask, prompt=prompt, bos_id=bos_id)
    stop = dict(eos_id=eos_id, pad_id=pad_id, max_new_tokens=max_new_tokens)
    return _generate(model, lambda logits: logits.argmax(dim=-1), **start, **stop, use_cache=use_cache)


@torch.no_grad()
def sample(
    model: Decodes,
    *,
    src: Tensor | None = None,
    src_padding_mask: Tensor | None = None,
    prompt: Tensor | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int = 0,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """A token drawn at every step from the model's distribution, sharpened by `temperature` and cut to the
    `top_k` most likely tokens and/or the smallest set holding probability `top_p` (nucleus sampling).

    Arguments and result as `greedy`, plus `generator` for reproducible draws.
    """
    if not finite_number(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r} (greedy() is the temperature-0 limit)")

    def choose(logits: Tensor) -> Tensor:
        # shifted to a maximum of 0 first: any temperature > 0 divides them without overflow (-inf, never nan),
        # also one that is 0 in fp32 (below ~1e-45), where the maximum stays 0 instead of 0 / 0
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        sharpened = torch.where(shifted == 0, shifted, shifted / temperature)
        probs = filter_logits(sharpened, top_k=top_k, top_p=top_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    start = dict(src=src, src_padding_mask=src_padding_mask, prompt=prompt, bos_id=bos_id)
    stop = dict(eos_id=eos_id, pad_id=pad_id, max_new_tokens=max_new_tokens)
    return _generate(model, choose, **start, **stop, use_cache=use_cache)


def filter_logits(logits: Tensor, *, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """logits [N, V] with every token outside the top k and outside the top-p nucleus set to -inf.

    The nucleus is the smallest set of most likely tokens whose probability reaches `top_p` (always at least
    the most likely token).
    """
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        kept = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices  # [N, k]: ties beyond k are cut, not kept
        logits = torch.full_like(logits, float("-inf")).scatter(-1, kept, logits.gather(-1, kept))
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if top_p is not None and top_p < 1:  # 1 keeps every token (an fp32 running sum reaches 1 before the tail)
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each
        drop_sorted = before >= top_p  # the most likely token has 0 before it: always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _generate(
    model: Decodes,
    choose: Callable[[Tensor], Tensor],
    *,
    src: Tensor | None,
    src_padding_mask: Tensor | None,
    prompt: Tensor | None,
    bos_id: int | None,
    eos_id: int | None,
    pad_id: int,
    max_new_tokens: int,
    use_cache: bool,
) -> Tensor:
    memory, memory_padding_mask, tokens, max_new_tokens = prepare(
        model,
        src=src,
        src_padding_mask=src_padding_mask,
        prompt=prompt,
        bos_id=bos_id,
        max_new_tokens=max_new_tokens,
    )
    ended = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    out = []
    with Steps(model, memory, memory_padding_mask, use_cache=use_cache) as steps:
        for step in range(max_new_tokens):
            logits = steps(tokens)  # [B, V]
            if step == 0:
                check_token_id("eos_id", eos_id, logits.shape[-1])
            token = choose(logits)  # [B]
            if eos_id is not None:  # without one, no row ends
                token = token.masked_fill(ended, pad_id)
                ended = ended | (token == eos_id)
            out.append(token)
            if eos_id is not None and bool(ended.all()):
                break
            tokens = token[:, None]  # [B, 1]
    return torch.stack(out, dim=1)  # [B, T]
