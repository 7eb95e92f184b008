"""Where a new run goes: `run.name` names a directory inside `run.dir`, never a path that leaves it."""

import logging
from pathlib import Path

import pytest

from attnzoo.config import ConfigError, load
from attnzoo.run import fit, new_run_dir
from attnzoo.run.rundir import claim_new_run_dir

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "recipes" / "vit.yaml"


@pytest.mark.parametrize("name", ["../../x", "/tmp/attnzoo-elsewhere", "a/../../b", "."])
def test_a_run_name_that_leaves_run_dir_is_refused_before_anything_is_written(tmp_path, name):
    runs = tmp_path / "deep" / "runs"
    cfg = load([VIT], [f"run.dir={runs}", f"run.name={name}"])
    with pytest.raises(ConfigError, match=r"run.name: .* must name a directory inside run.dir .*set run.dir"):
        fit(cfg)
    assert not list(tmp_path.iterdir()) and not Path("/tmp/attnzoo-elsewhere").exists()


def test_a_nested_run_name_stays_inside_run_dir(tmp_path):
    cfg = load([VIT], [f"run.dir={tmp_path}", "run.name=study/vit-small"])
    assert new_run_dir(cfg).parent == tmp_path / "study" / "vit-small"


def test_a_run_from_elsewhere_does_not_choose_where_the_new_run_goes(tmp_path, caplog, monkeypatch):
    # fit --config <downloaded run>/config.yaml created the new run under the absolute run.dir of its maker's machine
    from attnzoo.util.files import RUN_CONFIG_HEADER

    def a_run(folder, runs):
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(RUN_CONFIG_HEADER + load([VIT], [f"run.dir={runs}"]).to_yaml())
        return folder / "config.yaml"

    monkeypatch.chdir(tmp_path)
    theirs = a_run(tmp_path / "downloads" / "run", tmp_path / "home" / "them" / "runs")
    with caplog.at_level("WARNING", logger="attnzoo"):
        assert new_run_dir(load([theirs])).parent == Path("runs") / "vit"
    assert f"run.dir: {tmp_path / 'home' / 'them' / 'runs'} (set in {theirs}" in caplog.text
    assert new_run_dir(load([theirs], [f"run.dir={tmp_path}"])).parent == tmp_path / "vit"  # chosen on the command line
    mine = a_run(tmp_path / "runs" / "vit" / "20261128-090000", tmp_path / "runs")  # a run of this run.dir
    assert new_run_dir(load([mine])).parent == tmp_path / "runs" / "vit"
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(f"run:\n  dir: {tmp_path / 'elsewhere'}\n")  # a recipe's or overlay's stays
    assert new_run_dir(load([VIT, overlay])).parent == tmp_path / "elsewhere" / "vit"
    assert not (tmp_path / "home").exists()


def test_runs_made_inside_the_image_folder_they_train_on_are_not_a_class(tmp_path, monkeypatch):
    # data.root=. with run.dir runs/ made there: the first run stopped with "class folder(s) runs ... hold no image"
    # (its own directory, holding only its lock, was read as a class), a later one trained a class runs/ on plots
    import json

    from PIL import Image

    for c, name in enumerate(("cat", "dog")):
        (tmp_path / name).mkdir()
        for i in range(6):
            Image.new("RGB", (32, 32), color=(120 * c, 10 * i, 200)).save(tmp_path / name / f"{i}.png")
    monkeypatch.chdir(tmp_path)
    overrides = ["data.dataset=folder", "data.root=.", "data.img_size=32", "model.patch_size=8", "model.embed_dim=16",
                 "model.depth=1", "model.num_heads=2", "trainer.max_epochs=1", "run.baseline=false"]  # fmt: skip
    for _ in range(2):
        run_dir = fit(load([VIT], overrides))
        assert json.loads((run_dir / "labels.json").read_text())["class_names"] == ["cat", "dog"]


def test_runs_started_in_the_same_second_claim_their_own_directories(tmp_path, monkeypatch):
    import datetime
    import types

    from attnzoo.run import rundir

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 26, 12, 0, 0)

    monkeypatch.setattr(rundir, "datetime", types.SimpleNamespace(datetime=Frozen))  # every call in one second
    cfg = load([VIT], [f"run.dir={tmp_path}"])
    (first, a), (second, b) = claim_new_run_dir(cfg), claim_new_run_dir(cfg)
    assert first.name == "20261126-120000" and second.name == "20261126-120000-1" and a and b
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())  # claimed: created, nothing in them
    assert new_run_dir(cfg) == first.parent / "20261126-120000-2"  # without claim: the next free name, not created
    assert not (first.parent / "20261126-120000-2").exists()


