"""A classical baseline on a run's own splits: scikit-learn features, then logistic regression.

Every DataModule gives its splits' inputs through `baseline_features(split) -> (parts, labels)` (None for a
split it does not have): `parts` maps a name to texts (a list of str: TF-IDF of words and word pairs) or to an
array [N, D] of numbers (pixels, log-mel statistics: standardized); `labels` are class indices [N] or multi-hot
[N, K]. The parts are joined column-wise and a logistic regression is fit on train, its inverse regularization
strength C chosen on val from `C_GRID`. Metrics are named as the run's (`val/acc`, `test/acc`, `test/map`, ...),
so the two line up in summary.json and in ablation reports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

log = logging.getLogger("attnzoo")

C_GRID = (0.1, 1.0, 10.0, 100.0)
SPLITS = ("train", "val", "test")


class Features:
    """Fit on train parts, transform any split's parts into one matrix: TF-IDF for texts, scaling for arrays."""

    def __init__(self) -> None:
        self.steps: dict[str, Any] = {}

    def fit(self, parts: Mapping[str, Any]) -> Features:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.preprocessing import StandardScaler

        for name, values in parts.items():
            if _is_text(values):
                # words of one character count (digits, ListOps operands); word pairs catch short phrases
                step = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", min_df=1)
            else:
                step = StandardScaler()
            self.steps[name] = step.fit(_as_input(values))
        return self

    def transform(self, parts: Mapping[str, Any]) -> Any:
        from scipy import sparse

        if set(parts) != set(self.steps):
            raise ValueError(f"baseline features {sorted(parts)} differ from the train split's {sorted(self.steps)}")
        blocks = [self.steps[name].transform(_as_input(values)) for name, values in parts.items()]
        if len(blocks) == 1:
            return blocks[0]
        return sparse.hstack([sparse.csr_matrix(b) for b in blocks], format="csr")

    def describe(self) -> str:
        return " + ".join(f"TF-IDF of {n}" if hasattr(s, "vocabulary_") else n for n, s in self.steps.items())


def _is_text(values: Any) -> bool:
    return isinstance(values, list | tuple) and (not values or isinstance(values[0], str))


def _as_input(values: Any) -> Any:
    return list(values) if _is_text(values) else np.asarray(values, dtype=np.float64).reshape(len(values), -1)


def _classifier(c: float, multilabel: bool) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    model = LogisticRegression(C=c, max_iter=2000)
    return OneVsRestClassifier(model) if multilabel else model


def scores(model: Any, x: Any, labels: np.ndarray, *, multilabel: bool) -> dict[str, float]:
    """The run's metric names without split: acc and macro f1 (single-label), macro map and micro f1 (multi-label)."""
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score

    if not multilabel:
        predicted = model.predict(x)
        f1 = float(f1_score(labels, predicted, average="macro"))
        return {"acc": float(accuracy_score(labels, predicted)), "f1": f1}
    proba = model.predict_proba(x)  # [N, K]
    present = labels.sum(axis=0) > 0  # average precision is undefined for a label with no positive example
    return {
        "map": float(average_precision_score(labels[:, present], proba[:, present], average="macro")),
        "f1": float(f1_score(labels, proba >= 0.5, average="micro", zero_division=0)),
    }


def fit_baseline(data: Any, *, num_threads: int | None = None) -> dict[str, Any]:
    """Fit the baseline on `data`'s train split (C chosen on val); its metrics on every split `data` has.

    Multi-hot labels [N, K] make it multi-label: one logistic regression per label.

    Returns {"model", "features", "C", "train_examples", "seconds", "val/acc", "test/acc", ...}.
    """
    from threadpoolctl import threadpool_limits

    if not data.has_baseline():
        raise ValueError(
            f"{type(data).__name__} has no classical baseline (images, text, audio and text-image data have one; "
            "translation and language-model data do not)"
        )
    start = time.perf_counter()
    splits = {s: data.baseline_features(s) for s in SPLITS}
    splits = {s: v for s, v in splits.items() if v is not None}
    for needed in ("train", "val"):
        if needed not in splits:
            raise ValueError(f"the baseline needs a {needed} split; the data has {sorted(splits)}")
    train_parts, train_labels = splits["train"]
    features = Features().fit(train_parts)
    xs = {s: features.transform(parts) for s, (parts, _) in splits.items()}
    labels = {s: np.asarray(y) for s, (_, y) in splits.items()}
    multilabel = labels["train"].ndim == 2
    monitor = "map" if multilabel else "acc"
    best: tuple[float, float, Any] | None = None  # (val score, C, model)
    with threadpool_limits(limits=num_threads):
        for c in C_GRID:
            model = _classifier(c, multilabel).fit(xs["train"], labels["train"])
            value = scores(model, xs["val"], labels["val"], multilabel=multilabel)[monitor]
            if best is None or value > best[0]:
                best = (value, c, model)
    _, c, model = best
    result: dict[str, Any] = {
        "model": "logistic regression",
        "features": features.describe(),
        "C": c,
        "train_examples": len(labels["train"]),
    }
    for split in SPLITS:
        if split in xs:
            for name, value in scores(model, xs[split], labels[split], multilabel=multilabel).items():
                result[f"{split}/{name}"] = value
    result["seconds"] = time.perf_counter() - start
    shown = ", ".join(f"{k} {result[k]:.4f}" for k in (f"val/{monitor}", f"test/{monitor}") if k in result)
    log.info("baseline: %s + logistic regression (C=%g): %s", result["features"], c, shown)
    return result


def baseline_metric(summary: Mapping[str, Any], metric: str) -> float | None:
    """The baseline's value of the run's `metric`, on the split the run scored: a run without a test split tests on
    val (`summary["test"]["split"] == "val"`), so its `test/*` metrics pair with the baseline's `val/*`."""
    baseline = summary.get("baseline") or {}
    if metric.startswith("test/") and (summary.get("test") or {}).get("split") == "val":
        metric = "val/" + metric.removeprefix("test/")
    value = baseline.get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def comparison(summary: Mapping[str, Any]) -> str | None:
    """'test/acc 0.9120; baseline (TF-IDF of text + logistic regression) 0.9340' from a run's summary.json, on
    the test split when it ran, else validation (the best checkpoint's score); None without a baseline."""
    baseline = summary.get("baseline")
    monitor = next((k for k in (summary.get("best") or {}) if k != "path"), None)
    if not baseline or monitor is None:
        return None
    name = monitor.split("/", 1)[-1]
    metric, value = f"test/{name}", (summary.get("test") or {}).get(f"test/{name}")
    if value is None:
        metric, value = monitor, summary["best"][monitor]
    other = baseline_metric(summary, metric)
    shown = f"{other:.4f}" if other is not None else "-"
    return f"{metric} {value:.4f}; baseline ({baseline['features']} + {baseline['model']}) {shown}"
