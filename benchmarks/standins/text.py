"""Labelled text CSVs (train.csv, val.csv, test.csv with columns text,label) from text already on the machine.

    python benchmarks/standins/text.py docstrings OUT   # Python's own docstrings, labelled by stdlib package
    python benchmarks/standins/text.py fortunes OUT     # Debian's fortune files by category (apt install fortunes)
    python benchmarks/standins/text.py wordnet OUT      # WordNet noun definitions by lexicographer file
                                                        #   (apt install wordnet-base)
    python benchmarks/standins/text.py debian OUT       # Debian package descriptions by archive section
                                                        #   (the apt package lists of a Debian system)
    python benchmarks/standins/text.py corpus OUT       # OUT/corpus.txt: unlabeled docstrings for pretraining
    python benchmarks/standins/text.py corpus OUT --from debian   # ... every other Debian package description
    python benchmarks/standins/text.py corpus OUT --from wordnet  # ... every other WordNet definition and example
    python benchmarks/standins/text.py corpus OUT --from fortunes # ... every other fortune of every fortune file

- docstrings: the first paragraph of every documented class, function and method of the 10 standard-library
  packages with the most of them (tkinter, idlelib, asyncio, email, distutils, logging, xml, turtle,
  multiprocessing, http; at most 250 each). Depends on the Python version (recorded in OUT/source.txt).
- fortunes: the 10 largest categories of /usr/share/games/fortunes (people, definitions, cookie, computers,
  songs-poems, politics, miscellaneous, work, science, men-women), 400 fortunes each.
- wordnet: the definition (the gloss before its examples) of noun synsets in 10 lexicographer files of
  /usr/share/wordnet/data.noun (noun.animal, artifact, body, cognition, communication, food, location, person,
  plant, substance), 400 each: 4,000 short English definitions in 10 classes.
- debian: the one-line description of every package in the apt package lists (/var/lib/apt/lists/*_Packages,
  plain or compressed with lz4, xz or gzip) by its archive section, for the 10 sections with the most distinct
  descriptions among those that name what the software does (utils, net, science, admin, games, ...; not the
  sections of a language's libraries, documentation or debug symbols), without transitional and dummy packages,
  400 each (less any drawn for two sections): 4,000 short product descriptions in 10 classes. Depends on the
  Debian release and on when the lists were last updated.

Each class is split 70% / 15% / 15% (train / val / test) at random from `--seed`.

Unlabeled in-domain text for pretraining (`corpus`): every paragraph of every docstring (module, class, function) of
the standard library (`--packages`: and of the installed packages), read from the source files with `ast` (nothing
is imported), whitespace collapsed (`--from`: the other texts of the stand-in's source), without any text equal
(lowercased) to a text of OUT/val.csv or OUT/test.csv or holding half or more of the word 5-grams of one (a near
copy); OUT/corpus.txt holds those texts and OUT/train.csv's texts (without labels), one a line.
"""

from __future__ import annotations

import argparse
import ast
import csv
import importlib
import inspect
import pkgutil
import re
import sys
import sysconfig
import warnings
from collections import Counter
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
            definition = _wordnet_definition(line)
            if len(definition) > 10:
                found[files[lex]].add(definition)
    return {name: _sample(sorted(items), 400) for name, items in found.items()}


# archive sections that say what a package is for (the rest are languages' libraries, docs, fonts, localization ...)
DEBIAN_TOPICS = ("admin", "comm", "database", "editors", "electronics", "games", "graphics", "hamradio", "httpd",
                 "kernel", "mail", "math", "net", "news", "science", "shells", "sound", "text", "utils", "vcs",
                 "video", "web", "x11")  # fmt: skip


def _package_lists() -> list[str]:
    """The text of every apt package list on the machine (plain, .lz4 through the lz4 tool, .xz, .gz)."""
    import gzip
    import lzma
    import subprocess

    texts = []
    for path in sorted(Path("/var/lib/apt/lists").glob("*_Packages*")):
        if path.suffix == ".lz4":
            try:
                out = subprocess.run(["lz4cat", str(path)], capture_output=True, check=True).stdout
            except FileNotFoundError:
                sys.exit(f"{path} is lz4-compressed and there is no lz4cat to read it: apt install lz4")
            texts.append(out.decode("utf-8", errors="replace"))
        elif path.suffix in (".xz", ".gz"):
            opener = lzma.open if path.suffix == ".xz" else gzip.open
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        elif path.name.endswith("_Packages"):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return texts


