"""Reading labelled text (or only its texts) from CSV, TSV and JSONL files, and the label vocabulary.

CSV has a header row and standard quoting. TSV has a header row and no quoting (GLUE's SST-2 `train.tsv`
reads as it is). JSONL has one object per line. Lines end at "\\n", "\\r\\n" or a lone "\\r"; blank and
whitespace-only lines are skipped. Every error names the file, the row and the column.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ...util.names import suggest

FORMATS = (".csv", ".tsv", ".jsonl")
INTEGRAL = re.compile(r"[+-]?[0-9]+(\.0+)?")  # an integer, or one written as a float with a zero fraction
# byte-order marks of the other Unicode encodings (UTF-32's first: UTF-16 LE's is the start of UTF-32 LE's)
WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


log = logging.getLogger("attnzoo")


def _rows(path: Path, used: Sequence[str] = ()) -> Iterator[tuple[int, dict, list[str]]]:
    """(line number, record, columns) for every data row. A column (JSON key) of `used` named twice is an error:
    the reader would keep the last one without a word."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{path}: unknown text file format {suffix!r}; valid: {list(FORMATS)}")
    text = read_utf8(path)
    with io.StringIO(text, newline="") as f:
        if suffix == ".jsonl":
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                keys: list[list[str]] = []  # the keys of each object as written, the line's own one last
                try:
                    record = json.loads(line, object_pairs_hook=functools.partial(_keep_keys, keys))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path} line {n}: not valid JSON ({err})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path} line {n}: expected a JSON object per line, got {type(record).__name__}")
                twice = sorted({k for k in used if keys[-1].count(k) > 1})
                if twice:
                    raise ValueError(f"{path} line {n}: the key(s) {twice} appear more than once in the object")
                yield n, record, list(record)
            return
        dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {}
        csv.field_size_limit(2**31 - 1)  # a long document is one field (the module's default limit is 128 KiB)
        # strict: a quote that opens a field and never closes where a field may end is an error; not strict, the
        # reader ran on to the next quote of the file and made every row between one text, without a word
        reader = csv.reader(f, strict=suffix == ".csv", **dialect)
        columns: list[str] | None = None  # the header: the first line that is not blank
        lines = io.StringIO(text, newline="").readlines()  # the physical lines the reader counts
        for row in _records(reader, lines, path, dialect):
            n = reader.line_num  # where the record ends (a quoted field may hold line breaks)
            if not "".join(row).strip() and (len(row) <= 1 or suffix == ".tsv"):
                continue  # a blank or whitespace-only line (in a CSV, ",," is a row of empty fields)
            if columns is None:
                columns = row
                twice = sorted({c for c in used if columns.count(c) > 1})
                if twice:  # a dict keeps only the last column of each name (unnamed or other columns may repeat)
                    raise ValueError(
                        f"{path}: the header names the column(s) {twice} more than once; give each column its own name"
                    )
                continue
            if [c.strip().lstrip("\ufeff") for c in row] == [c.strip() for c in columns]:
                raise ValueError(
                    f"{path} line {n}: the header again ({', '.join(columns)}), which would be read as an example: "
                    "files joined with their headers (cat a.csv b.csv)? Keep the first one only"
                )
            if len(row) > len(columns):
                raise ValueError(f"{path} line {n}: more fields than the header's columns {columns}")
            padded = [*row, *[None] * (len(columns) - len(row))]  # None for a missing field
            record: dict[str, str | None] = dict(zip(columns, padded, strict=True))
            short = [c for c in used if c in record and record[c] is None]
            if short:
                raise ValueError(
                    f"{path} line {n}: fewer fields than the header's columns {columns}, none for "
                    f"{short}" + (" (a text holding a comma needs double quotes)" if suffix == ".csv" else "")
                )
            yield n, record, columns


