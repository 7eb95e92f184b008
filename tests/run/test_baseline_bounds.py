"""The classical baseline is bounded: large splits are subsampled and projected, the C grid stops at the deadline,
and after training it gets max(60 s, 25% of the training time); a baseline out of time is skipped, never a lost run."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from attnzoo.config import load
from attnzoo.data.modules.base import DataModule
from attnzoo.run import baseline, fit
from attnzoo.run.translation_memory import BudgetExceeded, nearest_targets

ROOT = Path(__file__).resolve().parents[2]


class Synthetic(DataModule):
    """`baseline_features` of a split whose class is the sign of the first column (and a word in its text)."""

    def __init__(self, rows: dict[str, int], columns: int, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.splits = {}
        for split, n in rows.items():
            x = rng.standard_normal((n, columns)).astype(np.float32)
            y = (x[:, 0] > 0).astype(np.int64)
            texts = [f"row {'up' if label else 'down'} {i % 7}" for i, label in enumerate(y)]
            self.splits[split] = ({"text": texts, "pixels": x}, y)

    def baseline_features(self, split: str):
        return self.splits.get(split)


def test_budget_is_a_minute_or_a_quarter_of_training():
    assert baseline.budget_seconds(10.0) == 60.0
    assert baseline.budget_seconds(600.0) == 150.0


class Stuck:
    """A classifier whose fit takes a minute: a baseline that cannot finish in its budget on any machine."""

    def __init__(self, c: float, multilabel: bool) -> None:
        pass

    def fit(self, x, y):
        time.sleep(60)
        return self


def test_a_baseline_past_its_budget_is_stopped_and_skipped_and_says_why(monkeypatch):
    monkeypatch.setattr(baseline, "_classifier", Stuck)  # the forked child inherits it
    data = Synthetic({"train": 4_000, "val": 200, "test": 200}, columns=300)
    start = time.perf_counter()
    result = baseline.bounded_baseline(data, num_threads=1, budget_s=1.0)
    assert time.perf_counter() - start < 10.0  # the budget, the fork and the child's end
    assert set(result) == {"skipped", "seconds"} and "time budget of 1 s" in result["skipped"]


def test_train_rows_beyond_the_limit_are_subsampled_and_wide_arrays_projected(monkeypatch):
    monkeypatch.setattr(baseline, "MAX_TRAIN_ROWS", 300)
    monkeypatch.setattr(baseline, "MAX_DENSE_COLUMNS", 64)
    monkeypatch.setattr(baseline, "PROJECTED_COLUMNS", 32)
    result = baseline.fit_baseline(Synthetic({"train": 1000, "val": 200, "test": 200}, columns=100), num_threads=1)
    assert result["train_examples"] == 300
    assert result["features"] == "TF-IDF of text + pixels (random projection to 32)"
    assert result["test/acc"] == 1.0  # the text names the class


def test_the_c_grid_stops_where_the_next_fit_would_pass_the_deadline(monkeypatch):
    class Slow:
        def __init__(self, c: float, multilabel: bool) -> None:
            pass

        def fit(self, x, y):
            time.sleep(0.3)
            self.label = int(np.bincount(y).argmax())
            return self

        def predict(self, x):
            return np.full(x.shape[0], self.label)

    monkeypatch.setattr(baseline, "_classifier", Slow)
    data = Synthetic({"train": 50, "val": 20}, columns=4)
    result = baseline.fit_baseline(data, deadline=time.perf_counter() + 0.7)
    assert result["C_tried"] == [baseline.C_GRID[0]] and result["C"] == baseline.C_GRID[0]
    with pytest.raises(BudgetExceeded):
        baseline.fit_baseline(data, deadline=time.perf_counter() - 1)


def test_a_failing_baseline_is_recorded_as_skipped():
    result = baseline.bounded_baseline(Synthetic({"train": 50}, columns=4), budget_s=30.0)  # no val split
    assert result["skipped"].startswith("failed:") and "needs a val split" in result["skipped"]


def test_translation_memory_answers_with_the_nearest_train_source():
    train = [("open the file", "die Datei öffnen"), ("close the window", "das Fenster schließen")]
    hyps, _ = nearest_targets(train, ["Open the files", "closing windows"])
    assert hyps == ["die Datei öffnen", "das Fenster schließen"]


def test_a_run_out_of_baseline_time_still_writes_its_test_results(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(baseline, "BUDGET_SHARE", 0.0)
    quick = ["trainer.enable_progress_bar=false", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
             "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "trainer.num_sanity_val_steps=0",
             "model.depth=1", "data.listops.num_train=64", "data.listops.num_val=32", "data.listops.num_test=32",
             f"run.dir={tmp_path}"]  # fmt: skip
    run_dir = fit(load([ROOT / "recipes" / "text_cls.yaml"], quick))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "test/acc" in summary["test"] and "time budget of 0 s" in summary["baseline"]["skipped"]
    acc, why = summary["test"]["test/acc"], summary["baseline"]["skipped"]
    assert baseline.comparison(summary) == f"test/acc {acc:.4f}; baseline skipped: {why}"  # the run's result too


def _translation_memory(tmp_path: Path, pair) -> dict:
    """The baseline command's translation memory of train/val/test files of `pair(i)` lines (60 / 12 / 12)."""
    from attnzoo import baseline as command

    files = []
    for split, first, n in (("train", 0, 60), ("val", 100, 12), ("test", 200, 12)):
        (tmp_path / f"{split}.tsv").write_text("".join(f"{pair(i)}\n" for i in range(first, first + n)))
        files.append(f"data.{split}={tmp_path / f'{split}.tsv'}")
    out = tmp_path / "tm.json"
    assert command.main(["--config", str(ROOT / "recipes" / "translation.yaml"), *files, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_baseline_command_scores_a_translation_memory(tmp_path, capsys):
    result = _translation_memory(
        tmp_path,
        lambda i: f"please open the files now, number {i}\tbitte jetzt die Dateien öffnen, Nummer {i}" if i % 2
        else f"please close the windows now, number {i}\tbitte jetzt die Fenster schließen, Nummer {i}",
    )  # fmt: skip
    assert result["model"] == "translation memory" and result["train_examples"] == 60
    assert 0 < result["test/bleu"] < 100 and "test/bleu" in capsys.readouterr().out  # numbers differ from train's


def test_chinese_targets_are_scored_by_their_characters(tmp_path, capsys):
    # BLEU of 13a words: a Chinese sentence is one "word", so BLEU was 0 for every translation, an exact one too, and
    # val/bleu never moved (no best checkpoint, no early stopping); the translation memory scored 0 as well
    from torch import nn

    from attnzoo.data.modules.translation import TranslationDataModule
    from attnzoo.tasks.sequence import Seq2SeqTask

    places, things = "河山房子花园学校", "猫狗鸟鱼"
    result = _translation_memory(
        tmp_path,
        lambda i: f"the {i} animal sees place {i % 8}\t{things[i % 4]}今天看见{places[(i % 8) // 2 * 2 :][:2]}。",
    )
    assert result["test/exact"] == 1.0 and result["test/bleu"] == 100.0  # every test target is a train target
    data = TranslationDataModule(train=str(tmp_path / "train.tsv"), val=str(tmp_path / "val.tsv"))
    data.setup()
    assert data.model_inputs()["bleu_tokenize"] == "zh"
    assert data.auto_values()["data.bleu_tokenize"][0] == "zh"
    task = Seq2SeqTask(net=nn.Linear(1, 1), pad_id=0, bos_id=1, eos_id=2, max_len=8, bleu_tokenize="zh")
    assert float(task.bleu["val"](["猫今天看见房子。"], [["猫今天看见房子。"]])) == 1.0
