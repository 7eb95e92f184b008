"""Speed and memory benchmarks: `python -m attnzoo.bench <suite> [--quick]` (or `attnzoo bench ...`).

A suite is a script `benchmarks/<suite>.py` in the repository with a `run(args) -> rows` function and a
`make_step(spec) -> callable` used for memory measurement. Each suite measures its variants side by side
in one run (timings interleaved, so machine load hits all variants alike) and writes
`benchmarks/results/<suite>.json` and `.md`. Peak memory of a variant is measured in a fresh subprocess:
CPU has no allocator high-water mark, so it is the growth of the process's peak resident set (VmHWM,
reset after a warm-up step) over its size before the step, with glibc told to return every large block
to the system on free (MALLOC_MMAP_THRESHOLD_).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
SUITE_DIR = RESULTS.parent


def load_suite(name: str) -> Any:
    """The module `benchmarks/<name>.py`."""
    import importlib.util

    path = SUITE_DIR / f"{name}.py"
    if not path.is_file():
        valid = sorted(p.stem for p in SUITE_DIR.glob("*.py") if not p.stem.startswith("_"))
        raise SystemExit(f"attnzoo bench: no suite {name!r} (looked for {path}); valid: {valid}")
    spec = importlib.util.spec_from_file_location(f"attnzoo_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_side_by_side(fns: dict[str, Callable[[], Any]], repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each fn, calls interleaved round-robin."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_of(spec: dict[str, Any]) -> int:
    """Peak extra resident bytes of one call of `make_step(spec)()` of suite `spec['suite']`, in a fresh process."""
    code = (
        "import json, sys; from attnzoo.bench import _measure_child; "
        "print(json.dumps(_measure_child(json.loads(sys.argv[1]))))"
    )
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "MALLOC_MMAP_THRESHOLD_": "65536",
    }
    out = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"memory measurement of {spec} failed:\n{out.stderr[-2000:]}")
    return int(json.loads(out.stdout.strip().splitlines()[-1]))


def _measure_child(spec: dict[str, Any]) -> int:
    module = load_suite(spec["suite"])
    step = module.make_step(spec)  # builds inputs; the step itself allocates only what it needs
    step()  # warm-up: thread pools, autograd engine, lazy inits
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    base = _rss_bytes()
    step()
    return max(0, _hwm_bytes() - base)


def _hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def write_results(name: str, rows: list[dict[str, Any]], notes: str = "") -> Path:
    """benchmarks/results/<name>.json (rows + machine) and .md (a table)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "suite": name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python -m attnzoo.bench " + " ".join(sys.argv[1:]),
    }
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    cols = list(dict.fromkeys(k for row in rows for k in row))
    lines = [
        f"# benchmark: {name}",
        "",
        f"`{meta['command']}` — torch {meta['torch']}, {meta['cpu_threads']} threads, {meta['date']}",
        "",
    ]
    if notes:
        lines += [notes, ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in cols) + " |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return RESULTS / f"{name}.md"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnzoo bench", description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="a script name under benchmarks/, e.g. dense")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = load_suite(args.suite).run(args)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
