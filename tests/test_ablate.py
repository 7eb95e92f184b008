"""`attnzoo.ablate`: grid expansion, every shipped grid validated, failures recorded, report, resume after a kill."""

import csv
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnzoo.ablation.grid import Grid, axis_labels, load_grid
from attnzoo.ablation.runner import ablate, plan, status
from attnzoo.config import ConfigError, load
from attnzoo.run.build import build_data, build_net, resolve
from attnzoo.tasks import TASKS
from tests.helpers import smoke_overrides
from tests.helpers.ablation import FAKE_FIT, SLOW_FIT, TINY_VIT, write_grid

ROOT = Path(__file__).resolve().parent.parent
VIT = ROOT / "recipes" / "vit.yaml"
RECIPES = {p.stem: p for p in sorted((ROOT / "recipes").glob("*.yaml"))}
GRIDS = sorted((ROOT / "configs" / "ablations").glob("*.yaml"))
SAFE = re.compile(r"^[A-Za-z0-9._+=,~-]+$")


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_variants_are_every_combination_times_seeds_with_readable_safe_ids(tmp_path):
    axes = {
        "model.pos_embed": ["learned", "none"],
        "model.attention": {"mha": {"kind": "mha"}, "mqa/1": {"kind": "mha", "num_kv_heads": 1}},
        "trainer.precision": ["32-true"],
    }
    grid = load_grid(write_grid(tmp_path, axes, seeds=(0, 1)))
    variants = grid.variants()
    assert len(variants) == 2 * 2 * 1 * 2
    assert variants[0].id == "pos_embed=learned,attention=mha,precision=32-true,seed=0"
    assert variants[-1].id == "pos_embed=none,attention=mqa_1,precision=32-true,seed=1"  # "/" is not filesystem-safe
    assert len({v.id for v in variants}) == len(variants) and all(SAFE.match(v.id) for v in variants)
    assert {v.name for v in variants if v.seed == 0} == {v.name for v in variants if v.seed == 1}
    mqa = variants[-1].overrides
    # a mapping replaces the recipe's mapping: the key is cleared first
    assert mqa.index("model.attention=null") < mqa.index('model.attention={"kind": "mha", "num_kv_heads": 1}')
    assert mqa[-1] == "seed=1"


def test_a_named_axis_applies_each_value_as_a_set_of_overrides(tmp_path):
    axes = {"position": {"learned": {"model.pos_embed": "learned"}, "rel": {"model.pos_embed": "none",
            "model.attention.bias": {"kind": "relative_2d"}}}}  # fmt: skip
    grid = load_grid(write_grid(tmp_path, axes))
    assert grid.keys() == {"model.pos_embed", "model.attention.bias"}
    learned, rel = grid.variants()
    assert (learned.id, rel.id) == ("position=learned,seed=0", "position=rel,seed=0")
    assert rel.overrides == ('model.pos_embed="none"', "model.attention.bias=null",
                             'model.attention.bias={"kind": "relative_2d"}', "seed=0")  # fmt: skip
    with pytest.raises(ConfigError, match="axes of the grid"):
        plan([VIT], grid, ["model.pos_embed=none"], tmp_path / "out")


def test_a_grid_value_holding_dollar_brace_stays_text(tmp_path, monkeypatch):
    # the grid is read resolved, so "\${oc.env:...}" in it is the text "${oc.env:...}": written back as an override,
    # it became an interpolation again and read the environment
    from omegaconf import OmegaConf

    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    grid = tmp_path / "grid.yaml"
    grid.write_text('axes:\n  task.prompt: ["\\\\${oc.env:ATTNZOO_TEST_SECRET}", "The"]\n')
    first, _ = load_grid(grid).variants()
    tree = OmegaConf.from_dotlist([o for o in first.overrides if o.startswith("task.prompt=")])
    assert OmegaConf.to_container(tree, resolve=True)["task"]["prompt"] == "${oc.env:ATTNZOO_TEST_SECRET}"


def test_values_the_config_reads_apart_are_apart_in_a_grid(tmp_path):
    # {one_batch: 1, all_batches: 1.0} was refused as "the same value (1)": Lightning reads int 1 as one batch, 1.0
    # as all of them
    grid = tmp_path / "grid.yaml"
    grid.write_text("axes:\n  trainer.limit_train_batches: {one_batch: 1, all_batches: 1.0}\n")
    variants = load_grid(grid).variants()
    given = [o for v in variants for o in v.overrides if o.startswith("trainer.")]
    assert given == ["trainer.limit_train_batches=1", "trainer.limit_train_batches=1.0"]


def test_a_very_long_id_is_cut_and_stays_unique(tmp_path):
    values = {f"w{'x' * 150}{i}": {"kind": kind} for i, kind in enumerate(["mha", "sinks"])}
    ids = [v.id for v in load_grid(write_grid(tmp_path, {"model.attention": values})).variants()]
    assert len(set(ids)) == 2 and all(len(i) <= 120 and SAFE.match(i) for i in ids)