def test_a_dangling_link_for_run_dir_is_not_claimed_and_the_lock_names_it(tmp_path):
    (tmp_path / "runs").symlink_to(tmp_path / "purged-scratch")  # a link to storage that is gone
    cfg = load([VIT], [f"run.dir={tmp_path / 'runs'}"])
    path, claimed = claim_new_run_dir(cfg)  # returns at once (it once tried name after name)
    assert not claimed and path.parent == tmp_path / "runs" / "vit"
    with pytest.raises(ConfigError, match=r"run directory \(run.dir=.*runs\).*cannot be created"):
        fit(cfg)


def test_a_refused_run_leaves_the_directory_it_did_not_claim_alone(tmp_path, monkeypatch):
    """Another process creates the directory and takes its lock between this run's look and its own lock: this run
    is refused, and the other run's directory (with its files) stays."""
    from attnzoo.run.lock import RunLock

    theirs = tmp_path / "theirs"

    def taken(self):
        theirs.mkdir()
        (theirs / "config.yaml").write_text("the other run's\n")
        raise ConfigError(f"run directory {theirs} is in use by process 1")

    monkeypatch.setattr(RunLock, "acquire", taken)
    with pytest.raises(ConfigError, match="in use"):
        fit(load([VIT], []), run_dir=theirs)
    assert (theirs / "config.yaml").read_text() == "the other run's\n"


def test_an_empty_directory_named_by_the_environment_is_kept_when_the_run_stops_before_training(tmp_path, monkeypatch):
    from attnzoo.run.rundir import RUN_DIR_ENV

    given = tmp_path / "made-by-the-batch-script"
    given.mkdir()
    monkeypatch.setenv(RUN_DIR_ENV, str(given))
    with pytest.raises(ConfigError):
        fit(load([VIT], [f"model.init_from={tmp_path / 'nothing-here'}"]))
    assert given.is_dir()


