"""A classical baseline for translation: a translation memory on the run's own splits.

Each source sentence is answered with the target of the most similar training source: cosine similarity of TF-IDF
vectors of character 2-4-grams (within words, so "Datei" and "Dateien" share most of theirs), the nearest one
chosen exactly. Its answers are scored with the metrics the model is scored with (sacreBLEU-compatible BLEU and chrF
from torchmetrics, 0-100), so `val/bleu`, `test/bleu`, ... line up with the run's in summary.json. It shows how much
of a test set is near-copies of training sentences, which a model gets for free.

A DataModule offers it through `baseline_pairs(split) -> list[(source, target)] | None`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

log = logging.getLogger("attnzoo")

SPLITS = ("train", "val", "test")
CHUNK = 512  # query sentences compared with every train source at once


class BudgetExceeded(RuntimeError):
    """The baseline ran out of its time budget."""


def _check(deadline: float | None, what: str) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise BudgetExceeded(f"out of time budget while {what}")


def nearest_targets(
    train: list[tuple[str, str]], sources: list[str], *, deadline: float | None = None
) -> tuple[list[str], Any]:
    """The target of the most similar train source for each of `sources` (the earliest on a tie), and the vectorizer."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True, lowercase=True)
    memory = vectorizer.fit_transform([s for s, _ in train])  # [N_train, F], rows L2-normalized
    memory_t = memory.T.tocsr()  # [F, N_train]
    out: list[str] = []
    for start in range(0, len(sources), CHUNK):
        _check(deadline, f"looking up sources {start}-{start + CHUNK} of {len(sources)}")
        queries = vectorizer.transform(sources[start : start + CHUNK])  # [n, F]
        scores = (queries @ memory_t).toarray()  # [n, N_train] cosine similarities
        out += [train[int(i)][1] for i in np.argmax(scores, axis=1)]
    return out, vectorizer


def translation_scores(
    hyps: list[str], refs: list[str], *, chrf: bool = True, tokenize: str = "13a"
) -> dict[str, float]:
    """BLEU (words split by sacreBLEU's `tokenize`) and chrF (0-100) as `attnzoo.tasks.sequence.Seq2SeqTask` computes
    them (chrF: ~30 ms a sentence)."""
    from torchmetrics.text import CHRFScore, SacreBLEUScore

    wrapped = [[r] for r in refs]
    out = {"bleu": 100 * float(SacreBLEUScore(tokenize=tokenize)(hyps, wrapped))}
    if chrf:
        out["chrf"] = 100 * float(CHRFScore()(hyps, wrapped))
    return out


def fit_translation_memory(data: Any, *, deadline: float | None = None) -> dict[str, Any]:
    """The translation memory of `data`'s train split, scored on every other split `data` has.

    Returns {"model", "features", "train_examples", "seconds", "val/bleu", "test/bleu", "test/chrf", ...}; chrF on
    val only without a test split (torchmetrics' chrF takes most of the time).
    """
    start = time.perf_counter()
    splits = {s: data.baseline_pairs(s) for s in SPLITS}
    splits = {s: v for s, v in splits.items() if v}
    if "train" not in splits:
        raise ValueError(f"the translation memory needs a train split; the data has {sorted(splits)}")
    train = splits["train"]
    tokenize = data.bleu_tokenize  # the model's BLEU splits words as the data says
    result: dict[str, Any] = {
        "model": "translation memory",
        "features": "TF-IDF of character 2-4-grams of the source",
        "train_examples": len(train),
    }
    for split in ("val", "test"):
        if split in splits:
            pairs = splits[split]
            hyps, _ = nearest_targets(train, [s for s, _ in pairs], deadline=deadline)
            _check(deadline, f"scoring {split}")
            chrf = split == "test" or "test" not in splits
            hyps, refs = [data.scored(h) for h in hyps], [data.scored(t) for _, t in pairs]  # as the model's (NFKC)
            for name, value in translation_scores(hyps, refs, chrf=chrf, tokenize=tokenize).items():
                result[f"{split}/{name}"] = value
            result[f"{split}/exact"] = sum(h == t for h, t in zip(hyps, refs, strict=True)) / len(pairs)
    result["seconds"] = time.perf_counter() - start
    shown = ", ".join(f"{k} {result[k]:.2f}" for k in ("val/bleu", "test/bleu") if k in result)
    log.info("baseline: translation memory (nearest train source by %s): %s", result["features"], shown)
    return result
