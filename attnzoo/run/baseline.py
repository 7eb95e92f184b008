"""A classical baseline on a run's own splits: scikit-learn features, then logistic regression.

Every DataModule gives its splits' inputs through `baseline_features(split) -> (parts, labels)` (None for a
split it does not have): `parts` maps a name to texts (a list of str: TF-IDF of words and word pairs) or to an
array [N, D] of numbers (pixels, log-mel statistics: standardized); `labels` are class indices [N] or multi-hot
[N, K]. The parts are joined column-wise and a logistic regression is fit on train, its inverse regularization
strength C chosen on val from `C_GRID`. Metrics are named as the run's (`val/acc`, `test/acc`, `test/map`, ...),
so the two line up in summary.json and in ablation reports. A DataModule with `baseline_pairs(split)` (translation)
gets a translation memory instead (`attnzoo.run.translation_memory`).

The baseline is bounded, so it never holds a run's results hostage: more than `MAX_TRAIN_ROWS` train rows are
subsampled, dense parts wider than `MAX_DENSE_COLUMNS` (pixels of large images) are randomly projected to
`PROJECTED_COLUMNS`, the C grid stops where the next fit would not end in time, and after training
(`bounded_baseline`) it runs in a child process given max(`MIN_BUDGET_S`, `BUDGET_SHARE` of the training time):
one that has not finished by then is stopped and recorded as `{"skipped": why}`.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..util.scripts import unspaced
from .translation_memory import BudgetExceeded, fit_translation_memory

log = logging.getLogger("attnzoo")

C_GRID = (0.1, 1.0, 10.0, 100.0)
SPLITS = ("train", "val", "test")
# a fit at 10x the C takes longer: 2.2x the previous one on 6,000 text-image questions (lbfgs, 155 -> 348
# iterations); a margin above that, so the grid is cut rather than the whole baseline killed at its budget
NEXT_FIT = 3.0
MAX_TRAIN_ROWS = 10_000  # more train rows are subsampled (a fixed draw)
MAX_DENSE_COLUMNS = 4096  # wider arrays (pixels of images larger than ~36x36 RGB) are randomly projected
PROJECTED_COLUMNS = 1024
MIN_BUDGET_S = 60.0
BUDGET_SHARE = 0.25  # of the training time


class Features:
    """Fit on train parts, transform any split's parts into one matrix: TF-IDF for texts, scaling for arrays."""

    def __init__(self) -> None:
        self.steps: dict[str, Any] = {}

    def fit(self, parts: Mapping[str, Any]) -> Features:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.preprocessing import StandardScaler

        for name, values in parts.items():
            if _is_text(values) and unspaced(values):  # Chinese, Japanese, Thai: a "word" would be a clause
                step = TfidfVectorizer(sublinear_tf=True, analyzer="char", ngram_range=(1, 3), min_df=1)
            elif _is_text(values):
                # words of one character count (digits, ListOps operands); word pairs catch short phrases
                step = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", min_df=1)
            elif _width(values) > MAX_DENSE_COLUMNS:  # a sparse random projection: distances kept
                from sklearn.pipeline import make_pipeline
                from sklearn.random_projection import SparseRandomProjection

                step = make_pipeline(SparseRandomProjection(PROJECTED_COLUMNS, random_state=0), StandardScaler())
            else:
                step = StandardScaler()
            self.steps[name] = step.fit(_as_input(values, wide=hasattr(step, "steps")))
        return self

    def transform(self, parts: Mapping[str, Any]) -> Any:
        from scipy import sparse

        if set(parts) != set(self.steps):
            raise ValueError(f"baseline features {sorted(parts)} differ from the train split's {sorted(self.steps)}")
        blocks = [self.steps[n].transform(_as_input(v, wide=hasattr(self.steps[n], "steps"))) for n, v in parts.items()]
        if len(blocks) == 1:
            return blocks[0]
        return sparse.hstack([sparse.csr_matrix(b) for b in blocks], format="csr")

    def describe(self) -> str:
        def one(name: str, step: Any) -> str:
            if hasattr(step, "vocabulary_"):
                return f"TF-IDF of {name}" + (
                    " (character 1-3-grams: a script without spaces between words)" if step.analyzer == "char" else ""
                )
            return f"{name} (random projection to {PROJECTED_COLUMNS})" if hasattr(step, "steps") else name

        return " + ".join(one(n, s) for n, s in self.steps.items())


