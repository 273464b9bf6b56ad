"""What every `--format json` prints (check, sql, report, sweep, compare): one strict JSON document.

- One document on stdout that any JSON parser reads (RFC 8259): never NaN or Infinity tokens, never one object
  per line. A document about one thing (a run's report, a sweep) is an object; a list of rows (check's anomalies,
  sql's result) is an array of objects, every row with every key.
- grpolens' own keys are snake_case; missing values are null (never omitted, never "" or "-").
- Numbers are JSON numbers at full precision (integers exact); NaN, +inf and -inf are null.
- Times are ISO-8601 strings (``2025-11-30T06:48:22.915001+00:00``, with the offset when the value has one), dates
  ``YYYY-MM-DD``, durations seconds; a JSON value (a JSON column such as ``runs.config``) is embedded as JSON;
  BLOBs are base64; anything else is its text.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any, TextIO


def plain(value: Any) -> Any:
    """``value`` as JSON-ready Python (dicts, lists, str, int, finite float, bool, None), following the rules above."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else plain(float(value))
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, PurePath):
        return str(value)
    item = getattr(value, "item", None)  # numpy and other array scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return plain(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays, polars series
    if callable(tolist):
        return plain(tolist())
    return str(value)


def dumps(value: Any, indent: int | None = 1) -> str:
    return json.dumps(plain(value), indent=indent, allow_nan=False)


def write(value: Any, stream: TextIO) -> None:
    stream.write(dumps(value) + "\n")


def embed_json(text: Any) -> Any:
    """The value a JSON column holds (DuckDB hands it over as text); text that does not parse stays text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def write_rows(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], stream: TextIO, json_columns: Sequence[bool] = ()
) -> None:
    """An array of row objects, one row per line, written as the rows come (a large result is never held whole)."""
    embed = [i < len(json_columns) and json_columns[i] for i in range(len(columns))]
    stream.write("[")
    first = True
    for row in rows:
        record = {name: embed_json(v) if e else v for name, v, e in zip(columns, row, embed, strict=False)}
        stream.write(("\n" if first else ",\n") + dumps(record, indent=None))
        first = False
    stream.write("\n]\n" if not first else "]\n")