@pytest.mark.parametrize(
    ("keys", "labels"),
    [
        (["model.attention.bias.kind", "model.attention.pattern.kind"], ["bias", "pattern"]),
        (["model.attention.kind", "trainer.precision"], ["attention", "precision"]),
        (["model.attention.backend", "model.text.backend"], ["attention.backend", "text.backend"]),
        (["seedless"], ["seedless"]),
    ],
)
def test_axis_labels_are_the_shortest_distinct_suffix(keys, labels):
    assert list(axis_labels(keys).values()) == labels


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("axes: {model.depth: [1, 2]}\nseed: [0]", "unknown key 'seed'"),
        ("axes: {model.depth: 3}", "axes.model.depth: expected a list"),
        ("axes: {model.depth: [1, 1]}", "distinct label"),
        # distinct as written, the same once made safe for a folder name: the message said only "distinct label"
        ('axes: {model.attention.kind: {"a/b": mha, "a b": gated}}', "'a/b' and 'a b' both become 'a_b' in run names"),
        ('axes: {model.depth: [1, "1"]}', "the values 1 and '1' are both labelled '1' (a mapping label -> value"),
        ("axes: {model.depth: [1]}\nseeds: [0, 0]", "repeats a seed"),
        ("axes: {model.depth: [1]}\nseeds: 3", "seeds: expected a non-empty list"),
        ("axes: {model.depth: [1]}\nfixed: {model.depth: 2}", "['model.depth (axis key model.depth)']"),
        (  # a key inside an axis' key: the axis value replaced it whole, silently
            "axes: {model.attention: {mha: {kind: mha}}}\nfixed: {model.attention.backend: eager}",
            "fixed: ['model.attention.backend (axis key model.attention)'] set again by the axes",
        ),
        (  # both labelled "attention": two variants shared a run directory, counted twice in the report
            "axes: {model.attention.kind: [mha, sinks], model.attention: {x: {kind: gated}}}",
            "axis keys model.attention.kind and model.attention overlap",
        ),
        ("", "is empty: a grid lists axes"),  # an empty file trained the recipe as it is
        ("axes: {model.depth: [1]}\nfixed: {trainer: {max_epochs: 1}}", "fixed: expected a mapping of dotted"),
        ("axes: {seed: [1, 2]}", "seeds:"),
        ("axes: {model.depth: [1]}\nmode: best", "mode: 'best'"),
        ("[1, 2]", "expected a mapping"),
        ("axes: {position: [learned, none]}", "axes.position: an axis named without a dot maps labels to sets"),
        ("axes: {position: {a: {pos_embed: none}}}", "axes.position: an axis named without a dot"),
        ("axes: {position: {a: {model.depth: 1}}, model.depth: [2, 3]}", "['model.depth'] set by more than one axis"),
        # two labels of one value ran one config twice; a recipe given as the grid was "unknown key 'seed'"
        ("axes: {model.attention.kind: {a: mha, b: mha}}", "axes.model.attention.kind: a and b are the same value"),
        ("seed: 0\nmodel: {kind: vit}\ntrainer: {max_epochs: 1}", "looks like a recipe (it has the config sections"),
    ],
)
def test_a_malformed_grid_names_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_grid(path)
    assert str(path) in str(err.value)


def test_a_variant_with_an_invalid_config_stops_the_plan_naming_it(tmp_path):
    grid = load_grid(write_grid(tmp_path, {"model.attention.kind": ["mha", "mah"]}))
    with pytest.raises(ConfigError, match=r"variant attention=mah,seed=0: .*did you mean 'mha'"):
        plan([VIT], grid, [], tmp_path / "out")
    grid = load_grid(write_grid(tmp_path, {"model.attention.kind": ["mha", None]}))  # a TypeError from difflib
    with pytest.raises(ConfigError, match=r"variant attention=none,seed=0: model.attention.kind: expected a name of "
                                          r"\['mha', .*got None \(set in the grid's axes"):  # fmt: skip
        plan([VIT], grid, [], tmp_path / "out")
    grid = load_grid(write_grid(tmp_path, {"model.patch_size": [7, 14]}))
    with pytest.raises(ConfigError, match="axes of the grid"):
        plan([VIT], grid, ["model.patch_size=4"], tmp_path / "out")


def test_overrides_an_axis_would_replace_or_a_seed_are_refused_and_fixed_errors_name_the_grid(tmp_path):
    # under an axis that sets the whole mapping, the overrides were dropped without a word; seed=5 too
    grid = load_grid(write_grid(tmp_path, {"model.attention": {"mha": {"kind": "mha"}, "mqa": {"num_kv_heads": 1}}}))
    with pytest.raises(ConfigError, match=r"overrides \['model.attention.backend'\] set keys that axes of the grid"):
        plan([VIT], grid, ["model.attention.backend=eager"], tmp_path / "out")
    with pytest.raises(ConfigError, match=r"override 'seed=5': the runs take their seeds from the grid's seeds: list"):
        plan([VIT], grid, ["seed=5"], tmp_path / "out")
    grid = load_grid(write_grid(tmp_path, {"model.patch_size": [8]}, fixed={"trainer.max_epoch": 1}))
    with pytest.raises(ConfigError, match=rf"trainer.max_epoch: unknown key \(set in grid {re.escape(str(grid.path))}, "
                                          r"fixed \('trainer.max_epoch=1'\)\)"):  # fmt: skip
        plan([VIT], grid, [], tmp_path / "out")


def test_alternatives_of_a_named_axis_and_a_seed_study_plan(tmp_path):
    # one named axis' values never apply together: keys of two of them may nest (they were refused as overlapping)
    variant = {"mha": {"model.attention.kind": "mha"}, "mqa": {"model.attention": {"kind": "mha", "num_kv_heads": 1}}}
    runs = plan([VIT], load_grid(write_grid(tmp_path, {"variant": variant})), [], tmp_path / "out")
    assert [r.variant.id for r in runs] == ["variant=mha,seed=0", "variant=mqa,seed=0"]
    inner_first = {"a": {"model.attention.pattern": "none", "model.attention": {"kind": "mha"}}}
    with pytest.raises(ConfigError, match="axis keys model.attention.pattern and model.attention overlap"):
        load_grid(write_grid(tmp_path, {"variant": inner_first}))
    # no axes: the seeds given to the ablation (--seeds) are what varies; without any, nothing does
    study = load_grid(write_grid(tmp_path, {}, seeds=None))
    with pytest.raises(ConfigError, match="nothing to vary: no axes and no seeds"):
        plan([VIT], study, [], tmp_path / "out")
    study.seeds = [0, 1]
    assert [r.variant.id for r in plan([VIT], study, [], tmp_path / "out")] == ["seed=0", "seed=1"]


