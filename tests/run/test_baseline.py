"""The classical baseline on each modality's splits, in fit's summary and output, and as its own command."""

import csv
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.io import wavfile

from attnzoo import baseline as command
from attnzoo import fit as fit_command
from attnzoo.config import load
from attnzoo.run.baseline import C_GRID, fit_baseline
from attnzoo.run.build import build_data

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


def _baseline(recipe: str, overrides: list[str]) -> dict:
    return fit_baseline(build_data(load([RECIPES / recipe], overrides)))


def _text_files(tmp_path: Path, noise: bool = False) -> list[str]:
    rng = np.random.default_rng(0)
    words = {"sport": ["goal", "match", "team", "score"], "food": ["bread", "soup", "salt", "cook"]}
    files = []
    for split, n in (("train", 40), ("val", 12), ("test", 12)):
        rows = ["text,label"]
        for i in range(n):
            label = ["sport", "food"][i % 2]
            text = " ".join(rng.choice(words[label], 3)) + " the and of"
            rows.append(f"{text},{['sport', 'food'][rng.integers(2)] if noise else label}")
        path = tmp_path / f"{split}.csv"
        path.write_text("\n".join(rows) + "\n")
        files.append(f"data.{split}={path}")
    return files


def test_text_baseline_is_tfidf_and_separates_words_that_name_the_class(tmp_path):
    result = _baseline("text_cls.yaml", _text_files(tmp_path))
    assert result["features"] == "TF-IDF of text" and result["model"] == "logistic regression"
    assert result["C"] in C_GRID and result["train_examples"] == 40
    assert result["val/acc"] == 1.0 and result["test/acc"] == 1.0 and result["test/f1"] == 1.0


def test_text_without_spaces_between_words_gets_character_ngrams(tmp_path):
    # Chinese texts: each whole sentence was one TF-IDF "word", so the baseline scored chance on data a character
    # model separates perfectly
    rng = np.random.default_rng(0)
    filler = list(
        "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经"
    )
    for split, n in (("train", 60), ("val", 20), ("test", 20)):
        rows = ["text,label"]
        for i in range(n):
            mood = ["非常好", "非常坏"][i % 2]
            chars = list(rng.choice(filler, 10))
            rows.append("".join(chars[:5]) + mood + "".join(chars[5:]) + f",{'好坏'[i % 2]}")
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n")
    files = [f"data.{split}={tmp_path / f'{split}.csv'}" for split in ("train", "val", "test")]
    result = _baseline("text_cls.yaml", files)
    assert result["features"] == "TF-IDF of text (character 1-3-grams: a script without spaces between words)"
    assert result["test/acc"] == 1.0
    from attnzoo.util.scripts import unspaced

    # real texts, punctuated (a first rule on runs of word characters took all of these for spaced text)
    assert unspaced(["这个酒店的服务态度非常好，房间也很干净，下次还会再来。", "房间太小了，隔音也不好，不推荐。"])
    assert unspaced(["この映画はとても面白かったです。また見たいと思います。"])
    assert unspaced(["วันนี้อากาศดีมากเราไปเที่ยวกันเถอะ"]) and unspaced(["好开心", "无语了", "太棒了！"])
    assert unspaced(["我今天买了一部iPhone手机，很好用"])  # Chinese with a Latin word
    spaced = ["The quick brown fox jumps over the lazy dog", "Donaudampfschifffahrt ist lang", "def snake_case_name():"]
    assert not unspaced(spaced) and not unspaced(["오늘 날씨가 정말 좋네요"])  # Korean writes spaces


def test_bleu_splits_the_words_of_each_script_as_sacrebleu_does():
    from attnzoo.util.scripts import bleu_tokenize

    assert bleu_tokenize(["Die Sitzung ist am Montag.", "Er kostet 250 Euro."])[0] == "13a"
    assert bleu_tokenize(["오늘 날씨가 정말 좋네요"])[0] == "13a"  # Korean writes spaces
    assert bleu_tokenize(["我今天买了一部iPhone手机，很好用", "猫今天看见房子。"])[0] == "zh"
    assert bleu_tokenize(["この映画はとても面白かったです。"])[0] == "char"  # kana: Japanese
    assert bleu_tokenize(["วันนี้อากาศดีมาก"])[0] == "char"
    assert bleu_tokenize([""])[0] == "13a"


