"""Audio data: real WAV files (written by tests/helpers/audio.py), class folders, CSV, bad files, statistics, mixup,
synthesis."""

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torchaudio

from attnzoo.data import DATAMODULES
from attnzoo.data.embedded.synth_audio import class_names, synthesize
from attnzoo.data.formats.audio_io import AudioFileError, fit_length, load_clip, read_wav
from attnzoo.data.modules.audio import AudioDataModule, Mixup
from attnzoo.layers.audio_features import LogMel
from tests.helpers import runs_inside
from tests.helpers.audio import RATE, WRITERS, small, speech_commands, tone, write_float32, write_pcm16


@pytest.mark.parametrize("rate", [8000, 16000, 44100])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("fmt", list(WRITERS))
def test_wav_files_load_as_mono_at_the_configured_rate(tmp_path, rate, channels, fmt):
    data = tone(rate, 0.5, 300.0, channels)
    path = tmp_path / f"clip_{fmt}_{rate}_{channels}.wav"
    WRITERS[fmt](path, data, rate)
    raw, got_rate = read_wav(path)
    assert got_rate == rate and raw.shape == (channels, data.shape[0])
    torch.testing.assert_close(raw, torch.from_numpy(data.T).float(), atol=1 / 16384, rtol=0)
    clip = load_clip(path, sample_rate=16000)
    expected = torchaudio.functional.resample(torch.from_numpy(data.mean(1)).float(), rate, 16000)
    assert clip.shape == (8000,)
    torch.testing.assert_close(clip, expected, atol=2e-4, rtol=0)


def test_fit_length_pads_and_crops():
    x = torch.arange(10.0)
    assert fit_length(x, 13).tolist() == list(range(10)) + [0, 0, 0]
    assert fit_length(x, 4, "start").tolist() == [0, 1, 2, 3]
    assert fit_length(x, 4, "center").tolist() == [3, 4, 5, 6]
    starts = {int(fit_length(x, 4, "random")[0]) for _ in range(200)}
    assert starts == set(range(7))
    with pytest.raises(ValueError, match="'middle' is not one of"):
        fit_length(x, 4, "middle")


@pytest.mark.parametrize("cache", [True, False])
def test_folder_layout_honours_speech_commands_lists(tmp_path, cache):
    speech_commands(tmp_path)
    dm = small(source="folder", root=str(tmp_path), cache=cache)
    dm.setup("fit")
    assert dm.class_names == ["down", "go", "yes"] and dm.num_classes == 3
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 12, "val": 3, "test": 3}
    assert sorted(dm.datasets["val"].targets) == [0, 1, 2]
    batch = next(iter(dm.train_dataloader()))
    assert batch["audio"].shape == (4, 4000) and batch["audio"].dtype == torch.float32
    assert batch["label"].dtype == torch.long
    ctx = dm.model_inputs()
    assert ctx["num_classes"] == 3 and ctx["n_mels"] == 32 and ctx["target_frames"] == 48
    assert ctx["sample_rate"] == RATE and ctx["feature_std"] > 0


def test_folder_without_lists_splits_by_speaker_hash(tmp_path):
    speech_commands(tmp_path)
    for name in ("validation_list.txt", "testing_list.txt"):
        (tmp_path / name).unlink()
    dm = small(source="folder", root=str(tmp_path), val_fraction=0.3, test_fraction=0.3)
    dm.setup()
    speaker_split = {}
    for split, ds in dm.datasets.items():
        for path in ds.paths:
            speaker_split.setdefault(path.name.split("_nohash_")[0], set()).add(split)
    assert len(speaker_split) == 6 and all(len(s) == 1 for s in speaker_split.values())  # a speaker stays in one split
    assert sum(len(ds) for ds in dm.datasets.values()) == 18
    assert len({next(iter(s)) for s in speaker_split.values()}) >= 2
    again = small(source="folder", root=str(tmp_path), val_fraction=0.3, test_fraction=0.3)
    again.setup()
    assert {k: ds.paths for k, ds in again.datasets.items()} == {k: ds.paths for k, ds in dm.datasets.items()}
    everything = small(source="folder", root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    everything.setup()
    assert len(everything.datasets["train"]) == 18


def esc50(root: Path, multilabel: bool = False) -> Path:
    (root / "audio").mkdir(parents=True)
    rows = ["filename,fold,category"]
    cats = ["dog;rain", "rain", "dog"] if multilabel else ["dog", "rain", "crow"]
    for i in range(12):
        write_pcm16(root / "audio" / f"{i}.wav", tone(16000, 0.5, 150.0 * (1 + i % 3), 1), 16000)
        cat = cats[i % 3]
        rows.append(f"{i}.wav,{1 + i % 4},{cat if not multilabel else chr(34) + cat + chr(34)}")
    (root / "meta.csv").write_text("\n".join(rows) + "\n")
    return root / "meta.csv"


def test_csv_with_folds_like_esc50(tmp_path):
    meta = esc50(tmp_path)
    dm = small(
        source="csv",
        csv=str(meta),
        root=str(tmp_path / "audio"),
        val_folds=[3],
        test_folds=4,
        columns={"path": "filename", "label": "category"},
    )
    dm.setup()
    assert dm.class_names == ["crow", "dog", "rain"]
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 6, "val": 3, "test": 3}


def test_csv_multilabel_targets_are_multi_hot(tmp_path):
    meta = esc50(tmp_path, multilabel=True)
    dm = small(
        source="csv",
        csv=str(meta),
        root=str(tmp_path / "audio"),
        multilabel=True,
        val_folds=[3],
        test_folds=[4],
        columns={"path": "filename", "label": "category"},
    )
    dm.setup()
    assert dm.class_names == ["dog", "rain"]
    batch = next(iter(dm.val_dataloader()))
    assert batch["label"].shape == (3, 2) and batch["label"].dtype == torch.float32
    assert batch["label"].sum().item() == 4  # "dog;rain", "rain", "dog"