def test_variants_that_would_share_a_run_directory_are_refused(tmp_path):
    axes = {"model.patch_size": {"a": 4, "b": 8}, "model.img_size": {"a": 32, "b": 64}}  # two axes, one label
    grid = Grid(tmp_path / "grid.yaml", axes, {"model.patch_size": "x", "model.img_size": "x"}, seeds=[0])
    with pytest.raises(ConfigError, match=r"variants \['x=a,seed=0', 'x=b,seed=0'\] would share an id"):
        grid.variants()


def _grid_cases():
    for path in GRIDS:
        recipes = load_grid(path).recipes or list(RECIPES)
        for name in recipes:
            yield pytest.param(path, name, id=f"{path.stem}-{name}")


@functools.cache
def _data(recipe: str):
    """(the DataModule, a batch of 2 training examples) of a recipe's data (sized as its smoke run)."""
    smoke = [o for o in smoke_overrides(load([RECIPES[recipe]])) if o.startswith("data.")]
    data = build_data(load([RECIPES[recipe]], smoke))
    batch = next(iter(data.train_dataloader()))
    return data, {k: v[:2] for k, v in batch.items()}


@pytest.mark.parametrize(("grid_path", "recipe"), list(_grid_cases()))
def test_every_shipped_grid_expands_to_configs_that_build_and_take_a_step(grid_path, recipe, tmp_path):
    assert recipe in RECIPES, f"{grid_path} names recipe {recipe!r}; recipes are {sorted(RECIPES)}"
    grid = load_grid(grid_path)
    runs = plan([RECIPES[recipe]], grid, [], tmp_path)  # validates every combination's config, trains nothing
    assert len(runs) == len(grid.variants()) >= 2, "an ablation grid should compare at least two runs"
    assert len({r.config_sha for r in runs}) == len(runs), "two variants of the grid produce the same config"
    data, batch = _data(recipe)
    for run in {r.variant.name: r for r in runs}.values():  # one forward and backward per variant (not per seed)
        cfg = load([RECIPES[recipe]], run.overrides)
        net = build_net(resolve(cfg, data))  # with what the data chooses for the recipe's `auto` keys, as a run does
        if cfg.section("trainer").get("grad_checkpointing"):
            net.set_grad_checkpointing(True)
        logits = net(**TASKS[cfg.section("task")["kind"]].net_inputs(batch))
        logits.float().logsumexp(-1).sum().backward()
        assert all(p.grad is not None for p in net.parameters() if p.requires_grad), run.variant.name


