"""`attnzoo.evaluate` stopped by a signal (a clear message, a non-zero exit, no partial metrics written), and the
names of its reports."""

import os
import re
import signal
import subprocess
import sys

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit
from attnzoo.run.signals import SELF_SIGNAL_ENV
from tests.helpers import QUICK, ROOT, TINY_RUN, VIT


@pytest.mark.parametrize("sig, split", [("SIGTERM", "test"), pytest.param("SIGINT", "val", marks=pytest.mark.slow)])
def test_a_signal_during_evaluate_exits_128_plus_the_signal_and_writes_no_metrics(sig, split, tmp_path):
    run_dir = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT), SELF_SIGNAL_ENV: f"{sig}@test", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "attnzoo.evaluate", str(run_dir), "--split", split, "trainer.limit_test_batches=2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 128 + signal.Signals[sig], done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    expected = f"attnzoo evaluate: {sig} received: the evaluation of {run_dir / 'checkpoints' / 'best.ckpt'} stopped"
    assert expected in done.stderr and "no metrics written" in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""  # no metrics of part of the split
    assert not list(run_dir.glob("evaluate-*.json"))  # limit_test_batches scores another report: none of them


def test_a_checkpoint_file_from_elsewhere_gets_a_report_name_of_its_own(tmp_path):
    """`--checkpoint <another run>/checkpoints/best.ckpt` must not replace this run's evaluate-best.json."""
    from attnzoo.evaluate import checkpoint_name

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert checkpoint_name(run, run / "checkpoints" / "epoch=3.ckpt") == "epoch=3"
    other = checkpoint_name(run, tmp_path / "other" / "checkpoints" / "best.ckpt")
    third = checkpoint_name(run, tmp_path / "third" / "checkpoints" / "best.ckpt")
    assert re.fullmatch(r"best-[0-9a-f]{8}", other) and other != third


# overrides that leave what evaluate scores as the run was trained: not applied (fit's budget and options, the
# optimizer), only how fast or how loudly it computes, or the run's own value again
SAME_SCORES = [
    [],
    ["trainer.max_epochs=3", "trainer.devices=2", "trainer.num_threads=2", "trainer.enable_progress_bar=false"],
    ["run.baseline=false", "run.early_stopping.patience=3", "task.optimizer.lr=0.1", "task.scheduler.warmup=0.2"],
    ["model.depth=4", "model.attention.kind=mha", "data.batch_size=64", "seed=0"],  # vit.yaml's own values
]
# overrides that change what is scored: another model, objective, precision, part of the split, other data
OTHER_SCORES = [
    ["model.attention.bias=alibi"],
    ["model.attention.pattern={kind: sliding_window, window: 2}"],
    ["model.depth=2"],
    ["task.objective.label_smoothing=0.2"],
    ["trainer.precision=bf16-mixed"],
    ["trainer.limit_test_batches=2"],
    ["seed=1"],
    ["data.batch_size=32"],
]


def test_an_override_that_changes_what_is_scored_gets_a_report_name_of_its_own(tmp_path):
    """`evaluate <run> model.attention.bias=alibi` replaced the run's evaluate-best.json with the report of another
    model: only data.* overrides added a digest to the name."""
    from attnzoo.evaluate import report_name

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(VIT.read_text())
    data = load([VIT]).section("data")
    data = {k: data[k] for k in ("train", "val", "test", "root", "csv") if data.get(k) is not None}
    for overrides in SAME_SCORES:
        for asked, plain in (("test", "evaluate-best.json"), ("val", "evaluate-best-val.json")):
            assert report_name(run, "best", asked, data, [], overrides) == plain, overrides
    names = [report_name(run, "best", "test", data, [], overrides) for overrides in OTHER_SCORES]
    assert all(re.fullmatch(r"evaluate-best-[0-9a-f]{8}\.json", name) for name in names), names
    assert len(set(names)) == len(names)
    # the same variant evaluated again replaces its report, and what leaves the scores alone does not change it
    again = [*OTHER_SCORES[0], *SAME_SCORES[1]]
    assert report_name(run, "best", "test", data, [], again) == names[0]


