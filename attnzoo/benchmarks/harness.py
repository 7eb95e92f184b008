"""The benchmark harness behind `python -m attnzoo.bench <suite>`: side-by-side timing, peak memory, results files.

A suite is a module `attnzoo.benchmarks.<suite>` with a `run(args) -> rows` function and a
`make_step(spec) -> callable` used for memory measurement. Each suite measures its variants side by side
in one run (timings interleaved, so machine load hits all variants alike) and writes `<out>/<suite>.json`
and `.md` (default out: `benchmarks/results`), with the hardware, threads and torch version recorded.
Peak memory of a variant is measured in a fresh subprocess:
CPU has no allocator high-water mark, so it is the growth of the process's peak resident set (VmHWM,
reset after a warm-up step) over its size before the step, with glibc told to return every large block
to the system on free (MALLOC_MMAP_THRESHOLD_).
"""

from __future__ import annotations

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

SUITE_DIR = Path(__file__).resolve().parent
NOT_SUITES = ("harness",)
OUT_ENV = "ATTNZOO_BENCH_OUT"  # where results go (set by `attnzoo bench --out`; inherited by memory subprocesses)


def suites() -> list[str]:
    """Names of the benchmark suites in this package."""
    return sorted(p.stem for p in SUITE_DIR.glob("*.py") if not p.stem.startswith("_") and p.stem not in NOT_SUITES)


def load_suite(name: str) -> Any:
    """The module `attnzoo.benchmarks.<name>`."""
    import importlib

    if name not in suites():
        raise SystemExit(f"attnzoo bench: no suite {name!r}; valid: {suites()}")
    return importlib.import_module(f"attnzoo.benchmarks.{name}")


def results_dir() -> Path:
    return Path(os.environ.get(OUT_ENV, "benchmarks/results"))


def hardware() -> dict[str, Any]:
    """What the numbers were measured on: CPU model, cores, GPU (if one is used), threads."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cpu_cores": os.cpu_count(), "cpu_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


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
        "import json, sys; from attnzoo.benchmarks.harness import _measure_child; "
        "print(json.dumps(_measure_child(json.loads(sys.argv[1]))))"
    )
    root = str(Path(__file__).resolve().parents[2])
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
    """`<out>/<name>.json` (rows + machine) and `.md` (a table)."""
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "suite": name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        **hardware(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python -m attnzoo.bench " + " ".join(sys.argv[1:]),
    }
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    cols = list(dict.fromkeys(k for row in rows for k in row))
    lines = [
        f"# benchmark: {name}",
        "",
        f"`{meta['command']}` — torch {meta['torch']}, {meta['cpu']} ({meta['cpu_cores']} cores), "
        f"{meta['cpu_threads']} threads" + (f", GPU {meta['gpu']}" if "gpu" in meta else "") + f", {meta['date']}",
        "",
    ]
    if notes:
        lines += [notes, ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in cols) + " |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out / f"{name}.md"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