def test_a_clip_the_csv_lists_twice_is_named(tmp_path, caplog):
    # a row repeated in the test fold, or with another label, went on without a word (a test clip trained on)
    meta = esc50(tmp_path)
    columns = {"path": "filename", "label": "category"}
    kw = dict(source="csv", csv=str(meta), root=str(tmp_path / "audio"), val_folds=[3], test_folds=[4], columns=columns)
    rows = meta.read_text().splitlines()  # 0.wav: fold 1 (train), dog
    meta.write_text("\n".join([*rows, "0.wav,4,dog", "1.wav,2,rain"]) + "\n")  # 1.wav is in fold 2 already
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        small(**kw).setup()
    assert "1 clip(s) are listed in two splits, 0.wav (lines 2 and 14, train and test)" in caplog.text, caplog.text
    assert "1 clip(s) are listed twice in one split, 1.wav (lines 3 and 15, train and train)" in caplog.text
    meta.write_text("\n".join([*rows, "0.wav,1,rain"]) + "\n")
    with pytest.raises(ValueError, match=r"meta\.csv:14: .*0\.wav is on line 2 too, labelled \['dog'\] there and "
                                         r"\['rain'\] here: list each clip once, with several labels joined by ';' "
                                         r"and data\.multilabel=true"):  # fmt: skip
        small(**kw).setup()


def test_labels_holding_the_label_separator_are_warned_without_multilabel(tmp_path, caplog):
    meta = esc50(tmp_path, multilabel=True)  # "dog;rain" rows
    columns = {"path": "filename", "label": "category"}
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        small(source="csv", csv=str(meta), root=str(tmp_path / "audio"), val_folds=[3], columns=columns).setup()
    assert "1 label(s) hold data.label_sep ';' ('dog;rain'): each is read as one class" in caplog.text, caplog.text