def test_a_model_override_keeps_the_report_of_the_run_as_trained(tmp_path):
    import json

    from attnzoo.evaluate import evaluate

    run = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", "run.baseline=false", f"run.dir={tmp_path}"]))
    plain = evaluate(run, "best", "test", [], [])
    assert plain["path"] == str(run / "evaluate-best.json") and plain["overrides"] == []
    written = (run / "evaluate-best.json").read_text()
    other = ["model.attention.pattern={kind: sliding_window, window: 2}"]
    variant = evaluate(run, "best", "test", [], other)
    assert variant["metrics"]["test/loss"] != plain["metrics"]["test/loss"]  # another model was scored
    assert re.fullmatch(r"evaluate-best-[0-9a-f]{8}\.json", variant["path"].rsplit("/", 1)[1]), variant["path"]
    assert (run / "evaluate-best.json").read_text() == written  # the run as trained keeps its report
    assert json.loads(open(variant["path"]).read())["overrides"] == other  # the report says what it was made with


def test_a_split_cut_by_a_batch_limit_is_said_to_be_scored_in_part(tmp_path, capsys):
    # a run trained with trainer.limit_test_batches=2 (a quick trial) passed it on to evaluate, which printed "the val
    # split, of 500 examples, scored" for 2 batches of it
    import json

    from attnzoo.evaluate import main

    run = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", "run.baseline=false", f"run.dir={tmp_path}"]))
    assert main([str(run), "trainer.limit_test_batches=2"]) == 0
    err = capsys.readouterr().err
    assert "warning: trainer.limit_test_batches=2 (set in the command line ('trainer.limit_test_batches=2')) " \
           "scored 2 of the split's " in err and "trainer.limit_test_batches=1.0 scores it whole" in err  # fmt: skip
    (report,) = run.glob("evaluate-best-*.json")
    assert json.loads(report.read_text())["scored_batches"] == 2
    assert main([str(run)]) == 0 and "scored 2 of" not in capsys.readouterr().err  # the whole split
    assert "scored_batches" not in json.loads((run / "evaluate-best.json").read_text())


def test_evaluate_on_data_without_a_test_split_says_so_in_its_own_words(tmp_path, caplog, capsys):
    # evaluate of a run tested on val logged fit's "run.test: ... the test pass scores the validation split
    # (summary.json: test.split = val)": no run.test, no summary.json in evaluate
    import logging

    from attnzoo.evaluate import main

    run = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", "run.baseline=false", f"run.dir={tmp_path}"]))
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        assert main([str(run), "--checkpoint", "best"]) == 0
    err = capsys.readouterr().err
    for fits in ("run.test", "the test pass scores the validation split", "summary.json"):
        assert fits not in caplog.text and fits not in err, (caplog.text, err)
    best = run / "checkpoints" / "best.ckpt"
    assert f"attnzoo evaluate: the data has no test examples: the val split, of 500 examples, scored with {best}" in err
    assert main([str(run), "--split", "val"]) == 0  # asked for: nothing to explain
    assert f"attnzoo evaluate: the val split, of 500 examples, scored with {best}" in capsys.readouterr().err