def debian() -> dict[str, list[str]]:
    lists = _package_lists()
    if not lists:
        sys.exit("no apt package lists in /var/lib/apt/lists: run apt-get update on a Debian system")
    found: dict[str, set[str]] = {}
    for text in lists:
        for stanza in text.split("\n\n"):
            fields = dict(re.findall(r"^(Section|Description): (.*)$", stanza, flags=re.MULTILINE))
            section = fields.get("Section", "").split("/")[-1]  # contrib/net -> net
            description = fields.get("Description", "").strip()
            if (
                section in DEBIAN_TOPICS
                and len(description) > 10
                and not re.search(r"transitional|dummy", description, flags=re.IGNORECASE)
            ):
                found.setdefault(section, set()).add(description)
    largest = sorted(found, key=lambda name: (-len(found[name]), name))[:10]
    picked = {name: _sample(sorted(found[name]), 400) for name in sorted(largest)}
    seen = Counter(t for texts in picked.values() for t in texts)
    return {name: [t for t in texts if seen[t] == 1] for name, texts in picked.items()}  # none in two classes


def docstring_corpus(exclude: set[str], *, packages: bool = False, min_chars: int = 30) -> list[str]:
    """Paragraphs (> min_chars characters) of the docstrings of the standard library (and with `packages` the
    installed packages: ~300k paragraphs, minutes to read), sorted and unique, none of them in `exclude` (compared
    lowercased, whitespace collapsed)."""
    roots = [Path(sysconfig.get_paths()["stdlib"])]
    if packages:
        roots.append(Path(sysconfig.get_paths()["purelib"]))
    banned = {t.lower() for t in exclude}
    found: set[str] = set()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if root == roots[0] and "site-packages" in path.relative_to(root).parts:
                continue  # the interpreter's own packages, not the standard library
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError, OSError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(node, clean=True)
                for paragraph in (doc or "").split("\n\n"):
                    text = " ".join(paragraph.split())
                    if len(text) > min_chars and text.lower() not in banned:
                        found.add(text)
    return sorted(found)


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


def debian_corpus(exclude: set[str]) -> list[str]:
    """Every package description of the apt lists (the one-line description, and the paragraphs of a long one where
    the lists hold it), of any section, sorted and unique, leaving out every package whose one-line description is
    in `exclude` (compared lowercased): ~59k texts on Debian bookworm."""
    banned = {t.strip().lower() for t in exclude}
    found: set[str] = set()
    for text in _package_lists():
        for stanza in text.split("\n\n"):
            match = re.search(r"^Description: (.*)\n((?:[ \t].*\n?)*)", stanza, flags=re.MULTILINE)
            if not match or match.group(1).strip().lower() in banned:
                continue
            if len(match.group(1).strip()) > 10:
                found.add(match.group(1).strip())
            for paragraph in re.split(r"\n[ \t]\.\s*\n", match.group(2)):
                if len(" ".join(paragraph.split())) > 30:
                    found.add(" ".join(paragraph.split()))
    return sorted(found)


def _wordnet_definition(line: str) -> str:
    """The definition of a line of a WordNet data file: its gloss before the examples ('; "...')."""
    gloss = line.split("|", 1)[1]
    return re.split(r';\s*"', gloss)[0].strip().rstrip(";").strip()


def wordnet_corpus(exclude: set[str]) -> list[str]:
    """The definition and the example sentences of every synset of /usr/share/wordnet (nouns of every lexicographer
    file, verbs, adjectives, adverbs), sorted and unique, leaving out every synset whose definition is in `exclude`
    (compared lowercased; its examples too): ~150k texts."""
    banned = {t.strip().lower() for t in exclude}
    found: set[str] = set()
    for part in ("noun", "verb", "adj", "adv"):
        for line in Path(f"/usr/share/wordnet/data.{part}").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(" ") or "|" not in line:
                continue
            definition = _wordnet_definition(line)
            if definition.lower() in banned:
                continue
            if len(definition) > 10:
                found.add(definition)
            found.update(e for e in re.findall(r'"([^"]{11,})"', line.split("|", 1)[1]))
    return sorted(found)