def test_the_clips_own_sample_rates_are_logged_and_a_rate_that_tells_classes_apart_is_warned(tmp_path, caplog):
    # 8 kHz clips resampled up to 16 kHz left the upper mel bins empty, and classes recorded at other rates were
    # told apart by the rate alone (a baseline scored 1.0 on white noise), without a word
    low = tmp_path / "low"
    speech_commands(low, rates=(8000,))
    make = DATAMODULES["audio"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        make(source="folder", root=str(low), sample_rate=16000, n_mels=32, clip_seconds=0.5, batch_size=4).setup()
    assert "the training clips' own sample rates: 8000 Hz (12); resampled to data.sample_rate 16000 Hz" in caplog.text
    assert "every training clip was recorded at 8000 Hz or less, and is resampled up to 16000 Hz" in caplog.text
    assert "set data.sample_rate=8000" in caplog.text and "mostly recorded at other sample rates" not in caplog.text
    caplog.clear()
    mixed = tmp_path / "mixed"
    speech_commands(mixed, rates=(16000,))
    for path in (mixed / "down").glob("*.wav"):
        write_pcm16(path, tone(8000, 0.5, 200.0, 1), 8000)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        make(source="folder", root=str(mixed), sample_rate=16000, n_mels=32, clip_seconds=0.5, batch_size=4).setup()
    assert (
        "classes' training clips were mostly recorded at other sample rates (down: 8000 Hz; go: 16000 Hz; yes: "
        "16000 Hz): a model can tell the classes apart by how they were recorded" in caplog.text
    ), caplog.text
    assert "every training clip was recorded" not in caplog.text


def test_a_data_root_one_level_above_the_class_folders_names_the_folder_to_give(tmp_path):
    # every clip of audio/<class>/ became the one class "audio", and the run failed after reading them all with
    # "num_classes (1) must be >= 2"
    speech_commands(tmp_path / "audio")
    with pytest.raises(ValueError, match=r"data\.root: .* has one class folder, audio, which holds folders itself "
                                         r"\(down; go; yes\): .*did you mean data\.root=.*audio\?"):  # fmt: skip
        small(source="folder", root=str(tmp_path)).setup()
    for other in ("go", "yes"):  # clips of one class
        shutil.rmtree(tmp_path / "audio" / other)
    with pytest.raises(ValueError, match=r"audio has one class folder, down: classification needs two or more"):
        small(source="folder", root=str(tmp_path / "audio")).setup()


def test_a_run_s_classes_read_clips_at_any_depth_of_a_class_folder(tmp_path):
    # evaluate gives the run's classes: one class folder of session folders is clips to score, not a root given one
    # level too high
    for session in ("a", "b"):
        (tmp_path / "dog" / session).mkdir(parents=True)
        write_pcm16(tmp_path / "dog" / session / "0.wav", tone(RATE, 0.5, 200.0, 1), RATE)
    dm = small(source="folder", root=str(tmp_path), labels=["cat", "dog"])
    dm.setup()
    assert sum(len(ds) for ds in dm.datasets.values()) == 2


def test_runs_made_inside_the_data_folder_are_not_a_class(tmp_path):

    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(4):
            write_pcm16(tmp_path / name / f"s{i}_nohash_0.wav", tone(RATE, 0.5, 200.0 * (c + 1), 1), RATE)
    runs_inside(tmp_path)
    dm = small(source="folder", root=str(tmp_path))
    dm.setup()
    assert dm.class_names == ["cat", "dog"]


def test_a_class_without_training_clips_is_an_error_naming_it(tmp_path, caplog):
    # a label only in the val fold (a typo) and a class folder of .flac files only became classes no clip trains
    meta = esc50(tmp_path)
    meta.write_text(meta.read_text().replace("2.wav,3,crow", "2.wav,3,crwo"))
    columns = {"path": "filename", "label": "category"}
    kw = dict(source="csv", csv=str(meta), root=str(tmp_path / "audio"), val_folds=[3], columns=columns)
    with pytest.raises(ValueError, match=r"class\(es\) crwo have no training clip \(only val clips\)"):
        small(**kw).setup()
    root = tmp_path / "folder"
    speech_commands(root)
    (root / "owl").mkdir()
    (root / "owl" / "hoot.flac").write_bytes(b"fLaC")
    with caplog.at_level(logging.WARNING, logger="attnzoo"), pytest.raises(ValueError, match=r"owl have no training"):
        small(source="folder", root=str(root)).setup()
    assert "1 file(s) in the class folders are not .wav" in caplog.text and "hoot.flac" in caplog.text


def test_an_empty_val_split_is_said_at_setup_and_a_fold_the_csv_lacks_is_refused(tmp_path, caplog):
    meta = esc50(tmp_path)
    columns = {"path": "filename", "label": "category"}
    for i in (2, 6, 10):  # fold 3's clips, all unreadable and skipped
        (tmp_path / "audio" / f"{i}.wav").write_bytes(b"not a wave file")
    kw = dict(source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns, on_bad_file="skip")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        small(**kw, val_folds=[3]).setup()
    assert "the val split has no clip" in caplog.text
    # a fold no row has: every clip trained, no validation, and the error said to set data.val_folds, which was set
    with pytest.raises(ValueError, match=r"data.val_folds \[9\] names no fold of .*meta.csv \(column 'fold'\); its "
                       r"folds: \[1, 2, 3, 4\]"):  # fmt: skip
        small(**kw, val_folds=[9]).setup()
    with pytest.raises(ValueError, match=r"data.test_folds \[7\] names no fold"):
        small(**kw, val_folds=[3], test_folds=[7]).setup()
    # evaluate scores a CSV of its own with the run's folds, classes and statistics: one of fold 4 alone scores
    (tmp_path / "fold4.csv").write_text("".join(line + "\n" for line in meta.read_text().splitlines() if
                                                 line.startswith("filename") or ",4," in line))  # fmt: skip
    stats = small(**kw, val_folds=[3]).compute_stats()
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    kw |= dict(csv=str(tmp_path / "fold4.csv"), labels=["crow", "dog", "rain"], stats_file=str(tmp_path / "stats.json"))
    scored = small(**kw, val_folds=[3], test_folds=[4])
    scored.setup()
    assert {k: len(ds) for k, ds in scored.datasets.items()} == {"train": 0, "val": 0, "test": 3}


def test_csv_errors_name_the_file_and_column(tmp_path):
    meta = esc50(tmp_path)
    with pytest.raises(ValueError, match=r"meta.csv: no column 'path' for data.columns.path; columns are"):
        small(source="csv", csv=str(meta)).setup()
    (tmp_path / "bad.csv").write_text("path,label,fold\naudio/0.wav,dog,one\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: fold 'one' is not an integer"):
        small(source="csv", csv=str(tmp_path / "bad.csv"), val_folds=1).setup()


@pytest.mark.parametrize("cache", [True, False])
def test_bad_files_raise_naming_the_file_or_are_skipped_and_counted(tmp_path, cache, caplog):
    speech_commands(tmp_path)
    (tmp_path / "go" / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    whole = (tmp_path / "yes" / "spk1_nohash_0.wav").read_bytes()  # 16-bit PCM, the 44-byte header of `wave`
    (tmp_path / "yes" / "truncated.wav").write_bytes(whole[:60])
    (tmp_path / "yes" / "no_channels.wav").write_bytes(whole[:22] + b"\x00\x00" + whole[24:])  # scipy divided by 0
    write_float32(tmp_path / "down" / "nan.wav", np.array([[0.1], [np.nan]]), RATE)  # only decoding finds it
    bad = ["broken.wav", "nan.wav", "no_channels.wav", "truncated.wav"]
    with pytest.raises(AudioFileError, match=r"4 unreadable audio file\(s\): .*broken\.wav: cannot read as WAV") as err:
        small(source="folder", root=str(tmp_path), cache=cache).setup()
    assert all(name in str(err.value) for name in bad) and "data.on_bad_file=skip" in str(err.value)  # all at once
    dm = small(source="folder", root=str(tmp_path), cache=cache, on_bad_file="skip")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm.setup()
    assert sorted(Path(p).name for p, _ in dm.skipped) == bad
    assert "skipped 4 unreadable audio files" in caplog.text and "broken.wav" in caplog.text
    assert len(dm.datasets["train"]) == 12
    for batch in dm.train_dataloader():  # every remaining clip decodes in the loader
        assert torch.isfinite(batch["audio"]).all()
    saved = json.loads(dm.save_artifacts(tmp_path / "run").read_text())
    assert len(saved["skipped"]) == 4


def test_stats_match_the_train_features_and_are_saved_and_reused(tmp_path):
    speech_commands(tmp_path / "data")
    tmp_path, out = tmp_path / "data", tmp_path  # the run's files beside the data, not in it (a folder of no clips)
    dm = small(source="folder", root=str(tmp_path), train_crop="start")
    stats = dm.compute_stats()
    waves = torch.stack([dm.datasets["train"][i]["audio"] for i in range(len(dm.datasets["train"]))])
    feats = LogMel(sample_rate=RATE, n_mels=32)(waves)
    assert stats["mean"] == pytest.approx(feats.mean().item(), rel=1e-4)
    assert stats["std"] == pytest.approx(feats.std(unbiased=False).item(), rel=1e-3)
    path = dm.save_artifacts(out / "run")
    reused = small(source="folder", root=str(tmp_path), stats_file=str(path))
    assert reused.model_inputs()["feature_mean"] == pytest.approx(stats["mean"])
    other = DATAMODULES["audio"](source="folder", root=str(tmp_path), sample_rate=RATE, n_mels=40, stats_file=str(path))
    with pytest.raises(ValueError, match="was computed for features"):
        other.compute_stats()
    # a stranger's run's audio_stats.json: the wrong types, or nesting deep enough to stop json, are named errors
    saved = json.loads(path.read_text())
    (out / "bad.json").write_text(json.dumps({**saved, "std": [1]}))
    with pytest.raises(ValueError, match=r"bad\.json holds no statistics attnzoo wrote .*'std'"):
        small(source="folder", root=str(tmp_path), stats_file=str(out / "bad.json")).compute_stats()
    (out / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"deep\.json cannot be read as JSON \(RecursionError"):
        small(source="folder", root=str(tmp_path), stats_file=str(out / "deep.json")).compute_stats()


@pytest.mark.parametrize("multilabel", [False, True])
def test_mixup_mixes_audio_and_labels_alike(multilabel):
    torch.manual_seed(1)
    items = [
        {
            "audio": torch.full((5,), float(i)),
            "label": torch.tensor(i) if not multilabel else torch.nn.functional.one_hot(torch.tensor(i), 4).float(),
        }
        for i in range(4)
    ]
    batch = Mixup(alpha=0.4, num_classes=4, multilabel=multilabel)(items)
    lam = batch["audio"][0, 0].item() / 3 if batch["audio"][0, 0] else 0.0  # item 0 mixes with item 3
    assert 0 <= lam <= 1
    torch.testing.assert_close(batch["label"].sum(1), torch.ones(4))
    torch.testing.assert_close(batch["label"][0], torch.tensor([1 - lam, 0, 0, lam]))
    torch.testing.assert_close(batch["audio"][1], torch.full((5,), lam * 2 + (1 - lam) * 1))


def test_synthetic_default_is_deterministic_balanced_and_split():
    a, la = synthesize(split="train", per_class=2, sample_rate=RATE, vowels="aiu", seed=3)
    b, lb = synthesize(split="train", per_class=2, sample_rate=RATE, vowels="aiu", seed=3)
    c, _ = synthesize(split="train", per_class=2, sample_rate=RATE, vowels="aiu", seed=4)
    v, _ = synthesize(split="val", per_class=2, sample_rate=RATE, vowels="aiu", seed=3)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.allclose(a, c) and not torch.allclose(a, v)
    assert a.shape == (12, RATE) and torch.bincount(la).tolist() == [2] * 6
    assert torch.isfinite(a).all() and a.abs().max() <= 1 and (a.std(1) > 1e-3).all()
    assert class_names("aiu") == ["a-i", "a-u", "i-a", "i-u", "u-a", "u-i"]


def test_synthetic_classes_differ_in_order_not_only_content():
    """'a-i' and 'i-a' hold the same vowels: their time-averaged spectra agree far more than their halves do."""
    waves, labels = synthesize(split="train", per_class=40, sample_rate=RATE, vowels="ai", snr_db=(30, 30))
    feats = LogMel(sample_rate=RATE, n_mels=32)(waves)  # [N, F, frames]
    mean = {c: feats[labels == c] for c in (0, 1)}
    whole = (mean[0].mean((0, 2)) - mean[1].mean((0, 2))).abs().mean()
    first_half = (mean[0][..., :30].mean((0, 2)) - mean[1][..., :30].mean((0, 2))).abs().mean()
    assert first_half > 3 * whole


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="data.root: source 'folder' needs root"):
        AudioDataModule(source="folder")
    with pytest.raises(ValueError, match=r"data.source: 'wav' is not one of"):
        AudioDataModule(source="wav")
    with pytest.raises(ValueError, match=r"data.synthetic: unknown option\(s\) \['vowel'\]"):
        AudioDataModule(synthetic={"vowel": "ai"})
    with pytest.raises(ValueError, match="data.root: .* is not a directory"):
        AudioDataModule(source="folder", root="/nonexistent/dir").setup()
    # own files without data.source: the synthetic clips would train, the files unread
    with pytest.raises(ValueError, match=r"data.root 'clips' is not read by data.source 'synthetic'.*source=folder"):
        AudioDataModule(root="clips")
    with pytest.raises(ValueError, match=r"data.csv 'meta.csv' is not read by .*add data.source=csv"):
        AudioDataModule(csv="meta.csv")


QUICK_FIT = [
    "trainer.max_steps=2",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "model.embed_dim=32",
    "model.depth=1",
    "model.num_heads=2",
    "data.n_mels=32",
    "data.batch_size=4",
]


@pytest.mark.parametrize("setting", ["folder", "csv_multilabel_mixup"])
def test_written_wav_files_train_through_the_recipe(tmp_path, setting):
    from attnzoo.config import load
    from attnzoo.run import fit

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "ast.yaml"
    if setting == "folder":
        speech_commands(tmp_path / "clips")  # 8, 16 and 44.1 kHz; mono and stereo; 16-bit and float
        extra = ["data.source=folder", f"data.root={tmp_path / 'clips'}"]
    else:
        meta = esc50(tmp_path / "esc", multilabel=True)
        extra = ["data.source=csv", f"data.csv={meta}", f"data.root={tmp_path / 'esc' / 'audio'}",
                 "data.multilabel=true", "data.mixup_alpha=0.4", "data.val_folds=[3]", "data.test_folds=[4]",
                 "data.columns={path: filename, label: category}", "task.objective=multilabel"]  # fmt: skip
    cfg = load([recipe], [*QUICK_FIT, *extra, "data.clip_seconds=0.5", f"run.dir={tmp_path / 'runs'}"])
    run_dir = fit(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2
    monitor = "val/map" if setting != "folder" else "val/acc"
    assert monitor in summary["metrics"]
    stats = json.loads((run_dir / "audio_stats.json").read_text())
    assert stats["features"]["sample_rate"] == 16000 and stats["std"] > 0  # files: 16 kHz, chosen from the data
    assert stats["mean"] == pytest.approx(load([run_dir / "config.yaml"]).section("model")["feature_mean"])


def test_a_run_given_a_relative_csv_is_evaluated_from_another_directory(tmp_path, monkeypatch):
    # config.yaml kept data.csv as typed (data.root was made absolute): evaluate, viz and --resume from any other
    # directory stopped with "data.csv: esc/meta.csv is not a file"
    from attnzoo.config import load
    from attnzoo.evaluate import evaluate
    from attnzoo.run import fit

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "ast.yaml"
    esc50(tmp_path / "esc")
    monkeypatch.chdir(tmp_path)
    extra = ["data.source=csv", "data.csv=esc/meta.csv", "data.root=esc/audio", "data.val_folds=[3]",
             "data.test_folds=[4]", "data.columns={path: filename, label: category}",
             "data.clip_seconds=0.5"]  # fmt: skip
    run_dir = fit(load([recipe], [*QUICK_FIT, *extra, f"run.dir={tmp_path / 'runs'}"]))
    assert load([run_dir / "config.yaml"]).section("data")["csv"] == str(tmp_path / "esc" / "meta.csv")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    report = evaluate(run_dir, "last", "test", [], [])
    assert report["split_examples"] == 3 and "test/acc" in report["metrics"]
    assert report["data"]["csv"] == str(tmp_path / "esc" / "meta.csv")  # what was scored, named in the report


def test_time_shift_moves_training_clips_and_fills_with_silence():
    from attnzoo.data.modules.audio import ClipDataset

    wave = torch.arange(1.0, 101.0)
    data = ClipDataset(targets=[0], num_samples=100, sample_rate=1000, crop="start", waves=[wave], shift=20)
    seen = set()
    for _ in range(50):
        out = data[0]["audio"]
        nonzero = out.nonzero().flatten()
        n = int(nonzero[0]) if out[0] == 0 else int(wave[0] - out[0])  # > 0: shifted right; < 0: left
        assert -20 <= n <= 20 and out.shape == (100,)
        assert torch.equal(out[nonzero], wave[nonzero - n]) and int((out == 0).sum()) == abs(n)
        seen.add(n)
    assert len(seen) > 5 and torch.equal(wave, torch.arange(1.0, 101.0))  # the cached clip is unchanged
    unshifted = ClipDataset(targets=[0], num_samples=100, sample_rate=1000, crop="start", waves=[wave])
    assert torch.equal(unshifted[0]["audio"], wave)


def test_hidden_files_are_not_clips_and_unmatched_list_lines_are_named(tmp_path, caplog):
    # macOS's ._clip.wav copies of a file's metadata stopped the run as unreadable clips; list lines matching no
    # clip (./go/x.wav, backslashes) left the val split empty with no word about them
    speech_commands(tmp_path)
    (tmp_path / "go" / "._spk0_nohash_0.wav").write_bytes(b"\x00\x05\x16\x07 metadata")
    (tmp_path / "go" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "go" / ".ipynb_checkpoints" / "x.wav").write_bytes(b"not a wav")
    with open(tmp_path / "validation_list.txt", "a") as f:  # bed: not copied
        f.write("go/spk9_nohash_0.wav\nyes/spk1_nohash_0.WAV\nbed/spk1_nohash_0.wav\n")
    dm = small(source="folder", root=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm.setup()
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 12, "val": 3, "test": 3} and not dm.skipped
    assert "2 of 6 line(s) of" in caplog.text and "go/spk9_nohash_0.wav" in caplog.text
    assert "a clip no list names is trained on" in caplog.text and "bed/" not in caplog.text
    assert "not .wav" not in caplog.text  # the hidden files are not named as files of another format


def test_list_lines_written_by_find_or_on_windows_name_their_clips(tmp_path, caplog):
    # `find . -name '*.wav' > testing_list.txt` writes ./go/x.wav, Windows go\\x.wav: neither matched a clip, so the
    # clips meant to be held out were trained on (the warning said they were "in no split")
    speech_commands(tmp_path)
    with open(tmp_path / "validation_list.txt", "a") as f:
        f.write("./go/spk1_nohash_0.wav\nyes\\spk1_nohash_0.wav\n")
    dm = small(source="folder", root=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm.setup()
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 10, "val": 5, "test": 3}
    val = {Path(p).relative_to(tmp_path).as_posix() for p in dm.datasets["val"].paths}
    assert {"go/spk1_nohash_0.wav", "yes/spk1_nohash_0.wav"} <= val and "line(s) of" not in caplog.text


def test_train_val_test_folders_of_class_folders_are_splits_as_for_images(tmp_path, caplog):
    # root/train/<class>/*.wav trained a model of the classes "test", "train" and "val", re-split by hash
    for split, per_class in (("Train", 6), ("val", 2), ("test", 2)):
        for c, name in enumerate(["down", "go"]):
            (tmp_path / "d" / split / name).mkdir(parents=True)
            for i in range(per_class):
                write_pcm16(tmp_path / "d" / split / name / f"{i}.wav", tone(RATE, 0.3, 200.0 * (c + 1), 1), RATE)
    dm = small(source="folder", root=str(tmp_path / "d"))
    dm.setup()
    assert dm.class_names == ["down", "go"]
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 12, "val": 4, "test": 4}
    assert all("/test/" in Path(p).as_posix() for p in dm.datasets["test"].paths)
    # without val/, the val split is drawn from train/ (by file-name hash, as for class folders alone)
    (tmp_path / "d" / "val").rename(tmp_path / "held")
    dm = small(source="folder", root=str(tmp_path / "d"), val_fraction=0.3)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        dm.setup()
    sizes = {k: len(ds) for k, ds in dm.datasets.items()}
    assert sizes["test"] == 4 and sizes["val"] > 0 and sizes["train"] + sizes["val"] == 12
    assert "val split drawn from train/" in caplog.text
    # a class only in val/ is named; split folders without train/ are an error (evaluate scores a test/ alone)
    (tmp_path / "d" / "test" / "yes").mkdir()
    write_pcm16(tmp_path / "d" / "test" / "yes" / "0.wav", tone(RATE, 0.3, 900.0, 1), RATE)
    with pytest.raises(ValueError, match=r"class\(es\) yes have no training clip \(only test clips\)"):
        small(source="folder", root=str(tmp_path / "d")).setup()
    (tmp_path / "d" / "Train").rename(tmp_path / "trained")
    with pytest.raises(ValueError, match=r"holds split folders \(test/ \(test\)\) but no train split"):
        small(source="folder", root=str(tmp_path / "d")).setup()
    (tmp_path / "d" / "test" / "yes" / "0.wav").unlink()
    (tmp_path / "d" / "test" / "yes").rmdir()
    scored = small(source="folder", root=str(tmp_path / "d"), labels=["down", "go"], stats_file="stats.json")
    scored.setup()  # the run's classes and statistics, as evaluate passes them
    assert {k: len(ds) for k, ds in scored.datasets.items()} == {"train": 0, "val": 0, "test": 4}
    # train/ of one class folder: refused for training, as class folders alone are
    (tmp_path / "trained").rename(tmp_path / "d" / "train")
    shutil.rmtree(tmp_path / "d" / "train" / "go")
    with pytest.raises(ValueError, match=r"train has one class folder, down: classification needs two or more"):
        small(source="folder", root=str(tmp_path / "d")).setup()


def test_clip_lengths_are_logged_and_clips_mostly_longer_than_clip_seconds_are_warned_about(tmp_path, caplog):
    # 4 s clips with the sound in their last second trained on their 1 s centre, with no word about the crop
    for name, hz in (("low", 200.0), ("high", 900.0)):
        (tmp_path / name).mkdir()
        for i in range(4):
            write_pcm16(tmp_path / name / f"{i}.wav", tone(RATE, 2.0, hz, 1), RATE)
    caplog.set_level(logging.INFO, logger="attnzoo")
    small(source="folder", root=str(tmp_path)).setup()  # clip_seconds 0.5
    assert "data: clips of 2.00 s (median; 2.00 s longest); data.clip_seconds 0.5: 100% of them cropped" in caplog.text
    assert "most clips are longer than data.clip_seconds (0.5 s; median 2.00 s)" in caplog.text
    assert "set data.clip_seconds=2 to hear" in caplog.text
    caplog.clear()
    DATAMODULES["audio"](sample_rate=RATE, n_mels=32, clip_seconds=2.0, source="folder", root=str(tmp_path)).setup()
    assert "clip_seconds 2: 0% of them cropped" in caplog.text and "most clips are longer" not in caplog.text


def test_a_csv_row_with_too_few_or_too_many_fields_is_named(tmp_path):
    # a short row stopped setup with AttributeError: 'NoneType' object has no attribute 'strip'
    for body, fields in (("a.wav,x,1\nb.wav\n", "1 field"), ("a.wav,x,1\nb.wav,x\n", "2 field"),
                         ("a.wav,x,1\nb.wav,x,1,2\n", "4 field")):  # fmt: skip
        (tmp_path / "r.csv").write_text("path,label,fold\n" + body)
        with pytest.raises(ValueError, match=rf"r\.csv:3: {fields}\(s\) where the header has 3 \(path, label, fold\)"):
            small(source="csv", csv=str(tmp_path / "r.csv"), val_folds=[1]).setup()
    # the columns named by data.columns (ESC-50's filename, category), and a header with a column no row fills
    (tmp_path / "esc.csv").write_text("filename,fold,category,extra\na.wav,1,dog,x\n\nb.wav\n")
    columns = {"path": "filename", "label": "category"}
    with pytest.raises(ValueError, match=r"esc\.csv:4: 1 field\(s\) where the header has 4"):
        small(source="csv", csv=str(tmp_path / "esc.csv"), columns=columns).setup()


def test_skipping_every_clip_of_a_class_is_an_error_naming_it(tmp_path):
    speech_commands(tmp_path)
    (tmp_path / "owl").mkdir()
    for i in range(3):
        (tmp_path / "owl" / f"{i}.wav").write_bytes(b"not a wav")
    with pytest.raises(ValueError, match=r"class\(es\) owl have no training clip left"):
        small(source="folder", root=str(tmp_path), on_bad_file="skip").setup()


def test_another_folder_is_matched_to_the_runs_classes_by_name(tmp_path):
    # evaluate on a folder whose high/ was renamed zzz/ scored zzz as the model's high (same sorted position), and a
    # folder with two of the three classes was refused as "num_classes 3 contradicts the data, which gives 2"
    speech_commands(tmp_path / "run_data")
    trained = small(source="folder", root=str(tmp_path / "run_data"))
    trained.setup()
    trained.save_artifacts(tmp_path / "run")
    saved = tmp_path / "run" / "labels.json"
    assert json.loads(saved.read_text())["class_names"] == ["down", "go", "yes"]
    other = tmp_path / "other"
    speech_commands(other)
    import shutil

    shutil.rmtree(other / "down")
    dm = small(source="folder", root=str(other), labels=str(saved))
    dm.setup()
    assert dm.class_names == ["down", "go", "yes"] and dm.num_classes == 3
    targets = sorted(t for ds in dm.datasets.values() for t in ds.targets)
    assert targets == [1] * 6 + [2] * 6  # go and yes keep the model's numbers
    (other / "yes").rename(other / "zzz")
    with pytest.raises(ValueError, match=r"class\(es\) that the run's model was not trained on: zzz"):
        small(source="folder", root=str(other), labels=str(saved)).setup()


def _held_out(root: Path) -> Path:
    """A folder of go/ and yes/ clips whose testing_list.txt names every one: a test set, no train clip."""
    for name, freq in (("go", 400.0), ("yes", 600.0)):
        (root / name).mkdir(parents=True)
        for i in range(2):
            write_pcm16(root / name / f"c{i}.wav", tone(RATE, 0.4, freq, 1), RATE)
    (root / "testing_list.txt").write_text("".join(f"{n}/c{i}.wav\n" for n in ("go", "yes") for i in range(2)))
    return root


def test_a_folder_of_test_clips_alone_is_scored_with_a_runs_classes_and_statistics(tmp_path, caplog):
    # evaluate refused it ("the train split of ... has no clips"), and warned that early stopping was off
    speech_commands(tmp_path / "run_data")
    small(source="folder", root=str(tmp_path / "run_data")).save_artifacts(tmp_path / "run")
    saved = {"labels": str(tmp_path / "run" / "labels.json"), "stats_file": str(tmp_path / "run" / "audio_stats.json")}
    other = _held_out(tmp_path / "other")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        dm = small(source="folder", root=str(other), **saved)
        dm.setup()
    assert {k: len(ds) for k, ds in dm.datasets.items()} == {"train": 0, "val": 0, "test": 4}
    assert sorted(dm.datasets["test"].targets) == [1, 1, 2, 2]  # the run's numbering: down, go, yes
    assert next(iter(dm.test_dataloader()))["audio"].shape == (4, 4000)
    assert "val split has no clip" not in caplog.text  # nothing trains, so nothing has no validation
    with pytest.raises(ValueError, match=r"the train split of .*other has no clips: nothing to train on"):
        dm.train_dataloader()
    for given in ("labels", "stats_file"):  # what the train split gives is still needed: refused at setup
        with pytest.raises(ValueError, match=r"the train split of .*other has no clips$"):
            small(source="folder", root=str(other), **{given: saved[given]}).setup()


def test_evaluate_scores_a_held_out_folder_of_test_clips(tmp_path, caplog):
    from attnzoo.config import load
    from attnzoo.evaluate import evaluate
    from attnzoo.run import fit

    speech_commands(tmp_path / "clips")
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "ast.yaml"
    extra = ["data.source=folder", f"data.root={tmp_path / 'clips'}", "data.clip_seconds=0.5"]
    run_dir = fit(load([recipe], [*QUICK_FIT, *extra, f"run.dir={tmp_path / 'runs'}"]))
    other = _held_out(tmp_path / "other")
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        report = evaluate(run_dir, "best", "test", [], [f"data.root={other}"])
    assert report["split"] == "test" and report["split_examples"] == 4 and "test/acc" in report["metrics"]
    assert "val split has no clip" not in caplog.text
    # a plain folder of class folders: its file-name-hash test split alone is scored, and the log says so
    plain = tmp_path / "plain"
    for name, freq in (("go", 400.0), ("yes", 600.0)):
        (plain / name).mkdir(parents=True)
        for i in range(20):
            write_pcm16(plain / name / f"{name}{i}.wav", tone(RATE, 0.4, freq, 1), RATE)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        report = evaluate(run_dir, "best", "test", [], [f"data.root={plain}"])
    scored = report["split_examples"]
    assert 0 < scored < 40, scored
    assert f"{plain}: {scored} of its 40 clips are the test split, and evaluate scores those only" in caplog.text
    assert "val split has no clip" not in caplog.text


def test_a_csvs_unknown_class_names_the_csv_and_reused_statistics_are_logged(tmp_path, caplog):
    # the error named data.root (the audio folder) for a class the CSV holds; data.stats_file was reused silently
    meta = esc50(tmp_path)
    columns = {"path": "filename", "label": "category"}
    with pytest.raises(ValueError, match=rf"data: {meta} has class\(es\) that the run's model was not trained on"):
        small(
            source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns, labels=["dog", "rain"]
        ).setup()
    dm = small(source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns)
    dm.save_artifacts(tmp_path)
    assert json.loads((tmp_path / "labels.json").read_text())["source"] == str(meta)
    caplog.set_level(logging.INFO, logger="attnzoo")
    again = small(source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns,
                  stats_file=str(tmp_path / "audio_stats.json"))  # fmt: skip
    assert again.compute_stats()["mean"] == pytest.approx(dm.stats["mean"])
    assert f"from {tmp_path / 'audio_stats.json'} (data.stats_file; measured over" in caplog.text
    # a start's statistics (an AST checkpoint's AudioSet ones) were said to be "measured over N clips" of this data
    again.normalized_as(4.5, 2.5, "model.init_from")
    again.save_artifacts(tmp_path / "started")
    caplog.clear()
    small(source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns,
          stats_file=str(tmp_path / "started" / "audio_stats.json")).compute_stats()  # fmt: skip
    assert (
        "std 2.5000 from" in caplog.text
        and "(data.stats_file; model.init_from's, which its weights were" in caplog.text
    )


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("data.clip_seconds=0.1", r"8 frames \(target_frames; at least 16: clips of 0.175 s or more, "
                                  r"data.clip_seconds\).*model.target_frames \(8\) comes from the data"),
        ("data.n_mels=8", r"8 mel bins \(n_mels; at least 16: data.n_mels\).*model.n_mels \(8\) comes from the data "
                          r"\(data.n_mels\)"),
    ],
)  # fmt: skip
def test_clips_or_mel_bins_smaller_than_a_patch_name_the_data_key_to_change(tmp_path, option, says):
    # it said "features of 32 mel bins x 8 frames are smaller than a 16 patch; model.features (fbank) comes from
    # the data (data.features)": the word "features" matched the model input of that name, not what was short
    from attnzoo.config import ConfigError, load
    from attnzoo.run.build import build

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "ast.yaml"
    esc50(tmp_path / "esc")
    extra = ["data.source=csv", f"data.csv={tmp_path}/esc/meta.csv", f"data.root={tmp_path}/esc/audio",
             "data.val_folds=[3]", "data.test_folds=[4]", "data.columns={path: filename, label: category}"]  # fmt: skip
    with pytest.raises(ConfigError, match=rf"patch_size \(16\) is larger than the log-mel spectrogram: {says}") as err:
        build(load([recipe], [*QUICK_FIT, *extra, option]))
    assert "data.features" not in str(err.value)


