"""Labelled text CSVs (train.csv, val.csv, test.csv with columns text,label) from text already on the machine.

    python benchmarks/standins/text.py docstrings OUT   # Python's own docstrings, labelled by stdlib package
    python benchmarks/standins/text.py fortunes OUT     # Debian's fortune files by category (apt install fortunes)
    python benchmarks/standins/text.py wordnet OUT      # WordNet noun definitions by lexicographer file
                                                        #   (apt install wordnet-base)

- docstrings: the first paragraph of every documented class, function and method of the 10 standard-library
  packages with the most of them (tkinter, idlelib, asyncio, email, distutils, logging, xml, turtle,
  multiprocessing, http; at most 250 each). Depends on the Python version (recorded in OUT/source.txt).
- fortunes: the 10 largest categories of /usr/share/games/fortunes (people, definitions, cookie, computers,
  songs-poems, politics, miscellaneous, work, science, men-women), 400 fortunes each.
- wordnet: the definition (the gloss before its examples) of noun synsets in 10 lexicographer files of
  /usr/share/wordnet/data.noun (noun.animal, artifact, body, cognition, communication, food, location, person,
  plant, substance), 400 each: 4,000 short English definitions in 10 classes.

Each class is split 70% / 15% / 15% (train / val / test) at random from `--seed`.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import inspect
import pkgutil
import re
import sys
import warnings
from pathlib import Path

import numpy as np

SHARES = {"train": 0.7, "val": 0.15}  # test: the rest


def docstrings() -> dict[str, list[str]]:
    packages = ["tkinter", "idlelib", "asyncio", "email", "distutils", "logging", "xml", "turtle", "multiprocessing",
                "http"]  # fmt: skip
    warnings.simplefilter("ignore")
    out = {}
    for package in packages:
        names = [package]
        root = importlib.import_module(package)
        if hasattr(root, "__path__"):
            names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
                      if "test" not in m.name and "__main__" not in m.name]  # fmt: skip
        found = set()
        for name in names:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 (a module that needs a display or a missing library)
                continue
            for _, obj in inspect.getmembers(module):
                if getattr(obj, "__module__", None) != name:
                    continue
                items = [obj]
                if inspect.isclass(obj):
                    items += [v for v in vars(obj).values() if inspect.isfunction(v)]
                for item in items:
                    doc = inspect.getdoc(item)
                    if doc and len(doc) > 30:
                        found.add(" ".join(doc.split("\n\n")[0].split()))
        out[package] = sorted(found)[:250] if len(found) <= 250 else _sample(sorted(found), 250)
    return out


def fortunes() -> dict[str, list[str]]:
    root = Path("/usr/share/games/fortunes")
    if not root.is_dir():
        sys.exit("no /usr/share/games/fortunes: apt install fortunes")
    categories = ["people", "definitions", "cookie", "computers", "songs-poems", "politics", "miscellaneous", "work",
                  "science", "men-women"]  # fmt: skip
    out = {}
    for name in categories:
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        items = [" ".join(chunk.split()) for chunk in text.split("\n%\n")]
        out[name] = _sample(sorted({t for t in items if len(t) > 10}), 400)
    return out


def wordnet() -> dict[str, list[str]]:
    path = Path("/usr/share/wordnet/data.noun")
    if not path.is_file():
        sys.exit("no /usr/share/wordnet/data.noun: apt install wordnet-base")
    files = {5: "animal", 6: "artifact", 8: "body", 9: "cognition", 10: "communication", 13: "food", 15: "location",
             18: "person", 20: "plant", 27: "substance"}  # fmt: skip
    found: dict[str, set[str]] = {name: set() for name in files.values()}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(" ") or "|" not in line:
            continue  # the licence header
        lex = int(line.split()[1])
        if lex in files:
            gloss = line.split("|", 1)[1]
            definition = re.split(r';\s*"', gloss)[0].strip().rstrip(";").strip()  # examples come after '; "'
            if len(definition) > 10:
                found[files[lex]].add(definition)
    return {name: _sample(sorted(items), 400) for name, items in found.items()}


def _sample(items: list[str], n: int) -> list[str]:
    rng = np.random.default_rng(1234)
    return [items[i] for i in sorted(rng.choice(len(items), size=min(n, len(items)), replace=False))]


def write_splits(out: Path, classes: dict[str, list[str]], seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    rows: dict[str, list[tuple[str, str]]] = {"train": [], "val": [], "test": []}
    for label, texts in classes.items():
        order = rng.permutation(len(texts))
        n_train, n_val = round(SHARES["train"] * len(texts)), round(SHARES["val"] * len(texts))
        for split, part in (("train", order[:n_train]), ("val", order[n_train : n_train + n_val]),
                            ("test", order[n_train + n_val :])):  # fmt: skip
            rows[split] += [(texts[i], label) for i in part]
    out.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        items = [items[i] for i in rng.permutation(len(items))]
        with open(out / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(items)
    return {split: len(items) for split, items in rows.items()}


SOURCES = {"docstrings": docstrings, "fortunes": fortunes, "wordnet": wordnet}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", choices=sorted(SOURCES))
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    classes = SOURCES[args.source]()
    counts = write_splits(args.out, classes, args.seed)
    (args.out / "source.txt").write_text(
        f"{args.source}: {len(classes)} classes {sorted(classes)}; {counts}; Python {sys.version.split()[0]}\n"
    )
    print(args.source, {k: len(v) for k, v in classes.items()}, counts)


if __name__ == "__main__":
    main()
