"""A spec's dataset: the rows of a JSON Lines or CSV file, each filling the `{{field}}`
placeholders of the spec's text values to make one sample of it (one spec, `<name>.<id>`).

Every problem is `file:line: field: message`, all of them at once, before anything runs. The
file is the spec author's, but it is read bounded all the same.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 16 * 2**20  # of a dataset file
MAX_ROWS = 10_000  # samples per spec
FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
SAMPLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
UNFILLED = ("version", "name", "dataset")  # top-level fields never filled: what names the spec


@dataclass(frozen=True)
class Row:
    """One row of a dataset: where it is (its line), its sample id and its fields' text."""

    line: int
    id: str
    values: dict[str, str]


def read(file: Path) -> tuple[list[Row], list[str]]:
    """The rows of a dataset file and every problem with them (`file:line: field: message`)."""
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return [], [f"{file}:1: (file): cannot read the dataset: {exc.strerror or exc}"]
    if len(raw) > MAX_BYTES:
        return [], [f"{file}:1: (file): larger than {MAX_BYTES // 2**20} MiB"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [f"{file}:1: (file): not UTF-8 text ({exc.reason} at byte {exc.start})"]
    parsed, problems = (_jsonl if file.suffix == ".jsonl" else _csv)(file, text)
    rows: list[Row] = []
    for n, (line, values) in enumerate(parsed, 1):
        sample = values.get("id", str(n))
        if not SAMPLE_ID.fullmatch(sample):
            problems.append(
                f"{file}:{line}: id: {sample!r} is not a sample id (a letter or digit, then up to"
                " 31 letters, digits, _ or -)"
            )
        elif any(r.id == sample for r in rows):
            first = next(r.line for r in rows if r.id == sample)
            problems.append(f"{file}:{line}: id: {sample!r} is the id of line {first} too")
        rows.append(Row(line, sample, values))
    if not rows and not problems:
        problems.append(f"{file}:1: (file): no rows: a dataset has one sample per row")
    if len(rows) > MAX_ROWS:
        problems.append(f"{file}:{rows[MAX_ROWS].line}: (file): more than {MAX_ROWS} rows")
    return rows, problems


def _jsonl(file: Path, text: str) -> tuple[list[tuple[int, dict[str, str]]], list[str]]:
    rows, problems = [], []
    for line, content in enumerate(text.splitlines(), 1):
        if not content.strip():
            continue
        try:
            obj = json.loads(content)
        except ValueError as exc:
            problems.append(f"{file}:{line}: (row): not JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{file}:{line}: (row): a row is an object of fields")
            continue
        values = {}
        for key, value in obj.items():
            if not FIELD.fullmatch(key):
                problems.append(
                    f"{file}:{line}: {key!r}: not a field name ([A-Za-z_][A-Za-z0-9_]*)"
                )
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                problems.append(f"{file}:{line}: {key}: expected text or a number")
            else:
                values[key] = value if isinstance(value, str) else json.dumps(value)
        rows.append((line, values))
    return rows, problems


def _csv(file: Path, text: str) -> tuple[list[tuple[int, dict[str, str]]], list[str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        problems = [
            f"{file}:1: {name!r}: not a field name ([A-Za-z_][A-Za-z0-9_]*)"
            for name in header or []
            if not FIELD.fullmatch(name)
        ]
        if header is None:
            return [], [f"{file}:1: (file): no header row of field names"]
        if len(set(header)) < len(header):
            problems.append(f"{file}:1: (header): a field is named twice")
        rows = []
        line = reader.line_num + 1
        for record in reader:
            if record and len(record) != len(header):
                problems.append(
                    f"{file}:{line}: (row): {len(record)} values for the header's {len(header)}"
                    " fields"
                )
            elif record:
                rows.append((line, dict(zip(header, record, strict=True))))
            line = reader.line_num + 1
    except csv.Error as exc:
        return [], [f"{file}:{reader.line_num}: (row): not CSV: {exc}"]
    return rows, problems


def placeholders(data: Any, at: tuple[Any, ...] = ()) -> dict[str, tuple[Any, ...]]:
    """Each field the spec's text values name (`{{field}}`), with where it is first used."""
    found: dict[str, tuple[Any, ...]] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if not (at == () and key in UNFILLED):
                for field, where in placeholders(value, (*at, key)).items():
                    found.setdefault(field, where)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            for field, where in placeholders(value, (*at, i)).items():
                found.setdefault(field, where)
    elif isinstance(data, str):
        for match in PLACEHOLDER.finditer(data):
            found.setdefault(match.group(1), at)
    return found


def fill(data: Any, row: Row, top: bool = True) -> Any:
    """The spec document with every placeholder replaced by the row's text, and the sample's
    name."""
    if isinstance(data, dict):
        out = {k: v if top and k in UNFILLED else fill(v, row, top=False) for k, v in data.items()}
        if top and isinstance(out.get("name"), str):
            out["name"] = f"{out['name']}.{row.id}"
        return out
    if isinstance(data, list):
        return [fill(v, row, top=False) for v in data]
    if isinstance(data, str):
        return PLACEHOLDER.sub(lambda m: row.values[m.group(1)], data)
    return data