def test_csv_labels_written_several_ways_are_refused_or_named(tmp_path, caplog):
    meta = esc50(tmp_path)
    rows = meta.read_text().splitlines()
    columns = {"path": "filename", "label": "category"}
    options = dict(source="csv", csv=str(meta), root=str(tmp_path / "audio"), columns=columns)
    meta.write_text("\n".join([rows[0], rows[1].replace(",dog", ",Dog"), *rows[2:]]) + "\n")
    with caplog.at_level("WARNING", logger="attnzoo"):
        small(**options).setup()
    assert "column 'category' has labels that differ only in case, each a class of its own: 'Dog' (line 2) and " \
           "'dog' (line 5)" in caplog.text  # fmt: skip
    numbered = [r.rsplit(",", 1)[0] + f",{i % 2}{'.0' * (i == 3)}" for i, r in enumerate(rows[1:])]
    meta.write_text("\n".join([rows[0], *numbered]) + "\n")
    with pytest.raises(ValueError, match=r"meta.csv: column 'category' writes one number in several ways.*'1' "
                                         r"\(line 3\) and '1.0' \(line 5\)"):  # fmt: skip
        small(**options).setup()


def test_the_embedded_sets_reasons_name_its_clips_sizes_only_for_the_sizes():
    """A run started from an AST checkpoint takes its 16 kHz and 128 bins; the log then said `mixup_alpha: auto ->
    0.0 (... (8 kHz clips, 0-4 kHz in 32 bins))` beside `data.sample_rate: auto -> 16000`."""
    from attnzoo.data.modules.defaults import audio_data

    chosen = audio_data(synthetic=True)
    assert "8 kHz" in chosen["data.sample_rate"][1] and "32 bins" in chosen["data.n_mels"][1]
    assert not any("kHz" in chosen[k][1] for k in ("data.mixup_alpha", "data.time_shift_ms"))