def test_text_baseline_with_random_labels_is_far_from_perfect(tmp_path):
    result = _baseline("text_cls.yaml", _text_files(tmp_path, noise=True))
    assert result["test/acc"] < 0.85


def _image_folder(root: Path) -> list[str]:
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("val", 6), ("test", 6)):
        for label, level in (("dark", 60), ("light", 190)):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                pixels = np.clip(rng.normal(level, 30, (10, 10, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")
    return ["data.dataset=folder", f"data.root={root}", "data.img_size=8"]


def test_image_baseline_reads_pixels_of_a_folder(tmp_path):
    result = _baseline("vit.yaml", _image_folder(tmp_path))
    assert result["features"] == "pixels" and result["train_examples"] == 24
    assert result["val/acc"] == 1.0 and result["test/acc"] == 1.0


def _tone(path: Path, hz: float, rng: np.random.Generator) -> None:
    t = np.arange(8000) / 8000
    wave = 0.3 * np.sin(2 * np.pi * hz * (1 + 0.05 * rng.standard_normal()) * t) + 0.01 * rng.standard_normal(8000)
    wavfile.write(path, 8000, wave.astype(np.float32))


def test_audio_baseline_reads_log_mel_statistics_of_a_folder(tmp_path):
    rng = np.random.default_rng(0)
    lists = {"val": [], "test": []}
    for label, hz in (("low", 300.0), ("high", 2500.0)):
        (tmp_path / label).mkdir()
        for i in range(16):
            _tone(tmp_path / label / f"s{i}_nohash_0.wav", hz, rng)
            split = "val" if i in (0, 1, 2) else "test" if i in (3, 4, 5) else None
            if split:
                lists[split].append(f"{label}/s{i}_nohash_0.wav")
    (tmp_path / "validation_list.txt").write_text("\n".join(lists["val"]))
    (tmp_path / "testing_list.txt").write_text("\n".join(lists["test"]))
    overrides = ["data.source=folder", f"data.root={tmp_path}", "data.sample_rate=8000"]
    result = _baseline("ast.yaml", overrides)
    assert result["features"] == "log-mel mean and std" and result["train_examples"] == 20
    assert result["val/acc"] == 1.0 and result["test/acc"] == 1.0


def test_multilabel_audio_baseline_reports_mean_average_precision(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["path,label,fold"]
    for i in range(30):
        tones = [("low", 300.0), ("high", 2500.0)][: 1 + i % 2] if i % 3 else [("high", 2500.0)]
        t = np.arange(8000) / 8000
        wave = sum(0.2 * np.sin(2 * np.pi * hz * t) for _, hz in tones) + 0.01 * rng.standard_normal(8000)
        wavfile.write(tmp_path / f"{i}.wav", 8000, wave.astype(np.float32))
        rows.append(f"{i}.wav,{';'.join(name for name, _ in tones)},{i % 5}")
    (tmp_path / "meta.csv").write_text("\n".join(rows) + "\n")
    overrides = ["data.source=csv", f"data.csv={tmp_path / 'meta.csv'}", "data.multilabel=true", "data.val_folds=[3]",
                 "data.test_folds=[4]", "data.sample_rate=8000", "task.objective=multilabel"]  # fmt: skip
    result = _baseline("ast.yaml", overrides)
    assert {"val/map", "test/map", "test/f1"} <= set(result) and "test/acc" not in result
    assert result["test/map"] == 1.0


def test_text_image_baseline_joins_tfidf_of_the_question_and_pixels():
    overrides = ["data.num_train=200", "data.num_val=60", "data.image_size=16"]
    result = _baseline("text_image.yaml", overrides)
    assert result["features"] == "TF-IDF of text + pixels" and result["train_examples"] == 200
    assert 0.0 <= result["test/acc"] <= 1.0


def _tiny_vit(tmp_path: Path) -> list[str]:
    return [
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "trainer.precision=32-true",
        "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2", "trainer.num_sanity_val_steps=0", "model.embed_dim=16", "model.depth=1",
        "model.num_heads=2", "model.patch_size=4", "data.batch_size=4", f"run.dir={tmp_path}",
        *_image_folder(tmp_path / "images"),
    ]  # fmt: skip


def test_fit_with_run_baseline_records_it_in_the_summary_and_prints_it(tmp_path, capsys):
    assert fit_command.main(["--config", str(RECIPES / "vit.yaml"), *_tiny_vit(tmp_path), "run.baseline=true"]) == 0
    (run_dir,) = (tmp_path / "vit").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    baseline = summary["baseline"]
    assert baseline["features"] == "pixels" and baseline["train_examples"] == 24 and baseline["test/acc"] == 1.0
    err = capsys.readouterr().err
    assert f"baseline (pixels + logistic regression) {baseline['test/acc']:.4f}" in err
    assert f"test/acc {summary['test']['test/acc']:.4f}" in err

    # the command adds the same baseline to a run that had none
    del summary["baseline"]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "new" / "b.json"  # --json into a folder not made yet (a benchmark's --out lost its score)
    assert command.main(["--run-dir", str(run_dir), "--json", str(out)]) == 0
    again = json.loads((run_dir / "summary.json").read_text())["baseline"]
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in baseline.items() if k != "seconds"}
    assert json.loads(out.read_text())["test/acc"] == baseline["test/acc"]
    assert "test/acc" in capsys.readouterr().out


def test_the_command_names_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert command.main(["--run-dir", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_the_ablation_report_shows_the_baseline_as_a_row_and_a_line(tmp_path):
    from attnzoo.ablation.report import write_report

    variants = []
    for name, seed, acc, base in (("a", 0, 0.8, 0.70), ("a", 1, 0.9, 0.72), ("b", 0, 0.6, 0.70)):
        run_id = f"{name},seed={seed}"
        variants.append({"id": run_id, "name": name, "seed": seed, "values": {"x": name}})
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        summary = {"test": {"test/acc": acc}, "best": {"path": "p", "val/acc": acc}, "train_samples_per_second": 10.0,
                   "baseline": {"features": "pixels", "model": "logistic regression", "test/acc": base}}  # fmt: skip
        (run_dir / "summary.json").write_text(json.dumps(summary))
        (run_dir / "ablate.json").write_text(json.dumps({"status": "ok", "wall_seconds": 1.0}))
    unfinished = tmp_path / "runs" / "b,seed=1"  # stopped by a signal: not a result
    unfinished.mkdir()
    (unfinished / "summary.json").write_text(json.dumps({"finished": False, "stopped": {"reason": "signal"}}))
    variants.append({"id": "b,seed=1", "name": "b", "seed": 1, "values": {"x": "b"}})
    info = {"variants": variants, "axes": {"x": ["a", "b"]}, "configs": ["vit.yaml"], "grid": "g.yaml"}
    (tmp_path / "ablation.json").write_text(json.dumps(info))

    report = write_report(tmp_path).read_text()
    with open(tmp_path / "report.csv", newline="") as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    name = "baseline: pixels + logistic regression"
    assert math.isclose(float(rows[name]["metric_mean"]), 0.70666667, rel_tol=1e-6)
    assert rows["b"]["runs_ok"] == "1" and rows["b"]["runs_missing"] == "1"
    assert f"| *{name}* | *0.7067 ± 0.0115* |" in report
    assert "| **`a`** | **0.8500 ± 0.0707** |" in report  # the best attention variant, not the baseline


def test_a_run_tested_on_val_is_compared_with_the_baseline_on_val():
    from types import SimpleNamespace

    from attnzoo.ablation.report import baseline_row
    from attnzoo.run.baseline import baseline_metric, comparison

    baseline = {"features": "pixels", "model": "logistic regression", "val/acc": 0.88, "train/acc": 0.99}
    summary = {"best": {"path": "x", "val/acc": 0.9}, "test": {"test/acc": 0.93, "split": "val"}, "baseline": baseline}
    assert baseline_metric(summary, "test/acc") == 0.88
    assert comparison(summary) == "test/acc (on the val split) 0.9300; baseline (pixels + logistic regression) 0.8800"
    # without a baseline (run.baseline=false, the language model's default) fit printed no result at all
    assert comparison({**summary, "baseline": None}) == "test/acc (on the val split) 0.9300"
    assert comparison({"best": {"path": "x", "val/ppl": 12.5}, "test": {}}) == "val/ppl 12.5000"
    assert comparison({"best": {}, "test": {}}) is None  # never validated
    tested = {**summary, "test": {"test/acc": 0.93}, "baseline": {**baseline, "test/acc": 0.8}}
    assert baseline_metric(tested, "test/acc") == 0.8  # a real test split pairs with the baseline's test split

    row = SimpleNamespace(runs=[SimpleNamespace(status="ok", summary=summary)])  # an ablation row of one finished run
    assert baseline_row([row], "test/acc").metric == [0.88]
