"""English -> German sentence pairs (train.tsv, val.tsv, test.tsv) from the gettext catalogs already on the machine.

    python benchmarks/standins/translation.py gettext OUT [--seed 0] [--locale-dir /usr/share/locale]

Every compiled catalog `<locale-dir>/de/LC_MESSAGES/*.mo` that installed Debian packages ship (git, coreutils,
dpkg, glib, gtk, gnupg, libc, ...) maps English user messages to their German translations, written by people:
real parallel text in the TSV format attnzoo reads (source<TAB>target). Kept: single-line messages of 2-100
characters and at least two words whose translation differs from them; the ISO code lists (names of languages,
countries, currencies) are left out. A message that several catalogs translate keeps the first catalog's
translation (sorted by file name). Catalogs that are not UTF-8 are skipped. Many messages hold numbers,
printf placeholders (`%s`, `%d`), option names and file paths, which a translation must copy.

The distinct messages are shuffled from `--seed` and split 8,000 / 500 / 1,000 (train / val / test): no source of
val or test occurs in train. The catalogs read and their counts go to OUT/source.txt.
"""

from __future__ import annotations

import argparse
import gettext
import random
import sys
from pathlib import Path

SIZES = {"train": 8000, "val": 500, "test": 1000}


def gettext_pairs(locale_dir: Path, lang: str = "de") -> tuple[dict[str, str], list[str]]:
    """{English message: translation} of every UTF-8 catalog of `lang`, and a line per catalog read."""
    pairs: dict[str, str] = {}
    notes = []
    for path in sorted((locale_dir / lang / "LC_MESSAGES").glob("*.mo")):
        if path.name.startswith("iso_"):
            continue
        try:
            with path.open("rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except (UnicodeDecodeError, OSError) as err:
            notes.append(f"{path.name}: skipped ({type(err).__name__})")
            continue
        kept = 0
        for key, value in catalog.items():
            if isinstance(key, tuple) or not key or not value:  # plural forms and the catalog header
                continue
            src, tgt = key.split("\x04", 1)[-1].strip(), value.strip()  # "\x04" separates a message's context
            if any(c in s for s in (src, tgt) for c in "\n\t\r") or src == tgt:
                continue
            if not 2 <= len(src) <= 100 or len(src.split()) < 2:
                continue
            if src not in pairs:
                pairs[src] = tgt
                kept += 1
        notes.append(f"{path.name}: {kept} pairs")
    return pairs, notes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("name", choices=["gettext"])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--locale-dir", type=Path, default=Path("/usr/share/locale"))
    args = p.parse_args()
    pairs, notes = gettext_pairs(args.locale_dir)
    need = sum(SIZES.values())
    if len(pairs) < need:
        sys.exit(f"{args.locale_dir}: {len(pairs)} English/German pairs, {need} needed (install packages with German)")
    sources = sorted(pairs)
    random.Random(args.seed).shuffle(sources)
    args.out.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, n in SIZES.items():
        rows = sources[start : start + n]
        start += n
        text = "".join(f"{s}\t{pairs[s]}\n" for s in rows)
        (args.out / f"{split}.tsv").write_text(text, encoding="utf-8")
    head = f"{len(pairs)} distinct English messages with a German translation, seed {args.seed}"
    (args.out / "source.txt").write_text("\n".join([head, *notes]) + "\n")
    print(f"{args.out}: " + ", ".join(f"{split} {n}" for split, n in SIZES.items()) + f" of {len(pairs)} pairs")


if __name__ == "__main__":
    main()
