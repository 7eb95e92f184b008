"""Pretrain your own start: MLM pretraining on unlabeled in-domain text, then the text classifier fine-tuned from it
(`model.init_from`), beside the same classifier from scratch and the TF-IDF + logistic regression baseline.

    python benchmarks/mlm_finetune.py --standins /tmp/standins                  # docstrings (built if missing)
    python benchmarks/mlm_finetune.py --standins /tmp/standins --only fortunes  # needs apt install fortunes

The stand-ins are the text classification ones of benchmarks/recipes.py (benchmarks/standins/text.py: real text on
this machine, never the recipes' embedded sets). Three runs, one after another, each `python -m attnzoo.fit` in
its own process with the recipes as they are (one thread each):

1. `recipes/mlm.yaml data.train={root}/corpus.txt`: domain-adaptive pretraining on `{root}/corpus.txt`
   (benchmarks/standins/text.py corpus, built if missing): the other texts of the stand-in's source (docstrings:
   every docstring paragraph of the standard library, `--packages`: and of the installed packages; fortunes: every
   fortune file; wordnet: every definition and example; debian: every package description), without the val and
   test texts or near copies of them, plus the train split's texts (their labels are not read). `--corpus train`
   pretrains on the train split's texts alone.
2. `recipes/text_cls.yaml` on train/val/test with `model.init_from=<run 1>` (encoder and tokenizer loaded).
3. the same from scratch, which also fits the recipe's TF-IDF + logistic regression baseline on the same splits.

Wall time, the process's CPU time and the machine's load average are recorded beside the hardware, thread count
and torch version in `<out>/mlm_finetune.json` and `<out>/mlm_finetune.md`.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from recipes import RUNS, build_standin  # noqa: E402 (the stand-ins of benchmarks/recipes.py)

TEXT_STANDINS = [name for name, spec in RUNS.items() if spec[0] == "text"]
SPLITS = ["data.train={root}/train.csv", "data.val={root}/val.csv", "data.test={root}/test.csv"]
STEPS = {
    "pretrain": ("recipes/mlm.yaml", ["data.train={root}/{corpus}", "--run-dir", "{runs}/{name}-mlm"]),
    "finetune": ("recipes/text_cls.yaml", [*SPLITS, "model.init_from={runs}/{name}-mlm", "--run-dir",
                                           "{runs}/{name}-finetune", "run.baseline=false"]),
    "scratch": ("recipes/text_cls.yaml", [*SPLITS, "--run-dir", "{runs}/{name}-scratch"]),
}  # fmt: skip
CORPUS = {
    "docstrings": "The text is {root}/corpus.txt (`python benchmarks/standins/text.py corpus {root}`): every docstring "
    "paragraph of the standard library read with `ast`, without any paragraph equal (lowercased) to a text of the "
    "val or test split or holding half of its word 5-grams (a near copy), plus the train split's texts without "
    "their labels; "
    "the MLM run holds 5% of it out for val and 5% for test. The tokenizer learned on it is the classifier's "
    "(`model.init_from` loads the run's tokenizer).",
    "docstrings+packages": "As docstrings, with the installed packages' docstrings too (`--packages`).",
    "debian": "The text is {root}/corpus.txt (`python benchmarks/standins/text.py corpus {root} --from debian`): every "
    "other package description of the machine's apt lists (the package of any val or test text left out whole, and "
    "near copies of those texts), plus the train split's texts without their labels.",
    "wordnet": "The text is {root}/corpus.txt (`python benchmarks/standins/text.py corpus {root} --from wordnet`): the "
    "definition and example sentences of every other WordNet synset (nouns of every lexicographer file, verbs, "
    "adjectives, adverbs; a synset whose definition is a val or test text left out whole, and near copies of those "
    "texts), plus the train split's texts without their labels.",
    "fortunes": "The text is {root}/corpus.txt (`python benchmarks/standins/text.py corpus {root} --from fortunes`): "
    "every fortune of every file of /usr/share/games/fortunes (the stand-in's 10 categories and the others) but the "
    "val and test texts and near copies of them (the same fortune with another attribution), plus the train split's "
    "texts without their labels.",
    "train": "The text is the train split's texts alone (their labels are not read).",
}
OWN_CORPUS = ("debian", "wordnet", "fortunes")  # stand-ins pretrained on their own source (text.py corpus --from)
GOAL = {"ratio": 1.0, "pretrain_seconds": 600, "finetune_seconds": 300}


def run_step(step: str, name: str, root: Path, runs: Path, corpus: str) -> dict:
    recipe, args = STEPS[step]
    args = [a.format(root=root, runs=runs, name=name, corpus=corpus) for a in args]
    command = [sys.executable, "-m", "attnzoo.fit", "--config", recipe, *args, "trainer.enable_progress_bar=false"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "step": step,
        "command": " ".join(["python -m attnzoo.fit --config", recipe, *STEPS[step][1]]).replace("{corpus}", corpus),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        record["error"] = proc.stderr.strip().splitlines()[-3:]
        return record
    run_dir = runs / f"{name}-{step if step != 'pretrain' else 'mlm'}"
    summary = json.loads((run_dir / "summary.json").read_text())
    record.update(
        test={k: v for k, v in summary["test"].items() if k.startswith("test/")},
        best={k: v for k, v in summary["best"].items() if k != "path"},
        epochs=summary["epochs"],
        global_step=summary["global_step"],
        stopped=summary.get("stopped", {}).get("reason"),
        train_seconds=round(summary["train_seconds"], 1),
        parameters=summary["parameters"],
        precision=summary["precision"],
        init_from={k: summary["init_from"][k] for k in ("loaded", "new", "dropped")}
        if "init_from" in summary
        else None,
        baseline={k: v for k, v in summary["baseline"].items() if k.startswith(("test/", "val/"))}
        if summary.get("baseline")
        else None,
        data={k: v for k, v in json.loads((run_dir / "mlm.json").read_text()).items() if k in ("texts", "tokens")}
        if step == "pretrain"
        else None,
        chosen=[line.strip() for line in proc.stderr.splitlines() if ": auto -> " in line or "attnzoo: data: " in line],
    )
    return record


def _counts(counts: dict) -> str:
    return " / ".join(f"{counts[k]:,}" for k in ("train", "val", "test"))


def markdown(result: dict) -> str:
    hw = result["hardware"]
    lines = [
        "# Pretrain your own start: MLM, then fine-tuning (`model.init_from`), beside scratch and TF-IDF",
        "",
        f"Hardware: {hw['cpu']} ({hw['cpu_cores']} cores, shared with other jobs), torch {hw['torch']}, Python "
        f"{hw['python']}; every run uses {hw['threads_per_run']} thread (the recipes' `trainer.num_threads`). Wall s "
        "is each process's time from start to exit (data, tokenizer, training, test); CPU s is its own processor "
        "time; load is the machine's 1-minute load average before / after (2 cores: above 2, runs shared a core). "
        f"Goal: fine-tuned test accuracy >= {GOAL['ratio']:.1f}x the baseline's, pretraining <= "
        f"{GOAL['pretrain_seconds'] // 60} min, fine-tuning <= {GOAL['finetune_seconds'] // 60} min.",
        "",
        *[
            f"{name}: pretraining text {_counts(steps['pretrain']['data']['texts'])} texts, "
            f"{_counts(steps['pretrain']['data']['tokens'])} tokens (train / val / test of the MLM run). "
            f"{CORPUS[name if result['corpus'] != 'train' and name in OWN_CORPUS else result['corpus']]}"
            for name, steps in result["standins"].items()
            if steps.get("pretrain", {}).get("data")
        ],
        "",
        "| stand-in | run | test/acc | / TF-IDF | epochs (stop) | steps | wall s | CPU s | load |",
        "|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for name, steps in result["standins"].items():
        base = steps.get("scratch", {}).get("baseline") or {}
        tfidf = base.get("test/acc")
        for step, r in steps.items():
            if r.get("returncode"):
                lines.append(f"| {name} | {step} | failed: {r.get('error')} | | | | | | |")
                continue
            if step == "pretrain":  # masked-token numbers, not classification: no ratio to the baseline
                shown, ratio = f"masked tokens: acc {r['test']['test/acc']:.3f}, ppl {r['test']['test/ppl']:.0f}", "-"
            else:
                shown, ratio = f"{r['test']['test/acc']:.4f}", f"{r['test']['test/acc'] / tfidf:.3f}" if tfidf else "-"
            lines.append(
                f"| {name} | {step} | {shown} | {ratio} | {r['epochs']} ({r['stopped']}) | {r['global_step']} | "
                f"{r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | {r['load_average'][0]:.1f} / "
                f"{r['load_average'][1]:.1f} |"
            )
        if tfidf is not None:
            lines.append(f"| {name} | TF-IDF + logistic regression | {tfidf:.4f} | 1.000 | | | | | |")
    lines += ["", "Commands (from the repository root; `{root}` is the stand-in's folder, `{runs}` where runs go):", ""]
    first = next(iter(result["standins"].values()))
    lines += [f"- {step}: `{r['command']}`" for step, r in first.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--standins", type=Path, required=True, help="where the stand-in data sets are (built if missing)")
    p.add_argument("--runs", type=Path, default=None, help="run directories (default: <standins>/mlm_runs)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--only", nargs="*", default=["docstrings"], choices=TEXT_STANDINS)
    p.add_argument(
        "--corpus",
        choices=["docstrings", "train"],
        default="docstrings",
        help="pretraining text: the docstring corpus (corpus.txt) or the train split's texts alone",
    )
    p.add_argument("--packages", action="store_true", help="the corpus also reads the installed packages (minutes)")
    args = p.parse_args()
    runs = (args.runs or args.standins / "mlm_runs").resolve()
    import torch

    sys.path.insert(0, str(ROOT))
    from attnzoo.benchmarks.harness import hardware

    info = {**hardware(), "torch": torch.__version__, "python": platform.python_version(), "threads_per_run": 1}
    which = "train" if args.corpus == "train" else "docstrings+packages" if args.packages else "docstrings"
    result: dict = {"hardware": info, "goal": GOAL, "corpus": which, "standins": {}}
    for name in args.only:
        root = (args.standins / name).resolve()
        build_standin(RUNS[name][2], root)
        corpus = {"docstrings": "corpus.txt", "train": "train.csv"}[args.corpus]
        source = name if name in OWN_CORPUS else "docstrings"  # the stand-in's own unlabeled text where it has one
        made = root / "corpus.source"  # what an existing corpus.txt was built from (text.py writes it)
        if corpus == "corpus.txt" and (not (root / corpus).exists() or not made.exists() or made.read_text() != source):
            start = time.perf_counter()
            build = [sys.executable, str(ROOT / "benchmarks/standins/text.py"), "corpus", str(root), "--from", source]
            subprocess.run(build + ["--packages"] * args.packages, check=True)
            result.setdefault("corpus_seconds", {})[name] = round(time.perf_counter() - start, 1)
        for step in STEPS:
            if (runs / f"{name}-{step if step != 'pretrain' else 'mlm'}").exists():
                sys.exit(f"{runs}: runs of an earlier benchmark are there; give --runs a new folder")
        result["standins"][name] = {}
        for step in STEPS:
            print(f"{name}: {step}", file=sys.stderr, flush=True)
            record = run_step(step, name, root, runs, corpus)
            result["standins"][name][step] = record
            print(json.dumps(record), file=sys.stderr, flush=True)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "mlm_finetune.json").write_text(json.dumps(result, indent=2) + "\n")
            (args.out / "mlm_finetune.md").write_text(markdown(result))


if __name__ == "__main__":
    main()
