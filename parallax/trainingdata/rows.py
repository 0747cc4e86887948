"""Rows of the ecosystem's data files, for every loader and file tool; the fields inside them are `fields`'s.

Files: JSONL (one object per line), JSON (a list of objects, or ``{"data": [...]}``) and parquet
(verl's dataset files; read with pyarrow). Each row comes back with its 1-based line (JSONL) or
row number, and a row that cannot be read is a `Row` with `error` set, never skipped: the caller
reports it with its number. pyarrow is imported only to read a parquet file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    """One row: its 1-based `line` (JSONL) or row number (JSON, parquet), the object, or why not."""

    line: int
    data: dict | None
    error: str | None = None  # "bad_utf8" | "empty_line" | "bad_json" | "not_object"
    message: str = ""


def parse_line(n: int, raw: bytes | str) -> Row:
    """Line `n` of a JSONL file as a `Row` (its error set when it is not one JSON object)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Row(n, None, "bad_utf8", str(e))
    if not line.strip():
        return Row(n, None, "empty_line", "empty line")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:
        return Row(n, None, "bad_json", str(e)[:200])
    if not isinstance(obj, dict):
        return Row(n, None, "not_object", f"expected a JSON object, got {type(obj).__name__}")
    return Row(n, obj)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (what parquet readers may return) as lists and Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def read_rows(path: str | Path, *, keep_empty: bool = False) -> Iterator[Row]:
    """Rows of `path` in order: `.parquet` (pyarrow), `.json` (a list, or `{"data": [...]}`), anything
    else JSONL (`-`: standard input). Empty JSONL lines are skipped unless `keep_empty`. A missing file
    raises `FileNotFoundError` naming it; a bad row is yielded with `error` set."""
    path = str(path)
    if path != "-" and not Path(path).is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return _rows(path, keep_empty)


def _rows(path: str, keep_empty: bool) -> Iterator[Row]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq  # lazy: only parquet files need it

        for i, obj in enumerate(pq.read_table(path).to_pylist(), 1):
            yield Row(i, _plain(obj))
        return
    if path.endswith(".json"):  # one document: an error in it is the file's, named
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 at byte {e.start} ({e.reason})") from None
        except RecursionError:
            raise ValueError(f"{path}: not readable JSON (nested too deeply)") from None
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        items = data if isinstance(data, list) else data.get("data", []) if isinstance(data, dict) else []
        for i, obj in enumerate(items, 1):
            yield Row(i, obj) if isinstance(obj, dict) else Row(i, None, "not_object",
                                                                f"expected a JSON object, got {type(obj).__name__}")
        return
    fh = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 -- closed below
    with fh:
        for n, raw in enumerate(fh, 1):
            row = parse_line(n, raw.rstrip(b"\r\n"))
            if row.error != "empty_line" or keep_empty:
                yield row
