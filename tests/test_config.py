"""Config loading and validation: every recipe and overlay validates; bad keys and values stop with clear errors."""

import re
from pathlib import Path

import pytest
import yaml

from attnzoo.config import ConfigError, load
from attnzoo.fit import main
from tests.helpers import smoke_overrides

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
# overlays are merged into a recipe; grids under configs/ablations/ have their own format (tests/test_ablate.py)
OVERLAYS = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if "ablations" not in p.relative_to(ROOT).parts)
VIT = ROOT / "recipes" / "vit.yaml"


def test_there_are_recipes_and_overlays():
    assert VIT in RECIPES and len(OVERLAYS) >= 4


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates_with_and_without_its_smoke_overrides(recipe):
    cfg = load([recipe])
    assert {"data", "model", "task", "trainer"} <= set(cfg.tree.keys())
    load([recipe], smoke_overrides(cfg))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_overlay_validates_on_a_recipe(overlay):
    """On the recipe its header's command names (`--config recipes/<name>.yaml`), else on the ViT recipe."""
    named = re.search(r"recipes/(\w+)\.yaml", overlay.read_text())
    load([ROOT / "recipes" / f"{named.group(1)}.yaml" if named else VIT, overlay])


@pytest.mark.parametrize(
    "override, fragments",
    [
        ("model.atention.backend=sdpa", ["model.atention", "unknown key", "did you mean 'model.attention'"]),
        ("trainer.max_epoch=3", ["trainer.max_epoch", "did you mean 'trainer.max_epochs'"]),
        ("trainer.max_epochs=three", ["trainer.max_epochs", "'three'"]),
        ("trainer.precision=bf15", ["trainer.precision", "'bf16-mixed'", "or 'auto'"]),
        ("data.kind=imag", ["data.kind", "'imag'", "did you mean 'image'"]),
        ("data.batch_size=1.5", ["data.batch_size", "1.5"]),
        ("model.global_pool=max", ["model.global_pool", "'token'", "'avg'"]),
        ("model.attention.backnd=sdpa", ["model.attention", "backnd", "did you mean 'backend'"]),
        ("task.optimizer.kind=adamww", ["task.optimizer.kind", "did you mean 'adamw'"]),
        ("task.optimizer.lrate=0.1", ["task.optimizer", "lrate"]),
        ("run.nme=x", ["run.nme", "did you mean 'run.name'"]),
        ("trainr.max_epochs=1", ["trainr", "unknown section", "did you mean 'trainer'"]),
        ("trainer.logger=false", ["trainer.logger", "unknown key"]),  # attnzoo sets the logger itself
        # a folder of images tried as a text recipe's file: "did you mean 'data.ink'?"
        ("data.train=images", ["data.train", "unknown key", "your images: data.dataset=folder data.root=DIR"]),
        ("seed=abc", ["seed", "'abc'"]),
        ("trainer.devices=two", ["trainer.devices", "'two'", "a number of devices", "'auto'"]),
        ("trainer.devices=0", ["trainer.devices", "a number of devices"]),
        ("trainer.strategy=ddp_spawn", ["trainer.strategy", "'ddp_spawn'", "use 'ddp'"]),
        # a forked run kept its record in the parent: no summary (a TypeError), or one of 0 steps
        ("trainer.strategy=ddp_fork", ["trainer.strategy", "'ddp_fork'", "forks its processes", "use 'ddp'"]),
        ("trainer.strategy=ddp_notebook", ["trainer.strategy", "'ddp_notebook'", "forks its processes"]),
        ("task.optimizer.lr=abc", ["task.optimizer.lr", "'abc' is not a number"]),
        ("model.attention.pattern=alibi", ["model.attention.pattern", "'alibi' is a bias", "model.attention.bias"]),
        # values only a builder refused, after the run directory was made (or an ablation's earlier runs trained)
        ("model.attention.backend=sdpaa", ["unknown attention backend 'sdpaa'", "did you mean 'sdpa'"]),
        ("model.attention.num_kv_heads=3", ["model.attention.num_kv_heads (3", "model.num_heads (4", "[1, 2, 4]"]),
        ("model.attention.num_kv_heads=0", ["num_kv_heads: 0 must be a whole number >= 1"]),
        ("model.attention.kindd=mha", ["unknown option 'kindd'", "did you mean 'kind'"]),
        ("model.depth=0", ["model.depth: 0", "must be >= 1"]),
        # the model refused it once built (after the run directory was made); the embedded digits are 28 px
        ("model.patch_size=5", ["model.patch_size (5", "does not divide the images' side, 28 px", "[1, 2, 4, 7, 14]"]),
        ("data.batch_size=0", ["data.batch_size: 0", "must be >= 1"]),
        ("trainer.max_epochs=-1", ["trainer.max_epochs: -1", "task.scheduler", "set trainer.max_steps too"]),
        # values that are no name stopped with a raw TypeError (unhashable list) or AttributeError (no rpartition)
        ("data.kind=[image]", ["data.kind: expected a name of", "'image'", "got ['image']"]),
        ("model.kind={a: 1}", ["model.kind: expected a name of", "'vit'", "got {'a': 1}"]),
        ("task.kind=[classification]", ["task.kind: expected a name of", "'classification'"]),
        ("model.attention.backend=[auto]", ["model.attention", "attention backend name of ['auto', 'eager'"]),
        ("task.objective.kind=[multiclass]", ["task.objective.kind: expected a name of", "'multilabel'"]),
        ("task.objective.kind=1.5", ["task.objective.kind: expected a name of", "got 1.5"]),
        ("task.scheduler.kind=1.5", ["task.scheduler.kind: expected a name of", "'cosine'", "got 1.5"]),
        ("task.scheduler.kind={a: 1}", ["task.scheduler.kind: expected a name of", "got {'a': 1}"]),
        # passed the check, then an AttributeError when the classification task was built
        ("task.objective.kind=null", ["task.objective: {'kind': None", "is not an objective", "'multiclass'"]),
        # Lightning's own ValueError (or TypeError for a list) when the trainer was made, after the run directory
        ("trainer.accelerator=zz", ["trainer.accelerator: 'zz'", "valid: ['auto', 'gpu', 'cpu', 'cuda'"]),
        ("trainer.accelerator=[cpu]", ["trainer.accelerator: ['cpu']", "valid: ['auto', 'gpu'"]),
        ("trainer.accelerator=cpuu", ["trainer.accelerator: 'cpuu'", "did you mean 'cpu'"]),
    ],
)
def test_bad_override_names_key_origin_and_choices(override, fragments):
    with pytest.raises(ConfigError) as err:
        load([VIT], [override])
    message = str(err.value)
    for fragment in [*fragments, "command line"]:
        assert fragment in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.max_epochs=-1", "trainer.max_steps=100"],
        ["trainer.max_epochs=-1", "task.scheduler=null"],
        ["trainer.max_epochs=-1", "task.scheduler.kind=none"],
    ],
)
def test_no_epoch_limit_is_accepted_with_a_step_limit_or_without_a_schedule(overrides):
    assert load([VIT], overrides).section("trainer")["max_epochs"] == -1