def test_a_failing_run_is_recorded_with_its_error_and_the_others_go_on(tmp_path, monkeypatch):
    import attnzoo.ablation.runner as module

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["eager", "sdpa"]}, seeds=(0, 1))
    out = ablate([VIT], grid, tmp_path / "out")
    records = {p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/ablate.json")}
    assert {k: r["status"] for k, r in records.items()} == {
        "backend=eager,seed=0": "failed",
        "backend=eager,seed=1": "failed",
        "backend=sdpa,seed=0": "ok",
        "backend=sdpa,seed=1": "ok",
    }
    failed = records["backend=eager,seed=0"]
    assert failed["error"] == "RuntimeError: out of memory (pretend)" and failed["returncode"] == 1
    assert "Traceback" in failed["stderr_tail"][0]
    rows = {r["variant"]: r for r in _csv(out / "report.csv")}
    assert rows["backend=eager"]["runs_failed"] == "2" and rows["backend=eager"]["metric_mean"] == ""
    sdpa = rows["backend=sdpa"]
    assert float(sdpa["metric_mean"]) == pytest.approx(0.55) and float(sdpa["metric_std"]) == pytest.approx(0.0707107)
    assert float(sdpa["samples_per_s_mean"]) == pytest.approx(110.0) and sdpa["memory_kind"] == "rss"
    report = (out / "report.md").read_text()
    assert "| **`backend=sdpa`** | **0.5500 ± 0.0707** | 110 ± 14 | 1024 ± 0 | 1,000 |" in report
    assert "| `backend=eager` | - |" in report and "0/2 ok, 2 failed" in report
    assert "`backend=eager,seed=1`: RuntimeError: out of memory (pretend)" in report

    # started again: the failed runs run again (unless --skip-failed); the finished ones do not
    kept = (out / "runs" / "backend=sdpa,seed=0" / "ablate.json").read_text()
    states = {r.variant.id: status(r) for r in plan([VIT], load_grid(grid), [], out)}
    assert sorted(states.values()) == ["failed", "failed", "ok", "ok"]
    ablate([VIT], grid, out, skip_failed=True)
    assert (out / "runs" / "backend=sdpa,seed=0" / "ablate.json").read_text() == kept
    # a finished run made from another config is not silently reused, and the refused plan leaves ablation.json
    recorded = (out / "ablation.json").read_text()
    with pytest.raises(ConfigError, match=r"different config \(overrides \[\] then, \['model.mlp_ratio=2.0'\] now\)"):
        ablate([VIT], grid, out, ["model.mlp_ratio=2.0"])
    assert (out / "ablation.json").read_text() == recorded


def _png_ok(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_a_2x1_grid_on_a_tiny_recipe_writes_csv_markdown_and_plots(tmp_path):
    grid = write_grid(tmp_path, {"model.attention.backend": ["eager", "sdpa"]})
    out = ablate([VIT], grid, tmp_path / "out", command_line="python -m attnzoo.ablate (test)")
    rows = _csv(out / "report.csv")
    baseline = "baseline: pixels + logistic regression"  # the recipe fits one (run.baseline: true): a row of its own
    assert [r["variant"] for r in rows] == ["backend=eager", "backend=sdpa", baseline]
    assert rows[-1]["backends"] == "scikit-learn" and rows[-1]["runs_ok"] == "2"  # one baseline per finished run
    assert 0.0 <= float(rows[-1]["metric_mean"]) <= 1.0
    rows = rows[:-1]
    for row in rows:
        assert row["runs_ok"] == "1" and row["metric"] == "test/acc" and 0.0 <= float(row["metric_mean"]) <= 1.0
        assert float(row["samples_per_s_mean"]) > 0 and float(row["wall_s_mean"]) > 0 and int(row["parameters"]) > 0
        assert row["backends"] == row["backend"]  # the backend the runs report is the one the variant asked for
    table = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(rows) and "backend=eager" in table[1] and "backend=sdpa" in table[2]
    assert baseline in table[3]
    # the embedded digits have no test split: "test/acc" was the val split that also picked each checkpoint
    assert "The runs have no test split: test/ is the val split" in (out / "report.md").read_text()
    assert all(_png_ok(out / name) for name in ("metric.png", "metric_vs_throughput.png"))
    assert len(_csv(out / "runs.csv")) == 2


def test_runs_that_never_validated_are_reported_on_the_test_split_of_their_monitor(tmp_path):
    # runs shorter than their first validation have no best checkpoint: the report said "Metric: none", every cell -
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa"]}, fixed={"trainer.limit_val_batches": 0})
    out = ablate([VIT], grid, tmp_path / "out", overrides=["run.baseline=false"])
    summary = json.loads((out / "runs" / "backend=sdpa,seed=0" / "summary.json").read_text())
    assert "best" not in summary and summary["monitor"] == "val/acc" and "test/acc" in summary["test"]
    rows = _csv(out / "report.csv")
    assert rows[0]["metric"] == "test/acc" and 0.0 <= float(rows[0]["metric_mean"]) <= 1.0


@pytest.mark.slow  # ~40 s; the runs started again are chosen by the same records in the failed-run test above
def test_an_ablation_killed_midway_runs_only_the_missing_runs_when_started_again(tmp_path):
    grid = write_grid(tmp_path, {"model.attention.backend": ["eager", "sdpa"]})
    out = tmp_path / "out"
    command = [sys.executable, "-m", "attnzoo.ablate", "--config", str(VIT), "--grid", str(grid), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first, second = out / "runs" / "backend=eager,seed=0", out / "runs" / "backend=sdpa,seed=0"
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 600
    while not (second / "ablate.json").is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the ablation and its fit run, no cleanup
    proc.wait()
    assert json.loads((first / "ablate.json").read_text())["status"] == "ok"
    assert not (second / "summary.json").exists(), "the second run finished before the kill; nothing was tested"
    finished = (first / "ablate.json").read_text(), (first / "summary.json").stat().st_mtime_ns

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 runs, 1 finished, 1 to run" in again.stderr
    assert ((first / "ablate.json").read_text(), (first / "summary.json").stat().st_mtime_ns) == finished
    assert json.loads((second / "ablate.json").read_text())["status"] == "ok"
    assert [(r["variant"], r["runs_ok"]) for r in _csv(out / "report.csv")][:2] == [
        ("backend=eager", "1"),
        ("backend=sdpa", "1"),
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"kind": "slidng_window", "window": 4},
            r"pattern.kind: unknown 'slidng_window'.*did you mean 'sliding_window'",
        ),
        ({"kind": "sliding_window", "windw": 4}, r"pattern: 'sliding_window' takes no argument 'windw'.*'window'"),
    ],
)
def test_the_plan_and_dry_run_catch_a_typo_inside_a_mapping_value(value, message, tmp_path, capsys):
    from attnzoo.ablate import main

    axes = {"model.attention.pattern": {"full": "none", "w": value}}
    grid = write_grid(tmp_path, axes)
    with pytest.raises(ConfigError, match=rf"variant pattern=w,seed=0: model.attention.{message}"):
        plan([VIT], load_grid(grid), [], tmp_path / "out")
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "did you mean" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("axis", "values", "message"),
    [
        ("model.attention.backend", ["eager", "sdpaa"], r"unknown attention backend 'sdpaa'.*did you mean 'sdpa'"),
        ("model.attention.num_kv_heads", [1, 3], r"num_kv_heads \(3, .*does not divide model.num_heads \(2"),
        ("model.depth", [1, 0], r"model.depth: 0 .*must be >= 1"),
        ("data.batch_size", [8, -1], r"data.batch_size: -1 .*must be >= 1"),
        # refused by the model or the data once built: each such run failed after the ablation started
        (
            "model.patch_size",
            [7, 5],
            r"model.patch_size \(5, .*does not divide the images' side, 28 px \(the "
            r"embedded digits'\).*\[1, 2, 4, 7, 14\]",
        ),
    ],
)
def test_values_that_only_a_builder_would_refuse_stop_the_plan_before_any_run(axis, values, message, tmp_path):
    """A typo'd value in a long grid is named before the first run trains, not when its run comes up."""
    fixed = {k: v for k, v in TINY_VIT.items() if k != axis}
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "fixed": fixed, "axes": {axis: values}}))
    with pytest.raises(ConfigError, match=message):
        plan([VIT], load_grid(grid), [], tmp_path / "out")


@pytest.mark.parametrize(
    "recipe, axis, values, message",
    [
        ("text_cls", "data.tokenizer", ["unigram", "bpee"], r"tokenizer=bpee,seed=0: data.tokenizer: unknown 'bpee'"),
        ("text_cls", "data.tokenizer", ["bytes", "/no/tok.json"], r"data.tokenizer: no tokenizer file '/no/tok.json'"),
        ("vit", "data.root", [None, "/no/images"], r"root=no_images,seed=0: data.root: directory '/no/images' does"),
    ],
)
def test_what_fit_refuses_before_reading_data_stops_the_plan_before_any_run(recipe, axis, values, message, tmp_path):
    # the dry run listed these variants, and the ablation trained the others before the bad one failed
    from attnzoo.ablate import main
    from attnzoo.ablation.runner import ablate

    fixed = {"data.dataset": "folder"} if axis == "data.root" else {}
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "fixed": fixed, "axes": {axis: values[1:]}}))
    config = ROOT / "recipes" / f"{recipe}.yaml"

    class Never:
        def launch(self, *args):
            raise AssertionError("a run began")

    with pytest.raises(ConfigError, match=message):
        ablate([config], grid, tmp_path / "out", launcher=Never())
    assert main(["--config", str(config), "--grid", str(grid), "--out", str(tmp_path / "o"), "--dry-run"]) == 2


