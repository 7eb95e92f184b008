"""README's "Use the blocks in your own LightningModule" example runs as it stands and does what it says, and every
command of README.md and the recipe headers that reads your own data runs verbatim on small files of its format."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from attnzoo.attention import capture_attention

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Use the blocks in your own LightningModule"


def _example() -> tuple[str, int]:
    """The first python block under SECTION, and the README line it starts on."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    found = re.search(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.DOTALL)
    assert found, f"no python code block in README section {SECTION!r}"
    return found.group(1), text[: start + found.start(1)].count("\n") + 1


def test_readme_lightning_example_trains_and_masks_padding(tmp_path, monkeypatch):
    code, line = _example()
    monkeypatch.chdir(tmp_path)  # anything Lightning writes stays out of the repository
    ns: dict = {"__name__": "readme_example"}
    exec(compile("\n" * (line - 1) + code, str(README), "exec"), ns)  # tracebacks point at README lines

    model, trainer, tokens, labels = ns["model"], ns["trainer"], ns["tokens"], ns["labels"]
    assert trainer.global_step == trainer.max_steps > 0
    assert model.encoder.checkpoint_every == 1, "activation checkpointing is not on"
    model.eval()
    with torch.no_grad():
        accuracy = (model(tokens).argmax(-1) == labels).float().mean().item()
        majority = max(labels.float().mean().item(), 1 - labels.float().mean().item())
        assert accuracy > majority + 0.2, (accuracy, majority)  # it learned the task, not the class prior

        batch = tokens[:8]
        pad = batch == 0
        assert pad.any(), "the example batch has no padding to check"
        with capture_attention() as maps:
            model(batch)
        assert len(maps) == len(model.encoder.blocks)
        lq = batch.shape[1]
        i, j = torch.arange(lq)[:, None], torch.arange(lq)[None, :]
        for w in maps:  # [B, H, L, L]
            assert (w[pad[:, None, None, :].expand_as(w)] == 0).all(), "a padded key got attention weight"
            assert (w[..., (i - j).abs() > 4] == 0).all(), "a key outside the sliding window got attention weight"

        longer = torch.cat([batch, torch.zeros(8, 5, dtype=batch.dtype)], 1)  # more padding: same logits
        torch.testing.assert_close(model(longer), model(batch), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- own-data commands

ROOT = README.parent
OWN_DATA = re.compile(r"\bdata\.(train|root|dataset|source|csv)=")
QUICK = ["trainer.max_epochs=2", "trainer.enable_progress_bar=false"]  # the epoch budget is chosen from the data


def _commands(lines: list[str], prefix: str = "") -> list[str]:
    """Whole `python -m attnzoo.*` commands (`\\` continuations joined) in `lines`, each stripped of `prefix`."""
    out, current = [], None
    for raw in lines:
        line = raw.removeprefix(prefix).strip() if raw.startswith(prefix) else None
        if line is None:
            current = None
            continue
        if current is None and not line.startswith("python -m attnzoo."):
            continue
        current = (current + " " if current else "") + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            out.append(current)
            current = None
    return out


def _section(title: str) -> str:
    """The text of README section `title` (up to the next `## ` heading)."""
    text = README.read_text()
    assert title in text, f"README.md has no section {title!r}"
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end > 0 else None]


def _bash_commands(text: str) -> list[str]:
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        lines = [re.sub(r"\s+#.*$", "", line) for line in block.splitlines()]
        found += _commands(lines)
    return found


PRETRAINED = "## Start from a pretrained model"


