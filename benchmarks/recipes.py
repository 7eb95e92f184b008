"""Recipes on real-format stand-in data: each run overrides data keys only, beside its classical baseline.

    python benchmarks/recipes.py --standins /tmp/standins                # every run below, one after another
    python benchmarks/recipes.py --standins /tmp/standins --only wordnet digits
    python benchmarks/recipes.py --standins /tmp/standins --embedded     # the recipes' embedded defaults too

Stand-ins are built first where missing (benchmarks/standins/*.py; the text and audio ones need Debian's
`fortunes`, `wordnet-base` and `espeak-ng`; `debian` reads the apt package lists of a Debian system). Settings were
tuned on the runs marked "tune" and not changed for the ones marked "report". Each run is `python -m attnzoo.fit`
in its own process with the recipe's own settings (`run.baseline: true`); wall time, the process's CPU time and the
machine's load average are recorded, with the hardware, in `<out>/standins.json` and `<out>/standins.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).resolve().parent / "standins"

# name: (modality, role, stand-in builder + its arguments, recipe, data overrides ({root} = the stand-in's folder))
RUNS = {
    "docstrings": ("text", "tune", ["text.py", "docstrings"], "text_cls.yaml",
                   ["data.train={root}/train.csv", "data.val={root}/val.csv", "data.test={root}/test.csv"]),
    "fortunes": ("text", "tune", ["text.py", "fortunes"], "text_cls.yaml",
                 ["data.train={root}/train.csv", "data.val={root}/val.csv", "data.test={root}/test.csv"]),
    "wordnet": ("text", "tune", ["text.py", "wordnet"], "text_cls.yaml",
                ["data.train={root}/train.csv", "data.val={root}/val.csv", "data.test={root}/test.csv"]),
    "debian": ("text", "report", ["text.py", "debian"], "text_cls.yaml",
               ["data.train={root}/train.csv", "data.val={root}/val.csv", "data.test={root}/test.csv"]),
    "mnist-folder": ("image", "tune", ["images.py", "mnist-folder"], "vit.yaml",
                     ["data.dataset=folder", "data.root={root}"]),
    "sklearn-digits": ("image", "report", ["images.py", "sklearn-digits"], "vit.yaml",
                       ["data.dataset=folder", "data.root={root}"]),
    "glyphs": ("image", "tune", ["images.py", "glyphs"], "vit.yaml", ["data.dataset=folder", "data.root={root}"]),
    "shapes": ("image", "report", ["images.py", "shapes"], "vit.yaml", ["data.dataset=folder", "data.root={root}"]),
    "commands": ("audio", "tune", ["audio.py", "commands"], "ast.yaml", ["data.source=folder", "data.root={root}"]),
    "digits": ("audio", "report", ["audio.py", "digits", "--seed", "1"], "ast.yaml",
               ["data.source=folder", "data.root={root}"]),
}  # fmt: skip
EMBEDDED = {
    "embedded-listops": ("text", "embedded", None, "text_cls.yaml", []),
    "embedded-mnist5k": ("image", "embedded", None, "vit.yaml", []),
    "embedded-syllables": ("audio", "embedded", None, "ast.yaml", []),
    "embedded-scenes": ("text-image", "embedded", None, "text_image.yaml", []),
}


def build_standin(builder: list[str], root: Path) -> None:
    if root.is_dir() and any(root.iterdir()):
        return
    command = [sys.executable, str(STANDINS / builder[0]), builder[1], str(root), *builder[2:]]
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def run(name: str, spec: tuple, standins: Path, runs: Path) -> dict:
    modality, role, builder, recipe, data = spec
    root = standins / name
    if builder is not None:
        build_standin(builder, root)
    overrides = [o.format(root=root) for o in data]
    command = [sys.executable, "-m", "attnzoo.fit", "--config", f"recipes/{recipe}", *overrides,
               "trainer.enable_progress_bar=false", f"run.dir={runs}", f"run.name={name}"]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "name": name, "modality": modality, "role": role, "recipe": f"recipes/{recipe}",
        "command": "python -m attnzoo.fit --config recipes/" + recipe + "".join(f" {o}" for o in data),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "returncode": proc.returncode,
    }  # fmt: skip
    if proc.returncode != 0:
        record["error"] = proc.stderr.strip().splitlines()[-1:]
        return record
    run_dir = sorted((runs / name).iterdir())[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    metric = "test/" + next(k for k in summary["best"] if k != "path").split("/", 1)[1]
    config = (run_dir / "config.yaml").read_text()
    from attnzoo.run.baseline import baseline_metric  # a run without a test split pairs with the baseline on val

    baseline = baseline_metric(summary, metric) if summary.get("baseline") else None
    record.update(
        metric=metric,
        attnzoo=summary["test"][metric],
        baseline=baseline,
        baseline_model=f"{summary['baseline']['features']} + {summary['baseline']['model']}"
        if summary.get("baseline")
        else None,
        ratio=summary["test"][metric] / baseline if baseline else None,
        epochs=summary["epochs"],
        best_epoch=summary.get("best_epoch"),
        stopped=summary.get("stopped", {}).get("reason"),
        train_seconds=round(summary["train_seconds"], 1),
        parameters=summary["parameters"],
        precision=summary["precision"],
        train_examples=summary.get("baseline", {}).get("train_examples"),
        chosen=[line.strip() for line in proc.stderr.splitlines() if ": auto -> " in line or "attnzoo: data: " in line],
        warnings=[line.strip() for line in proc.stderr.splitlines() if "not learning" in line],
        config_yaml_bytes=len(config),
    )
    return record


def markdown(records: list[dict], hardware: dict) -> str:
    lines = [
        "# Recipes on stand-in data (data keys only) beside a classical baseline",
        "",
        f"Hardware: {hardware['cpu']} ({hardware['cpu_cores']} cores), torch {hardware['torch']}, "
        f"Python {hardware['python']}. Each run uses one thread; load is the machine's load average over 1 min "
        "before / after the run (with 2 cores, up to 2 means the run had a core to itself). CPU s is the run's own "
        "processor time (user + system). `{root}` in a command is the stand-in's folder.",
        "",
        "| run | role | metric | attnzoo | baseline | attnzoo / baseline | epochs (stop) | wall s | CPU s | load |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in records:
        if r.get("returncode"):
            lines.append(f"| {r['name']} | {r['role']} | failed: {r.get('error')} | | | | | | | |")
            continue
        base = f"{r['baseline']:.4f}" if r.get("baseline") is not None else "-"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else "-"
        lines.append(
            f"| {r['name']} | {r['role']} | {r['metric']} | {r['attnzoo']:.4f} | {base} | {ratio} | "
            f"{r['epochs']} ({r['stopped']}) | {r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | "
            f"{r['load_average'][0]:.1f} / {r['load_average'][1]:.1f} |"
        )
    lines += ["", "Commands (from the repository root):", ""]
    lines += [f"- {r['name']}: `{r['command']}`" for r in records]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--standins", type=Path, required=True, help="where the stand-in data sets are (built if missing)")
    p.add_argument("--runs", type=Path, default=None, help="run directories (default: <standins>/runs)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--only", nargs="*", help="run only these names")
    p.add_argument("--embedded", action="store_true", help="also run each recipe on its embedded default data")
    args = p.parse_args()
    table = {**RUNS, **(EMBEDDED if args.embedded else {})}
    names = args.only or list(table)
    unknown = sorted(set(names) - set(table) - set(EMBEDDED))
    if unknown:
        sys.exit(f"unknown runs {unknown}; valid: {sorted({**RUNS, **EMBEDDED})}")
    runs = args.runs or args.standins / "runs"
    sys.path.insert(0, str(ROOT))
    import torch

    from attnzoo.benchmarks.harness import hardware

    info = {**hardware(), "torch": torch.__version__, "python": platform.python_version()}
    out_json = args.out / "standins.json"
    old = json.loads(out_json.read_text())["runs"] if out_json.is_file() else []
    records = {r["name"]: r for r in old}
    for name in names:
        spec = {**RUNS, **EMBEDDED}[name]
        print(f"{name}: running", file=sys.stderr, flush=True)
        records[name] = run(name, spec, args.standins, runs)
        print(json.dumps(records[name]), file=sys.stderr, flush=True)
        order = [n for n in {**RUNS, **EMBEDDED} if n in records]
        result = {"hardware": info, "runs": [records[n] for n in order]}
        args.out.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "standins.md").write_text(markdown(result["runs"], info))


if __name__ == "__main__":
    main()
