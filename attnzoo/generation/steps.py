"""The model protocol generation drives, and `Steps`: one decoding step after another, cached or recomputed.

Notation: B inputs, N rows (B, or B * beams), S source tokens, P prompt tokens, V vocabulary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from ..attention.cache import DecodingCache

Tensor = torch.Tensor


class NonFiniteScores(ValueError):
    """The model's next-token scores held NaN or +inf, or only -inf: no token can be chosen from them."""


NON_FINITE = (
    "the model's next-token scores are NaN or infinite, so no token can be chosen: the checkpoint's weights are not "
    "finite (a run that diverged, or a damaged file), or half precision overflowed (trainer.precision 16-mixed). "
    "Try the run's other checkpoint (best or last) or train it again; under 16-mixed, use bf16-mixed or 32-true"
)


@runtime_checkable
class Decodes(Protocol):
    """What generation needs of a model (`attnzoo.models.Seq2Seq` and `CausalLM` have it).

    - `new_cache()`: an empty cache with `reorder(index)` (`attnzoo.attention.cache.DecodingCache`).
    - `decode_step(tokens, memory, memory_padding_mask, cache)` -> logits [N, L, V] of `tokens` [N, L]:
      with a cache, tokens are the next L tokens (the cache advances by L); with cache=None, they are the
      whole prefix, recomputed. A decoder-only model gets memory=None and memory_padding_mask=None.
    - `encode(src, src_padding_mask)` -> memory [B, S, C], for encoder-decoders only.
    """

    def new_cache(self) -> Any: ...

    def decode_step(
        self, tokens: Tensor, memory: Tensor | None, memory_padding_mask: Tensor | None, cache: Any | None
    ) -> Tensor: ...


class Steps:
    """Feeds tokens to `model.decode_step` and returns the next-token logits, through a cache or by recomputing
    the whole prefix every step (`use_cache=False`: the reference cached decoding is tested against).

    Use it as a context manager around the decoding loop: over a cache, the model's weights are stored input-major
    inside it (`input_major_weights`), and put back on exit.

    Args:
        model: a `Decodes` model.
        memory, memory_padding_mask: the encoder output [N, S, C] and its padding [N, S] (None for an LM).
        use_cache: decode incrementally over the model's cache.
    """

    def __init__(
        self, model: Decodes, memory: Tensor | None, memory_padding_mask: Tensor | None, *, use_cache: bool
    ) -> None:
        self.model, self.memory, self.memory_padding_mask = model, memory, memory_padding_mask
        self.cache = model.new_cache() if use_cache else None
        self.prefix: Tensor | None = None  # every token fed so far [N, T] (without a cache)
        self._layout = contextlib.ExitStack()

    def __enter__(self) -> Steps:
        if self.cache is not None and isinstance(self.model, nn.Module):
            self._layout.enter_context(input_major_weights(self.model))
        return self

    def __exit__(self, *exc: object) -> None:
        self._layout.close()

    def __call__(self, tokens: Tensor) -> Tensor:
        """The next tokens [N, L] -> fp32 logits [N, V] at the last of them; `NonFiniteScores` when a row holds NaN
        or +inf, or only -inf (a token some model masks to -inf is fine)."""
        if self.cache is not None:
            logits = self.model.decode_step(tokens, self.memory, self.memory_padding_mask, self.cache)
        else:
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
            logits = self.model.decode_step(self.prefix, self.memory, self.memory_padding_mask, None)
        last = logits[:, -1].float()  # [N, V]
        # amax is NaN when a row holds one: sampling stopped in torch.multinomial's RuntimeError, and greedy and
        # beam search chose tokens from NaN with no word said
        if not bool(last.amax(dim=-1).isfinite().all()):
            raise NonFiniteScores(NON_FINITE)
        return last

    def reorder(self, index: Tensor) -> None:
        """Rows become rows[index] (beam search). Memory, and the cross-attention caches made from it, are left alone:
        beams never leave their input's rows, which all read the same source."""
        if isinstance(self.cache, DecodingCache):
            self.cache.reorder(index, cross=False)
        elif self.cache is not None:
            self.cache.reorder(index)
        elif self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