def test_an_image_size_the_patch_size_does_not_divide_stops_the_plan_and_auto_picks_one_that_does(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "fixed": {**TINY_VIT, "model.patch_size": 7},
                                "axes": {"data.img_size": [28, 30]}}))  # fmt: skip
    with pytest.raises(ConfigError, match=r"variant img_size=30,seed=0: model.patch_size \(7, .*does not divide the "
                                          r"images' side, 30 px \(set in .*\[1, 2, 3, 5, 6, 10, 15\]"):  # fmt: skip
        plan([VIT], load_grid(grid), [], tmp_path / "out")
    # the recipe's patch_size: auto took the embedded digits' 7 for any side, and the 30 px run failed when built
    from attnzoo.data.modules.defaults import image_model

    chosen = image_model(embedded=True, img_size=30, num_train=100, batch_size=16)
    assert chosen["model.patch_size"][0] == 5 and "6x6 patch grid" in chosen["model.patch_size"][1]
    assert image_model(embedded=True, img_size=28, num_train=100, batch_size=16)["model.patch_size"][0] == 7


def test_embedded_listops_longer_than_data_max_len_stops_the_plan_before_any_run(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "axes": {"data.max_len": [64, 16]}}))
    with pytest.raises(ConfigError, match=r"variant max_len=16,seed=0: data.max_len \(16\) is shorter than the "
                                          r"embedded ListOps expressions, data.listops.max_len \(40\).*\(set in the "
                                          r"grid's axes"):  # fmt: skip
        plan([ROOT / "recipes" / "text_cls.yaml"], load_grid(grid), [], tmp_path / "out")
    grid.write_text(json.dumps({"seeds": [0], "axes": {"data.max_len": [64, 40]}}))
    assert len(plan([ROOT / "recipes" / "text_cls.yaml"], load_grid(grid), [], tmp_path / "out")) == 2


def test_an_ablation_with_a_failed_run_exits_1_naming_it(tmp_path, monkeypatch, capsys):
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["eager", "sdpa"]})
    out = tmp_path / "out"
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "1 of 2 runs failed: ['backend=eager,seed=0']" in err and str(out / "report.md") in err
    assert (out / "report.md").is_file() and not (out / ".lock").exists()


def test_a_mistyped_metric_is_an_error_naming_the_reported_ones_and_report_only_takes_the_corrected_grid(
    tmp_path, monkeypatch, capsys
):
    """Before, every run was 'ok' and the report showed a column of '-' for the metric no run logs, exit 0; and
    --report-only kept the stored metric whatever the corrected grid said."""
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]})
    raw = json.loads(grid.read_text())
    grid.write_text(json.dumps({**raw, "metric": "test/accc"}))
    out = tmp_path / "out"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "metric 'test/accc' (the grid's metric:) is in no finished run's summary" in err
    assert "'test/acc'" in err and "did you mean 'test/acc'?" in err
    grid.write_text(json.dumps(raw))  # the metric: line deleted: the default (the recipe's monitored metric)
    assert main([*args, "--report-only"]) == 0
    assert "test/acc" in (out / "report.md").read_text() and "accc" not in (out / "report.md").read_text()
    grid.unlink()  # the grid moved away: --report-only still writes the report, from what the ablation stored
    assert main([*args, "--report-only"]) == 2 and "test/accc" in capsys.readouterr().err


def test_a_finished_run_whose_metric_is_nan_or_infinite_is_counted_apart_not_averaged(tmp_path, monkeypatch):
    """A run whose last steps diverged finishes with test/loss NaN (or test/ppl inf): the report crashed in
    statistics.stdev, and with one seed a NaN mean took the best variant's bold away."""
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    diverged = "{('sdpa', 0): float('nan'), ('blocked', 0): float('inf'), ('blocked', 1): float('inf')}"
    fit = FAKE_FIT.replace(
        '"test/acc": 0.5 + 0.1 * seed',
        f'"test/acc": {diverged}.get((backend, seed), 0.5 + 0.1 * seed)',
    ).replace(
        "seed = int(",
        "backend = next(a for a in args if a.startswith('model.attention.backend=')).split('=')[1].strip('\"')\n"
        "seed = int(",
    )
    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", fit, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "blocked", "auto"]}, seeds=(0, 1))
    out = tmp_path / "my out"  # the report's command line is quoted so that it can be pasted
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out)]
    assert main(args) == 0 and main([*args, "--report-only"]) == 0
    rows = {r["variant"]: r for r in _csv(out / "report.csv")}
    assert (rows["backend=sdpa"]["metric_mean"], rows["backend=sdpa"]["runs_ok"]) == ("0.6", "2")
    assert rows["backend=blocked"]["metric_mean"] == "" and float(rows["backend=auto"]["metric_mean"]) == 0.55
    report = (out / "report.md").read_text()
    assert f"`python -m attnzoo.ablate {shlex.join(args)}`" in report, report[:400]
    assert "| **`backend=sdpa`** | **0.6000** |" in report
    assert "2/2 ok (1 with a NaN or infinite metric, left out of the mean)" in report
    assert "| `backend=blocked` | - |" in report and "2/2 ok (2 with a NaN or infinite metric" in report