def test_kv_heads_are_checked_against_a_checkpoints_heads_only_when_it_is_read(tmp_path):
    """The recipe's num_heads gives way to model.init_from's: 3 key/value heads may suit a 6-head checkpoint (the
    built run checks them against its heads)."""
    cfg = load([VIT], [f"model.init_from={tmp_path / 'six_heads'}", "model.attention.num_kv_heads=3"])
    assert cfg.section("model")["attention"]["num_kv_heads"] == 3


@pytest.mark.parametrize("devices", ["2", "-1", "auto", "[0, 1]", "0,1"])
def test_device_counts_lightning_reads_are_accepted(devices):
    load([VIT], [f"trainer.devices={devices}"])


def test_a_rotary_encoding_given_as_the_position_table_says_where_it_goes():
    from attnzoo.attention.positions import POSITIONS
    from attnzoo.attention.specs import build

    with pytest.raises(ValueError) as err:
        build("rope", POSITIONS, "model.position", dim=8, max_len=4)
    message = str(err.value)
    assert "set in the attention section (model.attention.rotary=rope)" in message
    assert message.count("'none'") == 1  # listed once in the valid names (it was twice)


def test_error_names_the_file_that_set_the_key(tmp_path):
    overlay = tmp_path / "mine.yaml"
    overlay.write_text("model:\n  dept: 3\n")
    with pytest.raises(ConfigError, match=r"model\.dept.*mine\.yaml.*did you mean 'model\.depth'"):
        load([VIT, overlay])