@pytest.mark.parametrize("features", ["fbank", "melspec"])
def test_more_mel_bins_than_the_spectrum_fills_are_warned(features, caplog):
    # data.sample_rate=4000 data.n_mels=128 left 21 bins constant without a word
    from attnzoo.layers.audio_features import LogMel

    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        DATAMODULES["audio"](sample_rate=4000, n_mels=128, clip_seconds=0.5, features=features)
    logmel = LogMel(sample_rate=4000, n_mels=128, kind=features)
    empty = logmel.empty_bins()
    fits = max(n for n in range(4, 128) if logmel.empty_bins(n) == 0)
    said = f"data.n_mels 128 at 4000 Hz (data.sample_rate) with 25 ms windows: {empty} mel bins get no frequency"
    assert empty > 6 and f"{said} of the spectrum and stay constant; at most {fits} bins fill" in caplog.text
    wave = torch.randn(1, 4000)
    assert (logmel(wave).std(2) < 1e-6).sum() >= empty  # the bins it counts are constant indeed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):  # the recipe's 32 bins at 16 kHz, the AST paper's 128
        DATAMODULES["audio"](sample_rate=16000, n_mels=32, clip_seconds=0.5, features=features)
        DATAMODULES["audio"](sample_rate=16000, n_mels=128, clip_seconds=0.5, features=features)
    assert "mel bins get no frequency" not in caplog.text


def test_clips_outside_the_class_folders_are_named_and_folders_beside_splits_refused(tmp_path, caplog):
    # a clip in data.root itself (or in a split folder itself) was left out without a word, and so were class
    # folders beside split folders
    speech_commands(tmp_path / "sc")
    write_pcm16(tmp_path / "sc" / "stray.WAV", tone(RATE, 0.3, 200.0, 1), RATE)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        small(source="folder", root=str(tmp_path / "sc")).setup()
    assert "1 clip(s) lie outside the class folders, so no class reads them: stray.WAV" in caplog.text
    speech_commands(tmp_path / "split" / "train")
    speech_commands(tmp_path / "split" / "extra")
    with pytest.raises(
        ValueError, match=r"holds split folders \(train/\) and, beside them, 1 folder\(s\) of data files"
    ):
        small(source="folder", root=str(tmp_path / "split")).setup()
