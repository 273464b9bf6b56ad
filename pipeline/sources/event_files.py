"""Incremental ingest of NDJSON event files: the events a trainer sends to Axiom, written one JSON object a line.

Files: ``GRPOLENS_EVENT_FILES`` names files or folders; folders are searched recursively for ``*.ndjson`` and
``*.jsonl`` (hidden folders and symlinks skipped). Each line is one event as the producer sends it to Axiom
(``{"_time": ..., "event": "rollout_complete", "service": ..., "rollout_id": ..., ...}``).

Incremental: a byte offset per file; only complete lines are read (a last line without its newline waits for the
next ingest), and a refresh with nothing new costs one ``stat`` per file. A file that shrank, or whose bytes before
the cursor changed (rewritten in place: pipeline.sources.files), is read again from the start (its events get the
same ids, so nothing doubles after de-duplication). A bad line (not JSON, not an object,
no readable ``_time``) is counted, reported with its byte offset (the first few per file in full, then one summary)
and skipped; it never stops the ingest. As for every source: one ingest writes at most one events part and one
issues part, then saves the cursors.

Rows have the shape of the lake's ``events`` table, the same as ``pipeline.sources.axiom`` writes, built by the
same functions here (``event_row``), so one event read from a file and from the API is one row after
de-duplication on ``(dataset, event_id)``:

- ``time`` is ``_time`` (RFC 3339 with up to nanoseconds, or epoch seconds/ms/us/ns), stored to the microsecond;
- ``event``, ``service``, ``rollout_id``, ``run_name`` are lifted into columns; ``fields`` is JSON of every other
  field, names exactly as sent. So that both paths give byte-equal rows: nested objects become dotted names
  (``a.b``) as Axiom stores them, null values are left out (Axiom's tabular answers cannot tell a null from an
  absent field), keys are sorted (Axiom answers them sorted) and a whole float is written as an integer (``1.0``
  → ``1``; JSON does not keep the difference, and Axiom does not either); NaN/±Infinity become strings;
- credentials are replaced (pipeline.secrets): the value of a field named like one (``authorization``,
  ``api_key``...), and the credential part of any string, lifted columns included;
- ``event_id`` is Axiom's ``_rowId`` when the event has one, else ``content_id``: a hash of ``_time`` (to the
  nanosecond) and every field but Axiom's own (``_sysTime``, ``_rowId``). Two events identical in time and in
  every field are therefore one event (a re-sent event counts once). The hash is taken of the row as stored,
  after redaction: the same on both paths, and no oracle to test a guessed password against.

Dataset: a file whose name (without suffix) or whose folder is named after one of the configured datasets
(``GRPOLENS_AXIOM_DATASETS``, default ``diplomacy``) belongs to it; any other file to the first configured dataset.
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline import lake
from pipeline.secrets import CLEAN_TEXT, PLAIN_NAMES, REDACTED, is_secret_name, redact, redact_text
from pipeline.sources import files
from pipeline.sources.files import FileIssue, failed_file
from pipeline.sources.trainer_log_lines import complete_lines
from pipeline.sources.wandb_offline import IngestReport
from pipeline.values import TIME_US_MAX, TIME_US_MIN, finite, loads_checked

SOURCE = "event_files"
SUFFIXES = (".ndjson", ".jsonl")
DEFAULT_DATASET = "diplomacy"
DETAILED_BAD_LINES = 10  # per file and ingest; more are summed up in one issue

# Fields Axiom adds or keeps for itself: not part of the event's content.
SYSTEM_FIELDS = frozenset({"_time", "_sysTime", "_rowId"})
COLUMN_FIELDS = ("event", "service", "rollout_id", "run_name")


# ------------------------------------------------------------------------------------------------- event rows
# Shared with pipeline.sources.axiom: change nothing here without thinking of both.

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


def configured_datasets(datasets: Iterable[str] | None = None) -> list[str]:
    if datasets is None:
        datasets = (os.environ.get("GRPOLENS_AXIOM_DATASETS") or DEFAULT_DATASET).split(",")
    names = [d.strip() for d in datasets if d and d.strip()]
    return names or [DEFAULT_DATASET]


# ---------------------------------------------------------------------------------------------------- ingest


@dataclass
class EventFilesReport(IngestReport):
    events: int = 0
    bad_lines: int = 0

    def lines(self) -> list[str]:
        out = [
            f"event files: {self.files_seen} files, {self.files_read} read, {self.records} lines, "
            f"{self.events} events, {self.bad_lines} bad lines skipped in {self.seconds:.2f}s"
        ]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  skipped: {i.path} @ byte {i.offset}: {i.kind}: {i.message}" for i in self.issues]
        return out


def discover(roots: Iterable[Path], skipped: list[FileIssue] | None = None) -> list[Path]:
    """Every ``*.ndjson``/``*.jsonl`` below the roots, once each; hidden folders, symlinks and special files
    (added to ``skipped``) left out."""
    found: set[str] = set()
    for root in roots:
        root = Path(root)
        if root.is_file():
            found.add(os.path.realpath(root))
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [
                d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d))
            ]
            for name in filenames:
                full = os.path.join(dirpath, name)
                if name.lower().endswith(SUFFIXES) and not name.startswith(".") and files.regular(full, skipped):
                    found.add(os.path.realpath(full))
    return [Path(p) for p in sorted(found)]


def pending_files(lake_root: Path, roots: Iterable[Path]) -> list[Path]:
    """What the next ingest would read (new or grown files); takes no lock and writes nothing (for sensors)."""
    state = lake.IngestState.load(Path(lake_root), SOURCE)
    todo, _ = files.changed(discover(roots), state.data.get("files", {}))
    return [item[0] for item in todo]


def dataset_for(path: Path, datasets: list[str]) -> str:
    stem = path.name
    for suffix in SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    for name in (stem, path.parent.name):
        if name in datasets:
            return name
    return datasets[0]


class EventFileIngest:
    def __init__(
        self,
        lake_root: Path,
        roots: Iterable[Path],
        progress: Callable[[str], None] | None = None,
        datasets: Iterable[str] | None = None,
        batch_rows: int = 50_000,
    ):
        self.lake_root = Path(lake_root)
        self.roots = [Path(r) for r in roots]
        self.progress = progress or (lambda _msg: None)
        self.datasets = configured_datasets(datasets)
        self.batch_rows = batch_rows

    def run(self) -> EventFilesReport:
        started = time.perf_counter()
        report = EventFilesReport()
        lake.ensure_layout(self.lake_root, SOURCE)
        with lake.ingest_lock(self.lake_root, SOURCE) as leftovers:
            report.notes += leftovers
            state = lake.IngestState.load(self.lake_root, SOURCE)
            cursors: dict = state.data.setdefault("files", {})
            report.issues += files.root_issues(self.roots, "GRPOLENS_EVENT_FILES")
            found = discover(self.roots, report.issues)
            report.files_seen = len(found)
            todo, unreadable = files.changed(found, cursors)
            report.issues += unreadable
            if not todo:
                report.seconds = time.perf_counter() - started
                return report
            ingest_id = state.next_ingest_id()
            writer = lake.PartWriter(self.lake_root, "events", SOURCE, ingest_id)
            batch = EventBatch()
            try:
                for n, (path, size, mtime_ns, cursor) in enumerate(todo, 1):
                    self.progress(f"[{n}/{len(todo)}] {path}")
                    try:
                        new_cursor = self._read(path, size, mtime_ns, cursor, ingest_id, batch, writer, report)
                    except Exception as exc:
                        report.issues.append(failed_file(path, exc))
                        continue
                    if new_cursor is not None:
                        cursors[str(path)] = new_cursor
                report.events += batch.flush_to(writer)
                writer.commit()
            except BaseException:
                writer.abort()
                raise
            lake.write_issues(self.lake_root, SOURCE, ingest_id, report.issues)
            state.save(ingest_id)
            report.ingest_id = ingest_id
        report.values = report.events  # the field every source's report has
        report.seconds = time.perf_counter() - started
        return report

    def _read(
        self,
        path: Path,
        size: int,
        mtime_ns: int,
        cursor: dict | None,
        ingest_id: int,
        batch: EventBatch,
        writer: lake.PartWriter,
        report: EventFilesReport,
    ) -> dict | None:
        cursor = dict(cursor) if cursor else {"offset": 0, "size": 0, "events": 0, "bad_lines": 0}
        if size < cursor["size"]:
            report.notes.append(f"{path} shrank from {cursor['size']} to {size} bytes; reading it again from the start")
            cursor.update(offset=0, events=0, bad_lines=0)
        dataset = cursor.get("dataset") or dataset_for(path, self.datasets)
        bad_here, first_bad = 0, None
        end = cursor["offset"]
        try:
            with open(path, "rb") as fh:
                if cursor["offset"] and files.rewritten(fh, cursor):
                    report.notes.append(
                        f"{path}: the lines already read have changed (file rewritten); reading it "
                        "again from the start (events already in the lake count once)"
                    )
                    cursor.update(offset=0, events=0, bad_lines=0)
                    end = 0
                for offset, raw in complete_lines(fh, cursor["offset"], size):
                    end = offset + len(raw) + 1
                    report.records += 1
                    if not raw.strip():
                        continue
                    problem = None
                    try:
                        obj = loads_checked(raw)
                    except ValueError as exc:  # also bad UTF-8, and nesting beyond what a log line has
                        problem = ("bad_line", f"not JSON: {exc}")
                    else:
                        if type(obj) is not dict:
                            problem = ("bad_line", f"a JSON {type(obj).__name__}, not an object")
                        else:
                            time_ns = parse_time_ns(obj.get("_time"))
                            if time_ns is None:
                                shown = redact_text(repr(obj.get("_time")))[:40]  # redacted before it is cut
                                problem = (
                                    "no_time",
                                    "no _time"
                                    if "_time" not in obj
                                    else f"_time {shown} is not a time (RFC 3339, or epoch s/ms/us/ns; years 1-9999)",
                                )
                            else:
                                try:
                                    row = event_row(flatten(obj), time_ns)
                                except Exception as exc:  # a line no reader anticipated: skipped and said, not fatal
                                    problem = ("bad_line", f"event not usable: {type(exc).__name__}: {exc}")
                    if problem is not None:
                        bad_here += 1
                        if bad_here <= DETAILED_BAD_LINES:
                            report.issues.append(FileIssue(str(path), offset, len(raw) + 1, *problem))
                        elif first_bad is None:
                            first_bad = offset
                        continue
                    batch.add(dataset, row, ingest_id, offset)
                    cursor["events"] += 1
                    if len(batch) >= self.batch_rows:
                        report.events += batch.flush_to(writer)
                cursor.update(files.fingerprint(fh, end))
        except OSError as exc:
            report.issues.append(FileIssue(str(path), end, 0, "unreadable", str(exc)))
            return None
        if bad_here > DETAILED_BAD_LINES:
            assert first_bad is not None  # set at the first bad line past the detailed ones
            report.issues.append(
                FileIssue(
                    str(path),
                    first_bad,
                    0,
                    "bad_line",
                    f"{bad_here - DETAILED_BAD_LINES} more bad lines from this offset on",
                )
            )
        report.bad_lines += bad_here
        report.files_read += 1
        if end < size:
            report.notes.append(
                f"{path}: last {size - end} bytes are an incomplete line (still being written?); "
                "read up to the last complete one"
            )
        cursor.update(
            offset=end, size=size, mtime_ns=mtime_ns, dataset=dataset, bad_lines=cursor["bad_lines"] + bad_here
        )
        return cursor


def ingest(
    lake_root: Path,
    roots: Iterable[Path],
    progress: Callable[[str], None] | None = None,
    *,
    datasets: Iterable[str] | None = None,
    batch_rows: int = 50_000,
) -> EventFilesReport:
    """Read what was appended to the event files since the last ingest. ``datasets``: the configured dataset
    names (default ``GRPOLENS_AXIOM_DATASETS``) that decide each file's dataset."""
    return EventFileIngest(lake_root, roots, progress, datasets, batch_rows).run()