def _is_text(values: Any) -> bool:
    return isinstance(values, list | tuple) and (not values or isinstance(values[0], str))


def _width(values: Any) -> int:
    return int(np.prod(np.shape(values)[1:])) if len(values) else 0


def _as_input(values: Any, *, wide: bool = False) -> Any:
    """Texts as a list; numbers as [N, D] float64, or float32 for arrays that are projected (half the memory)."""
    if _is_text(values):
        return list(values)
    return np.asarray(values, dtype=np.float32 if wide else np.float64).reshape(len(values), -1)


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


def fit_baseline(data: Any, *, num_threads: int | None = None, deadline: float | None = None) -> dict[str, Any]:
    """Fit the baseline on `data`'s train split (C chosen on val); its metrics on every split `data` has.

    Multi-hot labels [N, K] make it multi-label: one logistic regression per label. A DataModule with
    `baseline_pairs` gets a translation memory. `deadline` (a `time.perf_counter()` value) stops the C grid where
    the next fit would end after it, and raises `BudgetExceeded` where not even one can.

    Returns {"model", "features", "C", "train_examples", "seconds", "val/acc", "test/acc", ...}.
    """
    if data.baseline_kind() == "pairs":
        return fit_translation_memory(data, deadline=deadline)
    from threadpoolctl import threadpool_limits

    if not data.has_baseline():
        raise ValueError(
            f"{type(data).__name__} has no classical baseline (images, text, audio and text-image data have one, "
            "translation data a translation memory; language-model data has none)"
        )
    start = time.perf_counter()
    splits = {s: data.baseline_features(s) for s in SPLITS}
    splits = {s: v for s, v in splits.items() if v is not None}
    for needed in ("train", "val"):
        if needed not in splits:
            raise ValueError(f"the baseline needs a {needed} split; the data has {sorted(splits)}")
    train_parts, train_labels = subsample(*splits["train"], MAX_TRAIN_ROWS)
    splits["train"] = (train_parts, train_labels)
    features = Features().fit(train_parts)
    xs = {s: features.transform(parts) for s, (parts, _) in splits.items()}
    labels = {s: np.asarray(y) for s, (_, y) in splits.items()}
    multilabel = labels["train"].ndim == 2
    monitor = "map" if multilabel else "acc"
    best: tuple[float, float, Any] | None = None  # (val score, C, model)
    tried: list[float] = []
    took = 0.0  # seconds of the last fit
    with threadpool_limits(limits=num_threads):
        for c in C_GRID:
            last = time.perf_counter()
            if best is not None and deadline is not None and last + NEXT_FIT * took > deadline:
                log.info("baseline: C grid cut to %s to end within its time budget", tried)
                break
            if deadline is not None and last > deadline:
                raise BudgetExceeded("out of time budget before the first fit")
            model = _classifier(c, multilabel).fit(xs["train"], labels["train"])
            took = time.perf_counter() - last
            tried.append(c)
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
    if len(tried) < len(C_GRID):
        result["C_tried"] = tried
    for split in SPLITS:
        if split in xs:
            for name, value in scores(model, xs[split], labels[split], multilabel=multilabel).items():
                result[f"{split}/{name}"] = value
    result["seconds"] = time.perf_counter() - start
    shown = ", ".join(f"{k} {result[k]:.4f}" for k in (f"val/{monitor}", f"test/{monitor}") if k in result)
    log.info("baseline: %s + logistic regression (C=%g): %s", result["features"], c, shown)
    return result


def subsample(parts: Mapping[str, Any], labels: Any, limit: int, seed: int = 0) -> tuple[dict[str, Any], Any]:
    """At most `limit` rows of a split (a fixed draw from `seed`, in their order), logged when rows are left out."""
    n = len(labels)
    if n <= limit:
        return dict(parts), labels
    keep = np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
    log.info("baseline: fit on %d of the %d train rows (at most %d)", limit, n, limit)
    picked = {k: [v[i] for i in keep] if _is_text(v) else np.asarray(v)[keep] for k, v in parts.items()}
    return picked, np.asarray(labels)[keep]


