"""One event as a lake ``events`` row, shared by pipeline.sources.event_files and pipeline.sources.axiom so that
an event read from a file and from the API is one row: time parsing, flattening, canonical values, redaction and the
content id. Change nothing here without thinking of both."""

from __future__ import annotations

import calendar
import datetime
import hashlib
import json
import math
import re
import time
from typing import Any

import pyarrow as pa

from pipeline import lake
from pipeline.secrets import CLEAN_TEXT, PLAIN_NAMES, REDACTED, is_secret_name, redact, redact_text
from pipeline.values import TIME_US_MAX, TIME_US_MIN, finite

# Fields Axiom adds or keeps for itself: not part of the event's content.
SYSTEM_FIELDS = frozenset({"_time", "_sysTime", "_rowId"})
COLUMN_FIELDS = ("event", "service", "rollout_id", "run_name")

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?\s*(Z|z|[+-]\d\d(?::?\d\d)?)?$")


class _SecondsCache(dict):
    """'YYYY-MM-DDTHH:MM:SS' -> epoch ns of that second; events come in bursts within a few seconds."""

    def __missing__(self, key: str) -> int | None:
        if len(self) > 4096:
            self.clear()
        m = _RFC3339.match(key + "Z")
        value = parse_time_ns(key + "Z") if m and key[10] == "T" else None
        self[key] = value
        return value


_FAST = _SecondsCache()


def parse_time_ns(value: Any) -> int | None:
    """An event's ``_time`` as integer nanoseconds since the epoch (UTC); None when it is not a time.

    Strings are RFC 3339 / ISO 8601 (fraction up to nanoseconds, ``Z`` or an offset; no zone means UTC). Numbers
    are epoch seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude.
    """
    if type(value) is str:
        if len(value) > 20 and value[19] == "." and value[-1] == "Z" and value[20:-1].isdigit():
            second = _FAST[value[:19]]
            if second is not None:
                return second + int(value[20:-1][:9].ljust(9, "0"))
        m = _RFC3339.match(value.strip())
        if m is None:
            return None
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        if not (hour <= 23 and minute <= 59 and second <= 60):  # 60: a leap second, read as the next one
            return None
        try:
            datetime.date(year, month, day)  # 2024-02-30 is no date
        except ValueError:
            return None
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
        frac = m.group(7) or ""
        nanos = int(frac[:9].ljust(9, "0")) if frac else 0
        zone = m.group(8)
        if zone and zone not in ("Z", "z"):
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            zone_hours, zone_minutes = int(digits[:2]), int(digits[2:4] or 0)
            if zone_hours > 23 or zone_minutes > 59:  # +99:99 is no offset
                return None
            seconds -= sign * (zone_hours * 3600 + zone_minutes * 60)
        return _in_range(seconds * 1_000_000_000 + nanos)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    magnitude = abs(value)
    if magnitude > 1e22:  # beyond any epoch in nanoseconds of years 1-9999
        return None
    scale = 1_000_000_000 if magnitude < 1e11 else 1_000_000 if magnitude < 1e14 else 1_000 if magnitude < 1e17 else 1
    return _in_range(int(round(value * scale)) if isinstance(value, float) else int(value) * scale)


def _in_range(ns: int) -> int | None:
    """Times the lake can store (years 1-9999, pipeline.values), else None."""
    return ns if TIME_US_MIN * 1000 <= ns <= TIME_US_MAX * 1000 + 999 else None