def test_report_only_covers_the_grids_seeds_not_only_the_last_commands(tmp_path, monkeypatch, capsys):
    """After `--seeds 1`, --report-only (with or without --seeds 0 1) reported seed 1 alone: ablation.json kept the
    variants of the last command that ran."""
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]}, seeds=(0, 1))
    out = tmp_path / "out"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out)]
    assert main(args) == 0 and main([*args, "--seeds", "1"]) == 0
    assert "over seeds [1]" in (out / "report.md").read_text()  # the command's own runs
    for extra in ([], ["--seeds", "0", "1"]):
        assert main([*args, "--report-only", *extra]) == 0
        assert "over seeds [0, 1]" in (out / "report.md").read_text(), extra
    assert main([*args, "--report-only", "--seeds", "0"]) == 0 and "over seeds [0]" in (out / "report.md").read_text()
    # other overrides than the runs were made with: their numbers were reported as those of this config
    assert main([*args, "model.depth=2", "--report-only"]) == 2
    assert "made from a different config (overrides [] then, ['model.depth=2'] now); --report-only" in (
        capsys.readouterr().err
    )
    grid.unlink()
    with pytest.raises(SystemExit):
        main([*args, "--report-only", "--seeds", "0"])
    assert "the grid" in capsys.readouterr().err
    # a grid without seeds: list, run with --seeds 0 1 2: those seeds stay in the report
    seedless = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]}, seeds=None, name="free.yaml")
    args = ["--config", str(VIT), "--grid", str(seedless), "--out", str(tmp_path / "free")]
    assert main([*args, "--seeds", "0", "1", "2"]) == 0 and main([*args, "--report-only"]) == 0
    assert "over seeds [0, 1, 2]" in (tmp_path / "free" / "report.md").read_text()
    # and one run with a seed= override: --report-only (and the same command again) keeps that one seed
    args = ["--config", str(VIT), "--grid", str(seedless), "--out", str(tmp_path / "seven"), "seed=7"]
    assert main(args) == 0 and main([*args, "--report-only"]) == 0 and main(args) == 0