def fortunes_corpus(exclude: set[str]) -> list[str]:
    """Every fortune of every file of /usr/share/games/fortunes (the 10 categories of the stand-in and the others:
    art, food, literature, ...), whitespace collapsed, sorted and unique, none of them in `exclude` (compared
    lowercased)."""
    banned = {t.strip().lower() for t in exclude}
    found: set[str] = set()
    for path in sorted(Path("/usr/share/games/fortunes").iterdir()):
        if path.suffix in (".dat", ".u8") or not path.is_file():
            continue
        for chunk in path.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            text = " ".join(chunk.split())
            if len(text) > 10 and text.lower() not in banned:
                found.add(text)
    return sorted(found)


CORPORA = {"docstrings": None, "debian": debian_corpus, "wordnet": wordnet_corpus, "fortunes": fortunes_corpus}


NEAR = 0.5  # a corpus text holding this share of a held-out text's word 5-grams is a near copy of it
GRAM = 5


def _grams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + GRAM]) for i in range(len(words) - GRAM + 1)}


def near_copies(texts: list[str], held_out: set[str]) -> set[str]:
    """The texts that hold at least `NEAR` of the word 5-grams of a held-out text (the same fortune with another
    attribution, a docstring repeated with one word changed, a package description inside a sibling's)."""
    index: dict[tuple[str, ...], list[int]] = {}
    sizes = []
    for i, text in enumerate(sorted(held_out)):
        grams = _grams(text)
        sizes.append(len(grams))
        for gram in grams:
            index.setdefault(gram, []).append(i)
    near = set()
    for text in texts:
        hits = Counter(i for gram in _grams(text) for i in index.get(gram, ()))
        if any(n >= NEAR * sizes[i] for i, n in hits.items()):
            near.add(text)
    return near


def write_corpus(out: Path, *, packages: bool, source: str = "docstrings") -> dict[str, int]:
    """OUT/corpus.txt, one text a line: the unlabeled text of `source` (docstrings; debian: every package
    description; wordnet; fortunes) without OUT/val.csv's and OUT/test.csv's texts or near copies of them
    (`near_copies`), plus OUT/train.csv's texts (unlabeled). The number of texts written and of near copies left out."""
    splits = {}
    for split in ("train", "val", "test"):
        with open(out / f"{split}.csv", newline="", encoding="utf-8") as f:
            splits[split] = [row["text"] for row in csv.DictReader(f)]
    held_out = set(splits["val"]) | set(splits["test"])
    unlabeled = CORPORA[source](held_out) if CORPORA[source] else docstring_corpus(held_out, packages=packages)
    train = set(splits["train"])
    near = near_copies([t for t in unlabeled if t not in train], held_out)
    texts = sorted((set(unlabeled) - near) | train)
    (out / "corpus.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    (out / "corpus.source").write_text(source)  # benchmarks/mlm_finetune.py rebuilds a corpus of another source
    return {"texts": len(texts), "near copies left out": len(near)}


SOURCES = {"docstrings": docstrings, "fortunes": fortunes, "wordnet": wordnet, "debian": debian}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", choices=[*sorted(SOURCES), "corpus"], help="corpus: OUT/corpus.txt for OUT's splits")
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--packages", action="store_true", help="corpus: the installed packages' docstrings too")
    p.add_argument("--from", dest="origin", choices=sorted(CORPORA), default="docstrings",
                   help="corpus: the unlabeled text (debian: every package description of the apt lists; wordnet: "
                        "every definition and example; fortunes: every fortune file)")  # fmt: skip
    args = p.parse_args()
    if args.source == "corpus":
        print("corpus", write_corpus(args.out, packages=args.packages, source=args.origin))
        return
    classes = SOURCES[args.source]()
    counts = write_splits(args.out, classes, args.seed)
    (args.out / "source.txt").write_text(
        f"{args.source}: {len(classes)} classes {sorted(classes)}; {counts}; Python {sys.version.split()[0]}\n"
    )
    print(args.source, {k: len(v) for k, v in classes.items()}, counts)


if __name__ == "__main__":
    main()
