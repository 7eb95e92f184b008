"""`model.init_from` with attnzoo's own runs: the backbone comes from the run's best checkpoint, the new recipe's head
starts new when the label set differs, and a checkpoint that cannot be used stops the run before training."""

import csv
import json
import logging
import random

import pytest
import torch

from attnzoo import pretrained
from attnzoo.config import ConfigError, load
from attnzoo.run import build, fit
from attnzoo.run.checkpoint_io import read_checkpoint
from tests.helpers import QUICK, ROOT

TEXT = ROOT / "recipes" / "text_cls.yaml"
WORDS = "red green blue cat dog fish one two three four sun moon star tree leaf rock".split()
SMALL = [*QUICK, "trainer.num_threads=1", "trainer.max_epochs=1", "trainer.num_sanity_val_steps=0",
         "trainer.log_every_n_steps=1", "model.dim=16", "model.depth=1", "model.num_heads=2", "model.mlp_ratio=1.0",
         "data.vocab_size=60", "data.batch_size=16", "run.test=false", "run.baseline=false"]  # fmt: skip


def _texts(path, labels, n=64, seed=0):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["text", "label"])
        for i in range(n):
            out.writerow([" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))), labels[i % len(labels)]])
    return path


def _files(tmp_path, name, labels):
    folder = tmp_path / name
    folder.mkdir()
    train = _texts(folder / "train.csv", labels, seed=1)
    val = _texts(folder / "val.csv", labels, n=16, seed=2)
    return [f"data.train={train}", f"data.val={val}"]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("a")
    return fit(load([TEXT], [*SMALL, *_files(tmp_path, "data", ["a", "b", "c"]), f"run.dir={tmp_path}"]))


def test_a_new_label_set_keeps_the_backbone_and_starts_a_new_head(run_a, tmp_path, caplog):
    overrides = [*SMALL, *_files(tmp_path, "data", ["yes", "no"]), f"run.dir={tmp_path}", f"model.init_from={run_a}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data, task, cfg = build(load([TEXT], overrides))
    saved = read_checkpoint(run_a / "checkpoints" / "best.ckpt")["state_dict"]
    own = task.net.state_dict()
    assert own["head.weight"].shape[0] == 2 and saved["net.head.weight"].shape[0] == 3
    for key, value in own.items():
        if not key.startswith("head."):
            torch.testing.assert_close(value, saved[f"net.{key}"], rtol=0, atol=0, msg=key)
    assert task.net.started_from["new"] == ["head.weight", "head.bias"]
    assert task.net.started_from["dropped"] == ["head.weight", "head.bias"]
    assert task.net.started_from["loaded"] == len(own) - 2
    log = caplog.text
    assert f"{len(own) - 2} tensors loaded; 2 new (head.weight, head.bias); 2 dropped (head.weight, head.bias)" in log
    assert str(run_a / "tokenizer.json") in log  # the run's tokenizer: ids match its embedding
    assert cfg.section("data")["tokenizer"] == str(run_a / "tokenizer.json")


def test_the_same_number_of_other_labels_starts_a_new_head_too(run_a, tmp_path, caplog):
    overrides = [*SMALL, *_files(tmp_path, "data", ["x", "y", "z"]), f"model.init_from={run_a}"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, _ = build(load([TEXT], overrides))
    saved = read_checkpoint(run_a / "checkpoints" / "best.ckpt")["state_dict"]
    assert not torch.equal(task.net.state_dict()["head.weight"], saved["net.head.weight"])
    assert task.net.started_from["new"] == ["head.weight", "head.bias"]
    assert "the label set differs" in caplog.text


def test_the_same_labels_load_the_head_and_the_summary_names_the_checkpoint(run_a, tmp_path):
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b", "c"]), f"run.dir={tmp_path}"]
    run_b = fit(load([TEXT], [*overrides, f"model.init_from={run_a / 'checkpoints' / 'best.ckpt'}"]))
    summary = json.loads((run_b / "summary.json").read_text())
    assert summary["init_from"]["source"] == f"attnzoo run {run_a / 'checkpoints' / 'best.ckpt'}"
    assert summary["init_from"]["new"] == [] and summary["init_from"]["dropped"] == []
    assert load([run_b / "config.yaml"]).section("model")["init_from"] == str(run_a / "checkpoints" / "best.ckpt")


def test_a_relative_init_from_is_recorded_absolute_so_the_config_works_from_anywhere(run_a, tmp_path, monkeypatch):
    # config.yaml kept `init_from: a/<run>` and the tokenizer path it set as typed: from another working directory
    # `--config <run>/config.yaml` stopped with "model.init_from: ... is not a file or directory here"
    monkeypatch.chdir(run_a.parents[1])
    relative = str(run_a.relative_to(run_a.parents[1]))
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b", "c"])]
    _, _, cfg = build(load([TEXT], [*overrides, f"model.init_from={relative}"]))
    assert cfg.section("model")["init_from"] == str(run_a)
    assert cfg.section("data")["tokenizer"] == str(run_a / "tokenizer.json")
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    monkeypatch.chdir(tmp_path)
    _, task, _ = build(load([tmp_path / "config.yaml"]))
    assert task.net.started_from["loaded"] > 0


def test_another_architecture_names_the_file_and_the_first_tensor_that_differs(run_a, tmp_path):
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b"]), f"model.init_from={run_a}", "model.dim=32"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    text = str(err.value)
    assert str(run_a / "checkpoints" / "best.ckpt") in text and "'embed.weight' is [" in text
    assert "model.dim (16 there, 32 here)" in text
    # an option the run left at its default (not in its config.yaml) is named too; one its kind has not is not
    overrides = [*SMALL, *_files(tmp_path, "more", ["a", "b"]), f"model.init_from={run_a}", "model.layer_scale=0.1"]
    with pytest.raises(ConfigError, match=r"model.layer_scale \(None there, 0.1 here\)"):
        build(load([TEXT], overrides))


def test_another_tokenizer_is_named_beside_the_embedding_that_differs(run_a, tmp_path):
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b"]), f"model.init_from={run_a}", "data.tokenizer=bytes"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    text = str(err.value)
    assert "'embed.weight' is [" in text and "model.vocab_size (" in text
    assert "data.tokenizer ('unigram' there, 'bytes' here)" in text  # run A learned its vocabulary from its data


def test_weights_without_the_tokenizer_they_were_trained_with_are_refused(run_a, tmp_path):
    # a run directory without its tokenizer.json, or its .ckpt copied out of it, loaded every tensor into a model whose
    # ids came from a tokenizer learned anew: other tokens on the same embedding rows, with no error
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_a, copy)
    (copy / "tokenizer.json").unlink()
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b"])]
    with pytest.raises(
        ConfigError,
        match=r"copy has no tokenizer\.json, and its weights were trained with the "
        r"tokenizer its config\.yaml names \(data\.tokenizer 'unigram'\).*Copy the run's own",
    ):
        build(load([TEXT], [*overrides, f"model.init_from={copy}"]))
    lone = tmp_path / "lone.ckpt"
    shutil.copy(run_a / "checkpoints" / "best.ckpt", lone)
    with pytest.raises(
        ConfigError,
        match=r"lone\.ckpt is a checkpoint outside its run directory, and its weights "
        r"were trained with a tokenizer \(sha256 [0-9a-f]{12}\.\.\.\) that is not beside it",
    ):
        build(load([TEXT], [*overrides, f"model.init_from={lone}"]))
    with pytest.raises(ValueError, match=r"lone\.ckpt: no config\.yaml beside it .* give the run directory"):
        pretrained.load(lone)
    # with its tokenizer named, a lone .ckpt still has no architecture: another width says so, not only the tensor
    named = [*overrides, f"model.init_from={lone}", f"data.tokenizer={run_a / 'tokenizer.json'}"]
    with pytest.raises(ConfigError, match=r"tensor .* holds no architecture: the network is this config's"):
        build(load([TEXT], [*named, "model.dim=24"]))
    build(load([TEXT], named))  # the keys it was trained with (SMALL's)
    # naming the tokenizer file says which ids the weights take
    shutil.copy(run_a / "tokenizer.json", tmp_path / "theirs.json")
    build(load([TEXT], [*overrides, f"model.init_from={copy}", f"data.tokenizer={tmp_path / 'theirs.json'}"]))
    # a fixed tokenizer (bytes) is not a file beside the weights: the same one takes a lone .ckpt
    fixed = fit(load([TEXT], [*overrides, "data.tokenizer=bytes", f"run.dir={tmp_path / 'bytes'}"]))
    shutil.copy(fixed / "checkpoints" / "best.ckpt", tmp_path / "bytes.ckpt")
    build(load([TEXT], [*overrides, f"model.init_from={tmp_path / 'bytes.ckpt'}", "data.tokenizer=bytes"]))


def test_a_checkpoint_of_another_model_kind_is_refused(tmp_path):
    from tests.helpers import VIT

    run = tmp_path / "vit"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(VIT.read_text())
    torch.save({"state_dict": {"net.head.weight": torch.zeros(2, 2)}}, run / "checkpoints" / "best.ckpt")
    with pytest.raises(ConfigError, match=r"is a 'vit' model, and this run builds model.kind 'text'") as err:
        build(load([TEXT], [*SMALL, f"model.init_from={run}"]))
    assert "or fine-tune this one with recipes/vit.yaml" in str(err.value), err.value


def test_the_recipe_named_for_each_model_kind_builds_that_kind():
    from attnzoo.config import read_yaml
    from attnzoo.run.start import ENCODER_OF, RECIPE_OF
    from tests.helpers import ROOT

    built = {read_yaml(path)["model"]["kind"]: path.name for path in sorted((ROOT / "recipes").glob("*.yaml"))}
    assert RECIPE_OF == built
    assert all(kind in RECIPE_OF for kind in ENCODER_OF.values())


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "the file is empty"),
        (b"not a checkpoint at all", "UnpicklingError"),
        (b"PK\x03\x04broken zip", "cut short"),
    ],
)
def test_a_corrupted_checkpoint_is_named_before_training(tmp_path, content, why):
    ckpt = tmp_path / "broken.ckpt"
    ckpt.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"model.init_from: '{ckpt}' is not a readable checkpoint.*{why}"):
        fit(load([TEXT], [*SMALL, f"model.init_from={ckpt}", f"run.dir={tmp_path / 'runs'}"]))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("summary.json"))