def _records(reader: Any, lines: Sequence[str], path: Path, dialect: dict[str, Any]) -> Iterator[list[str]]:
    """The rows of a strict csv reader over `lines`. A record that fails on one line (a quote that closed, then more
    text: `"Hi" she said,pos`) is read as the lenient reader reads it; one that fails after running over line breaks
    (a quote that never closed) is an error naming the line it starts on, and a quoted field that runs over lines
    that look like rows of their own is warned about (a stray quote that a later one closed)."""
    start, width = 1, None
    # the first and the last fields of the one-line records so far: a label column's values among them
    firsts: set[str] = set()
    ends: set[str] = set()
    header = next((line for line in lines if line.strip()), "")
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            other = _separator_error(path, header)  # the file is not comma-separated: its quotes are not CSV's
            if other is not None:
                raise other from None
            if reader.line_num > start or "unexpected end of data" in str(err):
                raise ValueError(
                    f"{path} line {start}: a double quote opens a field there that does not close where a field may "
                    f"end (read to line {reader.line_num}: {err}); a field holding a double quote is quoted whole, "
                    'with the quote doubled inside (""), or holds it unquoted in the middle of a text'
                ) from None
            row = next(csv.reader([lines[start - 1]], **dialect))
        end = reader.line_num
        if width is None and "".join(row).strip():
            width = len(row)
        elif width and width > 1 and end - start >= 2:
            # a line like a row: enough commas and, once one-line rows have shown their fields, one of their first
            # fields at its start or one of their last at its end (a label first or last; prose with a comma in a
            # quoted multi-line text has neither)
            rowlike = sum(
                line.count(",") >= width - 1 and (not ends or _edge(line, 0) in firsts or _edge(line, -1) in ends)
                for line in lines[start:end]  # after the record's first
            )
            if rowlike >= 2 and rowlike >= 0.8 * (end - start):
                log.warning("%s line %d: a quoted field runs on to line %d, and %d of its lines look like rows of "
                            "their own: a double quote that does not close? (the rows between are read as one text)",
                            path, start, end, rowlike)  # fmt: skip
        if end == start and width and len(row) == width and start > 1:
            firsts.add(row[0].strip())
            ends.add(row[-1].strip())
        yield row
        start = end + 1


def _edge(line: str, which: int) -> str:
    """The first (`which` 0) or last (-1) comma-separated field of a physical line, stripped of blanks and quotes."""
    fields = line.split(",")
    return fields[which].strip().strip('"').strip()


