"""Peak memory of `translate --file` on 20,000 lines, and whether every output line matches its input line.

    python benchmarks/translate_file.py --out /tmp/translate_file      # a tiny run, the file, the measurement

Trains a small translation run on the embedded English -> German phrases (dim 64, one encoder and one decoder layer,
6,000 pairs, 5 epochs, one thread), writes 20,000 lines of English phrases not in its train split with about 5%
blank lines, and runs `python -m attnzoo.translate <run> --file <file>` under `/usr/bin/time -v` (peak resident set
size), with the run's beam size. For scale, the same is measured for a 1,000-line file and for a process that only
imports what the command imports (torch, Lightning, torchmetrics and what those import). Alignment: the number of
output lines equals the number of input lines, and an output line is blank exactly where its input line is.
Writes translate_file.json and .md into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIT = ["--config", "recipes/translation.yaml", "model.encoder_depth=1", "model.decoder_depth=1", "model.dim=64",
       "data.num_train=6000", "data.num_val=64", "data.num_test=32", "data.vocab_size=500", "task.beam_size=2",
       "trainer.max_epochs=5", "trainer.precision=32-true", "run.test=false",
       "trainer.enable_progress_bar=false"]  # fmt: skip
LINES = 20_000


def timed(command: list[str], stdout: Path) -> tuple[int, float, str]:
    """(peak RSS in KiB, wall seconds, stderr tail) of `command` under /usr/bin/time -v."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with stdout.open("w") as out:
        done = subprocess.run(["/usr/bin/time", "-v", *command], stdout=out, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT, check=True)  # fmt: skip
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", done.stderr).group(1)
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    return rss, round(seconds, 1), "\n".join(done.stderr.splitlines()[-30:])


def write_lines(path: Path, n: int) -> list[str]:
    from attnzoo.data.embedded.cldr_pairs import generate_pairs

    pairs = generate_pairs({"train": n, "val": 10, "test": 10}, src_lang="en", tgt_lang="de", seed=5)["train"]
    rng = random.Random(0)
    lines: list[str] = []
    for src, _ in pairs:
        lines += [src] + ([""] if rng.random() < 0.05 else [])
    lines = lines[:n]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def aligned(inputs: list[str], output: Path) -> dict:
    out = output.read_text(encoding="utf-8").split("\n")[:-1]
    pairs = list(zip(inputs, out, strict=False))
    return {
        "input_lines": len(inputs),
        "output_lines": len(out),
        "blank_inputs": sum(not a.strip() for a in inputs),
        "blank_mismatches": sum((not a.strip()) != (not b) for a, b in pairs),
        "empty_translations": sum(bool(a.strip()) and not b for a, b in pairs),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--run", type=Path, help="an existing translation run instead of training one")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = args.run
    if run is None:
        subprocess.run([sys.executable, "-m", "attnzoo.fit", *FIT, f"run.dir={args.out / 'runs'}"], cwd=ROOT, env=env,
                       check=True, capture_output=True)  # fmt: skip
        (run,) = (args.out / "runs" / "translation").iterdir()
    result: dict = {"run": str(run), "fit": "python -m attnzoo.fit " + " ".join(FIT), "files": {}}
    for n in (LINES, 1000):
        lines = write_lines(args.out / f"in{n}.txt", n)
        command = [sys.executable, "-m", "attnzoo.translate", str(run), "--file", str(args.out / f"in{n}.txt")]
        rss, wall, tail = timed(command, args.out / f"out{n}.txt")
        shown = f"/usr/bin/time -v python -m attnzoo.translate <run> --file <{n} lines> > out.txt"
        record = {"command": shown, "peak_rss_kib": rss, "wall_s": wall, **aligned(lines, args.out / f"out{n}.txt")}
        result["files"][n] = {**record, "stderr_tail": tail.splitlines()[-3:]}
    imports = "import torch, lightning, torchmetrics, attnzoo.translate, attnzoo.run, attnzoo.tasks"
    rss, _, _ = timed([sys.executable, "-c", imports], args.out / "imports.txt")
    result["imports_only"] = {"command": f'python -c "{imports}"', "peak_rss_kib": rss}
    import torch

    result["hardware"] = {"cpu": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count(),
                          "torch": torch.__version__, "python": platform.python_version(), "threads": 1}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "translate_file.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "translate_file.md").write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    hw = result["hardware"]
    lines = [
        "# `translate --file`: peak memory and line alignment",
        "",
        f"Hardware: {hw['cpu']} ({hw['cpu_cores']} cores), torch {hw['torch']}, Python {hw['python']}, one thread. "
        f"Run: `{result['fit']}`.",
        "",
        "| lines | peak RSS (MiB) | wall (s) | output lines | blank in / blank mismatches | empty translations |",
        "|---|---|---|---|---|---|",
    ]
    for n, r in result["files"].items():
        lines.append(f"| {n} | {r['peak_rss_kib'] / 1024:.0f} | {r['wall_s']} | {r['output_lines']} | "
                     f"{r['blank_inputs']} / {r['blank_mismatches']} | {r['empty_translations']} |")  # fmt: skip
    imp = result["imports_only"]
    lines += ["", f"Importing what the command imports, and nothing else (`{imp['command']}`): "
              f"{imp['peak_rss_kib'] / 1024:.0f} MiB peak RSS. The file is read and translated in batches, so the "
              "peak does not grow with the number of lines.", ""]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