_DRIVER = """
import sys
import attnzoo.ablation.runner as runner
fake = sys.argv[1]
runner.fit_command = lambda configs, run: [sys.executable, "-c", fake, *run.overrides, "--run-dir", str(run.run_dir)]
from attnzoo.ablate import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("presses", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_stops_the_runs_in_flight_starts_no_queued_one_and_exits_130(presses, tmp_path):
    grid = write_grid(tmp_path, {"model.attention.backend": ["eager", "sdpa"]}, seeds=(0, 1))
    out = tmp_path / "out"
    command = [sys.executable, "-c", _DRIVER, SLOW_FIT, "--config", str(VIT), "--grid", str(grid), "--out", str(out),
               "--jobs", "2"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 300
        while len(list(out.glob("runs/*/started"))) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert len(list(out.glob("runs/*/started"))) == 2, "the first two runs never started"
        for _ in range(presses):  # Ctrl-C in a terminal: SIGINT to the ablation and its runs
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "started none of the 2 queued" in err, err
    started = sorted(p.parent.name for p in out.glob("runs/*/started"))
    assert len(started) == 2 and len(list((out / "runs").iterdir())) == 2  # the queued runs never started
    for name in started:
        record = json.loads((out / "runs" / name / "ablate.json").read_text())
        assert record["status"] == "interrupted", record
    assert not list(out.rglob("*.tmp")) and not (out / ".lock").exists()
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["0", "0"]

    again = subprocess.run(command, env={**env, "FAKE_FIT": "fast"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 runs, 0 finished, 4 to run" in again.stderr
    assert [r["runs_ok"] for r in _csv(out / "report.csv")] == ["2", "2"]


def test_overrides_after_the_seeds_are_overrides(tmp_path, capsys):
    """`--seeds 0 1 trainer.max_epochs=1` stopped with "argument --seeds: invalid int value"."""
    from attnzoo.ablate import main

    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa"]})
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]
    assert main([*args, "trainer.max_epochs=2", "--seeds", "3", "4", "trainer.max_epochs=1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["backend=sdpa,seed=3", "backend=sdpa,seed=4"]
    assert all(line.index("trainer.max_epochs=2") < line.index("trainer.max_epochs=1") for line in lines)
    with pytest.raises(SystemExit):
        main([*args, "--seeds", "trainer.max_epochs=1"])
    assert "expected seed numbers" in capsys.readouterr().err
    # a seed given twice was blamed on the values' labels; a negative one on the grid's axes
    for seeds, message in ((["0", "0"], "0 given twice"), (["-1"], "[-1]: seeds are numbers >= 0")):
        with pytest.raises(SystemExit):
            main([*args, "--seeds", *seeds])
        assert f"argument --seeds: {message}" in capsys.readouterr().err


def test_another_study_in_the_same_out_is_said_to_replace_the_report(tmp_path, monkeypatch, capsys):
    # another grid's report replaced the first one's with no word (only clashing variant ids were refused)
    import attnzoo.ablation.runner as module

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    out = tmp_path / "out"
    ablate([VIT], write_grid(tmp_path, {"model.attention.backend": ["sdpa"]}), out)
    ablate([VIT], write_grid(tmp_path, {"model.attention.backend": ["sdpa", "blocked"]}, name="more.yaml"), out)
    assert "held an ablation over other axes" not in capsys.readouterr().err  # more values of the same axis
    ablate([VIT], write_grid(tmp_path, {"model.attention.kind": ["mha"]}, name="kind.yaml"), out)
    err = capsys.readouterr().err
    assert f"{out} held an ablation over other axes (['model.attention.backend'], grid" in err


def test_a_finished_run_is_reused_only_for_the_same_files_not_the_same_typed_path(tmp_path, monkeypatch):
    # data.train=train.csv typed in another directory (another file) reused the finished run silently, and the same
    # file typed as explore/train.csv from the parent was refused as "a different config"
    import hashlib

    text = ROOT / "recipes" / "text_cls.yaml"
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "axes": {"model.depth": [1]}}))
    for name in ("a", "b", "run #2: x"):  # a folder name that YAML would read as a comment or a mapping
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.csv").write_text(f"text,label\nsome words {name},x\nother words,y\n")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path / "a")
    (run,) = plan([text], load_grid(grid), ["data.train=train.csv"], out)
    assert f'data.train="{tmp_path / "a" / "train.csv"}"' in run.overrides  # the command reads it from anywhere
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "summary.json").write_text('{"finished": true}')
    (run.run_dir / "ablate.json").write_text(json.dumps({"config_sha": run.config_sha, "status": "ok"}))
    assert status(run) == "ok"
    monkeypatch.chdir(tmp_path)  # the same file, typed from the parent
    assert status(plan([text], load_grid(grid), ["data.train=a/train.csv"], out)[0]) == "ok"
    monkeypatch.chdir(tmp_path / "b")  # another file of the same name
    with pytest.raises(ConfigError, match="made from a different config"):
        status(plan([text], load_grid(grid), ["data.train=train.csv"], out)[0])
    fixed = tmp_path / "fixed.yaml"  # the path set by the grid (its values are JSON-quoted overrides)
    fixed.write_text(json.dumps({"seeds": [0], "fixed": {"data.train": "train.csv"}, "axes": {"model.depth": [1]}}))
    with pytest.raises(ConfigError, match="made from a different config"):
        status(plan([text], load_grid(fixed), [], out)[0])
    monkeypatch.chdir(tmp_path / "run #2: x")
    (other,) = plan([text], load_grid(grid), ["data.train=train.csv"], tmp_path / "out2")
    assert other.paths == {"data.train": str(tmp_path / "run #2: x" / "train.csv")}
    # a run of an earlier ablation, planned from the typed path: reused where its config.yaml read the same file
    typed = load([text], run.overrides[:-1])  # the config as planned then
    old_sha = hashlib.sha256(typed.to_yaml().encode()).hexdigest()[:16]
    (run.run_dir / "ablate.json").write_text(json.dumps({"config_sha": old_sha, "status": "ok"}))
    (run.run_dir / "config.yaml").write_text(f"data:\n  train: {tmp_path / 'a' / 'train.csv'}\n")
    monkeypatch.chdir(tmp_path / "a")
    assert status(plan([text], load_grid(grid), ["data.train=train.csv"], out)[0]) == "ok"
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ConfigError, match="made from a different config"):
        status(plan([text], load_grid(grid), ["data.train=train.csv"], out)[0])


def test_a_variant_scored_on_its_val_split_is_marked_beside_held_out_ones(tmp_path):
    # "The runs have no test split" was said of every variant as soon as one of them had none
    from attnzoo.ablation.report import Row, Run, write_tables

    def row(name, split, value):
        summary = {"test": {"test/acc": value, "split": split}, "best": {"val/acc": value}}
        return Row(name, {}, [Run(f"{name},seed=0", 0, "ok", {}, summary)], metric=[value])

    info = {"configs": ["recipes/text_cls.yaml"], "grid": "g.yaml"}
    write_tables(tmp_path, info, [row("held_out", "test", 0.90), row("no_test", "val", 0.95)], "test/acc", "max")
    report = (tmp_path / "report.md").read_text()
    assert "| **`no_test`** | **0.9500 †** |" in report and "| `held_out` | 0.9000 |" in report
    assert "† No test split: test/ is the val split" in report and "The runs have no test split" not in report
    write_tables(tmp_path, info, [row("a", "val", 0.9), row("b", "val", 0.8)], "test/acc", "max")
    report = (tmp_path / "report.md").read_text()
    assert "The runs have no test split: test/ is the val split" in report and "†" not in report


def test_a_variant_whose_seeds_differ_in_size_shows_the_range_of_parameter_counts(tmp_path):
    # the first run's count stood for every seed (a vocabulary learned from each seed's split can differ)
    import csv

    from attnzoo.ablation.report import Row, Run, write_tables

    def run(seed, params):
        return Run(f"v,seed={seed}", seed, "ok", {}, {"test": {"test/acc": 0.5}, "parameters": params})

    rows = [Row("v", {}, [run(0, 12345), run(1, 12001)], metric=[0.5, 0.5], parameters=[12345, 12001]),
            Row("w", {}, [run(0, 999)], metric=[0.4], parameters=[999])]  # fmt: skip
    write_tables(tmp_path, {"configs": ["recipes/text_cls.yaml"], "grid": "g.yaml"}, rows, "test/acc", "max")
    report = (tmp_path / "report.md").read_text()
    assert "| 12,001–12,345 |" in report and "| 999 |" in report
    with open(tmp_path / "report.csv", newline="") as f:
        assert [r["parameters"] for r in csv.DictReader(f)] == ["12001-12345", "999"]


def test_metric_against_throughput_names_close_variants_apart_in_a_legend(tmp_path, monkeypatch):
    # the names were written beside the points: two variants with close points overprinted each other's
    from attnzoo.ablation.report import Row, plot_metric_vs_throughput
    from tests.helpers.figures import clipped_and_overlapping, record_texts

    names = [f"model.num_heads={h}" for h in (1, 2, 4, 8)]
    points = [(0.2, 1000.0), (0.2001, 1001.0), (0.3, 1500.0), (0.25, 1200.0)]  # the first two close together
    rows = [Row(n, {}, metric=[m], throughput=[t]) for n, (m, t) in zip(names, points, strict=True)]
    rows.append(Row("baseline: tfidf + logistic regression", {}, metric=[0.2002], baseline=True))
    drawn = record_texts(monkeypatch)
    plot_metric_vs_throughput(rows, "test/acc", tmp_path / "plot.png")
    assert clipped_and_overlapping(drawn) == ([], [])
    texts = [t.text for t in drawn.values()]
    assert all(texts.count(row.name) == 1 for row in rows)  # each variant named once
    (figure,) = {t.artist.figure for t in drawn.values()}
    assert [t.get_text() for t in figure.legends[0].get_texts()] == [rows[-1].name, *names]  # in the legend
    caps = ("|", "_", "None", "", None)  # the error bars' caps, the baseline's line
    marks = {
        (line.get_color(), line.get_marker()) for line in figure.axes[0].get_lines() if line.get_marker() not in caps
    }
    assert len(marks) == len(names)  # each point told apart by its color and marker


def test_an_out_folder_holding_the_users_own_report_is_refused_not_written_over(tmp_path, monkeypatch, capsys):
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]})
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(mine)]) == 2
    assert "holds report.md that no ablation wrote" in capsys.readouterr().err
    assert (mine / "report.md").read_text() == "my notes\n" and not (mine / "runs").exists()
    out = tmp_path / "out"  # an ablation's own report is replaced by the next one
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(out)]) == 0
    assert main(["--config", str(VIT), "--grid", str(grid), "--out", str(out)]) == 0


def test_a_finished_run_on_data_that_changed_since_is_refused_not_reported_beside_the_others(tmp_path):
    # the train file cut to half after seed 0 finished: --seeds 0 1 ran seed 1 on it and reported both as one row
    from attnzoo.run.paths import record_data_files

    text = ROOT / "recipes" / "text_cls.yaml"
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "axes": {"model.depth": [1]}}))
    train = tmp_path / "train.csv"
    train.write_text("text,label\nsome words,x\nother words,y\nmore words,x\n")
    (run,) = plan([text], load_grid(grid), [f"data.train={train}"], tmp_path / "out")
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(load([text], run.overrides).to_yaml())
    record_data_files({"train": str(train)}, run.run_dir)
    (run.run_dir / "summary.json").write_text('{"finished": true}')
    (run.run_dir / "ablate.json").write_text(json.dumps({"config_sha": run.config_sha, "status": "ok"}))
    assert status(run) == "ok"
    train.write_text("text,label\nsome words,x\nother words,y\n")
    with pytest.raises(ConfigError, match=rf"made from data that changed since \(data.train: {re.escape(str(train))} "
                                          r"\(\d+ bytes then, \d+ now\)\); use another --out"):  # fmt: skip
        status(run)


_DATA_FIT = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
easy = "data.max_len=64" in args
baseline = {"features": "text", "model": "logistic regression", "test/acc": 0.9 if easy else 0.5}
summary = {"test": {"test/acc": 0.7}, "best": {"path": "x", "val/acc": 0.7}, "baseline": baseline}
(run_dir / "summary.json").write_text(json.dumps(summary))
"""


