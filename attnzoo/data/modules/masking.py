"""BERT-style masking of token batches for masked-language-model pretraining.

Of the real tokens of each text, `rate` (15%) are picked; a picked token is replaced by the mask token 80% of the
time, by a random token of the vocabulary 10% of the time, and kept 10% of the time, and only picked positions carry
a label (the original token; every other position is `IGNORE_INDEX`). Every text gets at least one pick, so no batch
is without a loss. Special tokens (padding, unknown, ...) are never drawn as a random replacement.

Training masks are drawn anew for every batch from torch's global random state, as every augmentation of attnzoo's
data is: the run seeds it, a resumed run continues it (`attnzoo.run.resume_position`), so a resume reads the masks
the uninterrupted run would have. Validation and test masks are fixed: each text's mask is drawn from its own
generator, seeded by (seed, the text's index), so every evaluation scores the same positions.

Notation: B batch, L the longest text in the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

from ..tokenizers.specials import SPECIALS
from .batching import IGNORE_INDEX, PadCollate

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor

MASK_TOKENS = ("[MASK]", "<mask>")  # what tokenizer files call a mask token


def mask_token_id(tokenizer: Any) -> tuple[int, str]:
    """(id, token) that stands for a masked position: the tokenizer's own mask token, else its [CLS] token, which
    attnzoo's learned tokenizers have and text classification never feeds the model (it has its own cls vector)."""
    inner = getattr(tokenizer, "tok", None)  # the `tokenizers.Tokenizer` of a subword or file tokenizer
    for token in (*MASK_TOKENS, SPECIALS["cls"], "<cls>"):
        token_id = inner.token_to_id(token) if inner is not None else None
        if token_id is not None:
            return token_id, token
    raise ValueError(
        f"data.tokenizer {tokenizer.name!r} has no token to mask with (none of {[*MASK_TOKENS, SPECIALS['cls']]}); "
        "use a subword tokenizer learned from the train split (bpe, wordpiece, unigram) or a file that has one"
    )


def special_ids(tokenizer: Any) -> set[int]:
    """The ids of the tokenizer's special tokens (padding, unknown, bos, eos, cls, mask) that it has."""
    inner = getattr(tokenizer, "tok", None)
    found = {getattr(tokenizer, f"{role}_id", None) for role in SPECIALS}
    if inner is not None:
        found |= {inner.token_to_id(t) for t in (*SPECIALS.values(), *MASK_TOKENS)}
    return {int(i) for i in found if i is not None}


def mask_tokens(
    tokens: Tensor,
    maskable: Tensor,
    *,
    mask_id: int,
    replacements: Tensor,
    rate: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """(inputs [B, L], labels [B, L]) of tokens [B, L] with BERT's masking of the `maskable` [B, L] positions.

    Args:
        mask_id: the id that replaces 80% of the picked tokens.
        replacements: [R] long, the ids a random replacement is drawn from (the vocabulary less special tokens).
        rate: the share of maskable tokens picked.
        generator: the random source; None is torch's global one.
    """
    b, length = tokens.shape
    pick = torch.rand(b, length, generator=generator)  # [B, L]
    pick = pick.masked_fill(~maskable, 2.0)
    picked = pick < rate
    first = pick.argmin(dim=1)  # [B]: the lowest draw of each text, picked in any case
    rows = torch.arange(b)
    picked[rows, first] |= maskable[rows, first]
    labels = torch.where(picked, tokens, torch.full_like(tokens, IGNORE_INDEX))
    how = torch.rand(b, length, generator=generator)  # [B, L]: < 0.8 mask, < 0.9 a random token, else kept
    random_ids = replacements[torch.randint(len(replacements), (b, length), generator=generator)]  # [B, L]
    inputs = torch.where(picked & (how < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(picked & (how >= 0.8) & (how < 0.9), random_ids, inputs)
    return inputs, labels


class MaskingCollate:
    """Pads a list of (ids, index) items (`TokenDataset` with each text's index as its label) and masks them.

    Returns {"tokens": [B, L] long (masked inputs), "padding_mask": [B, L] bool (True = pad), "labels": [B, L] long
    (the original token at picked positions, `IGNORE_INDEX` elsewhere)}.

    Args:
        pad_id, mask_id: from the tokenizer.
        vocab_size: ids 0..vocab_size-1; all but `specials` may be drawn as random replacements.
        specials: special-token ids, never masked nor drawn.
        rate: the share of tokens picked (BERT: 0.15).
        fixed_seed: None draws from the global random state (training); an int fixes each text's mask by (fixed_seed,
            its index), for validation and test.
    """

    def __init__(
        self,
        *,
        pad_id: int,
        mask_id: int,
        vocab_size: int,
        specials: Iterable[int],
        rate: float = 0.15,
        fixed_seed: int | None = None,
    ) -> None:
        if not 0.0 < rate < 1.0:
            raise ValueError(f"data.mask_rate ({rate}) must be in (0, 1)")
        self.pad = PadCollate(pad_id=pad_id)
        self.mask_id, self.rate, self.fixed_seed = mask_id, rate, fixed_seed
        self.specials = torch.tensor(sorted({*specials, pad_id, mask_id}), dtype=torch.long)
        ids = torch.arange(vocab_size)
        self.replacements = ids[~torch.isin(ids, self.specials)]  # [R]
        if len(self.replacements) == 0:
            raise ValueError(f"the vocabulary ({vocab_size} ids) has no token that is not special")

    def __call__(self, items: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
        batch = self.pad(items)
        tokens, index = batch["tokens"], batch.pop("label")  # [B, L], [B]
        maskable = ~batch["padding_mask"] & ~torch.isin(tokens, self.specials)  # [B, L]
        common = {"mask_id": self.mask_id, "replacements": self.replacements, "rate": self.rate}
        if self.fixed_seed is None:
            batch["tokens"], batch["labels"] = mask_tokens(tokens, maskable, **common)
            return batch
        inputs, labels = tokens.clone(), torch.full_like(tokens, IGNORE_INDEX)
        lengths = (~batch["padding_mask"]).sum(1).tolist()
        for row, n in enumerate(lengths):  # each text's own generator, over its own tokens: the same mask in any batch
            generator = torch.Generator().manual_seed(self.fixed_seed * 1_000_003 + int(index[row]))
            text = slice(row, row + 1), slice(0, n)
            inputs[text], labels[text] = mask_tokens(tokens[text], maskable[text], generator=generator, **common)
        batch["tokens"], batch["labels"] = inputs, labels
        return batch
