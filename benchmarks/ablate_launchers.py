"""The same ablation through `ablate --launcher local` and `--launcher ray`: are the reports the same?

    python benchmarks/ablate_launchers.py --out /tmp/ablate_launchers      # both ablations, then the comparison

A grid of the 4 attention kinds (configs/ablations/attention.yaml, seed 0) on the ViT recipe cut to 1 epoch in
32-true, one intra-op thread per run (the recipe's). `local` runs one run at a time; `ray` starts a Ray instance
with every core, one CPU per trial. Each report.csv is read back and compared column by column: the variants, the
runs that finished, the metric, the parameter count and the attention backends must match (wall times and
throughput depend on what else the machine ran). Writes ablate_launchers.json and .md into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ARGS = ["--config", "recipes/vit.yaml", "--grid", "configs/ablations/attention.yaml", "trainer.max_epochs=1",
        "trainer.precision=32-true", "--seeds", "0"]  # fmt: skip
LAUNCHERS = {"local": [], "ray": ["--launcher", "ray", "--cpus-per-run", "1"]}
SAME = ["variant", "runs_ok", "runs_failed", "metric", "metric_mean", "parameters", "backends"]  # must match
SHOWN = [*SAME, "samples_per_s_mean", "wall_s_mean"]


def run(name: str, out: Path) -> dict:
    command = [sys.executable, "-m", "attnzoo.ablate", *ARGS, "--out", str(out / name), *LAUNCHERS[name]]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    with open(out / name / "report.csv", newline="") as f:
        rows = [{k: row[k] for k in SHOWN} for row in csv.DictReader(f)]
    shown = ["python -m attnzoo.ablate", *ARGS, "--out", f"<out>/{name}", *LAUNCHERS[name]]
    loads = [round(load, 1), round(os.getloadavg()[0], 1)]
    return {"command": " ".join(shown), "wall_s": round(wall, 1), "load": loads, "rows": rows}


def markdown(result: dict) -> str:
    hw = result["hardware"]
    lines = [
        "# One ablation through the local and the Ray launcher",
        "",
        f"Hardware: {hw['cpu']} ({hw['cpu_cores']} cores), torch {hw['torch']}, Ray {hw['ray']}, Python {hw['python']}."
        " The machine was shared with other jobs (load average over 1 min before / after each ablation), so wall "
        "times and throughput are noisy; the metric is not (same seed, one thread per run).",
        "",
        f"**Same report: {'yes' if result['identical'] else 'NO'}** (columns compared: {', '.join(SAME)}).",
        "",
    ]
    for name, launcher in result["launchers"].items():
        lines += [f"## `{name}`: {launcher['wall_s']:.0f} s in all, load {launcher['load'][0]} / {launcher['load'][1]}",
                  "", f"`{launcher['command']}`", "", "| " + " | ".join(SHOWN) + " |",
                  "|" + "---|" * len(SHOWN)]  # fmt: skip
        lines += ["| " + " | ".join(_cell(k, row[k]) for k in SHOWN) + " |" for row in launcher["rows"]]
        lines.append("")
    lines.append("`local` runs one run at a time; `ray` ran two trials at a time (one CPU each), Ray's start-up "
                 "included. Full values (all digits) in ablate_launchers.json.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _cell(column: str, value: str) -> str:
    digits = {"metric_mean": 4, "samples_per_s_mean": 0, "wall_s_mean": 1}.get(column)
    return f"{float(value):.{digits}f}" if digits is not None and value else value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="a new folder for the two ablation directories")
    p.add_argument("--markdown-only", action="store_true", help="rewrite the .md from the .json, run nothing")
    args = p.parse_args()
    if args.markdown_only:
        (RESULTS / "ablate_launchers.md").write_text(
            markdown(json.loads((RESULTS / "ablate_launchers.json").read_text()))
        )
        return
    import ray
    import torch

    sys.path.insert(0, str(ROOT))
    from attnzoo.benchmarks.harness import hardware

    info = {**hardware(), "torch": torch.__version__, "ray": ray.__version__, "python": platform.python_version()}
    launchers = {name: run(name, args.out) for name in LAUNCHERS}
    same = [[{k: row[k] for k in SAME} for row in launcher["rows"]] for launcher in launchers.values()]
    result = {"hardware": info, "identical": all(s == same[0] for s in same), "compared": SAME, "launchers": launchers}
    (RESULTS / "ablate_launchers.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "ablate_launchers.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