def read_utf8(path: Path) -> str:
    """The text of a UTF-8 file (a byte-order mark, as Excel writes, is dropped); a byte that is not UTF-8 raises
    ValueError naming the file, line and column (lines ending at "\\n", "\\r\\n" or a lone "\\r"), and a
    UTF-16 or UTF-32 file (Excel's "Unicode Text") one saying so."""
    raw = path.read_bytes()
    note = wide_unicode(raw, path.name)
    if note is not None:  # not the Latin-1 of the hint below: every character would be wrong
        raise ValueError(f"{path}: {note}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        before = raw[: err.start]
        line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
        column = err.start - (max(before.rfind(b"\n"), before.rfind(b"\r")) + 1) + 1
        bad = raw[err.start : err.end].hex(" ")
        raise ValueError(
            f"{path} line {line}, column {column}: byte(s) {bad} are not UTF-8 ({err.reason}); "
            f"{recode_hint(raw, path.name)}"
        ) from None


def recode_hint(raw: bytes, name: str) -> str:
    """How to save a file (`name`) that is not UTF-8 as UTF-8, its encoding guessed from its bytes `raw`: Windows'
    CP1252 (Excel's "CSV" on Windows) where a byte 0x80-0x9F occurs (its curly quotes, dashes and euro sign; Latin-1
    has only control characters there, which a Latin-1 conversion would put into the text), else Latin-1."""
    encoding = "cp1252" if re.search(rb"[\x80-\x9f]", raw) else "latin1"
    return f"save the file as UTF-8 (e.g. iconv -f {encoding} -t utf-8 {name} > utf8-{name})"


def wide_unicode(head: bytes, name: str) -> str | None:
    """What to say of a file (`name`) whose first bytes `head` are a UTF-16 or UTF-32 byte-order mark, as Excel's
    "Unicode Text" writes; None for any other start."""
    for bom, encoding in WIDE_BOMS:
        if head.startswith(bom):
            return (
                f"the file is {encoding} text (it starts with the {encoding} byte-order mark {bom.hex(' ')}, as "
                f'Excel\'s "Unicode Text" saves); save it as UTF-8 (e.g. iconv -f {encoding.lower()} -t utf-8 {name} > '
                f"utf8-{name})"
            )
    return None


SEPARATORS = {"\t": "tabs", ";": "semicolons", "|": "bars"}  # what a one-column CSV header may be separated by


def _separator_error(path: Path, header: str, where: str = "") -> ValueError | None:
    """The error for a .csv file whose header (a line) separates its names by another character than a comma, or
    a .tsv file whose header separates them by commas."""
    if Path(path).suffix.lower() == ".tsv" and "," in header and "\t" not in header:
        return ValueError(
            f"{path}{where}: the header {header.strip()!r} is one column, its names separated by commas; a .tsv file "
            f"is read with tabs between fields: rename it to {Path(path).stem}.csv"
        )
    sep = next((s for s in SEPARATORS if s in header), None)
    if sep is None or "," in header or Path(path).suffix.lower() != ".csv":
        return None
    fix = f"rename it to {Path(path).stem}.tsv" if sep == "\t" else "save it with commas (or tabs, as .tsv)"
    return ValueError(
        f"{path}{where}: the header {header.strip()!r} is one column, its names separated by {SEPARATORS[sep]}; a .csv "
        f"file is read with commas between fields: {fix}"
    )


def _column_error(path: Path, what: str, column: str, columns: Sequence[str], where: str = "") -> ValueError:
    other = _separator_error(path, columns[0], where) if len(columns) == 1 else None
    if other is not None:
        return other
    if where:  # a later line of a JSONL file: the lines before it have the key
        return ValueError(
            f"{path}{where}: no {what} key {column!r}, which the lines before it have; this line's keys: "
            f"{list(columns)}: correct the line"
        )
    return ValueError(
        f"{path}{where}: no {what} column {column!r}; columns found: {list(columns)}{suggest(column, list(columns))} "
        f"(set data.{what}_column)"
    )


def _keep_keys(keys: list[list[str]], pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict; its keys as written (a repeated one too) appended to `keys`."""
    keys.append([k for k, _ in pairs])
    return dict(pairs)


def _text(value: Any, path: Path, n: int, column: str) -> str:
    """A record's text, which must be a non-blank string (ValueError naming the file, line and column)."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{path} line {n}: the text in column {column!r} is not a string: {value!r}")
    if not value or not value.strip():
        raise ValueError(f"{path} line {n}: empty text in column {column!r}")
    return value


def one_line(text: str) -> str:
    """`text` with each run of whitespace (newlines and tabs too) as one space, stripped: the form both the text
    classification and the MLM recipes read, so a tokenizer learned by one reads the other's texts alike (its
    pre-tokenizer splits words at spaces only)."""
    return " ".join(text.split())


def read_text_file(path: str | Path, *, text_column: str, label_column: str) -> tuple[list[str], list[str]]:
    """Texts (`one_line`) and labels (as strings) of one file.

    Raises:
        ValueError: unknown format, a missing column (listing the columns found), an empty text or label.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such text file: {str(path)!r}")
    texts, labels = [], []
    first: dict[str, int] = {}  # label -> the line it first occurs on
    for n, record, columns in _rows(path, used=(text_column, label_column)):
        for what, column in (("text", text_column), ("label", label_column)):
            if column not in record:
                raise _column_error(path, what, column, columns, where="" if not texts else f" line {n}")
        text, label = _text(record[text_column], path, n, text_column), record[label_column]
        if label is None or str(label).strip() == "":
            raise ValueError(f"{path} line {n}: empty label in column {label_column!r}")
        if isinstance(label, (list, dict)):  # one class per text: a JSON list would become a class named "[1, 2]"
            raise ValueError(f"{path} line {n}: the label in column {label_column!r} is not one value: {label!r}")
        texts.append(one_line(text))
        labels.append(str(label).strip())
        first.setdefault(labels[-1], n)
    if not texts:
        raise ValueError(f"{path}: no examples")
    check_label_forms(first, f"{path}: column {label_column!r}")
    return texts, labels


def same_number(labels: Iterable[str]) -> list[list[str]]:
    """The groups of distinct `labels` that write one integer both as an integer and with a zero fraction ("1" and
    "1.0", as pandas writes an int column holding a NaN), each as ordered in `labels`. Only that: "01" and "1" may be
    product codes, "1.1" and "1.10" section numbers, which are different classes."""
    groups: dict[int, list[str]] = {}  # int: exact, where floats would make big integers equal
    for label in labels:
        if INTEGRAL.fullmatch(label):
            groups.setdefault(int(label.split(".")[0]), []).append(label)
    return [forms for forms in groups.values() if len(forms) > 1 and any("." in form for form in forms)]


# labels that spreadsheets, pandas and R write for a missing value (compared casefolded)
MISSING_MARKS = {"na", "n/a", "#n/a", "nan", "null", "none", "nil"}


def check_label_forms(first: dict[str, int], where: str) -> None:
    """One class written several ways among the distinct labels of `first` (label -> the line it first occurs on, in
    `where`, a file and column): the same integer with and without a zero fraction (`same_number`) raises, as which
    form a run's labels.json would keep is a guess; the same letters in another case ("Red" and "red"), and a mark of
    a missing value ("NA", "nan"; `MISSING_MARKS`) and one written with composed and decomposed accents, are warned
    about, as they may be classes of their own. Each form is named with its line."""
    forms = list(first)

    def said(group: list[str]) -> str:
        return " and ".join(f"{f!r} (line {first[f]})" for f in group)

    groups = same_number(forms)
    if groups:
        raise ValueError(
            f"{where} writes one number in several ways, which would be separate classes: "
            f"{'; '.join(said(g) for g in groups[:3])}{'; ...' * (len(groups) > 3)}; write each class one way (e.g. "
            f"all {min(groups[0], key=len)!r}; a spreadsheet or pandas may have written integers as floats)"
        )
    missing = [f for f in forms if f.casefold() in MISSING_MARKS]
    if missing:
        log.warning(
            "data: %s has the label(s) %s, which spreadsheets and pandas write for a missing value: each is a class "
            "of its own here; give those rows their labels or leave them out, unless it is a class of yours",
            where, said(missing),
        )  # fmt: skip
    cased: dict[str, list[str]] = {}
    for form in forms:  # "café" composed (é) or decomposed (e + a combining accent) looks the same
        cased.setdefault(unicodedata.normalize("NFC", form).casefold(), []).append(form)
    variants = [group for group in cased.values() if len(group) > 1]
    if variants:
        log.warning(
            "data: %s has labels that differ only in case, each a class of its own: %s%s; if they are one class, "
            "write it one way (labels that look alike may differ in how an accent is encoded: Unicode NFC and NFD)",
            where, "; ".join(said(g) for g in variants[:5]), "; ..." * (len(variants) > 5),
        )  # fmt: skip


def read_texts(path: str | Path, *, text_column: str) -> list[str]:
    """The texts of one CSV, TSV or JSONL file's `text_column`, other columns (a label, if any) left unread.

    Raises:
        ValueError: unknown format, a missing column (listing the columns found), an empty text.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such text file: {str(path)!r}")
    texts = []
    for n, record, columns in _rows(path, used=(text_column,)):
        if text_column not in record:
            raise _column_error(path, "text", text_column, columns, where="" if not texts else f" line {n}")
        texts.append(_text(record[text_column], path, n, text_column))
    if not texts:
        raise ValueError(f"{path}: no examples")
    return texts


def label_vocabulary(labels: Sequence[str]) -> list[str]:
    """Sorted distinct labels: numerically when all are integers ("2" before "10"), else as strings. (Integers
    written as floats, "2.0", sort as strings: a rule changed here would renumber the classes of runs resumed.)"""
    distinct = set(labels)
    try:  # ties ("01" and "1", two codes) by their text: a set's order changes with the process's hash seed
        return sorted(distinct, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(distinct)


def check_labels(labels: Sequence[str], class_names: Sequence[str], *, path: str | Path, column: str, source: str):
    """Raise when `labels` (of `path`) hold a value outside `class_names` (from `source`)."""
    unknown = sorted(set(labels) - set(class_names))
    if unknown:
        shown = unknown[:10] + (["..."] if len(unknown) > 10 else [])
        first = next(  # read again, on this error only: where the first of them is
            (n for n, record, _ in _rows(Path(path)) if str(record.get(column, "")).strip() in set(unknown)), None
        )
        other = []  # "1.0" here and "1" there: one class written two ways (a file pandas wrote with float labels)
        for forms in same_number([*unknown, *class_names]):
            known = [form for form in forms if form in class_names]
            other += [(form, known[0]) for form in forms if known and form not in class_names]
        hint = "".join(f"; {a!r} is the number {source} writes {b!r}" for a, b in other[:3])
        raise ValueError(
            f"{path}{'' if first is None else f' line {first}'}: labels {shown} in column {column!r} never occur in "
            f"{source}; known labels: {list(class_names)[:50]}{hint}" + ("; write each class one way" if other else "")
        )