def test_a_run_with_relative_data_paths_resumes_and_evaluates_from_another_directory(tmp_path, monkeypatch):
    """config.yaml holds the data paths as absolute ones; before, `data.train=train.csv` was written as typed and the
    run could not be resumed, evaluated or drawn from any other working directory."""
    import json
    import random

    from attnzoo.config import load
    from attnzoo.evaluate import evaluate
    from attnzoo.run import fit
    from tests.helpers import QUICK, ROOT

    words, rng = "red green blue cat dog fish one two three four".split(), random.Random(0)
    (tmp_path / "data").mkdir()
    for split, n in (("train", 48), ("val", 16), ("test", 16)):
        rows = [f"{' '.join(rng.choice(words) for _ in range(4))},{'ab'[i % 2]}\n" for i in range(n)]
        (tmp_path / "data" / f"{split}.csv").write_text("text,label\n" + "".join(rows))
    small = [*QUICK, "trainer.num_threads=1", "trainer.num_sanity_val_steps=0", "model.dim=16", "model.depth=1",
             "model.num_heads=2", "data.vocab_size=40", "data.batch_size=16", "run.baseline=false",
             "data.train=train.csv", "data.val=val.csv", "data.test=test.csv",
             f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    monkeypatch.chdir(tmp_path / "data")
    run_dir = fit(load([ROOT / "recipes" / "text_cls.yaml"], [*small, "trainer.max_epochs=1"]))
    assert load([run_dir / "config.yaml"]).section("data")["train"] == str(tmp_path / "data" / "train.csv")
    monkeypatch.chdir(tmp_path)
    fit(load([run_dir / "config.yaml"], ["trainer.max_epochs=2"]), resume=run_dir)
    assert json.loads((run_dir / "summary.json").read_text())["finished"]
    own = evaluate(run_dir, "best", "test", [], [])
    assert "test/acc" in own["metrics"] and own["path"] == str(run_dir / "evaluate-best.json")
    assert own["data"]["test"] == str(tmp_path / "data" / "test.csv")
    # other data keeps a report of its own, which says what it scored; the run's own report stays
    (tmp_path / "other.csv").write_text((tmp_path / "data" / "test.csv").read_text())
    other = evaluate(run_dir, "best", "test", [], ["data.test=other.csv"])
    assert other["path"] != own["path"] and Path(other["path"]).name.startswith("evaluate-best-")
    assert other["data"]["test"] == str(tmp_path / "other.csv") and other["overrides"] == ["data.test=other.csv"]
    assert json.loads((run_dir / "evaluate-best.json").read_text())["data"] == own["data"]
    again = evaluate(run_dir, "best", "test", [], [f"data.test={tmp_path / 'other.csv'}"])
    assert again["path"] == other["path"]  # the same data by another path: the same report, replaced
    longer = evaluate(run_dir, "best", "test", [], ["data.lowercase=false"])  # another reading of the same files
    val = evaluate(run_dir, "best", "val", [], [])
    assert len({own["path"], other["path"], longer["path"], val["path"]}) == 4
    assert Path(val["path"]).name == "evaluate-best-val.json"


def test_a_resume_of_a_run_whose_config_holds_relative_paths_takes_them_as_the_same_files(tmp_path, monkeypatch):
    from attnzoo.run.rundir import same_path

    monkeypatch.chdir(tmp_path)
    assert same_path("data.train", "a/train.csv", str(tmp_path / "a" / "train.csv"))
    assert same_path("data.train", ["x.txt"], [str(tmp_path / "x.txt")])
    assert not same_path("data.train", "a/train.csv", str(tmp_path / "b" / "train.csv"))
    assert not same_path("model.kind", "text", str(tmp_path / "text"))  # not a data path
    # model.init_from is recorded absolute now: a resume with the command that started an older run matches it
    assert same_path("model.init_from", "runs/a", str(tmp_path / "runs" / "a"))


def test_only_data_paths_that_exist_are_made_absolute(tmp_path, monkeypatch):
    from attnzoo.run.build import absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cat").mkdir()
    (tmp_path / "a.txt").write_text("x")
    got = absolute_paths({"train": ["a.txt"], "val": "missing.csv", "labels": ["cat", "dog"], "tokenizer": "bpe",
                          "root": "cat", "test": str(tmp_path / "a.txt")})  # fmt: skip
    assert got == {"data.train": [str(tmp_path / "a.txt")], "data.root": str(tmp_path / "cat")}  # class names stay


def test_a_missing_best_checkpoint_points_to_last_and_an_unknown_name_lists_the_valid_ones(tmp_path):
    # a run stopped before its first validation has last.ckpt only: evaluate and translate said "no checkpoint file"
    from attnzoo.run.rundir import run_checkpoint

    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"best\.ckpt': the run has no best checkpoint yet .*--checkpoint last"):
        run_checkpoint(tmp_path, "best")
    with pytest.raises(ConfigError, match=r"no checkpoint file at 'lats'; valid: best, last, or the path"):
        run_checkpoint(tmp_path, "lats")
    assert run_checkpoint(tmp_path, "last") == tmp_path / "checkpoints" / "last.ckpt"
    # a finished run copied without its best.ckpt: summary.json records one, so "not yet" would be wrong
    (tmp_path / "summary.json").write_text('{"best": {"path": "x/best.ckpt", "val/acc": 0.5}}')
    with pytest.raises(ConfigError, match=r"best\.ckpt': the run saved one .*not here .*--checkpoint last"):
        run_checkpoint(tmp_path, "best")