def test_a_shared_run_scores_data_test_without_the_train_files_it_was_trained_on(tmp_path, caplog):
    """A run directory from elsewhere (its config.yaml names train/val files of another machine) stopped evaluate
    with 'no such text file': the classes and token ids it needs are the run's labels.json and tokenizer.json."""
    import csv
    import logging
    import random

    from attnzoo.evaluate import evaluate

    rng = random.Random(0)
    words = "red green blue cat dog fish one two three".split()
    for name, n in (("train", 64), ("val", 16), ("test", 16)):
        with open(tmp_path / f"{name}.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["text", "label"])
            out.writerows([" ".join(rng.choice(words) for _ in range(5)), "ab"[i % 2]] for i in range(n))
    overrides = [*QUICK, "trainer.max_epochs=1", "model.depth=1", "run.baseline=false", f"run.dir={tmp_path / 'r'}",
                 f"data.train={tmp_path / 'train.csv'}", f"data.val={tmp_path / 'val.csv'}"]  # fmt: skip
    run = fit(load([ROOT / "recipes" / "text_cls.yaml"], overrides))
    test = [f"data.test={tmp_path / 'test.csv'}"]
    here = evaluate(run, "best", "test", [], test)["metrics"]
    for name in ("train", "val"):
        (tmp_path / f"{name}.csv").rename(tmp_path / f"{name}.gone")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        report = evaluate(run, "best", "test", [], test)
    assert report["metrics"] == here and report["split_examples"] == 16
    assert f"{tmp_path / 'train.csv'}, {tmp_path / 'val.csv'} (data.train and data.val) are not here" in caplog.text
    # a test file whose columns have other names: data.text_column / data.label_column were applied to the run's own
    # train file too ("train.csv: no text column 'sentence'"), so no override could score it
    for name in ("train", "val"):
        (tmp_path / f"{name}.gone").rename(tmp_path / f"{name}.csv")
    rows = (tmp_path / "test.csv").read_text().splitlines()
    (tmp_path / "other.csv").write_text("\n".join(["sentence,category", *rows[1:]]) + "\n")
    columns = [f"data.test={tmp_path / 'other.csv'}", "data.text_column=sentence", "data.label_column=category"]
    report = evaluate(run, "best", "test", [], columns)
    assert report["metrics"] == here
    # the report named other.csv as the run's train and val files too (it read them in their place)
    own = {"train": str(tmp_path / "train.csv"), "val": str(tmp_path / "val.csv"), "test": str(tmp_path / "other.csv")}
    assert {k: report["data"][k] for k in own} == own, report["data"]
    assert report["read_in_place"].startswith("data.test was also read in place of data.train and data.val")


@pytest.mark.parametrize("recipe", ["lm", "mlm"])
def test_a_language_model_run_scores_a_test_file_of_its_own_without_its_train_file(recipe, tmp_path, caplog):
    # a copied LM run: "data.train: no such file or directory"; an MLM run given data.test with another column:
    # data.text_column=sentence was applied to the run's own train file ("no text column 'sentence'")
    import logging
    import random

    from attnzoo.evaluate import evaluate

    rng = random.Random(0)
    words = "the cat sat on a mat while dog ran far away from home and came back".split()
    lines = lambda n: [" ".join(rng.choice(words) for _ in range(9)) for _ in range(n)]  # noqa: E731
    own_val = []
    if recipe == "lm":  # with a val file of its own, which stays: the test file was compared with itself
        (tmp_path / "corpus.txt").write_text("\n".join(lines(200)) + "\n")
        (tmp_path / "val.txt").write_text("\n".join(lines(20)) + "\n")
        (tmp_path / "new.txt").write_text("\n".join(lines(30)) + "\n")
        train, test, other = tmp_path / "corpus.txt", [f"data.test={tmp_path / 'new.txt'}"], None
        own_val = [f"data.val={tmp_path / 'val.txt'}"]
    else:
        (tmp_path / "train.csv").write_text(
            "text,label\n" + "".join(f"{t},{i % 2}\n" for i, t in enumerate(lines(200)))
        )
        tests = lines(30)
        (tmp_path / "test.csv").write_text("text\n" + "".join(f"{t}\n" for t in tests))
        (tmp_path / "other.csv").write_text("id,sentence\n" + "".join(f"{i},{t}\n" for i, t in enumerate(tests)))
        train, test = tmp_path / "train.csv", [f"data.test={tmp_path / 'test.csv'}"]
        other = [f"data.test={tmp_path / 'other.csv'}", "data.text_column=sentence"]
    overrides = [*QUICK, "trainer.max_epochs=1", "model.depth=1", "model.dim=16", f"run.dir={tmp_path / 'r'}",
                 f"data.train={train}", *own_val]  # fmt: skip
    run = fit(load([ROOT / "recipes" / f"{recipe}.yaml"], overrides))
    here = evaluate(run, "best", "test", [], test)
    if other is not None:  # another column named for the test file: the run's own train file keeps its column
        assert evaluate(run, "best", "test", [], other)["metrics"] == here["metrics"]
    train.rename(tmp_path / "gone")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        alone = evaluate(run, "best", "test", [], test)
    assert alone["metrics"] == here["metrics"] and alone["split_examples"] == here["split_examples"]
    assert f"{train} (data.train) is not here: data.test" in caplog.text
    assert "is read as train and val too (test_only)" in caplog.text  # nothing held out: said


def test_an_image_run_whose_folder_moved_is_told_what_draws_without_it(tmp_path):
    # the hint for data that is not here read data.train/val/test only: an image folder (data.root) got none
    import shutil

    from PIL import Image

    from attnzoo.evaluate import evaluate
    from attnzoo.run.rundir import _not_alone

    for split in ("train", "val"):
        for name in ("a", "b"):
            (tmp_path / "imgs" / split / name).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (16, 16), (40 * i, 200 if name == "a" else 0, 0)).save(
                    tmp_path / "imgs" / split / name / f"{i}.png"
                )
    folder = ["data.dataset=folder", f"data.root={tmp_path / 'imgs'}", "data.img_size=28"]
    run = fit(load([VIT], [*TINY_RUN, *folder, "trainer.max_epochs=1", "run.baseline=false",
                           f"run.dir={tmp_path / 'r'}"]))  # fmt: skip
    shutil.move(tmp_path / "imgs", tmp_path / "moved")
    with pytest.raises(ConfigError) as err:
        evaluate(run, "best", "test", [], [])
    assert f"The run's data '{tmp_path / 'imgs'}' is not here" in str(err.value), err.value
    assert "`viz <run> --input <image>` draws one input without them" in str(err.value)
    assert "`evaluate <run> data.root=<folder>` scores the folder where it is now" in str(err.value)
    # a folder of class folders alone: its held-out val part is scored, and the report says how to score all of it
    report = evaluate(run, "best", "test", [], [f"data.root={tmp_path / 'moved' / 'train'}"])
    assert report["split"] == "val" and report["split_examples"] == 1
    assert f"put the class folders under {tmp_path / 'moved' / 'train' / 'test'}/" in report["hint"]
    assert "hint" not in evaluate(run, "best", "test", [], [f"data.root={tmp_path / 'moved'}"])  # val/: scored whole
    # classes given in the config are the run's own, and a fixed tokenizer gives the same ids anywhere
    text_cfg = load([ROOT / "recipes" / "text_cls.yaml"], ["data.train=t.csv", "data.labels=[a, b]",
                                                           "data.tokenizer=bytes"])  # fmt: skip
    assert _not_alone(text_cfg, {}) is None


