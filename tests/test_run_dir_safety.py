"""A run directory is data from a stranger: no command that reads one runs code named in its config.yaml or
pickled in its checkpoints. A dotted import path in a config is imported only with --allow-imports or
ATTNZOO_ALLOW_IMPORTS=1, and then a user's own class works."""

import os
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from attnzoo.ablate import main as ablate_main
from attnzoo.ablation.grid import load_grid
from attnzoo.ablation.runner import fit_command, plan
from attnzoo.baseline import main as baseline_main
from attnzoo.config import ConfigError, load
from attnzoo.evaluate import main as evaluate_main
from attnzoo.fit import main as fit_main
from attnzoo.generate import main as generate_main
from attnzoo.run import build
from attnzoo.run.checkpoint_io import AtomicCheckpointIO
from attnzoo.translate import main as translate_main
from attnzoo.util.imports import import_path
from attnzoo.viz import main as viz_main
from tests.helpers import smoke_overrides

ROOT = Path(__file__).resolve().parent.parent
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu"]
USER_MODULE = '''
from attnzoo.attention.patterns import SlidingWindow


class Window2(SlidingWindow):
    """A user's own pattern: a sliding window of 2."""

    def __init__(self, *, causal: bool = False) -> None:
        super().__init__(window=2, causal=causal)
'''


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A tiny LM run directory as `attnzoo fit` writes it (config, tokenizer.json, best and last checkpoints)."""
    path = tmp_path_factory.mktemp("lm_run")
    cfg = load([ROOT / "recipes" / "lm.yaml"])
    cfg = load([ROOT / "recipes" / "lm.yaml"], [*smoke_overrides(cfg), *PINNED, f"run.dir={path / 'runs'}"])
    data, task, cfg = build(cfg)
    (path / "config.yaml").write_text(cfg.to_yaml())  # resolved, as fit writes it
    data.save_artifacts(path)
    (path / "checkpoints").mkdir()
    for name in ("best", "last"):
        torch.save({"state_dict": task.state_dict()}, path / "checkpoints" / f"{name}.ckpt")
    return path


def _copy(run: Path, dest: Path, **pattern) -> Path:
    """A copy of `run` whose config.yaml sets `model.attention.pattern` to `pattern`."""
    shutil.copytree(run, dest)
    cfg = OmegaConf.load(dest / "config.yaml")
    OmegaConf.update(cfg, "model.attention.pattern", pattern, force_add=True)
    (dest / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return dest


def _grid(tmp_path: Path) -> Path:
    grid = tmp_path / "grid.yaml"
    grid.write_text("axes:\n  model.attention.backend: [eager, sdpa]\n")
    return grid


def _commands(run: Path, tmp_path: Path) -> dict[str, list]:
    """Every command that reads a run directory (or its config), as it would be typed."""
    config = str(run / "config.yaml")
    return {
        "evaluate": [evaluate_main, [str(run)]],
        "viz": [viz_main, [str(run), "--out", str(tmp_path / "viz")]],
        "translate": [translate_main, [str(run), "--text", "a sentence"]],
        "generate": [generate_main, [str(run), "--prompt", "The", "--max-new-tokens", "2"]],
        "fit --print-config": [fit_main, ["--config", config, "--print-config"]],
        "fit --resume": [fit_main, ["--resume", str(run)]],
        "ablate --dry-run": [
            ablate_main,
            ["--config", config, "--grid", str(_grid(tmp_path)), "--dry-run", "--out", str(tmp_path / "abl")],
        ],
        "baseline --run-dir": [baseline_main, ["--run-dir", str(run)]],
    }


COMMANDS = ["evaluate", "viz", "translate", "generate", "fit --print-config", "fit --resume", "ablate --dry-run",
            "baseline --run-dir"]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_runs_code_named_in_a_run_config(command, lm_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    run = _copy(lm_run, tmp_path / "downloaded", kind="subprocess.getoutput", cmd=f"touch {marker}")
    commands = _commands(run, tmp_path)
    assert sorted(commands) == sorted(COMMANDS)
    main, argv = commands[command]
    assert main(argv) == 2
    assert not marker.exists(), f"{command} ran the command named in the run's config.yaml"
    err = capsys.readouterr().err
    # the refusal names the key, the value, the file and how to opt in
    for part in (
        "model.attention.pattern.kind",
        "'subprocess.getoutput'",
        "--allow-imports",
        "ATTNZOO_ALLOW_IMPORTS=1",
    ):
        assert part in err, (part, err)
    assert str(run / "config.yaml") in err, err


def test_a_python_tag_in_config_yaml_is_not_constructed(lm_run, tmp_path, monkeypatch, capsys):
    # YAML's own way to run code: config files are read with a safe loader, the tag is an error
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    run = tmp_path / "downloaded"
    shutil.copytree(lm_run, run)
    text = (run / "config.yaml").read_text()
    payload = f'seed: !!python/object/apply:os.system ["touch {marker}"]'
    (run / "config.yaml").write_text(text.replace("seed: 0", payload))
    assert "!!python" in (run / "config.yaml").read_text()
    assert evaluate_main([str(run), "--allow-imports"]) == 2  # not even with the opt-in
    err = capsys.readouterr().err
    assert "config.yaml" in err and "a tag that builds Python objects (code) is never read" in err  # not "syntax"
    assert "YAML syntax error" not in err and not marker.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_reads_the_environment_named_in_a_run_config(command, lm_run, tmp_path, monkeypatch, capsys):
    # `prompt: ${oc.env:SECRET}` in a downloaded run's config.yaml was resolved: evaluate wrote the secret into its
    # report (and errors echoed it); a run writes its config resolved, so a run's config.yaml holds no interpolation
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    run = tmp_path / "downloaded"
    shutil.copytree(lm_run, run)
    text = (run / "config.yaml").read_text()
    assert "\n  prompt: " in text and "${" not in text  # as fit writes it: resolved
    lines = [
        "  prompt: ${oc.env:ATTNZOO_TEST_SECRET}" if line.startswith("  prompt: ") else line
        for line in text.splitlines()
    ]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")
    main, argv = _commands(run, tmp_path)[command]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "s3cr3t-value" not in out + err
    assert not any("s3cr3t-value" in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert f"{run / 'config.yaml'}: task.prompt: '${{oc.env:ATTNZOO_TEST_SECRET}}' is an interpolation" in err, err
    assert "cannot read" not in err  # said once, not wrapped in "cannot read: ConfigError: ..."


def test_a_start_from_a_run_does_not_read_the_environment_named_in_its_config(lm_run, tmp_path, monkeypatch):
    # model.init_from=<downloaded run> read its config.yaml with yaml.safe_load, and `${oc.env:...}` in its model
    # section was resolved in the new run (recorded in its config.yaml, or echoed in an error)
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    run = tmp_path / "downloaded"
    shutil.copytree(lm_run, run)
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(
        text.replace("\nmodel:\n", "\nmodel:\n  activation: ${oc.env:ATTNZOO_TEST_SECRET}\n")
    )
    cfg = load([ROOT / "recipes" / "lm.yaml"])
    overrides = [*smoke_overrides(cfg), *PINNED, f"model.init_from={run}", f"run.dir={tmp_path / 'runs'}"]
    with pytest.raises(ConfigError) as err:
        build(load([ROOT / "recipes" / "lm.yaml"], overrides))
    assert "model.activation: '${oc.env:ATTNZOO_TEST_SECRET}' is an interpolation" in str(err.value)
    assert "s3cr3t-value" not in str(err.value) and "cannot read" not in str(err.value)


def test_the_payload_runs_once_imports_are_allowed(lm_run, tmp_path, monkeypatch):
    # the gate is what stops the payload above: with the opt-in, the config is trusted and its code runs
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    run = _copy(lm_run, tmp_path / "trusted", kind="subprocess.getoutput", cmd=f"touch {marker}")
    fit_main(["--config", str(run / "config.yaml"), "--print-config", "--allow-imports"])
    assert marker.exists()


def test_a_users_own_class_works_with_the_opt_in(lm_run, tmp_path, monkeypatch, capsys):
    (tmp_path / "my_patterns.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = _copy(lm_run, tmp_path / "mine", kind="my_patterns.Window2")
    config = str(run / "config.yaml")

    assert fit_main(["--config", config, "--print-config"]) == 2  # not without asking
    assert "'my_patterns.Window2'" in capsys.readouterr().err
    assert fit_main(["--config", config, "--print-config", "--allow-imports"]) == 0
    assert "kind: my_patterns.Window2" in capsys.readouterr().out

    # a command reading the run with the flag, then with the variable: the model is built with the user's pattern
    monkeypatch.setenv("ATTNZOO_ALLOW_IMPORTS", "0")
    assert evaluate_main([str(run), "--allow-imports"]) == 0
    monkeypatch.setenv("ATTNZOO_ALLOW_IMPORTS", "1")
    assert generate_main([str(run), "--prompt", "The", "--max-new-tokens", "2"]) == 0


def test_an_ablation_passes_the_opt_in_to_every_run(lm_run, tmp_path, monkeypatch):
    (tmp_path / "my_patterns.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    configs = [lm_run / "config.yaml"]
    grid = load_grid(_grid(tmp_path))
    overrides = ["model.attention.pattern.kind=my_patterns.Window2"]
    with pytest.raises(ConfigError, match="--allow-imports"):
        plan(configs, grid, overrides, tmp_path / "abl")
    assert ablate_main(["--config", str(configs[0]), "--grid", str(grid.path), "--dry-run", "--allow-imports",
                        "--out", str(tmp_path / "abl"), *overrides]) == 0  # fmt: skip
    runs = plan(configs, grid, overrides, tmp_path / "abl")
    assert all("--allow-imports" in fit_command(configs, r) for r in runs)  # local, SLURM and Ray runs alike
    monkeypatch.setenv("ATTNZOO_ALLOW_IMPORTS", "0")
    assert not any("--allow-imports" in fit_command(configs, r) for r in runs)


def test_attnzoos_own_classes_by_import_path_need_no_opt_in():
    # configs/ablations/pattern_ast.yaml and README name this one; nothing else under attnzoo is reachable
    assert import_path("attnzoo.models.ast.TimeWindow").__name__ == "TimeWindow"
    with pytest.raises(ValueError, match="--allow-imports"):
        import_path("attnzoo.ablation.slurm._run")  # attnzoo's own module, but not a class a config may name


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickled_payload_in_a_checkpoint_is_never_run(lm_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    run = tmp_path / "downloaded"
    shutil.copytree(lm_run, run)
    for name in ("best", "last"):
        torch.save({"state_dict": {}, "payload": _Payload(marker)}, run / "checkpoints" / f"{name}.ckpt")
    assert evaluate_main([str(run)]) == 2
    # it said torch's text cut at 300 characters, which mostly suggested weights_only=False
    err = capsys.readouterr().err
    assert "holds Python objects besides tensors and plain values (posix.system)" in err and "refused" in err
    assert fit_main(["--resume", str(run)]) == 2
    # Lightning's own loads (resume, testing the best checkpoint) go through the run's checkpoint IO: data only,
    # even where the environment asks torch.load for full unpickling
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        AtomicCheckpointIO().load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert not marker.exists()


def test_checkpoints_are_readable_by_the_others_who_read_the_run(tmp_path):
    """best.ckpt and last.ckpt kept mkstemp's mode 0600 (the run's JSON files are 0644): on a shared run.dir the
    other users could read everything but the weights."""
    import torch

    AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(2)}, tmp_path / "checkpoints" / "last.ckpt")
    assert (tmp_path / "checkpoints" / "last.ckpt").stat().st_mode & 0o777 == 0o644