def test_a_path_inside_a_run_or_a_missing_one_is_named_for_what_it_is(tmp_path, monkeypatch, caplog):
    # generate <run>/checkpoints/best.ckpt, <run>/config.yaml or a misspelled folder all said "is not a run directory
    # (no config.yaml)"; --checkpoint last.ckpt was looked for in the current folder only; a run with no checkpoint
    # yet got a bare "no checkpoint file"
    from attnzoo.run.rundir import run_checkpoint

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ConfigError, match=r"best\.ckpt': the run has saved no checkpoint yet \(it is still training"):
        run_checkpoint(run, "best")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"'.*nowhere' is not a run directory \(it does not exist\)"):
        run_checkpoint(tmp_path / "nowhere", "best")
    with pytest.raises(
        ConfigError, match=rf"is not a run directory \(it is inside the run directory {run}: give {run}\)"
    ):
        run_checkpoint(run / "config.yaml", "best")
    ckpt = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=rf"inside the run directory {run}: give {run}, with --checkpoint {ckpt} to"):
        run_checkpoint(ckpt, "best")
    monkeypatch.chdir(tmp_path)
    assert run_checkpoint(run, "last.ckpt") == ckpt
    assert run_checkpoint(run, "checkpoints/last.ckpt") == ckpt
    with pytest.raises(ConfigError, match=r"no checkpoint file at 'first\.ckpt'"):
        run_checkpoint(run, "first.ckpt")
    with pytest.raises(ConfigError, match=r"no checkpoint file at 'config\.yaml'"):  # the run's files: .ckpt only
        run_checkpoint(run, "config.yaml")
    (tmp_path / "last.ckpt").write_bytes(b"")  # one here too: it is read, and the run's is named
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        assert run_checkpoint(run, "last.ckpt") == Path("last.ckpt")
    assert f"--checkpoint last.ckpt: the file of that name here is read, not the run's {ckpt}" in caplog.text
    # a project folder's own config.yaml above a folder is no run (no checkpoints/): the folder is not "inside" it
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "data").mkdir()
    with pytest.raises(ConfigError, match=r"is not a run directory \(no config\.yaml\)"):
        run_checkpoint(tmp_path / "data", "best")


def test_a_folder_of_runs_given_for_a_run_names_the_runs_it_holds(tmp_path, capsys):
    """`--resume runs/vit` (run.dir/run.name: the folder of its timestamped runs) said only "not a run directory"."""
    from attnzoo.baseline import main as baseline_main
    from attnzoo.run.rundir import resume_target, run_checkpoint

    for name in ("20250101-120000", "20250102-120000"):
        (tmp_path / "vit" / name).mkdir(parents=True)
        (tmp_path / "vit" / name / "config.yaml").write_text("seed: 0\n")
    folder = tmp_path / "vit"
    said = f"it holds runs: {folder / '20250102-120000'}, {folder / '20250101-120000'}: give one of them"
    with pytest.raises(ConfigError, match="is not a run directory") as err:
        resume_target(folder)
    assert said in str(err.value)
    with pytest.raises(ConfigError, match="is not a run directory") as err:
        run_checkpoint(folder, "best")  # evaluate, viz, translate, generate
    assert said in str(err.value)
    assert baseline_main(["--run-dir", str(folder)]) == 2
    assert said in capsys.readouterr().err
    with pytest.raises(ConfigError) as err:  # a folder whose folders are no runs: no list
        resume_target(tmp_path)
    assert "holds runs" not in str(err.value)


def test_a_resume_whose_data_moved_says_how_to_give_its_place_now(tmp_path):
    """`fit --resume <run>` after the train file moved said only "no such parallel text file"."""
    from tests.helpers import ROOT, TINY_TRAINER, smoke_overrides

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"sentence number {i} here\tSatz Nummer {i} hier\n" for i in range(120)))
    recipe = ROOT / "recipes" / "translation.yaml"
    small = [o for o in smoke_overrides(load([recipe])) if not o.startswith("data.num_")]  # embedded data's sizes
    run = fit(load([recipe], [*small, *TINY_TRAINER, f"data.train={pairs}", f"run.dir={tmp_path / 'runs'}"]))
    (tmp_path / "moved").mkdir()
    pairs.rename(tmp_path / "moved" / "pairs.tsv")
    with pytest.raises(ConfigError, match="no such parallel text file") as err:
        fit(load([run / "config.yaml"], ["trainer.max_epochs=3"]), resume=run)
    assert f"if it moved, `--resume {run} data.train=<where it is now>` goes on" in str(err.value)
    fit(load([run / "config.yaml"], ["trainer.max_epochs=3", f"data.train={tmp_path / 'moved' / 'pairs.tsv'}"]),
        resume=run)  # fmt: skip


def test_a_summary_too_deep_for_json_reads_as_none(tmp_path):
    # a stranger's run's summary.json nested deeper than json's recursion limit stopped a resume with a traceback
    from attnzoo.run.rundir import read_summary

    (tmp_path / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert read_summary(tmp_path) == {}
    (tmp_path / "summary.json").write_text('{"finished": true}')
    assert read_summary(tmp_path) == {"finished": True}