def test_a_split_without_examples_is_an_error_naming_the_data_not_an_empty_report(tmp_path, capsys):
    # an audio folder whose few files all hashed into train: "set run.test=false" (which evaluate cannot), and
    # --split val exited 0 with a report of no metrics ("the val split, of 0 examples")
    import torch

    from attnzoo.evaluate import main
    from attnzoo.run import build
    from tests.helpers.audio import RATE, speech_commands, tone, write_pcm16

    speech_commands(tmp_path / "clips")
    given = ["data.source=folder", f"data.root={tmp_path / 'clips'}", f"data.sample_rate={RATE}", "model.depth=1",
             "model.embed_dim=16", "data.clip_seconds=0.5", "run.baseline=false"]  # fmt: skip
    data, task, cfg = build(load([ROOT / "recipes" / "ast.yaml"], [*QUICK, *given]))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    data.save_artifacts(run)
    (run / "config.yaml").write_text(cfg.to_yaml())
    torch.save({"state_dict": task.state_dict()}, run / "checkpoints" / "best.ckpt")
    for name in ("down", "go", "yes"):  # files of one name in every class: a name hash sends them all to train
        (tmp_path / "flat" / name).mkdir(parents=True)
        for i in range(3):
            write_pcm16(tmp_path / "flat" / name / f"{i}.wav", tone(RATE, 0.5, 200.0, 1), RATE)
    for split, said in (("test", "neither the test nor the val split of"), ("val", "the val split of")):
        assert main([str(run), f"data.root={tmp_path / 'flat'}", "--split", split]) == 2
        err = capsys.readouterr().err
        assert said in err and f"put the files to score in {tmp_path / 'flat'}/{split}/<class>/ (a folder" in err, err
        assert not list(run.glob("evaluate-*.json"))
    (tmp_path / "flat" / "test").mkdir()  # split folders: scored on test, and --split val names its own folder
    for name in ("down", "go", "yes"):
        (tmp_path / "flat" / name).rename(tmp_path / "flat" / "test" / name)
    assert main([str(run), f"data.root={tmp_path / 'flat'}", "--split", "val"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'flat'}/val/<class>/" in err and "without split folders" not in err, err


def test_a_run_given_a_tokenizer_file_keeps_a_copy_and_loads_without_the_file(tmp_path):
    """A text run given `data.tokenizer=<file>` kept only the file's path: evaluate, viz and --resume of the run on
    another machine, or after the file moved, stopped with "no tokenizer file"."""
    import csv
    import json
    import random

    from tokenizers import Tokenizer, models, pre_tokenizers

    from attnzoo.evaluate import evaluate
    from attnzoo.viz import main as viz_main
    from tests.helpers.hf import tokenizer

    words = "red green blue cat dog fish one two three".split()
    tok = tokenizer("bert", words)  # [CLS] ... [SEP] around every text, and padding settings of its own
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.save(str(tmp_path / "mine.json"))
    # a padding token no alias names, told by the file's padding settings alone: the run's copy was refused as
    # "no padding token" when a command loaded the run
    other = Tokenizer(models.WordLevel({n: i for i, n in enumerate(["<blank>", "<oov>", *words])}, unk_token="<oov>"))
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    other.enable_padding(pad_id=0, pad_token="<blank>")
    other.save(str(tmp_path / "blank.json"))
    rng = random.Random(0)
    for name, n in (("train", 64), ("val", 16), ("test", 16)):
        with open(tmp_path / f"{name}.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["text", "label"])
            out.writerows([" ".join(rng.choice(words) for _ in range(5)), "ab"[i % 2]] for i in range(n))
    files = [f"data.{s}={tmp_path / f'{s}.csv'}" for s in ("train", "val", "test")]
    overrides = [*QUICK, "trainer.max_epochs=1", "model.depth=1", "run.baseline=false", f"run.dir={tmp_path / 'r'}",
                 f"data.tokenizer={tmp_path / 'mine.json'}", *files]  # fmt: skip
    run = fit(load([ROOT / "recipes" / "text_cls.yaml"], overrides))
    assert (run / "tokenizer.json").read_text() == (tmp_path / "mine.json").read_text()
    here = evaluate(run, "best", "test", [], [])["metrics"]
    (tmp_path / "mine.json").rename(tmp_path / "moved.json")
    assert evaluate(run, "best", "test", [], [])["metrics"] == here
    assert viz_main([str(run), "--text", "red cat dog", "--out", str(tmp_path / "viz")]) == 0
    for name in ("train", "val"):  # scored alone, as a run from elsewhere: classes and ids are the run's own
        (tmp_path / f"{name}.csv").rename(tmp_path / f"{name}.gone")
    assert evaluate(run, "best", "test", [], [f"data.test={tmp_path / 'test.csv'}"])["metrics"] == here
    with pytest.raises(ConfigError) as err:  # the file given is not there either: say what works without them
        evaluate(run, "best", "test", [], [f"data.test={tmp_path / 'nothing.csv'}"])
    # the run's own files named as such, not the one given (the error itself names it as missing)
    assert f"The run's data '{tmp_path / 'train.csv'}', '{tmp_path / 'val.csv'}' is not" in str(err.value)
    for part in ("`evaluate <run> data.test=<file>` scores", '`viz <run> --text "<text>"` draws'):
        assert part in str(err.value), err.value
    # a run made before runs kept a copy of their tokenizer file: scored alone once the file is named again
    (run / "tokenizer.json").rename(tmp_path / "copy.json")
    test = [f"data.test={tmp_path / 'test.csv'}"]
    with pytest.raises(ConfigError, match=r"cannot be scored with this run alone: it keeps no tokenizer.json"):
        evaluate(run, "best", "test", [], test)
    assert evaluate(run, "best", "test", [], [*test, f"data.tokenizer={tmp_path / 'moved.json'}"])["metrics"] == here
    (tmp_path / "copy.json").rename(run / "tokenizer.json")
    for name in ("train", "val"):
        (tmp_path / f"{name}.gone").rename(tmp_path / f"{name}.csv")
    fit(load([run / "config.yaml"], ["trainer.max_epochs=2"]), resume=run)
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2
    assert f"tokenizer: {tmp_path / 'mine.json'}" in (run / "config.yaml").read_text()  # still names the file given
    blank = [o.replace("mine.json", "blank.json").replace("/r", "/r2") for o in overrides]
    run = fit(load([ROOT / "recipes" / "text_cls.yaml"], blank))
    assert evaluate(run, "best", "test", [], [])["metrics"]
    assert viz_main([str(run), "--text", "red cat dog", "--out", str(tmp_path / "viz2")]) == 0


@pytest.mark.parametrize("recipe, split", [("lm.yaml", "val"), ("translation.yaml", "val"), ("mlm.yaml", "test")])
def test_a_held_out_split_is_not_scored_with_the_other_splits_file(recipe, split, tmp_path):
    # `evaluate --split val data.test=other` held val out where the run had held out its test: the run's test
    # documents were reported as its val/ppl (MLM, which holds val out first: --split test data.val=other)
    from attnzoo.evaluate import evaluate

    other = {"val": "test", "test": "val"}[split]
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    text = (ROOT / "recipes" / recipe).read_text().replace("  train: null", f"  train: {tmp_path / 'corpus.txt'}")
    (run / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"--split {split} with data.{other}: .* held its val and test splits out"):
        evaluate(run, "best", split, [], [f"data.{other}={tmp_path / 'other.txt'}"])
    (tmp_path / "overlay.yaml").write_text(f"data:\n  {other}: {tmp_path / 'other.txt'}\n")  # the same in a file
    with pytest.raises(ConfigError, match=rf"--split {split} with data.{other}: .* held its val and test splits out"):
        evaluate(run, "best", split, [str(tmp_path / "overlay.yaml")], [])
    for given in ([f"data.{split}={tmp_path / 'other.txt'}"],  # a file of one's own for the split scored
                  [f"data.{split}={tmp_path / 'a.txt'}", f"data.{other}={tmp_path / 'b.txt'}"]):  # fmt: skip
        with pytest.raises(ConfigError, match="no checkpoint"):  # the check passed
            evaluate(run, "best", split, [], given)
    with pytest.raises(ConfigError, match="no config.yaml"):  # a folder that is no run: load_run says so
        evaluate(tmp_path, "best", split, [], [f"data.{other}={tmp_path / 'other.txt'}"])


def test_a_missing_file_of_ones_own_is_not_called_the_runs_data(tmp_path):
    """`evaluate <run> data.test=<a file that is not there>` said "The run's data '<that file>' is not here (a run
    from elsewhere ...): `evaluate <run> data.test=<file>` scores a file of yours", what the user had just done."""
    from attnzoo.evaluate import evaluate
    from tests.helpers import TINY_TRAINER, smoke_overrides

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"sentence number {i} here\tSatz Nummer {i} hier\n" for i in range(120)))
    recipe = ROOT / "recipes" / "translation.yaml"
    small = [o for o in smoke_overrides(load([recipe])) if not o.startswith("data.num_")]  # embedded data's sizes
    overrides = [*small, *TINY_TRAINER, f"data.train={pairs}", f"run.dir={tmp_path}"]
    run = fit(load([recipe], overrides))
    with pytest.raises(ConfigError, match="no such parallel text file") as err:
        evaluate(run, "best", "test", [], [f"data.test={tmp_path / 'nope.tsv'}"])
    assert "The run's data" not in str(err.value)
    pairs.unlink()  # the run's own file gone too: that one is named as the run's
    with pytest.raises(ConfigError, match="no such parallel text file") as err:
        evaluate(run, "best", "test", [], [f"data.test={tmp_path / 'nope.tsv'}"])
    assert f"The run's data {str(pairs)!r} is not here" in str(err.value)