def own_data_commands() -> list[tuple[str, str]]:
    """(where, command) of every command in README.md's bash blocks and the recipe headers that reads the user's
    own data (data.train=, data.root=, data.dataset=, data.source=, data.csv=). The commands of PRETRAINED, and those
    that start from a run (model.init_from=), need the runs and folders they start from, and run in order in their
    own tests."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text().replace(_section(PRETRAINED), ""), re.DOTALL):
        lines = [re.sub(r"\s+#.*$", "", line) for line in block.splitlines()]
        found += [("README.md", c) for c in _commands(lines)]
    for recipe in sorted((ROOT / "recipes").glob("*.yaml")):
        header = [line for line in recipe.read_text().splitlines() if line.startswith("#")]
        found += [(f"recipes/{recipe.name}", c) for c in _commands(header, prefix="#")]
    places: dict[str, list[str]] = {}  # a command shown in two places (README and a recipe header) runs once
    for where, c in found:
        if OWN_DATA.search(c) and "model.init_from=" not in c:
            places.setdefault(c, []).append(where)
    return [(" and ".join(wheres), c) for c, wheres in places.items()]


def _overrides(command: str) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in shlex.split(command) if "=" in arg and not arg.startswith("-"))


def _pairs(path: Path, n: int, offset: int) -> None:
    words = [("file", "Datei"), ("window", "Fenster"), ("key", "Schlüssel"), ("page", "Seite"), ("user", "Benutzer")]
    rows = []
    for i in range(offset, offset + n):
        (en, de), count = words[i % len(words)], 2 + i % 97
        rows.append(f"open {count} {en}s\t{count} {de}en öffnen")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _table(path: Path, text_column: str, label_column: str, n: int, offset: int) -> None:
    sep = "\t" if path.suffix == ".tsv" else ","
    words = {"sport": ["goal", "match", "team"], "food": ["bread", "soup", "salt"]}
    rows = [f"{text_column}{sep}{label_column}"]
    for i in range(offset, offset + n):
        label = ["sport", "food"][i % 2]
        rows.append(f"the {words[label][i % 3]} and {words[label][(i + 1) % 3]} {i}{sep}{label}")
    path.write_text("\n".join(rows) + "\n")


def _wav(path: Path, hz: float, seconds: float, rng: np.random.Generator) -> None:
    from scipy.io import wavfile

    t = np.arange(int(16000 * seconds)) / 16000
    wave = 0.3 * np.sin(2 * np.pi * hz * (1 + 0.05 * rng.standard_normal()) * t) + 0.01 * rng.standard_normal(len(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    wavfile.write(path, 16000, wave.astype(np.float32))


def _image(path: Path, level: int, size: int, rng: np.random.Generator) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.clip(rng.normal(level, 30, (size, size, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


def make_files(recipe: str, opts: dict[str, str]) -> None:
    """Small files of the recipe's format at the paths the command names (relative to the working directory)."""
    rng = np.random.default_rng(0)
    sizes = {"train": 60, "val": 16, "test": 16}
    if recipe == "translation":
        for i, split in enumerate(sizes):
            if f"data.{split}" in opts:
                _pairs(Path(opts[f"data.{split}"]), sizes[split], offset=100 * i)
    elif recipe == "lm":
        lines = [f"The {w} of line {i} is stored in a file named part{i % 13}.txt." for i in range(300)
                 for w in ("value", "name")]  # fmt: skip
        Path(opts["data.train"]).write_text("\n".join(lines) + "\n")
    elif recipe == "mlm":  # unlabeled text: lines of a .txt file, or the text column of a table (labels unread)
        path = Path(opts["data.train"])
        if path.suffix == ".txt":
            path.write_text("\n".join(f"the {w} and the {v} of line {i}" for i in range(120)
                                      for w, v in (("goal", "team"), ("bread", "soup"))) + "\n")  # fmt: skip
        else:
            _table(path, opts.get("data.text_column", "text"), "label", 120, offset=0)
    elif recipe == "text_cls":
        columns = opts.get("data.text_column", "text"), opts.get("data.label_column", "label")
        for i, split in enumerate(sizes):
            if f"data.{split}" in opts:
                _table(Path(opts[f"data.{split}"]), *columns, sizes[split], offset=100 * i)
    elif recipe == "vit":
        for label, level in (("dark", 60), ("light", 190)):
            for i in range(10):
                _image(Path(opts["data.root"]) / label / f"{i}.png", level, 8, rng)
    elif recipe == "ast" and opts["data.source"] == "folder":
        root = Path(opts["data.root"])
        lists: dict[str, list[str]] = {"validation_list.txt": [], "testing_list.txt": []}
        for label, hz in (("low", 300.0), ("high", 2500.0)):
            for i in range(10):
                _wav(root / label / f"s{i}_nohash_0.wav", hz, 1.0, rng)
                name = "validation_list.txt" if i < 2 else "testing_list.txt" if i < 4 else None
                if name:
                    lists[name].append(f"{label}/s{i}_nohash_0.wav")
        for name, rows in lists.items():
            (root / name).write_text("\n".join(rows) + "\n")
    elif recipe == "ast" and opts["data.source"] == "csv":
        columns = dict(item.split(": ") for item in opts["data.columns"].strip("{}").split(", "))
        seconds = float(opts.get("data.clip_seconds", 1.0))
        rows = [f"{columns['path']},{columns['label']},fold"]
        for label, hz in (("low", 300.0), ("high", 2500.0)):
            for i in range(10):
                _wav(Path(opts["data.root"]) / f"{label}{i}.wav", hz, seconds, rng)
                rows.append(f"{label}{i}.wav,{label},{1 + i % 5}")
        Path(opts["data.csv"]).parent.mkdir(parents=True, exist_ok=True)
        Path(opts["data.csv"]).write_text("\n".join(rows) + "\n")
    elif recipe == "text_image":
        for i, split in enumerate(sizes):
            if f"data.{split}" not in opts:
                continue
            path, rows = Path(opts[f"data.{split}"]), []
            for j in range(sizes[split]):
                answer = ["yes", "no"][(i + j) % 2]
                _image(path.parent / "imgs" / f"{split}{j}.png", 190 if answer == "yes" else 60, 16, rng)
                rows.append(json.dumps({"image": f"imgs/{split}{j}.png", "text": "is it light?", "label": answer}))
            path.write_text("\n".join(rows) + "\n")
    else:
        raise AssertionError(f"no files are made for {recipe} {opts}: add them to make_files")


