"""`attnzoo.ablate` over a pretrained start: the shipped grid that converts a pretrained text encoder to a sliding
window, BigBird and ALiBi plans its runs from a BERT folder (`--dry-run`), and each of its variants builds from that
folder with every checkpoint tensor loaded (ALiBi in place of positions drops only the position table); so does each
variant of the ViT grid from a ViT folder, and each variant of the grid that converts the encoder to grouped-query
attention loads the checkpoint with its key/value heads mean-pooled. A variant that cannot start from the checkpoint
(another head count, an attention kind without its projections, key/value heads that do not divide its heads) stops
the dry run and the ablation before any run begins, the checkpoint read once."""

import json
import re
from pathlib import Path

import pytest
import torch

from attnzoo.ablation.grid import load_grid
from attnzoo.config import load
from attnzoo.run import build
from attnzoo.tasks import TASKS
from tests.helpers import smoke_overrides
from tests.helpers.hf import SIZES, save_encoder, save_vit

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "text_cls.yaml"
GRID = ROOT / "configs" / "ablations" / "pretrained_text.yaml"
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu", "run.baseline=false"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    """A small random BERT folder with its tokenizer.json (as `hf download` leaves one)."""
    path = tmp_path_factory.mktemp("models") / "bert"
    save_encoder("bert", path)
    return path


@pytest.fixture(scope="module")
def bert6(tmp_path_factory) -> Path:
    """The same with 6 heads of 8 channels (BERT-base's 12 heads are not a multiple of 8 either)."""
    path = tmp_path_factory.mktemp("models") / "bert6"
    save_encoder("bert", path, sizes={**SIZES, "hidden_size": 48, "num_attention_heads": 6})
    return path


def test_the_dry_run_plans_every_variant_from_the_pretrained_folder(bert, tmp_path, capsys):
    from attnzoo.ablate import main

    out = tmp_path / "out"
    argv = ["--config", str(RECIPE), f"model.init_from={bert}", "--grid", str(GRID), "--out", str(out), "--dry-run"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    grid = load_grid(GRID)
    assert [line.split()[0] for line in lines] == [v.id for v in grid.variants()]
    assert len(lines) == 5 * 2 and all("[missing]" in line and f"model.init_from={bert}" in line for line in lines)
    assert {v.values["attention"] for v in grid.variants()} == {"full", "window32", "bigbird", "alibi", "alibi_only"}
    assert not out.exists()  # a dry run writes nothing


def test_a_start_that_cannot_start_a_run_stops_the_plan_and_a_grid_names_its_recipes(bert, tmp_path, capsys):
    # the dry run listed every run of a start without tokenizer.json as [missing], and the ablation then failed each
    # run; a grid made for text_cls run with the LM recipe failed on an attention its decoder cannot use, not saying so
    import shutil

    from attnzoo.ablate import main

    shutil.copytree(bert, tmp_path / "bert")
    (tmp_path / "bert" / "tokenizer.json").unlink()
    argv = ["--config", str(RECIPE), f"model.init_from={tmp_path / 'bert'}", "--grid", str(GRID), "--dry-run"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "variant attention=full,seed=0: model.init_from:" in err and "has no tokenizer.json" in err, err
    lm = ["--config", str(ROOT / "recipes" / "lm.yaml"), "--grid", str(GRID), "--dry-run", "--out", str(tmp_path)]
    assert main(lm) == 2
    assert f"(the grid is made for the recipes ['text_cls']; the config is {ROOT / 'recipes' / 'lm.yaml'})" in (
        capsys.readouterr().err
    )


def test_every_variant_starts_from_every_tensor_of_the_checkpoint(bert):
    smoke = [o for o in smoke_overrides(load([RECIPE])) if o.startswith("data.")]
    logits = {}
    for variant in load_grid(GRID).variants():
        if variant.seed != 0:
            continue
        _, task, cfg = build(load([RECIPE], [*smoke, *PINNED, f"model.init_from={bert}", *variant.overrides]))
        started = task.net.started_from
        assert started["loaded"] > 0 and started["new"] == ["head.weight", "head.bias"], (variant.id, started)
        label = variant.values["attention"]
        attention = cfg.section("model")["attention"]  # the variant's attention over the checkpoint's
        want = {"window32": "sliding_window", "bigbird": "bigbird"}.get(label)
        pattern = attention.get("pattern")
        assert (pattern.get("kind") if isinstance(pattern, dict) else None) == want and attention.get("bias") == (
            "alibi" if label.startswith("alibi") else None), (variant.id, attention)  # fmt: skip
        positions = [k for k in started["dropped"] if "pos" in k]
        assert started["dropped"] == (positions if label == "alibi_only" else []), (variant.id, started["dropped"])
        assert (len(positions) == 1) == (label == "alibi_only")
        if label in ("full", "window32"):  # the folder's 24 positions: a window of +-32 tokens sees every key
            torch.manual_seed(0)
            task.net.head.reset_parameters()
            batch = {"tokens": torch.randint(5, 60, (2, 24))}
            with torch.no_grad():
                logits[label] = task.net.eval()(**TASKS[cfg.section("task")["kind"]].net_inputs(batch))
    torch.testing.assert_close(logits["window32"], logits["full"], atol=1e-5, rtol=0)


def test_every_variant_of_the_vit_grid_starts_from_a_vit_folder(tmp_path):
    source = tmp_path / "vit"
    save_vit(source)
    recipe = ROOT / "recipes" / "vit.yaml"
    smoke = [o for o in smoke_overrides(load([recipe])) if not o.startswith("model.depth")]
    kinds = set()
    for variant in load_grid(ROOT / "configs" / "ablations" / "pretrained_vit.yaml").variants():
        if variant.seed != 0:
            continue
        _, task, cfg = build(load([recipe], [*smoke, *PINNED, f"model.init_from={source}", *variant.overrides]))
        started = task.net.started_from
        heads = ["head.weight", "head.bias"]  # MNIST has 10 classes, the checkpoint 4
        assert started["new"] == heads and started["dropped"] == heads, (variant.id, started)
        kinds.add(type(task.net.encoder.blocks[0].attn.pattern).__name__)
    assert kinds == {"NoneType", "SlidingWindow", "BigBird"}


def test_every_variant_of_the_gqa_grid_pools_the_checkpoints_kv_heads(bert, tmp_path, capsys):
    from attnzoo.ablate import main

    grid_path = ROOT / "configs" / "ablations" / "pretrained_gqa.yaml"
    argv = ["--config", str(RECIPE), f"model.init_from={bert}", "--grid", str(grid_path), "--out", str(tmp_path),
            "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4 * 2
    smoke = [o for o in smoke_overrides(load([RECIPE])) if o.startswith("data.")]
    heads = {"all": 4, "kv4": 4, "kv2": 2, "mqa": 1}  # the folder's 4 heads
    logits = {}
    for variant in load_grid(grid_path).variants():
        if variant.seed != 0:
            continue
        _, task, cfg = build(load([RECIPE], [*smoke, *PINNED, f"model.init_from={bert}", *variant.overrides]))
        started, label = task.net.started_from, variant.values["num_kv_heads"]
        assert started["new"] == ["head.weight", "head.bias"] and started["dropped"] == [], (variant.id, started)
        kv = heads[label]
        assert {b.attn.num_kv_heads for b in task.net.encoder.blocks} == {kv}
        pooled = f"k/v heads mean-pooled 4 -> {kv} in 2 layers (groups of {4 // kv} averaged; it changes the function)"
        assert started["attention"] == ([] if kv == 4 else [pooled]), (variant.id, started["attention"])
        torch.manual_seed(0)
        task.net.head.reset_parameters()
        with torch.no_grad():
            logits[label] = task.net.eval()(tokens=torch.randint(5, 60, (2, 24)))
    torch.testing.assert_close(logits["kv4"], logits["all"], rtol=0, atol=0)  # the checkpoint's own heads
    assert (logits["mqa"] - logits["all"]).abs().max() > 1e-4


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> Path:
    """An attnzoo text run of 2 blocks 32 wide (config.yaml, tokenizer.json, checkpoints/best.ckpt), untrained."""
    folder = tmp_path_factory.mktemp("own")
    lines = ["text,label"] + [f"{w} film number {i},{w}" for i, w in enumerate(["good", "bad"] * 10)]
    (folder / "train.csv").write_text("\n".join(lines) + "\n")
    cfg = load([RECIPE], [f"data.train={folder / 'train.csv'}", "model.dim=32", "model.depth=2", *PINNED])
    data, task, cfg = build(cfg)
    run = folder / "run"
    (run / "checkpoints").mkdir(parents=True)
    data.save_artifacts(run)
    (run / "config.yaml").write_text(cfg.to_yaml())
    torch.save({"state_dict": task.state_dict()}, run / "checkpoints" / "best.ckpt")
    return run


# a later variant of one checkpoint that fit refuses: (the folder, the grid's axes (None: the shipped GQA grid), the
# variant and the start of its error): another num_heads than the checkpoint's, a kind whose projections it lacks, and
# key/value heads that do not divide its 6 heads; WHY: what the error says of it
REFUSED = {
    "num_heads": ("bert", {"model.num_heads": [4, 2]}, "num_heads=2,seed=0: model.num_heads: 2 (set in the command"),
    "mla": ("bert", {"model.attention.kind": ["mha", "mla"]}, "attention=mla,seed=0: model.init_from: bert (HF)"),
    "gqa": ("bert6", None, "num_kv_heads=kv4,seed=0: model.attention.num_kv_heads: 4 (set in the command line"),
    "depth": ("own", {"model.depth": [2, 3]}, "depth=3,seed=0: model.init_from: "),
}
WHY = {
    "num_heads": "but model.init_from's weights have 4 heads",
    "mla": "cannot start attention kind 'mla'",
    "gqa": "have 6 heads, which the start keeps (model.num_heads is the checkpoint's): give one of 1, 2, 3, 6",
    "depth": "does not fit this model: it has no tensor 'encoder.blocks.2.",  # a depth the run has not: after the first
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_every_variant_is_checked_against_its_start_before_any_run(case, request, tmp_path, capsys, monkeypatch):
    # only the first variant of each checkpoint was checked: the dry run passed, and the ablation failed the variant
    # after training the first
    import attnzoo.pretrained
    from attnzoo.ablate import main
    from attnzoo.ablation.runner import ablate
    from attnzoo.config import ConfigError

    source, axes, said = REFUSED[case]
    folder = request.getfixturevalue(source)
    grid = ROOT / "configs" / "ablations" / "pretrained_gqa.yaml"
    if axes is not None:
        grid = tmp_path / "grid.yaml"
        grid.write_text(json.dumps({"axes": axes}))
    read, convert = [], attnzoo.pretrained.convert
    monkeypatch.setattr(attnzoo.pretrained, "convert", lambda path, **kw: read.append(path) or convert(path, **kw))
    start = [f"model.init_from={folder}"]
    argv = ["--config", str(RECIPE), *start, "--grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"variant {said}" in err and WHY[case] in err, err
    assert read == [str(folder)]  # once, for every variant of it

    class Never:
        def launch(self, *args):
            raise AssertionError("a run began")

    with pytest.raises(ConfigError, match=f"variant {re.escape(said)}"):
        ablate([RECIPE], grid, tmp_path / "out", start, launcher=Never())
    assert not (tmp_path / "out" / "ablation.json").exists()