def format_time_ns(ns: int) -> str:
    """RFC 3339 with as many fraction digits as needed (Go's RFC3339Nano, what Axiom writes)."""
    seconds, nanos = divmod(int(ns), 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{nanos:09d}".rstrip("0") + "Z" if nanos else text + "Z"


def flatten(event: dict, prefix: str = "", out: dict | None = None) -> dict:
    """Nested objects as dotted names, the way Axiom stores them; null values left out."""
    out = {} if out is None else out
    for key, value in event.items():
        name = f"{prefix}{key}"
        if type(value) is dict:
            flatten(value, f"{name}.", out)
        elif value is not None:
            out[name] = value
    return out


def _canonical(value: Any) -> Any:
    """Values as both paths see them: 1.0 and 1 are one number (JSON does not keep the difference), NaN a string."""
    kind = type(value)
    if kind is float:
        if not math.isfinite(value):
            return finite(value)
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if kind is list:
        return [_canonical(v) for v in value]
    if kind is dict:
        return {k: _canonical(v) for k, v in value.items()}
    return value


_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_sha256 = hashlib.sha256


def _canonical_fields(flat: dict) -> dict:
    """The event's fields without Axiom's own and the lifted columns, values in their canonical form, credentials
    replaced (pipeline.secrets: a field named like one, a string that holds one; a few set lookups per field)."""
    rest = {}
    plain_names, clean_text = PLAIN_NAMES, CLEAN_TEXT
    for k, v in flat.items():
        if k in _NOT_IN_FIELDS:
            continue
        kind = type(v)
        if kind is str:
            if v not in clean_text:
                v = redact_text(v)
        elif kind is float:
            if v.is_integer() or v != v or v in (math.inf, -math.inf):
                v = _canonical(v)
        elif kind is list or kind is dict:
            v = redact(_canonical(v))
        if k not in plain_names and is_secret_name(k):
            v = REDACTED
        rest[k] = v
    return rest


def _content_id(time_ns: int, columns: tuple, fields: str) -> str:
    head = _SORTED([time_ns, *columns])
    return _sha256(f"{head}\x1f{fields}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def content_id(time_ns: int, flat: dict) -> str:
    """A stable id for an event without ``_rowId``: its time to the nanosecond and every field but Axiom's own
    (``_sysTime``, ``_rowId``), values canonical (1.0 is 1, NaN the string "NaN"), key order immaterial."""
    return event_row({k: v for k, v in flat.items() if k != "_rowId"}, time_ns)[-1]


def _text(value: Any) -> str | None:
    if value is None or type(value) is str:
        return value
    return _SORTED(_canonical(value))


def event_row(flat: dict, time_ns: int) -> tuple:
    """(time_us, event, service, rollout_id, run_name, fields JSON, event_id) of one flattened event.

    ``fields`` is sorted-key JSON of the canonical values (Axiom answers fields sorted and writes 1.0 as 1; a file
    keeps the producer's order and spelling), so one event gives one row whichever way it was read."""
    get = flat.get
    columns = (get("event"), get("service"), get("rollout_id"), get("run_name"))
    for c in columns:
        if c is not None and (c.__class__ is not str or c not in CLEAN_TEXT):
            columns = tuple(redact(c) for c in columns)  # the value rule only: these names are no credentials
            break
    fields = _SORTED(_canonical_fields(flat))  # credentials are out before the content id is taken
    row_id = get("_rowId")
    if row_id is not None:
        event_id = str(row_id)
    else:
        if any(type(c) is float for c in columns):
            columns = tuple(_canonical(c) for c in columns)
        event_id = _content_id(time_ns, columns, fields)
    return (
        time_ns // 1000,
        _text(columns[0]),
        _text(columns[1]),
        _text(columns[2]),
        _text(columns[3]),
        fields,
        event_id,
    )


_NOT_IN_FIELDS = SYSTEM_FIELDS | frozenset(COLUMN_FIELDS)


class EventBatch:
    """Events rows held column by column and written to a part as one record batch."""

    def __init__(self) -> None:
        self.columns: list[list] = [[] for _ in lake.EVENTS_SCHEMA.names]

    def __len__(self) -> int:
        return len(self.columns[0])

    def add(self, dataset: str, row: tuple, ingest_id: int, file_offset: int | None) -> None:
        c = self.columns
        c[0].append(dataset)
        for i, value in enumerate(row, 1):
            c[i].append(value)
        c[8].append(ingest_id)
        c[9].append(file_offset)

    def record_batch(self) -> pa.RecordBatch:
        schema = lake.EVENTS_SCHEMA
        arrays = [pa.array(col, type=field.type) for col, field in zip(self.columns, schema, strict=True)]
        return pa.record_batch(arrays, schema=schema)

    def flush_to(self, writer: lake.PartWriter) -> int:
        n = len(self)
        if n:
            writer.write(self.record_batch())
            self.columns = [[] for _ in lake.EVENTS_SCHEMA.names]
        return n
