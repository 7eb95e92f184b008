"""Batched beam search over the KV cache, with length penalty and the finished hypotheses of every input.

Every input keeps K = beam_size live beams (rows b * K .. b * K + K - 1 of the batch). Each step scores all
K * V continuations, takes the 2K best (so K live ones remain even when up to K of them end), ends the ones
that are EOS among the K best, and continues the K best of the rest. A hypothesis scores
sum(log p) / length ** length_penalty, its length counting the generated tokens (EOS included).

Notation: B inputs, K beams, N = B * K rows, V vocabulary, T generated tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..util.checks import finite_number
from .steps import Decodes, Steps, check_token_id, prepare

Tensor = torch.Tensor


@dataclass(order=True)
class Hypothesis:
    """A finished hypothesis: its score (what ranks it), summed log-probability and generated tokens [T]."""

    score: float
    log_prob: float = field(compare=False)
    tokens: Tensor = field(compare=False)


@dataclass
class BeamSearchOutput:
    """The best hypothesis of every input, and all that were kept.

    Attributes:
        tokens: the best hypothesis of each input [B, T], padded with pad_id after its end.
        scores: their scores [B].
        hypotheses: per input, up to beam_size finished hypotheses, best first.
    """

    tokens: Tensor
    scores: Tensor
    hypotheses: list[list[Hypothesis]]


def too_wide(beam_size: int, vocab_size: int) -> str | None:
    """Why a beam of `beam_size` is refused for a vocabulary of `vocab_size` tokens (None: it is not): memory and time
    grow with the beam, and a beam keeps at most one continuation per token (100,000 ran for minutes on one
    sentence of a 500-token vocabulary). The caller names the option before it."""
    if beam_size <= vocab_size:
        return None
    return (
        f"is more than the model's vocabulary ({vocab_size} tokens), the most different continuations a beam can keep; "
        "beams of 4-10 are usual"
    )


LENGTH_PENALTY_BOUND = 10.0  # |alpha| beyond it: length ** alpha outweighs every log-probability (and overflows)


def bad_length_penalty(alpha: Any) -> str | None:
    """Why `alpha` is refused as a length penalty (None: it is not); the caller names the option before it."""
    if not finite_number(alpha):
        return f"({alpha!r}) must be a finite number"
    if abs(alpha) > LENGTH_PENALTY_BOUND:
        return (
            f"({alpha}) must be within +-{LENGTH_PENALTY_BOUND:g}: beyond it the length decides alone; 0 scores the "
            "raw log-probability, 0.6-1.0 are usual"
        )
    return None


@torch.no_grad()
def beam_search(
    model: Decodes,
    *,
    src: Tensor | None = None,
    src_padding_mask: Tensor | None = None,
    prompt: Tensor | None = None,
    bos_id: int | None = None,
    eos_id: int,
    pad_id: int = 0,
    max_new_tokens: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    early_stopping: bool = True,
    use_cache: bool = True,
) -> BeamSearchOutput:
    """The highest-scoring continuations found keeping `beam_size` live hypotheses per input.

    Args:
        model, src, src_padding_mask, prompt, bos_id, pad_id, max_new_tokens, use_cache: as `greedy`.
        eos_id: ends a hypothesis; one still live after max_new_tokens ends there, without EOS.
        beam_size: K, live hypotheses per input (1 is greedy decoding).
        length_penalty: alpha in score = sum(log p) / length ** alpha (0: raw log-probability; > 0 favours
            longer hypotheses).
        early_stopping: an input is done once it has K finished hypotheses (fairseq). False: only once no live
            hypothesis can still beat the worst of them, whatever length it ends at (slower; the stop never
            cuts off a better hypothesis, though the beam itself still prunes).
    """
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    why = bad_length_penalty(length_penalty)
    if why:
        raise ValueError(f"length_penalty {why}")
    memory, memory_padding_mask, prompt, max_new_tokens = prepare(
        model, src=src, src_padding_mask=src_padding_mask, prompt=prompt, bos_id=bos_id, max_new_tokens=max_new_tokens
    )
    b, k = prompt.shape[0], beam_size
    device = prompt.device
    if memory is not None:  # every beam of an input reads its memory
        memory = memory.repeat_interleave(k, dim=0)  # [N, S, C]
        if memory_padding_mask is not None:
            memory_padding_mask = memory_padding_mask.repeat_interleave(k, dim=0)
    steps = Steps(model, memory, memory_padding_mask, use_cache=use_cache)
    tokens = prompt.repeat_interleave(k, dim=0)  # [N, P]
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live beam to start with: the others would repeat it
    generated = torch.empty(b * k, 0, dtype=torch.long, device=device)  # [N, t]
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    done = [False] * b
    first_row = (torch.arange(b, device=device) * k)[:, None]  # [B, 1]: input i's beams are rows i K .. i K + K - 1
    with steps:  # over a cache, with input-major weights (`Steps`)
        for step in range(max_new_tokens):
            log_probs = steps(tokens).log_softmax(dim=-1)  # [N, V]
            vocab = log_probs.shape[-1]
            if step == 0:
                check_token_id("eos_id", eos_id, vocab)
            candidates = (scores[:, :, None] + log_probs.view(b, k, vocab)).view(b, k * vocab)  # [B, K V]
            top, index = candidates.topk(min(2 * k, k * vocab), dim=1)  # [B, 2K], best first
            beam, token = index // vocab, index % vocab
            length = step + 1
            ends = (token == eos_id) & top.isfinite()
            ends[:, k:] = False  # only the K best may end (fairseq): the others rank below K that go on
            top_list, beam_list = top.tolist(), beam.tolist()  # one device sync per step, not one per hypothesis
            for i, j in ends.nonzero().tolist():
                if not done[i]:
                    row = generated[i * k + beam_list[i][j]]
                    hyp = _hypothesis(row, eos_id, top_list[i][j], length, length_penalty)
                    _keep(finished[i], hyp, k)
            # the K best candidates that do not end continue
            live = ~(token == eos_id)
            rank = live.long().cumsum(dim=1) - 1
            chosen = live & (rank < k)  # exactly K per input (at most K of the 2K end)
            pick = chosen.nonzero()[:, 1].view(b, k)  # [B, K] candidate indices, best first
            scores = top.gather(1, pick)
            rows = (first_row + beam.gather(1, pick)).view(-1)  # [N]: the beam each new beam continues
            new_token = token.gather(1, pick).view(-1)  # [N]
            generated = torch.cat([generated.index_select(0, rows), new_token[:, None]], dim=1)
            steps.reorder(rows)
            tokens = new_token[:, None]
            live_scores = scores.tolist()
            for i in range(b):
                if done[i]:
                    continue
                if step == max_new_tokens - 1:  # live hypotheses end at the length limit
                    for j, score in enumerate(live_scores[i]):
                        if math.isfinite(score):
                            hyp = _hypothesis(generated[i * k + j], None, score, length, length_penalty)
                            _keep(finished[i], hyp, k)
                    done[i] = True
                else:
                    bound = _best_reachable(live_scores[i][0], length, max_new_tokens, length_penalty)
                    full = len(finished[i]) >= k
                    done[i] = full and (early_stopping or bound <= finished[i][-1].score)
            if all(done):
                break
    return _output(finished, pad_id, device)


def _hypothesis(tokens: Tensor, eos_id: int | None, log_prob: float, length: int, alpha: float) -> Hypothesis:
    if eos_id is not None:
        tokens = torch.cat([tokens, tokens.new_full((1,), eos_id)])
    return Hypothesis(score=log_prob / length**alpha, log_prob=log_prob, tokens=tokens.clone())


def _keep(kept: list[Hypothesis], hyp: Hypothesis, k: int) -> None:
    """Add `hyp` to the best-first list `kept`, holding at most k."""
    kept.append(hyp)
    kept.sort(reverse=True)
    del kept[k:]


def _best_reachable(log_prob: float, length: int, max_length: int, alpha: float) -> float:
    """The best score a live hypothesis with summed `log_prob` at `length` can still reach: log p only falls, and
    the length it ends at divides it (best at max_length when alpha > 0, at the next step when alpha < 0)."""
    if not math.isfinite(log_prob):
        return log_prob
    return log_prob / (max_length if alpha > 0 else length + 1) ** alpha


def _output(finished: list[list[Hypothesis]], pad_id: int, device: torch.device) -> BeamSearchOutput:
    best = [hyps[0] for hyps in finished]
    width = max(len(h.tokens) for h in best)
    tokens = torch.full((len(best), width), pad_id, dtype=torch.long, device=device)
    for i, h in enumerate(best):
        tokens[i, : len(h.tokens)] = h.tokens
    scores = torch.tensor([h.score for h in best], device=device)
    return BeamSearchOutput(tokens=tokens, scores=scores, hypotheses=finished)
