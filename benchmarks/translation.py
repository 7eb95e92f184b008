"""Translation on real English -> German pairs: the recipe's defaults before and after issue 26, beside a translation
memory.

    python benchmarks/translation.py --data /tmp/gettext-de        # builds the stand-in there if missing
    python benchmarks/translation.py --data /tmp/gettext-de --only defaults

The stand-in is Debian's gettext catalogs (`benchmarks/standins/translation.py`: 8,000 / 500 / 1,000 English user
messages with their German translations). Runs, each in its own process with one thread:

- `memory`: the translation memory alone (`python -m attnzoo.baseline`), no training.
- `before`: the recipe as it was before digit splitting and data-chosen epochs: 6 epochs, no early stopping, BPE
  that merges digits (`data.split_digits=false trainer.max_epochs=6 run.early_stopping=false`).
- `defaults`: the recipe as shipped, data keys only: digits split one by one, epochs chosen from the data (~2,500
  steps), early stopping on val BLEU; its summary also holds the translation-memory baseline on the same splits.

Test BLEU/chrF are the beam-search scores of the best checkpoint; wall time, the process's CPU time (user +
system) and the machine's load average are recorded, with the hardware and torch version, in
`<out>/translation.json` and `<out>/translation.md`.
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
FILES = ["data.train={root}/train.tsv", "data.val={root}/val.tsv", "data.test={root}/test.tsv"]
RUNS = {
    "memory": None,  # the translation memory alone: `python -m attnzoo.baseline` on the same files
    "before": ["data.split_digits=false", "trainer.max_epochs=6", "run.early_stopping=false", "run.baseline=false"],
    "defaults": [],
}


def memory(root: Path, out: Path) -> dict:
    """The translation memory on the stand-in's splits, without training (`attnzoo baseline`)."""
    overrides = [o.format(root=root) for o in FILES]
    result_file = out / "translation_memory.json"
    command = [sys.executable, "-m", "attnzoo.baseline", "--config", "recipes/translation.yaml", *overrides,
               "trainer.num_threads=1", "--json", str(result_file)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "name": "memory",
        "command": "python -m attnzoo.baseline --config recipes/translation.yaml " + " ".join(FILES),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        record["error"] = proc.stderr.strip().splitlines()[-3:]
        return record
    record["baseline"] = json.loads(result_file.read_text())
    result_file.unlink()
    return record


def run(name: str, extra: list[str], root: Path, runs: Path) -> dict:
    overrides = [o.format(root=root) for o in FILES] + extra
    command = [sys.executable, "-m", "attnzoo.fit", "--config", "recipes/translation.yaml", *overrides,
               "trainer.num_threads=1", "trainer.enable_progress_bar=false", f"run.dir={runs}",
               f"run.name={name}"]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "name": name,
        "command": "python -m attnzoo.fit --config recipes/translation.yaml " + " ".join([*FILES, *extra]),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        record["error"] = proc.stderr.strip().splitlines()[-3:]
        return record
    run_dir = sorted((runs / name).iterdir())[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    record.update(
        test_bleu=summary["test"]["test/bleu"],
        test_chrf=summary["test"]["test/chrf"],
        best_val_bleu=summary["best"]["val/bleu"],
        epochs=summary["epochs"],
        best_epoch=summary.get("best_epoch"),
        stopped=summary.get("stopped", {}).get("reason"),
        train_seconds=round(summary["train_seconds"], 1),
        parameters=summary["parameters"],
        precision=summary["precision"],
        chosen=[line.strip() for line in proc.stderr.splitlines() if ": auto -> " in line or "left out" in line],
    )
    if summary.get("baseline"):
        record["baseline"] = summary["baseline"]
    return record


def markdown(records: list[dict], hardware: dict) -> str:
    lines = [
        "# Translation on real English -> German pairs (Debian's gettext catalogs)",
        "",
        f"Hardware: {hardware['cpu']} ({hardware['cpu_cores']} cores), torch {hardware['torch']}, "
        f"Python {hardware['python']}; one thread per run (`trainer.num_threads=1`, `OMP_NUM_THREADS=1`). "
        "Data: `benchmarks/standins/translation.py gettext` (8,000 train / 500 val / 1,000 test pairs, no test "
        "source in train). Test scores are beam search (beam 4) with the best checkpoint on val BLEU (greedy). "
        "CPU s is the run's own processor time (user + system); load is the machine's load average over 1 min "
        "before / after the run (the wall time grows with it; the CPU time much less).",
        "",
        "| run | test BLEU | test chrF | best val BLEU | epochs (best, stop) | train s | wall s | CPU s | load |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in records:
        if r.get("returncode"):
            lines.append(f"| {r['name']} | failed: {r.get('error')} | | | | | | | |")
            continue
        if r["name"] == "memory":  # the baseline command alone
            b = r["baseline"]
            lines.append(
                f"| memory: {b['model']} ({b['features']}), no training | {b['test/bleu']:.1f} | {b['test/chrf']:.1f} "
                f"| {b['val/bleu']:.1f} | | | {r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | "
                f"{r['load_average'][0]:.1f} / {r['load_average'][1]:.1f} |"
            )
            continue
        lines.append(
            f"| {r['name']} | {r['test_bleu']:.1f} | {r['test_chrf']:.1f} | {r['best_val_bleu']:.1f} | "
            f"{r['epochs']} ({r['best_epoch']}, {r['stopped']}) | {r['train_seconds']:.0f} | "
            f"{r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | "
            f"{r['load_average'][0]:.1f} / {r['load_average'][1]:.1f} |"
        )
        base = r.get("baseline")
        if base and "skipped" not in base:
            lines.append(
                f"| {r['name']}: baseline, {base['model']} ({base['features']}) | {base['test/bleu']:.1f} | "
                f"{base['test/chrf']:.1f} | {base['val/bleu']:.1f} | | | {base['seconds']:.0f} (baseline) | | |"
            )
        elif base:
            lines.append(f"| {r['name']}: baseline skipped ({base['skipped']}) | | | | | | | | |")
    lines += ["", "Commands (from the repository root; `{root}` is the stand-in's folder):", ""]
    lines += [f"- {r['name']}: `{r['command']}`" for r in records]
    chosen = [f"  - {line}" for r in records for line in r.get("chosen", [])]
    if chosen:
        lines += ["", "Chosen from the data (the runs' logs):", "", *chosen]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="the stand-in's folder (built if missing)")
    p.add_argument("--runs", type=Path, default=None, help="run directories (default: <data>/runs)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--only", nargs="*", choices=list(RUNS), help="run only these")
    args = p.parse_args()
    if not (args.data / "train.tsv").is_file():
        builder = ROOT / "benchmarks" / "standins" / "translation.py"
        subprocess.run([sys.executable, str(builder), "gettext", str(args.data)], check=True)
    runs = args.runs or args.data / "runs"
    sys.path.insert(0, str(ROOT))
    import torch

    from attnzoo.benchmarks.harness import hardware

    info = {**hardware(), "torch": torch.__version__, "python": platform.python_version()}
    out_json = args.out / "translation.json"
    args.out.mkdir(parents=True, exist_ok=True)  # the translation memory's score is written there as it runs
    for name in args.only or list(RUNS):
        print(f"{name}: running", file=sys.stderr, flush=True)
        record = memory(args.data, args.out) if RUNS[name] is None else run(name, RUNS[name], args.data, runs)
        print(json.dumps(record), file=sys.stderr, flush=True)
        # the file read again now: runs of another invocation (`--only`) that finished meanwhile are kept
        old = json.loads(out_json.read_text())["runs"] if out_json.is_file() else []
        records = {**{r["name"]: r for r in old}, name: record}
        result = {"hardware": info, "runs": [records[n] for n in RUNS if n in records]}
        out_json.write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "translation.md").write_text(markdown(result["runs"], info))


if __name__ == "__main__":
    main()