def test_overlays_then_overrides_win_in_order(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("trainer: {max_epochs: 2}\nmodel: {depth: 2}\n")
    b.write_text("trainer: {max_epochs: 3}\n")
    cfg = load([VIT, a, b], ["model.depth=5"])
    assert cfg.tree.trainer.max_epochs == 3 and cfg.tree.model.depth == 5
    assert cfg.tree.model.embed_dim == load([VIT]).tree.model.embed_dim  # untouched keys survive
    assert "b.yaml" in cfg.where("trainer.max_epochs") and "command line" in cfg.where("model.depth")


TEXT_IMAGE = ROOT / "recipes" / "text_image.yaml"


@pytest.mark.parametrize(
    "overlay, override, shown",
    [
        (None, "data.classes=[yes,no,maybe]", "\"data.classes=['yes','no']\" on the command line"),
        (None, "data.classes=on", "\"data.classes='yes'\""),
        (None, "run.name=no", "\"run.name='no'\""),
        ("data:\n  classes: [yes, no, maybe]\n", None, "classes: ['yes', 'no'] in a YAML file"),
    ],
    ids=["list_override", "scalar_override", "str_override", "list_in_yaml"],
)
def test_booleans_yaml_read_from_unquoted_words_of_a_str_key_say_to_quote_them(tmp_path, overlay, override, shown):
    files = [TEXT_IMAGE]
    if overlay:
        files.append(tmp_path / "mine.yaml")
        files[-1].write_text(overlay)
    with pytest.raises(ConfigError) as err:
        load(files, [override] if override else [])
    message = str(err.value)
    assert "read from unquoted yes/no/true/false/on/off" in message and shown in message, message


@pytest.mark.parametrize("override", ["trainer.max_epochs=yes", "data.batch_size=[no]"])
def test_booleans_given_for_a_number_get_no_word_about_quoting(override):
    with pytest.raises(ConfigError) as err:
        load([TEXT_IMAGE], [override])
    assert "is not a valid int" in str(err.value) and "unquoted" not in str(err.value)


@pytest.mark.parametrize(
    "value, why",
    [(".nan", "(nan) must be a finite number"), ("400", "(400) must be within +-10"), ("-1e400", "(-inf) must be")],
)
def test_a_length_penalty_beam_search_cannot_use_is_refused_before_training(value, why):
    # nan trained the whole run, then the test pass stopped in beam search; 400 overflowed (OverflowError)
    with pytest.raises(ConfigError) as err:
        load([ROOT / "recipes" / "translation.yaml"], [f"task.length_penalty={value}"])
    assert f"task.length_penalty {why}" in str(err.value) and "command line" in str(err.value)


@pytest.mark.parametrize(
    "files, overrides, match",
    [
        (["missing.yaml"], [], "does not exist"),
        ([VIT], ["noequals"], "expected key=value"),
        ([], [], "no config given"),
    ],
)
def test_unusable_inputs(files, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load(files, overrides)


def test_cli_reports_errors_without_traceback_and_prints_config(capsys):
    assert main(["--config", str(VIT), "model.atention.backend=sdpa"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'model.attention'" in err and "Traceback" not in err
    assert main(["--config", str(VIT), "--print-config", "model.depth=3"]) == 0
    out = capsys.readouterr().out
    assert "depth: 3" in out and "kind: vit" in out
    assert out.startswith("# the config files and overrides merged") and "model.init_from" not in out
    assert yaml.safe_load(out)["model"]["depth"] == 3  # comments aside, YAML


def test_print_config_with_a_start_says_the_architecture_is_the_checkpoints(capsys, tmp_path):
    """It printed the recipe's width, heads and positions, which a run started from a checkpoint does not use."""
    assert main(["--config", str(VIT), "--print-config", f"model.init_from={tmp_path / 'vit.safetensors'}"]) == 0
    out = capsys.readouterr().out
    assert "# model.init_from: the run takes the checkpoint's architecture" in out


def test_a_literal_dollar_brace_in_a_value_is_written_so_that_it_reads_back(tmp_path):
    # `task.prompt='cost \${x}'` trained, but config.yaml held `prompt: cost ${x}`: reading the run back took it for
    # an interpolation ("Interpolation key 'x' not found"; in a run directory: refused as one)
    cfg = load([ROOT / "recipes" / "lm.yaml"], ["task.prompt=cost \\${x}", "data.val=b\\${c}.txt"])
    assert cfg.section("task")["prompt"] == "cost ${x}"
    (tmp_path / "checkpoints").mkdir()  # read as a run's own config.yaml: one that holds an interpolation is refused
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    again = load([tmp_path / "config.yaml"])
    assert again.section("task")["prompt"] == "cost ${x}"
    assert again.section("data")["val"] == "b${c}.txt"