def test_a_run_trained_on_a_gpu_with_flash_attn_is_scored_on_a_machine_without_one(tmp_path, caplog, monkeypatch):
    """A run directory copied off its GPU machine: evaluate stopped with Lightning's 'No supported gpu backend found!'
    traceback, and flash-attn's 'runs on CUDA only' at the first batch."""
    import logging

    import torch
    import yaml

    from attnzoo.evaluate import evaluate
    from attnzoo.run import load_run

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run_dir = fit(load([VIT], [*TINY_RUN, "trainer.max_epochs=1", f"run.dir={tmp_path}"]))
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["trainer"]["accelerator"] = "gpu"
    config["model"]["attention"]["backend"] = "flash"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        results = evaluate(run_dir, "best", "test", [], [])
    assert 0.0 <= results["metrics"]["test/acc"] <= 1.0
    assert "trainer.accelerator 'gpu': this machine has no GPU: scored on the CPU" in caplog.text
    assert "model.attention.backend 'flash' runs on CUDA only, and this machine has none" in caplog.text
    assert {m.backend for m in load_run(run_dir).net.modules() if hasattr(m, "backend")} == {"auto"}


def test_evaluate_on_the_runs_own_folder_after_files_were_added_says_the_held_out_part_changed(tmp_path, caplog):
    """A folder without split folders: its val part is held out by hashing its file list, which a file added
    reshuffles; evaluate scored training images as val without a word (--resume already refuses it)."""
    import logging

    from PIL import Image

    from attnzoo.evaluate import evaluate

    for name in ("a", "b"):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (16, 16), (20 * i, 200 if name == "a" else 0, 0)).save(
                tmp_path / "imgs" / name / f"{i}.png"
            )
    folder = ["data.dataset=folder", f"data.root={tmp_path / 'imgs'}", "data.img_size=28"]
    run = fit(load([VIT], [*TINY_RUN, *folder, "trainer.max_epochs=1", "run.baseline=false",
                           f"run.dir={tmp_path / 'r'}"]))  # fmt: skip
    assert "data_changed" not in evaluate(run, "best", "val", [], [])
    Image.new("RGB", (16, 16), (1, 2, 3)).save(tmp_path / "imgs" / "a" / "new.png")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        report = evaluate(run, "best", "val", [], [])
    assert "the run's data changed since it was trained (data.root:" in caplog.text
    assert report["data_changed"][0].startswith(f"data.root: {tmp_path / 'imgs'}")