def test_baselines_of_other_data_are_reported_apart_not_averaged(tmp_path, monkeypatch):
    # a grid over two datasets reported one baseline row, the mean of 0.9 on one and 0.5 on the other
    import attnzoo.ablation.runner as module

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", _DATA_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    text = ROOT / "recipes" / "text_cls.yaml"
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({"seeds": [0], "axes": {"data.max_len": [48, 64], "model.depth": [1, 2]}}))
    out = ablate([text], grid, tmp_path / "out")
    report = (out / "report.md").read_text()
    assert "baseline: text + logistic regression (max_len=48)* | *0.5000" in report, report
    assert "baseline: text + logistic regression (max_len=64)* | *0.9000" in report
    assert json.loads((out / "ablation.json").read_text())["data_axes"] == ["max_len"]
    grid.write_text(json.dumps({"seeds": [0], "axes": {"model.depth": [1, 2]}}))  # one dataset: one baseline row
    out = ablate([text], grid, tmp_path / "one", ["data.max_len=64"])
    assert "baseline: text + logistic regression* | *0.9000" in (out / "report.md").read_text()
    grid.write_text(json.dumps({"seeds": [0], "axes": {"data.batch_size": [8, 16]}}))  # the same baseline each
    out = ablate([text], grid, tmp_path / "batch", ["data.max_len=64"])
    assert (out / "report.md").read_text().count("baseline: text + logistic regression") == 1


def test_a_grid_made_for_other_recipes_is_said_before_any_run(tmp_path, monkeypatch, capsys):
    # text_cls with the lm grid (metric test/ppl) trained all 5 runs, then failed on a metric no run reports
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = ROOT / "configs" / "ablations" / "lm_position.yaml"
    args = ["--config", str(ROOT / "recipes" / "text_cls.yaml"), "--grid", str(grid), "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    warned = err.index(f"warning: the grid {grid} is made for the recipes ['lm']")
    assert warned < err.index("[1/") and "its metric 'test/ppl' may be one this recipe does not report" in err
    assert "?." not in err  # "did you mean 'test/loss'?. Correct the grid"


def test_report_only_reports_the_seeds_that_ran_not_a_grid_seed_no_command_ran(tmp_path, monkeypatch):
    # a grid of seeds [0, 1] run with --seeds 0: --report-only made every row "1/2 ok, 1 missing"
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]}, seeds=(0, 1))
    out = tmp_path / "out"
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(out)]
    assert main([*args, "--seeds", "0"]) == 0 and main([*args, "--report-only"]) == 0
    report = (out / "report.md").read_text()
    assert "over seeds [0]" in report and "missing" not in report, report


def test_the_report_of_finished_runs_is_written_where_their_data_is_gone(tmp_path, monkeypatch):
    # runs copied from a cluster, or the data moved since: --report-only was refused, "data.root: directory ... does
    # not exist" (only runs still to run are checked against their data)
    import attnzoo.ablation.runner as module
    from attnzoo.ablate import main

    monkeypatch.setattr(module, "fit_command", lambda configs, run: [sys.executable, "-c", FAKE_FIT, *run.overrides,
                                                                      "--run-dir", str(run.run_dir)])  # fmt: skip
    images = tmp_path / "imgs"
    for name in ("a", "b"):
        (images / name).mkdir(parents=True)
    grid = write_grid(tmp_path, {"model.attention.backend": ["sdpa", "auto"]})
    args = ["--config", str(VIT), "--grid", str(grid), "--out", str(tmp_path / "out"), "data.dataset=folder",
            f"data.root={images}"]  # fmt: skip
    assert main(args) == 0
    images.rename(tmp_path / "elsewhere")
    assert main([*args, "--report-only"]) == 0 and main(args) == 0  # every run finished: nothing to check