COMMANDS = own_data_commands()


def test_every_recipe_documents_an_own_data_command():
    recipes = {_overrides(c).get("--config", re.search(r"recipes/(\w+)\.yaml", c).group(1)) for _, c in COMMANDS}
    assert recipes >= {"translation", "lm", "mlm", "text_cls", "vit", "ast", "text_image"}, recipes


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in COMMANDS])
def test_an_own_data_command_runs_verbatim_and_tests(where, command, tmp_path, monkeypatch):
    recipe = re.search(r"recipes/(\w+)\.yaml", command).group(1)
    opts = _overrides(command)
    monkeypatch.chdir(tmp_path)
    make_files(recipe, opts)
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")  # the command names recipes/ relative to the repository
    args = shlex.split(command)
    assert args[:2] == ["python", "-m"], command
    fits = args[2] == "attnzoo.fit"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, *args[1:], *(QUICK if fits else [])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, f"{where}: {command}\n{proc.stderr[-3000:]}"
    if not fits:  # attnzoo.baseline: prints its metrics
        assert re.search(r"^test/acc\s+[01]\.\d+$", proc.stdout, re.MULTILINE), proc.stdout
        return
    summary_path = tmp_path / re.search(r"attnzoo: run directory (\S+)", proc.stderr).group(1) / "summary.json"
    summary = json.loads(summary_path.read_text())
    assert summary["finished"] and any(k.startswith("test/") for k in summary["test"]), summary
    assert "auto" not in (summary_path.parent / "config.yaml").read_text().replace("backend: auto", "")
    if recipe == "translation":
        assert summary["baseline"]["model"] == "translation memory" and "test/bleu" in summary["baseline"]


# ---------------------------------------------------------------------------------------------- pretrained starts