def budget_seconds(training_seconds: float) -> float:
    """The most a baseline may take after a training of `training_seconds`."""
    return max(MIN_BUDGET_S, BUDGET_SHARE * training_seconds)


def bounded_baseline(data: Any, *, num_threads: int | None = None, budget_s: float) -> dict[str, Any]:
    """`fit_baseline` that returns within `budget_s` seconds: its result, or {"skipped": why} (logged) when it ran
    out of time or failed. It runs in a forked child process, stopped at the budget; where processes cannot be
    forked, in this one, stopped at its next check of the time."""
    start = time.perf_counter()
    deadline = start + budget_s
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        ctx = None
    try:
        if ctx is None:
            return fit_baseline(data, num_threads=num_threads, deadline=deadline)
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(send, data, num_threads, deadline), name="attnzoo-baseline")
        child.start()
        send.close()
        status, value = "error", "the baseline process ended without an answer"
        try:
            status, value = receive.recv() if receive.poll(budget_s) else ("timeout", None)
        except EOFError:  # the child died without an answer (killed, out of memory): the message above
            pass
        finally:
            child.join(timeout=0 if status == "timeout" else 5)
            if child.is_alive():
                child.kill()
            child.join()
        if status == "ok":
            return value
        if status == "timeout":
            raise BudgetExceeded(value or f"not done within its time budget of {budget_s:.0f} s")
        raise RuntimeError(value)
    except (BudgetExceeded, RuntimeError, ValueError) as err:
        why = f"{err} (max({MIN_BUDGET_S:.0f} s, {BUDGET_SHARE:.0%} of the training time))"
        if not isinstance(err, BudgetExceeded):
            why = f"failed: {err}"
        log.warning("baseline: skipped after %.0f s: %s", time.perf_counter() - start, why)
        return {"skipped": why, "seconds": time.perf_counter() - start}


def _child(send: Any, data: Any, num_threads: int | None, deadline: float) -> None:
    try:
        send.send(("ok", fit_baseline(data, num_threads=num_threads, deadline=deadline)))
    except BudgetExceeded as err:
        send.send(("timeout", str(err)))
    except Exception as err:  # noqa: BLE001 (anything the baseline raises is reported, never a lost summary)
        send.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        send.close()


def baseline_metric(summary: Mapping[str, Any], metric: str) -> float | None:
    """The baseline's value of the run's `metric`, on the split the run scored: a run without a test split tests on
    val (`summary["test"]["split"] == "val"`), so its `test/*` metrics pair with the baseline's `val/*`."""
    baseline = summary.get("baseline") or {}
    if metric.startswith("test/") and tested_on_val(summary):
        metric = "val/" + metric.removeprefix("test/")
    value = baseline.get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def tested_on_val(summary: Mapping[str, Any]) -> bool:
    """Whether a run's test pass scored its validation split (its data had no test examples)."""
    return (summary.get("test") or {}).get("split") == "val"


def comparison(summary: Mapping[str, Any]) -> str | None:
    """'test/acc 0.9120; baseline (TF-IDF of text + logistic regression) 0.9340' from a run's summary.json, on
    the test split when it ran, else validation (the best checkpoint's score); the run's score alone without a
    baseline; None for a run that never validated."""
    baseline = summary.get("baseline")
    monitor = next((k for k in (summary.get("best") or {}) if k != "path"), None)
    if monitor is None or not isinstance(summary["best"][monitor], int | float):
        return None
    name = monitor.split("/", 1)[-1]
    test = summary.get("test") or {}
    metric, value = f"test/{name}", test.get(f"test/{name}")
    if value is None:
        metric, value = monitor, summary["best"][monitor]
    # no test examples: the test pass scored validation
    label = f"{metric} (on the val split)" if metric.startswith("test/") and tested_on_val(summary) else metric
    if not baseline:
        return f"{label} {value:.4f}"
    if "skipped" in baseline:
        return f"{label} {value:.4f}; baseline skipped: {baseline['skipped']}"
    other = baseline_metric(summary, metric)
    shown = f"{other:.4f}" if other is not None else "-"
    return f"{label} {value:.4f}; baseline ({baseline['features']} + {baseline['model']}) {shown}"
