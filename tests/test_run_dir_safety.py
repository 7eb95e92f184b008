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


def _with_prompt(lm_run: Path, run: Path, prompt: str) -> Path:
    """A copy of `lm_run` at `run` whose config.yaml has the line `  prompt: <prompt>` (written as it stands)."""
    shutil.copytree(lm_run, run)
    text = (run / "config.yaml").read_text()
    assert "\n  prompt: " in text and "${" not in text  # as fit writes it: resolved
    lines = [f"  prompt: {prompt}" if line.startswith("  prompt: ") else line for line in text.splitlines()]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")
    return run


# `\\${...}` is a literal backslash, then the interpolation: it passed the check as if escaped
@pytest.mark.parametrize("prompt", ["${oc.env:ATTNZOO_TEST_SECRET}", "\\\\${oc.env:ATTNZOO_TEST_SECRET}"])
@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_reads_the_environment_named_in_a_run_config(command, prompt, lm_run, tmp_path, monkeypatch, capsys):
    # `prompt: ${oc.env:SECRET}` in a downloaded run's config.yaml was resolved: evaluate wrote the secret into its
    # report (and errors echoed it); a run writes its config resolved, so a run's config.yaml holds no interpolation
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    run = _with_prompt(lm_run, tmp_path / "downloaded", prompt)
    main, argv = _commands(run, tmp_path)[command]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "s3cr3t-value" not in out + err
    assert not any("s3cr3t-value" in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert f"{run / 'config.yaml'}: task.prompt: {prompt!r} is an interpolation" in err, err
    assert "cannot read" not in err  # said once, not wrapped in "cannot read: ConfigError: ..."


@pytest.mark.parametrize("command", ["evaluate", "fit --print-config", "baseline --run-dir"])
def test_an_escaped_dollar_brace_in_a_run_config_stays_the_text_it_is(command, lm_run, tmp_path, monkeypatch, capsys):
    # `\${oc.env:SECRET}` is the text "${oc.env:SECRET}" (how the run wrote a prompt holding `${`): the resolved
    # config was made an OmegaConf tree again, where that text became an interpolation and read the environment
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    run = _with_prompt(lm_run, tmp_path / "downloaded", "\\${oc.env:ATTNZOO_TEST_SECRET}")
    main, argv = _commands(run, tmp_path)[command]
    code = main(argv)
    out, err = capsys.readouterr()
    assert "s3cr3t-value" not in out + err
    assert not any("s3cr3t-value" in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    if command == "evaluate":
        assert code == 0, err
        import json  # the example's prompt, as the text it is (the report's: log lines follow the logger's level)

        examples = json.loads((run / "evaluate-best.json").read_text())["examples"]
        assert [row["prompt"] for rows in examples.values() for row in rows] == ["${oc.env:ATTNZOO_TEST_SECRET}"]
    if command == "fit --print-config":
        assert code == 0 and "prompt: \\${oc.env:ATTNZOO_TEST_SECRET}" in out  # written escaped again


@pytest.mark.parametrize("text", ["${x}", "\\${x}", "a \\\\${x} b", "\\\\\\${x}", "\\ and $ and {x}", "$${x}"])
def test_a_value_holding_dollar_brace_reads_back_as_the_same_text(text):
    from attnzoo.config import Config

    written = Config.of_values({"task": {"prompt": text}}, {}).to_yaml()
    assert OmegaConf.to_container(OmegaConf.create(written), resolve=True)["task"]["prompt"] == text


def test_a_run_config_holds_no_interpolation_whatever_lies_beside_it(lm_run, tmp_path, monkeypatch, capsys):
    # a config.yaml was read as a run's (no interpolation) only beside checkpoints/, metrics.csv or summary.json: a
    # run laid out otherwise (its checkpoints in ck/) was resolved by evaluate --checkpoint and by a resume
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNZOO_TEST_SECRET", "s3cr3t-value")
    run = _with_prompt(lm_run, tmp_path / "downloaded", "${oc.env:ATTNZOO_TEST_SECRET}")
    (run / "checkpoints").rename(run / "ck")
    assert evaluate_main([str(run), "--checkpoint", str(run / "ck" / "best.ckpt")]) == 2
    out, err = capsys.readouterr()
    assert "s3cr3t-value" not in out + err and "task.prompt: '${oc.env:ATTNZOO_TEST_SECRET}' is an interpolation" in err
    assert fit_main(["--resume", str(run / "ck" / "last.ckpt")]) == 2
    out, err = capsys.readouterr()
    assert "s3cr3t-value" not in out + err and "is not in a run's checkpoints folder" in err
    assert not any("s3cr3t-value" in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


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


def _deflated(src: Path, dest: Path) -> Path:
    """`src` (a torch.save archive) written again with every entry compressed: it expands as it is read."""
    import zipfile

    with zipfile.ZipFile(src) as inp, zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for info in inp.infolist():
            out.writestr(info.filename, inp.read(info.filename))
    return dest


def test_a_checkpoint_whose_entries_are_compressed_is_refused(tmp_path):
    # torch.load reads deflated entries: 400 KB of zeros compressed stood for 190 MB in memory, a small download
    # that could fill it; torch.save never compresses, so such a file is no checkpoint attnzoo or torch wrote
    from attnzoo.pretrained.converted import read_weights
    from attnzoo.run.checkpoint_io import read_checkpoint

    plain = tmp_path / "plain.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000, 1000)}}, plain)
    assert read_checkpoint(plain)["state_dict"]["w"].shape == (1000, 1000)  # torch.save's own archive reads
    packed = _deflated(plain, tmp_path / "packed.ckpt")
    assert packed.stat().st_size < plain.stat().st_size / 50
    with pytest.raises(
        ValueError, match=r"packed\.ckpt.* entry '.+' is compressed \(\d+ bytes to \d+\), which torch.save"
    ):
        read_checkpoint(packed)
    torch.save({"w": torch.zeros(1000, 1000)}, plain)
    bin_file = _deflated(plain, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin.*is compressed"):
        read_weights(bin_file)


@pytest.mark.parametrize(
    "state, message",
    [
        ({"w": torch.zeros(1), 5: torch.zeros(1)}, "its key 5 is not a parameter name"),
        ({"w": torch.zeros(1), "b": [1.0]}, "its key 'b' holds a list"),
    ],
    ids=["int_key", "list_value"],
)
def test_a_checkpoint_whose_state_dict_is_not_names_to_tensors_is_refused(tmp_path, state, message):
    # weights_only loads int keys and lists: generate, evaluate and resume stopped with a raw AttributeError
    # ('int' object has no attribute 'startswith') from torch's load_state_dict, or a TypeError from the shape check
    from attnzoo.run.checkpoint_io import read_checkpoint

    path = tmp_path / "odd.ckpt"
    torch.save({"state_dict": state}, path)
    with pytest.raises(ValueError) as err:
        read_checkpoint(path)
    assert f"{str(path)!r} is not a checkpoint written by attnzoo fit" in str(err.value)
    assert f"its state_dict maps parameter names to tensors, but {message}" in str(err.value)


@pytest.mark.parametrize("reader", ["labels.json", "data record", "resumes.json", "hf config.json"])
def test_json_nested_too_deep_for_the_parser_is_bad_json_not_a_recursion_error(tmp_path, reader):
    # viz --text (labels.json), generate (lm.json), fit --resume (resumes.json) and pretrained.load (a Hugging Face
    # config.json) stopped with a raw RecursionError from json.loads
    from attnzoo.data.modules.base import given_class_names
    from attnzoo.pretrained.family import hf_model_type
    from attnzoo.run.rundir import RESUMES_FILE, read_resumes
    from attnzoo.run.tokenizer_stamp import RECORDS, expected_digest

    deep = "[" * 100_000 + "]" * 100_000
    if reader == "labels.json":
        (tmp_path / "labels.json").write_text('{"class_names": ' + deep + "}")
        with pytest.raises(ValueError, match=r"data.labels: '.*labels\.json' is not a labels.json of class names"):
            given_class_names(str(tmp_path / "labels.json"))
    elif reader == "data record":
        for name in RECORDS:
            (tmp_path / name).write_text(deep)
        assert expected_digest(tmp_path, {}) == (None, "")  # as for any record that is not JSON
        (tmp_path / RECORDS[-1]).write_text('{"tokenizer": ["sha256"]}')  # an AttributeError ('list' has no get)
        assert expected_digest(tmp_path, {}) == (None, "")
    elif reader == "resumes.json":
        (tmp_path / RESUMES_FILE).write_text(deep)
        assert read_resumes(tmp_path) == []
    else:
        (tmp_path / "config.json").write_text(deep)
        assert hf_model_type(tmp_path) is None


def test_a_huge_lock_file_is_read_no_further_than_a_record(tmp_path, monkeypatch):
    # a downloaded run's .lock of a gigabyte (sparse: a few bytes in a tarball) was read whole, quadratically
    import attnzoo.run.lock as lock

    run = tmp_path / "run"
    run.mkdir()
    with open(run / ".lock", "wb") as f:
        f.write(b'{"pid": "\\u001b]0;title\\u0007", "host": "h"' + b" " * (8 << 20))
    read = []
    real = os.read
    monkeypatch.setattr(lock.os, "read", lambda fd, n: read.append(real(fd, n)) or read[-1])
    with lock.RunLock(run):
        pass
    assert sum(map(len, read)) <= lock.RECORD_MAX
    assert lock._parsed(b'{"pid": "\\u001b]0;title\\u0007"}') == {"pid": "?]0;title?"}  # no escape reaches a terminal


def test_an_ablation_variant_id_is_a_folder_name_of_its_runs(tmp_path):
    # ablation.json's ids name the run folders: "../../elsewhere" had --report-only read a summary.json outside
    import json

    from attnzoo.ablation.report import collect

    out, elsewhere = tmp_path / "abl", tmp_path / "elsewhere"
    (out / "runs").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "summary.json").write_text(json.dumps({"test": {"acc": 0.99}}))
    variant = {"id": "../../elsewhere", "name": "x", "values": {}, "seed": 0}
    (out / "ablation.json").write_text(json.dumps({"variants": [variant], "metric": "test/acc", "mode": "max"}))
    with pytest.raises(ConfigError, match=r"the variant id '../../elsewhere' is no folder name of"):
        collect(out)


def test_a_prompt_longer_than_the_context_is_refused_before_evaluating(lm_run, tmp_path, monkeypatch, capsys):
    # the samples' prompt was checked against the context before training only: evaluate met it at the end of the
    # test split, with generate's bare ValueError
    monkeypatch.chdir(tmp_path)
    run = _with_prompt(lm_run, tmp_path / "run", " ".join(["The"] * 400))
    assert evaluate_main([str(run)]) == 2
    err = capsys.readouterr().err
    assert "task.prompt ('The The" in err and "no room to sample" in err and "task.num_examples=0" in err
    assert not list(run.glob("evaluate-*.json"))


def test_a_runs_loader_workers_and_threads_stay_within_this_machines_cores(lm_run, tmp_path, caplog):
    # evaluate forked as many loader workers as a run's config.yaml asked (10**6: hundreds of processes a minute)
    from attnzoo.run import load_run

    run = tmp_path / "run"
    shutil.copytree(lm_run, run)
    cfg = OmegaConf.load(run / "config.yaml")
    cfg.data.num_workers, cfg.trainer.num_threads = 10**6, 10**6
    OmegaConf.save(cfg, run / "config.yaml")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    try:
        with caplog.at_level("INFO", logger="attnzoo"):
            loaded = load_run(run, with_data=False)
    finally:
        torch.set_num_threads(threads)
    assert loaded.cfg.section("data")["num_workers"] == loaded.cfg.section("trainer")["num_threads"] == cores
    assert f"data.num_workers: 1000000 (set in {run / 'config.yaml'}) is more than the {cores} core(s)" in caplog.text
    overlay = tmp_path / "mine.yaml"  # the user's own choice, in an overlay, is taken as given
    overlay.write_text(f"data:\n  num_workers: {cores + 1}\n")
    try:
        assert load_run(run, configs=[overlay], with_data=False).cfg.section("data")["num_workers"] == cores + 1
    finally:
        torch.set_num_threads(threads)