@contextlib.contextmanager
def input_major_weights(model: nn.Module) -> Iterator[None]:
    """Inside the block, the CPU weight of every `nn.Linear` and `nn.Embedding` of `model` is stored input-major:
    the same [out, in] tensor and values, with column-major strides; on exit, row-major again.

    `F.linear` multiplies by the weight's transpose, which is then contiguous [in, out] (the layout of GPT-2's
    Conv1D): on CPU, a product of a few rows (a decoding step, or a tied output head reading the embedding table)
    reads it 1.3-1.6x faster (measured with MKL, one thread, the GPT-2-shaped weights of `python -m attnzoo.bench
    decode`). The copies are exact and the parameters stay the same objects; weights off the CPU are left alone.
    """
    weights = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Linear | nn.Embedding)}
    moved = [
        w
        for w in weights.values()
        if w.device.type == "cpu" and w.dim() == 2 and w.is_contiguous() and w.is_floating_point()
    ]
    with torch.inference_mode(False), torch.no_grad():  # normal tensors even inside inference mode
        for w in moved:
            w.data = w.data.t().contiguous().t()  # [out, in] with strides (1, out)
    try:
        yield
    finally:
        with torch.inference_mode(False), torch.no_grad():
            for w in moved:
                w.data = w.data.contiguous()


def prepare(
    model: Decodes,
    *,
    src: Tensor | None,
    src_padding_mask: Tensor | None,
    prompt: Tensor | None,
    bos_id: int | None,
    max_new_tokens: int,
) -> tuple[Tensor | None, Tensor | None, Tensor, int]:
    """Check the inputs and run the encoder once: (memory, memory_padding_mask, prompt [B, P], the most steps to
    take). A model with a `max_len` (its longest sequence, prompt included) stops there: the steps are
    `max_new_tokens` or fewer, as many as the context has room for (the last token generated is never fed)."""
    if not isinstance(model, Decodes):
        raise ValueError(
            f"{type(model).__name__} cannot generate: it needs new_cache() and "
            "decode_step(tokens, memory, memory_padding_mask, cache) (see attnzoo.generation.steps.Decodes)"
        )
    if getattr(model, "training", False):
        raise ValueError("call model.eval() before generating: dropout would change every step")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    memory = None
    if src is not None:
        if not hasattr(model, "encode"):
            raise ValueError(f"{type(model).__name__} has no encode(): generate without src (a decoder-only model)")
        memory = model.encode(src, src_padding_mask)
    elif src_padding_mask is not None:
        raise ValueError("src_padding_mask without src")
    if prompt is None:
        if bos_id is None:
            raise ValueError("give a prompt [B, P] or a bos_id to start every row with")
        if src is None:
            raise ValueError("without src, give a prompt [B, P] (the batch size comes from it)")
        prompt = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    if prompt.dim() != 2 or prompt.shape[1] < 1 or prompt.dtype != torch.long:
        raise ValueError(f"prompt must be long [B, P] with P >= 1; got {prompt.dtype} {list(prompt.shape)}")
    if src is not None and prompt.shape[0] != src.shape[0]:
        raise ValueError(f"prompt has {prompt.shape[0]} rows, src {src.shape[0]}")
    limit = getattr(model, "max_len", None)
    if isinstance(limit, int) and prompt.shape[1] > limit:
        raise ValueError(f"the prompt has {prompt.shape[1]} tokens; the model reads at most {limit} (max_len)")
    room = limit - prompt.shape[1] + 1 if isinstance(limit, int) else max_new_tokens
    return memory, src_padding_mask, prompt, min(max_new_tokens, room)


def check_token_id(name: str, value: int | None, vocab: int) -> None:
    """ValueError unless `value` (eos_id, pad_id) is None or an id of the model's `vocab` tokens: an id no logit
    stands for is never generated (no row would end)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab):
        raise ValueError(f"{name} must be a token id in [0, {vocab}) (the model's vocabulary), got {value!r}")
