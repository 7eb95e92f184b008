"""The report of an ablation directory (see `attnzoo.ablate`): tables (CSV, markdown) and plots (PNG).

Per variant, over its seeds: mean +- std of the metric, training throughput, peak memory and wall time,
the parameter count and the attention backends the run reported. A metric is looked up in a run's
summary.json in this order: `test` (the test split on the best checkpoint), `best` (the best validation
score), `metrics` (the values at the end of training). Runs with `run.baseline: true` also carry a classical
baseline on the same splits (`attnzoo.run.baseline`): it is a row of its own, and a dashed line on the plots.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..run.baseline import baseline_metric, tested_on_val
from ..util.files import replacing, write_text
from ..util.names import metric_mode, suggest

MB = 2**20


@dataclass
class Run:
    id: str
    seed: int
    status: str  # ok | failed | missing
    record: dict[str, Any]
    summary: dict[str, Any]


@dataclass
class Row:
    """One variant: its runs over seeds and what they measured."""

    name: str
    values: dict[str, str]
    runs: list[Run] = field(default_factory=list)
    metric: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)
    memory_mb: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    parameters: list[int] = field(default_factory=list)
    backends: set[str] = field(default_factory=set)
    nonfinite: int = 0  # finished runs whose metric is NaN or infinite (diverged at the end): not averaged, counted
    baseline: bool = False  # the classical baseline's row, not an attention variant

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.runs)


def metric_value(summary: dict[str, Any], metric: str) -> float | None:
    for section in ("test", "best", "metrics"):
        value = (summary.get(section) or {}).get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def default_metric(summaries: Sequence[dict[str, Any]]) -> str | None:
    """The recipe's monitored metric (what picked the best checkpoint), on the test split when one ran."""
    for summary in summaries:
        monitor = next((k for k in (summary.get("best") or {}) if k != "path"), summary.get("monitor"))
        if not isinstance(monitor, str):  # no validation ran (runs shorter than an epoch) in a run from before
            continue
        test = "test/" + monitor.split("/", 1)[-1]
        return test if test in (summary.get("test") or {}) else monitor
    return None


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample std); std is NaN for fewer than two values, the mean is NaN for none."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def _read(path: Path) -> dict[str, Any]:
    """A JSON record of a run ({} when it is missing, unreadable or no object)."""
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError, RecursionError):
        return {}
    return record if isinstance(record, dict) else {}


STORED = object()  # `collect`'s metric and mode: the ones the ablation stored in ablation.json


def collect(
    out: Path,
    metric: str | None | object = STORED,
    mode: str | None | object = STORED,
    variants: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], list[Row], str | None, str]:
    """(the plan, one Row per variant in grid order, the metric, its mode) from an ablation directory; `metric` and
    `mode`, when given, replace the stored ones (a grid corrected after the runs; None: the default), and so do
    `variants` (`runner.variant_records` of the grid's plan now: its seeds, not only the last command's). ConfigError
    when no finished run reports the metric (a mistyped `metric:`), naming those they report."""
    info = _read(out / "ablation.json")
    if not info:
        raise ConfigError(f"{out} is not an ablation directory (no ablation.json); give the --out of an ablation")
    info = {
        **info,
        "metric": info.get("metric") if metric is STORED else metric,
        "mode": info.get("mode") if mode is STORED else mode,
        "variants": info["variants"] if variants is None else variants,
    }
    rows: dict[str, Row] = {}
    for v in info["variants"]:
        if not isinstance(v.get("id"), str) or Path(v["id"]).name != v["id"] or v["id"] in ("", ".", ".."):
            raise ConfigError(
                f"{out / 'ablation.json'}: the variant id {v.get('id')!r} is no folder name of {out / 'runs'} (an "
                "ablation names each run's folder there)"
            )
        run_dir = out / "runs" / v["id"]
        record, summary = _read(run_dir / "ablate.json"), _read(run_dir / "summary.json")
        state = record.get("status", "ok")  # "running" with a summary: fit finished before the ablation stopped
        done = summary and summary.get("finished", True)  # False: stopped by a signal, not a result
        status = "ok" if done and state in ("ok", "running") else "failed" if state == "failed" else "missing"
        row = rows.setdefault(v["name"], Row(v["name"], v["values"]))
        row.runs.append(Run(v["id"], v["seed"], status, record, summary if status == "ok" else {}))
    summaries = [r.summary for row in rows.values() for r in row.runs if r.status == "ok"]
    metric = info.get("metric") or default_metric(summaries)
    if metric and summaries and all(metric_value(s, metric) is None for s in summaries):
        reported = sorted({k for s in summaries for sec in ("test", "best", "metrics") for k in (s.get(sec) or {})})
        reported = [k for k in reported if "/" in k]
        raise ConfigError(
            f"metric {metric!r} (the grid's metric:) is in no finished run's summary; they report {reported}"
            f"{suggest(metric, reported)}; correct the grid and run the same command again (finished runs are "
            "reused), or --report-only with --grid"
        )
    mode = info.get("mode") or (metric_mode(metric) if metric else "max")
    for row in rows.values():
        for run in row.runs:
            if run.status != "ok":
                continue
            s = run.summary
            value = metric_value(s, metric) if metric else None
            if value is not None and not math.isfinite(value):
                row.nonfinite += 1
            elif value is not None:
                row.metric.append(value)
            if s.get("train_samples_per_second"):
                row.throughput.append(float(s["train_samples_per_second"]))
            peak = s.get("peak_cuda_bytes") or s.get("peak_rss_bytes")
            if peak:
                row.memory_mb.append(peak / MB)
            if run.record.get("wall_seconds") is not None:
                row.wall.append(float(run.record["wall_seconds"]))
            if s.get("parameters") is not None:
                row.parameters.append(int(s["parameters"]))
            row.backends.update(s.get("attention_backends") or {})
    found = baseline_rows(list(rows.values()), metric, info.get("data_axes") or [])
    return info, [*rows.values(), *found], metric, mode