def test_the_mlm_recipe_header_runs_verbatim_in_order(tmp_path, monkeypatch):
    """recipes/mlm.yaml's header, in order: pretraining on the embedded text and on files writes the runs that the
    text classifier's commands then start from (few batches each)."""
    header = [line for line in (ROOT / "recipes" / "mlm.yaml").read_text().splitlines() if line.startswith("#")]
    commands = _commands(header, prefix="#")
    starts = [c for c in commands if "model.init_from=" in c]
    assert len(starts) >= 2 and any("recipes/mlm.yaml" in c and not OWN_DATA.search(c) for c in commands), commands
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    quick = [*QUICK, "trainer.limit_train_batches=5", "trainer.limit_val_batches=2", "trainer.limit_test_batches=2"]
    for command in commands:
        args, opts = shlex.split(command), _overrides(command)
        recipe = re.search(r"recipes/(\w+)\.yaml", command).group(1)
        if "data.train" in opts and not Path(opts["data.train"]).exists():
            make_files(recipe, opts)
        proc = subprocess.run([sys.executable, *args[1:], *quick], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"recipes/mlm.yaml: {command}\n{proc.stderr[-3000:]}"
        run_dir = tmp_path / re.search(r"attnzoo: run directory (\S+)", proc.stderr).group(1)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["finished"] and any(k.startswith("test/") for k in summary["test"]), summary
        if "model.init_from" in opts:  # the encoder loaded, the classifier's head new, the MLM head dropped
            start = summary["init_from"]
            assert start["path"] == str(tmp_path / opts["model.init_from"]) and start["loaded"] > 0, start
            assert start["new"] == ["head.weight", "head.bias"] and start["dropped"], start
            assert all(k.startswith("mlm_head.") for k in start["dropped"]), start


def test_the_pretrained_start_commands_and_example_run_verbatim_in_order(tmp_path, monkeypatch):
    """The section's commands, in order, on small files: the first writes the run the second starts from, and a
    small random BERT stands at the folder the others name (as `hf download` would leave it); then its Python."""
    from attnzoo.ablation.grid import load_grid
    from attnzoo.attention.patterns import SlidingWindow
    from tests.helpers.hf import save_ast, save_bart, save_encoder, save_gpt2, save_vit

    section = _section(PRETRAINED)
    commands = _bash_commands(section)
    assert len(commands) >= 3 and any("--run-dir" in c for c in commands), commands
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")  # the ablation grids
    make_files("text_cls", _overrides(commands[0]))
    folders = {_overrides(c)["model.init_from"] for c in commands if "model.init_from" in _overrides(c)}
    for folder in folders:  # a small random model of the family the name says, where `hf download` leaves it
        if Path(folder).exists() or not folder.startswith("models/"):  # runs/...: an earlier command writes it
            continue
        if "bert" in folder:
            save_encoder("bert", Path(folder), words=["the", "and", "goal", "match", "team", "bread", "soup", "salt"])
        elif "vit" in folder:
            save_vit(Path(folder))
        elif "ast" in folder:
            save_ast(Path(folder))
        elif "gpt2" in folder:
            save_gpt2(Path(folder), ["The for statement is used to iterate over the elements of a sequence."] * 20)
        elif "bart" in folder:
            save_bart(Path(folder), ["The meeting is on Monday, 3 March.", "Das Treffen ist am Montag, 3. März."] * 10)
        else:
            raise AssertionError(f"README.md names {folder}, of a family this test does not make")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # the small files fill a few batches; the embedded sets of the other recipes run 20 of theirs
    quick = [*QUICK, "run.baseline=false", "data.batch_size=16", "trainer.limit_train_batches=20"]

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *shlex.split(command)[1:], *quick], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip

    # a command that starts from an earlier one's --run-dir runs after it, in its chain; the chains run two at a time
    chains: list[list[int]] = []
    writes: dict[str, list[int]] = {}
    for i, command in enumerate(commands):
        args, start = shlex.split(command), _overrides(command).get("model.init_from")
        assert start is None or start.startswith("models/") or start in writes, f"{command}: no earlier run writes it"
        chain = writes.get(start) if start is not None else None
        if chain is None:
            chain = []
            chains.append(chain)
        chain.append(i)
        if "--run-dir" in args:
            writes[args[args.index("--run-dir") + 1]] = chain
    with ThreadPoolExecutor(2) as pool:  # runs of one recipe started in the same second get their own directories
        results = list(pool.map(lambda chain: [run(commands[i]) for i in chain], chains))
    done = {i: proc for chain, procs in zip(chains, results, strict=True) for i, proc in zip(chain, procs, strict=True)}
    for i, command in enumerate(commands):
        args, proc = shlex.split(command), done[i]
        assert proc.returncode == 0, f"README.md: {command}\n{proc.stderr[-3000:]}"
        if "attnzoo.ablate" in command:  # a dry run: every run of the grid planned, each from the start it names
            grid = load_grid(args[args.index("--grid") + 1])
            planned = proc.stdout.splitlines()
            assert [line.split()[0] for line in planned] == [v.id for v in grid.variants()], proc.stdout
            start = _overrides(command)["model.init_from"]
            assert all(f"model.init_from={start}" in line for line in planned), proc.stdout
            continue
        run_dir = Path(re.search(r"attnzoo: run directory (\S+)", proc.stderr).group(1))
        summary = json.loads((tmp_path / run_dir / "summary.json").read_text())
        assert summary["finished"], summary
        start = _overrides(command).get("model.init_from")
        if start is not None:
            assert summary["init_from"]["path"] == str(tmp_path / start), summary["init_from"]  # recorded absolute
            assert summary["init_from"]["loaded"] > 0, summary["init_from"]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, f"no python code block in README section {PRETRAINED!r}"
    ns: dict = {"__name__": "readme_pretrained"}
    exec(compile(found.group(1), str(README), "exec"), ns)
    net = ns["net"]
    assert net.head.out_features == 2
    assert all(isinstance(block.attn.pattern, SlidingWindow) for block in net.encoder.blocks)