def test_a_run_that_saved_no_checkpoint_says_so(tmp_path):
    (tmp_path / "config.yaml").write_text(TEXT.read_text())
    with pytest.raises(ConfigError, match=r"run directory '.*' has no checkpoints/best.ckpt"):
        build(load([TEXT], [*SMALL, f"model.init_from={tmp_path}"]))


@pytest.mark.parametrize("name", ["bert-base-uncased", "google/vit-base-patch16-224"])
def test_a_hub_name_says_to_download_it_first(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # "here" says where a relative folder was looked for (a project's models/bert-base-uncased run elsewhere)
    with pytest.raises(ConfigError, match=rf"'{name}' is not a file or directory here \(relative to {tmp_path}\)\. "
                                          r".*download it first"):  # fmt: skip
        build(load([TEXT], [*SMALL, f"model.init_from={name}"]))


def test_a_path_that_is_nothing_attnzoo_reads_lists_what_it_expects(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="no checkpoint attnzoo can read: expected an attnzoo run directory"):
        build(load([TEXT], [*SMALL, f"model.init_from={tmp_path / 'notes.txt'}"]))


def test_a_folder_with_a_broken_or_foreign_config_json_says_what_its_config_json_holds(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.json").write_text('{"model_type": "bert", ')  # cut short
    with pytest.raises(ConfigError, match=r"config.json': cannot be read as JSON \(JSONDecodeError: Expecting"):
        build(load([TEXT], [*SMALL, f"model.init_from={tmp_path}"]))
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ConfigError, match=r"no checkpoint attnzoo can read \(its config.json names 'llama'\)") as err:
        build(load([TEXT], [*SMALL, f"model.init_from={tmp_path}"]))
    # the families by what they read (model types a user can check against config.json), not by module names
    assert "bert or roberta folder" in str(err.value) and "gpt2 folder" in str(err.value), err.value
    assert "hf_bert" not in str(err.value)
    (tmp_path / "config.json").write_text('{"model_type": ["bert"]}')  # a TypeError (unhashable list) from hf_bert
    with pytest.raises(ConfigError, match=r"no checkpoint attnzoo can read \(its config.json names \['bert'\]\)"):
        build(load([TEXT], [*SMALL, f"model.init_from={tmp_path}"]))


def test_python_load_builds_the_runs_network_with_its_weights(run_a):
    from attnzoo.pretrained import load as load_pretrained

    saved = read_checkpoint(run_a / "checkpoints" / "best.ckpt")["state_dict"]
    net = load_pretrained(run_a)
    for key, value in net.state_dict().items():
        torch.testing.assert_close(value, saved[f"net.{key}"], rtol=0, atol=0, msg=key)
    other = load_pretrained(run_a, num_classes=5)  # another label count: a new head, the same backbone
    assert other.head.out_features == 5
    torch.testing.assert_close(other.embed.weight, saved["net.embed.weight"], rtol=0, atol=0)
    # an unknown option raised a bare TypeError (TextClassifier.__init__() got an unexpected keyword argument)
    # another head count loaded the same tensors split into other heads (fit's model.init_from refuses it)
    for given in (run_a, run_a / "checkpoints" / "best.ckpt"):  # the run's .ckpt file states its heads as well
        with pytest.raises(ValueError, match=r"num_heads=1, but .* has 2 heads: its tensors would load split"):
            load_pretrained(given, num_heads=1)
    with pytest.raises(ValueError, match=r"\['num_clases'\] \(given to load: \['num_clases'\]\) are not .*num_classes"):
        load_pretrained(run_a, num_clases=5)


def test_python_load_checks_the_heads_of_a_run_whose_config_leaves_them_to_the_model(run_a, tmp_path):
    # a config without model.num_heads trained with the model's default: another count was taken without a word
    import inspect
    import shutil

    import yaml

    from attnzoo.models import MODELS
    from attnzoo.pretrained import load as load_pretrained

    copy = tmp_path / "run"
    shutil.copytree(run_a, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    del config["model"]["num_heads"]
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    default = inspect.signature(MODELS[config["model"]["kind"]]).parameters["num_heads"].default
    with pytest.raises(ValueError, match=rf"num_heads={default + 1}, but .* has {default} heads"):
        load_pretrained(copy, num_heads=default + 1)


def test_python_load_names_an_option_of_the_runs_config_that_its_model_does_not_take(run_a, tmp_path):
    import shutil

    import yaml

    from attnzoo.pretrained import load as load_pretrained

    copy = tmp_path / "copy"
    shutil.copytree(run_a, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["model"]["mlp_ratio_x"] = 2.0
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(
        ValueError, match=r"model option\(s\) \['mlp_ratio_x'\] \(in its config: \['mlp_ratio_x'\]\) are not options"
    ):
        load_pretrained(copy)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("num_heads", 0, "model.num_heads: 0 (set in {config}) must be >= 1"),
        ("dim", "abc", "model.dim: 'abc' is not a valid int (set in {config})"),
        ("drop_rate", "x", "model.drop_rate: 'x' is not a valid float (set in {config})"),
        ("mlp_ratio", -2.0, "model.mlp_ratio: -2.0 (set in {config}) must be > 0"),
    ],
)
def test_the_model_options_of_a_runs_config_are_checked_naming_its_config_yaml(run_a, tmp_path, key, value, message):
    # pretrained.load stopped deep in the model (ZeroDivisionError, TypeError, torch's RuntimeError) naming no file or
    # key, and model.init_from said the value was set in the new run's recipe
    import shutil

    import yaml

    from attnzoo.pretrained import load as load_pretrained

    copy = tmp_path / "copy"
    shutil.copytree(run_a, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["model"][key] = value
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    said = message.format(config=copy / "config.yaml")
    with pytest.raises(ConfigError) as err:
        load_pretrained(copy)
    assert said in str(err.value)
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b", "c"]), f"run.dir={tmp_path}", f"model.init_from={copy}"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    assert str(err.value).startswith(f"model.init_from: {said}")


def test_a_run_of_the_same_kind_gives_its_architecture_and_the_data_keeps_its_sizes(tmp_path, caplog):
    sizes = ["model.dim=16", "model.depth=1", "model.num_heads=2", "model.mlp_ratio=1.0"]
    rest = [o for o in SMALL if o not in sizes]
    files = _files(tmp_path, "data", ["a", "b", "c"])
    arch = ["model.pooling=cls", "model.norm=post", "model.position=learned", "data.max_len=32"]
    dropout = ["model.drop_rate=0.3", "model.attention.attn_drop=0.3"]  # training choices: the new run's own stay
    run = fit(load([TEXT], [*SMALL, *files, *arch, *dropout, f"run.dir={tmp_path}"]))
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = build(load([TEXT], [*rest, *files, f"model.init_from={run}"]))
    model = cfg.section("model")
    assert (model["dim"], model["depth"], model["num_heads"], model["mlp_ratio"]) == (16, 1, 2, 1.0)
    assert (model["pooling"], model["norm"], model["position"]) == ("cls", "post", "learned")  # a cls token, BERT-like
    assert cfg.section("data")["max_len"] == 32  # the run's learned table holds 32 positions: longer texts are cut
    assert model["drop_rate"] != 0.3 and model["attention"].get("attn_drop", 0.0) == 0.0
    assert task.net.started_from["new"] == [] and task.net.started_from["dropped"] == []
    assert "model.pooling: 'auto' (set in" in caplog.text and "-> 'cls' (model.init_from)" in caplog.text


def test_a_vit_run_gives_its_patches_and_pooling_and_the_next_run_loads_every_tensor(tmp_path, caplog):
    vit = ROOT / "recipes" / "vit.yaml"
    steps = [*QUICK, "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
             "trainer.num_sanity_val_steps=0", "run.test=false", "run.baseline=false"]  # fmt: skip
    arch = ["model.embed_dim=16", "model.depth=1", "model.num_heads=2", "model.global_pool=avg", "model.patch_size=4"]
    run = fit(load([vit], [*steps, *arch, f"run.dir={tmp_path}"]))
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = build(load([vit], [*steps, f"model.init_from={run}"]))
    model = cfg.section("model")
    assert (model["embed_dim"], model["depth"], model["num_heads"]) == (16, 1, 2)
    assert (model["global_pool"], model["patch_size"]) == ("avg", 4)  # avg pooling: a norm of its own (fc_norm)
    assert task.net.started_from["new"] == [] and task.net.started_from["dropped"] == []
    assert "model.global_pool: 'token' (set in" in caplog.text


def test_an_import_path_in_the_start_runs_config_is_named_as_coming_from_it(run_a, tmp_path, monkeypatch):
    # a downloaded run's config.yaml with pattern.kind: subprocess.getoutput was refused as "set in
    # recipes/text_cls.yaml": a user trusting their own recipe would pass --allow-imports and run its code
    import shutil

    import yaml

    from attnzoo.util.imports import ALLOW_IMPORTS_ENV

    monkeypatch.delenv(ALLOW_IMPORTS_ENV, raising=False)
    hostile = tmp_path / "downloaded"
    shutil.copytree(run_a, hostile)
    config = yaml.safe_load((hostile / "config.yaml").read_text())
    config["model"]["attention"]["pattern"] = {"kind": "subprocess.getoutput", "cmd": f"touch {tmp_path}/pwned"}
    (hostile / "config.yaml").write_text(yaml.safe_dump(config))
    overrides = [*SMALL, *_files(tmp_path, "data", ["a", "b"]), f"model.init_from={hostile}"]
    with pytest.raises(ConfigError) as err:
        build(load([TEXT], overrides))
    text = str(err.value)
    assert "model.attention.pattern.kind: 'subprocess.getoutput' is an import path in model.init_from's" in text
    assert f"{hostile}/config.yaml" in text and "text_cls.yaml" not in text
    config["model"]["attention"]["pattern"] = "subprocess.Popen"  # a spec's short form: the kind as a string
    (hostile / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"model.attention.pattern: 'subprocess.Popen' is an import path in model"):
        build(load([TEXT], overrides))
    build(load([TEXT], [*overrides, "model.attention.pattern=none"]))  # replaced on the command line: not taken over
    assert not (tmp_path / "pwned").exists()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # what a malicious pickle does on loading: call any function
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_weights_file_holding_a_pickled_object_is_refused_by_attnzoo_and_runs_nothing(tmp_path):
    # torch 2.14 words the refusal "unsupported GLOBAL ...": the check for its older wording never matched, so
    # the user got torch's advice to load with weights_only=False
    marker = tmp_path / "pwned"
    torch.save(
        {"w": torch.zeros(2), "x": _Payload(marker)}, tmp_path / "model.pth", _use_new_zipfile_serialization=False
    )
    with pytest.raises(ValueError, match=r"model\.pth' holds pickled objects other than tensors \(posix\.system: a "):
        pretrained.load(tmp_path / "model.pth")
    assert not marker.exists()


def test_a_weights_file_that_cannot_be_opened_is_named(tmp_path, monkeypatch):
    # read_weights let the OSError of a file without read permission out raw (as root, monkeypatched: root reads all)
    from attnzoo.pretrained import converted

    def refused(path):
        raise PermissionError(13, "Permission denied")

    (tmp_path / "w.pth").write_bytes(b"x")
    monkeypatch.setattr(converted, "unfinished", refused)
    with pytest.raises(ValueError, match=r"'.*w.pth' cannot be read: Permission denied"):
        converted.read_weights(tmp_path / "w.pth")