def baseline_rows(rows: list[Row], metric: str | None, data_axes: Sequence[str]) -> list[Row]:
    """The baseline's rows: one over every run, or, where axes of the grid change the data (`data_axes`: a dataset
    axis, data.max_len), one for each of their values, named by them: baselines of other data are not averaged."""
    if not data_axes:
        found = baseline_row(rows, metric)
        return [found] if found else []
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row.values.get(a)) for a in data_axes), []).append(row)
    out = []
    for values, group in groups.items():
        found = baseline_row(group, metric)
        if found is not None:
            found.name += f" ({', '.join(f'{a}={v}' for a, v in zip(data_axes, values, strict=True))})"
            out.append(found)
    if len({tuple(sorted(round(v, 6) for v in row.metric)) for row in out}) == 1:  # data.* keys the baseline ignores
        found = baseline_row(rows, metric)  # (data.max_len, data.augment): one row
        return [found] if found else []
    return out


def baseline_row(rows: Any, metric: str | None) -> Row | None:
    """The baseline's value of `metric` in every finished run that fit one (mean over seeds), as a Row."""
    values, names = [], set()
    for row in rows:
        for run in row.runs:
            found = (run.summary.get("baseline") or {}) if run.status == "ok" else {}
            value = baseline_metric(run.summary, metric) if metric and found else None
            if value is not None:
                values.append(value)
                names.add(f"{found.get('features', '?')} + {found.get('model', '?')}")
    if not values:
        return None
    return Row(f"baseline: {' / '.join(sorted(names))}", {}, metric=values, backends={"scikit-learn"}, baseline=True)


def _fmt(values: Sequence[float], digits: int) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" if math.isnan(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def _runs_text(row: Row) -> str:
    text = f"{row.count('ok')}/{len(row.runs)} ok"
    if row.nonfinite:
        text += f" ({row.nonfinite} with a NaN or infinite metric, left out of the mean)"
    for state in ("failed", "missing"):
        if row.count(state):
            text += f", {row.count(state)} {state}"
    return text


def _params(row: Row, dash: str, form: str = "{}") -> str:
    """The variant's parameter count, or its lowest and highest where its runs differ (a size the data chose per
    seed, such as a vocabulary learned from each seed's split); "" without any."""
    if not row.parameters:
        return ""
    low, high = min(row.parameters), max(row.parameters)
    return form.format(low) if low == high else f"{form.format(low)}{dash}{form.format(high)}"


def write_tables(out: Path, info: dict[str, Any], rows: list[Row], metric: str | None, mode: str) -> Path:
    """report.csv (one row per variant), runs.csv (one row per run) and report.md; returns report.md."""
    axes = list(info.get("axes") or {})
    cuda = any("peak_cuda_bytes" in r.summary for row in rows for r in row.runs)
    memory = "peak CUDA memory (MiB)" if cuda else "peak RSS (MiB)"  # MB = 2**20 bytes: mebibytes
    with replacing(out / "report.csv") as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", *axes, "metric", "metric_mean", "metric_std", "samples_per_s_mean", "samples_per_s_std",
                    "peak_memory_mb_mean", "memory_kind", "parameters", "wall_s_mean", "wall_s_std", "backends",
                    "seeds", "runs_ok", "runs_failed", "runs_missing"])  # fmt: skip
        for row in rows:
            stats = [tuple("" if math.isnan(x) else x for x in mean_std(v))
                     for v in (row.metric, row.throughput, row.memory_mb, row.wall)]  # fmt: skip
            w.writerow([row.name, *(row.values.get(a, "") for a in axes), metric or "", *stats[0], *stats[1],
                        stats[2][0], "cuda" if cuda else "rss", _params(row, "-"),
                        *stats[3], "+".join(sorted(row.backends)), " ".join(str(r.seed) for r in row.runs),
                        len(row.metric) if row.baseline else row.count("ok"), row.count("failed"),
                        row.count("missing")])  # fmt: skip
    with replacing(out / "runs.csv") as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "variant", "seed", "status", metric or "metric", "samples_per_s", "parameters",
                    "wall_s", "backends", "error"])  # fmt: skip
        for row in rows:
            for r in row.runs:
                s = r.summary
                w.writerow([r.id, row.name, r.seed, r.status, metric_value(s, metric) if metric and s else "",
                            s.get("train_samples_per_second", ""), s.get("parameters", ""),
                            r.record.get("wall_seconds", "") if r.status == "ok" else "",
                            "+".join(sorted(s.get("attention_backends") or {})),
                            r.record.get("error", "")])  # fmt: skip

    means = {row.name: mean_std(row.metric)[0] for row in rows if row.metric and not row.baseline}
    top = (max if mode == "max" else min)(means.values()) if means else None  # ties are all bold
    seeds = sorted({r.seed for row in rows for r in row.runs})
    # no test examples: a run's test pass scored the val split, which also picked its best checkpoint
    scored_val = {
        row.name
        for row in rows
        if metric is not None and metric.startswith("test/") and not row.baseline
        and any(tested_on_val(r.summary) for r in row.runs if r.summary)
    }  # fmt: skip
    every = scored_val and all(row.name in scored_val for row in rows if not row.baseline and row.metric)
    val_note = (
        (" The runs have no test split" if every else " † No test split")
        + ": test/ is the val split, which also chose the checkpoint scored (optimistic; give data.test a file, or a "
        "test/ folder, for held-out scores)."
        if scored_val
        else ""
    )
    configs = info.get("configs") or []
    lines = [
        f"# Ablation: {Path(info.get('grid', 'grid')).stem} on {', '.join(Path(c).stem for c in configs)}",
        "",
        f"`{info['command']}`" if info.get("command") else "",
        "",
        f"Metric: **{metric or 'none'}** ({'higher' if mode == 'max' else 'lower'} is better; best variant in bold), "
        f"mean ± std over seeds {seeds}. Throughput: training samples/s. {memory[0].upper()}{memory[1:]}: the run's "
        "process. "
        "Wall: the whole run (start-up, training, validation, test). Backend: what the attention modules ran on."
        + (" In italic: a classical baseline fit on the same splits." if any(r.baseline for r in rows) else "")
        + val_note,
        "",
        f"| variant | {metric or 'metric'} | train samples/s | {memory} | parameters | wall (s) | backend | runs |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        name, value = f"`{row.name}`", _fmt(row.metric, 4)
        if row.name in scored_val and not every:
            value += " †"
        if row.baseline:
            runs = f"{len(row.metric)} run{'' if len(row.metric) == 1 else 's'}"
            lines.append(f"| *{row.name}* | *{value}* | - | - | - | - | scikit-learn | {runs} |")
            continue
        if row.metric and means[row.name] == top:
            name, value = f"**{name}**", f"**{value}**"
        params = _params(row, "–", "{:,}") or "-"
        lines.append(
            f"| {name} | {value} | {_fmt(row.throughput, 0)} | {_fmt(row.memory_mb, 0)} | {params} | "
            f"{_fmt(row.wall, 0)} | {'+'.join(sorted(row.backends)) or '-'} | {_runs_text(row)} |"
        )
    lines += ["", "![metric per variant](metric.png)", "", "![metric against throughput](metric_vs_throughput.png)"]
    failed = [(r.id, r.record.get("error", "")) for row in rows for r in row.runs if r.status == "failed"]
    if failed:
        lines += ["", "Failed runs (stderr in `runs/<run>/stderr.log`):", ""]
        lines += [f"- `{run}`: {error}" for run, error in failed]
    write_text(out / "report.md", "\n".join(lines) + "\n")
    return out / "report.md"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_metric(rows: list[Row], metric: str | None, path: Path) -> None:
    """The metric per variant: mean with a ± std bar, each seed a faint dot; a failed variant says so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.45 * len(rows)))
    ys = list(range(len(rows)))[::-1]  # first variant at the top
    for y, row in zip(ys, rows, strict=True):
        if row.baseline:
            mean = mean_std(row.metric)[0]
            ax.axvline(mean, color="0.4", linestyle="--", linewidth=1, zorder=1)
            ax.plot(mean, y, "D", color="0.4", ms=6, zorder=3)
            continue
        if not row.metric:
            ax.annotate(f"no result ({_runs_text(row)})", (0.02, y), xycoords=("axes fraction", "data"), va="center",
                        color="tab:red", fontsize=9)  # fmt: skip
            continue
        mean, std = mean_std(row.metric)
        ax.errorbar(mean, y, xerr=0 if math.isnan(std) else std, fmt="o", color="tab:blue", capsize=4, ms=7, zorder=3)
        ax.scatter(row.metric, [y] * len(row.metric), s=14, color="0.5", alpha=0.6, zorder=2)
    ax.set_yticks(ys, [row.name for row in rows], fontsize=9)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(f"{metric} (mean ± std over seeds; grey: each seed)" if metric else "no metric")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{metric} per variant", fontsize=11)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


MARKERS = "osD^vPX*<>"  # with the 10 colors of tab10: 100 variants drawn alike at most


def plot_metric_vs_throughput(rows: list[Row], metric: str | None, path: Path) -> None:
    """Metric against training throughput, one point (± std both ways) per variant: each its own color and marker,
    named in a legend under the plot (names written beside the points overprinted each other where points are close)."""
    plt = _pyplot()
    drawn = [row for row in rows if row.metric and row.throughput]
    named = drawn + [row for row in rows if row.baseline]
    columns = 2 if all(len(row.name) <= 40 for row in named) else 1
    fig, ax = plt.subplots(figsize=(7.5, 4.6 + 0.22 * math.ceil(len(named) / columns)), layout="constrained")
    colors = plt.get_cmap("tab10")
    for row in rows:
        if row.baseline:
            ax.axhline(mean_std(row.metric)[0], color="0.4", linestyle="--", linewidth=1, label=row.name)
    for i, row in enumerate(drawn):
        (m, ms), (t, ts) = mean_std(row.metric), mean_std(row.throughput)
        ax.errorbar(t, m, xerr=0 if math.isnan(ts) else ts, yerr=0 if math.isnan(ms) else ms, ms=8, capsize=4,
                    fmt=MARKERS[i // 10 % len(MARKERS)], color=colors(i % 10), label=row.name)  # fmt: skip
    if not drawn:
        _empty(ax, "no finished run yet")
    if named:
        fig.legend(loc="outside lower center", ncols=columns, fontsize=8, frameon=False)
    ax.set_xlabel("training throughput (samples/s)")
    ax.set_ylabel(metric or "metric")
    ax.grid(alpha=0.3)
    ax.set_title(f"{metric} against throughput (mean ± std over seeds)", fontsize=11)
    ax.margins(0.15)
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def write_report(
    out: str | Path,
    metric: str | None | object = STORED,
    mode: str | None | object = STORED,
    variants: list[dict[str, Any]] | None = None,
) -> Path:
    """Tables and plots of the ablation in `out` (`metric`, `mode`, `variants`: in place of the stored ones; see
    `collect`); returns report.md."""
    out = Path(out)
    info, rows, metric, mode = collect(out, metric, mode, variants)
    path = write_tables(out, info, rows, metric, mode)
    plot_metric(rows, metric, out / "metric.png")
    plot_metric_vs_throughput(rows, metric, out / "metric_vs_throughput.png")
    return path
