"""A small Axiom query API on 127.0.0.1, for tests and the offline demo: the real wire format, on demand faults.

Speaks ``POST /v1/datasets/_apl?format=tabular`` as Axiom does (see Axiom's "Query data via Axiom API" and "API
limits" pages): bearer token and ``X-Axiom-Org-Id`` checked, a JSON body ``{"apl", "startTime", "endTime"}``, the
tabular answer (``format``, ``status``, ``tables[].fields`` as ``{name, type}``, column-major
``tables[].columns``, ``datasetNames``), ``_time`` written as RFC 3339 with nanoseconds, errors as
``{"message": ...}``, and the headers Axiom sends (``X-Axiom-Trace-Id``, ``X-RateLimit-*`` with the reset in UTC
epoch seconds, ``X-QueryLimit-*``).

It evaluates the APL subset grpolens sends: ``['dataset']`` (or a bare name), any number of
``where _time <op> datetime(...)`` clauses joined with ``and`` (``>= > <= < ==``), ``sort by _time asc|desc``,
``limit N``/``take N``; anything else answers 400 as Axiom does for a query it cannot run. ``startTime`` is
inclusive and ``endTime`` exclusive. Events at one ``_time`` come back in a random order each time (Axiom promises
no order among ties), unless ``shuffle_ties=False``.

Events are stored as sent, nested objects flattened to dotted names and nulls dropped as Axiom does, with a
``_sysTime`` and a ``_rowId`` added; ``_rowId`` is answered only when ``row_ids=True``.

Faults are queued with ``fail(kind, times=1, dataset=None, **options)`` and used by the next matching requests:
``429`` (``reset_in`` seconds, given as ``X-RateLimit-Reset`` epoch seconds and, with ``retry_after=True``, as
``Retry-After``), ``500``/``502``/``503``, ``slow`` (answers after ``delay`` seconds), ``truncated`` (a 200 whose
JSON body is cut in half), ``unexpected`` (a 200 in the legacy shape, no ``tables``), ``partial`` (a tabular
answer marked ``isPartial``), ``401``, ``403``, ``404``, ``drop`` (closes the connection without answering).

Usage::

    with AxiomEmulator() as axiom:
        axiom.add("diplomacy", events)
        ingest(lake, ["diplomacy"], url=axiom.url, token=axiom.token)
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import random
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)(?:[Tt ](\d\d):(\d\d)(?::(\d\d))?(?:[.,](\d+))?)?\s*(Z|z|[+-]\d\d(?::?\d\d)?)?$"
)
_SOURCE = re.compile(r"^\s*(?:\[\s*['\"]([^'\"]+)['\"]\s*\]|([A-Za-z0-9._-]+))\s*$")
_CLAUSE = re.compile(r"^\s*_time\s*(>=|<=|==|>|<)\s*datetime\(\s*['\"]?([^'\")]+?)['\"]?\s*\)\s*$")
_OPS = {
    ">=": lambda t, v: t >= v,
    ">": lambda t, v: t > v,
    "<=": lambda t, v: t <= v,
    "<": lambda t, v: t < v,
    "==": lambda t, v: t == v,
}


def time_ns(value: Any) -> int:
    """RFC 3339 text or epoch number → nanoseconds (the emulator's own parser, independent of grpolens')."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        magnitude = abs(value)
        scale = (
            1_000_000_000 if magnitude < 1e11 else 1_000_000 if magnitude < 1e14 else 1_000 if magnitude < 1e17 else 1
        )
        return int(round(value * scale))
    m = _RFC3339.match(str(value).strip())
    if not m:
        raise ValueError(f"not a time: {value!r}")
    import calendar

    seconds = calendar.timegm(tuple(int(m.group(i) or 0) for i in range(1, 7)) + (0, 0, 0))
    nanos = int((m.group(7) or "0")[:9].ljust(9, "0"))
    zone = m.group(8)
    if zone and zone not in "Zz":
        digits = zone[1:].replace(":", "")
        seconds -= (-1 if zone[0] == "-" else 1) * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    return seconds * 1_000_000_000 + nanos


def rfc3339(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return (f"{text}.{nanos:09d}".rstrip("0") if nanos else text) + "Z"


def _flatten(event: dict, prefix: str = "", out: dict | None = None) -> dict:
    out = {} if out is None else out
    for key, value in event.items():
        if isinstance(value, dict):
            _flatten(value, f"{prefix}{key}.", out)
        elif value is not None:
            out[f"{prefix}{key}"] = value
    return out


def _type(values: list) -> str:
    kinds = []
    for v in values:
        kind = (
            "boolean"
            if isinstance(v, bool)
            else "integer"
            if isinstance(v, int)
            else "float"
            if isinstance(v, float)
            else "array"
            if isinstance(v, list)
            else "string"
            if v is not None
            else None
        )
        if kind and kind not in kinds:
            kinds.append(kind)
    return "|".join(kinds) or "string"


class APLError(ValueError):
    pass


@dataclass
class Query:
    dataset: str
    clauses: list[tuple[str, int]] = field(default_factory=list)
    descending: bool = False
    limit: int | None = None


def parse_apl(apl: str) -> Query:
    parts = apl.split("|")
    m = _SOURCE.match(parts[0])
    if not m:
        raise APLError(f"cannot parse dataset reference {parts[0].strip()!r}")
    query = Query(m.group(1) or m.group(2))
    for part in parts[1:]:
        words = part.strip()
        lower = words.lower()
        if lower.startswith("where "):
            for clause in re.split(r"\s+and\s+", words[6:], flags=re.IGNORECASE):
                c = _CLAUSE.match(clause)
                if not c:
                    raise APLError(f"unsupported where clause {clause.strip()!r}")
                try:
                    query.clauses.append((c.group(1), time_ns(c.group(2))))
                except ValueError as exc:
                    raise APLError(f"invalid datetime literal: {exc}") from None
        elif re.match(r"^(sort|order)\s+by\s+_time(\s+(asc|desc))?$", lower):
            query.descending = lower.endswith("desc") or not lower.endswith("asc")  # APL sorts desc by default
        elif re.match(r"^(limit|take)\s+\d+$", lower):
            query.limit = int(lower.split()[1])
        else:
            raise APLError(f"unsupported operator {words!r}")
    return query


@dataclass
class Fault:
    kind: str
    times: int = 1
    dataset: str | None = None
    after: int = 0
    options: dict = field(default_factory=dict)


class AxiomEmulator:
    def __init__(
        self,
        token: str | None = None,
        org_id: str | None = None,
        row_ids: bool = True,
        shuffle_ties: bool = True,
        seed: int = 0,
        max_limit: int | None = None,
    ):
        self.token = token or f"xaat-{uuid.uuid4()}"
        self.org_id = org_id
        self.row_ids = row_ids
        self.shuffle_ties = shuffle_ties
        self.max_limit = max_limit
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._times: dict[str, list[int]] = {}
        self._events: dict[str, list[dict]] = {}
        self._faults: list[Fault] = []
        self.requests: list[dict] = []  # what was asked: path, apl, startTime, endTime, status (never the token)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._seq = 0

    # -- data

    def add(self, dataset: str, events: list[dict]) -> None:
        """Store events as Axiom ingests them: flattened, nulls dropped, with ``_sysTime`` and ``_rowId``."""
        now = time.time_ns()
        with self._lock:
            stored = self._events.setdefault(dataset, [])
            for event in events:
                flat = _flatten(event)
                t = time_ns(flat["_time"]) if "_time" in flat else now
                self._seq += 1
                flat["_time"] = t
                flat["_sysTime"] = now
                flat.setdefault("_rowId", f"0d{t:x}-{self._seq:08x}")
                stored.append(flat)
            stored.sort(key=lambda e: e["_time"])  # stable: arrival order among equal times
            self._times[dataset] = [e["_time"] for e in stored]

    def count(self, dataset: str) -> int:
        return len(self._times.get(dataset, []))

    def fail(self, kind: str, times: int = 1, dataset: str | None = None, after: int = 0, **options: Any) -> None:
        """Queue a fault for the next ``times`` requests (of ``dataset``, if given), once ``after`` such requests
        have been answered normally. Options: ``reset_in``, ``retry_after`` (429), ``delay`` (slow), ``message``."""
        with self._lock:
            self._faults.append(Fault(str(kind), times, dataset, after, options))

    def pending_faults(self) -> int:
        return sum(f.times for f in self._faults)

    def _take_fault(self, dataset: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.dataset is None or fault.dataset == dataset:
                    if fault.after > 0:
                        fault.after -= 1
                        return None
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # -- queries

    def run(self, query: Query, start: int | None, end: int | None) -> tuple[list[str], list[dict]]:
        with self._lock:
            times = self._times.get(query.dataset)
            events = self._events.get(query.dataset)
            if times is None:
                raise KeyError(query.dataset)
            lo, hi = 0, len(times)
            bounds = list(query.clauses)
            if start is not None:
                bounds.append((">=", start))
            if end is not None:
                bounds.append(("<", end))
            for op, value in bounds:  # every supported clause is a range on the sorted times
                if op == ">=":
                    lo = max(lo, bisect.bisect_left(times, value))
                elif op == ">":
                    lo = max(lo, bisect.bisect_right(times, value))
                elif op == "<=":
                    hi = min(hi, bisect.bisect_right(times, value))
                elif op == "<":
                    hi = min(hi, bisect.bisect_left(times, value))
                else:
                    lo, hi = max(lo, bisect.bisect_left(times, value)), min(hi, bisect.bisect_right(times, value))
            picked = events[lo:hi] if lo < hi else []
            picked_times = times[lo:hi] if lo < hi else []
        if self.shuffle_ties and picked:
            picked = self._shuffle_ties(picked, picked_times)
        if query.descending:
            picked = picked[::-1]
        limit = query.limit
        if self.max_limit is not None:
            limit = min(limit or self.max_limit, self.max_limit)
        if limit is not None:
            picked = picked[:limit]
        names = ["_sysTime", "_time"] + sorted({k for e in picked for k in e} - {"_sysTime", "_time", "_rowId"})
        if self.row_ids:
            names.insert(2, "_rowId")
        return names, picked

    def _shuffle_ties(self, events: list[dict], times: list[int]) -> list[dict]:
        out, i = [], 0
        while i < len(events):
            j = bisect.bisect_right(times, times[i], i)
            group = events[i:j]
            if len(group) > 1:
                group = group[:]
                self._rng.shuffle(group)
            out += group
            i = j
        return out

    def tabular(self, query: Query, names: list[str], events: list[dict], elapsed_us: int, start, end) -> dict:
        columns = []
        fields = []
        for name in names:
            column = [e.get(name) for e in events]
            if name in ("_time", "_sysTime"):
                column = [rfc3339(v) for v in column]
                kind = "datetime"
            else:
                kind = _type(column)
            fields.append({"name": name, "type": kind})
            columns.append(column)
        times = [e["_time"] for e in events]
        return {
            "format": "tabular",
            "status": {
                "elapsedTime": elapsed_us,
                "blocksExamined": 1 + len(events) // 5000,
                "blocksCached": 0,
                "blocksMatched": 0,
                "rowsExamined": len(events),
                "rowsMatched": len(events),
                "numGroups": 0,
                "isPartial": False,
                "cacheStatus": 1,
                **({"minBlockTime": rfc3339(min(times)), "maxBlockTime": rfc3339(max(times))} if times else {}),
            },
            "tables": [
                {
                    "name": "0",
                    "sources": [{"name": query.dataset}],
                    "fields": fields,
                    "order": [{"field": "_time", "desc": query.descending}],
                    "groups": [],
                    "range": {"field": "_time", "start": rfc3339(start or 0), "end": rfc3339(end or time.time_ns())},
                    "columns": columns,
                }
            ],
            "datasetNames": [query.dataset],
            "fieldsMetaMap": {query.dataset: []},
        }

    # -- server

    @property
    def url(self) -> str:
        assert self._server is not None, "start the emulator first (use it as a context manager)"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> AxiomEmulator:
        emulator = self

        class Handler(_Handler):
            pass

        Handler.emulator = emulator
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="axiom-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> AxiomEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that gave up (timeout) leaves a broken pipe behind: expected here, not worth a traceback."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    emulator: AxiomEmulator
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; Nagle would hold the body ~40 ms
    server_version = "axiom-emulator"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet; and request lines never hold secrets anyway
        pass

    def _limit_headers(self) -> dict[str, str]:
        reset = int(time.time()) + 60
        return {
            "X-RateLimit-Scope": "organization",
            "X-RateLimit-Limit": "600",
            "X-RateLimit-Remaining": "599",
            "X-RateLimit-Reset": str(reset),
            "X-QueryLimit-Limit": "1000000000",
            "X-QueryLimit-Remaining": "999000000",
            "X-QueryLimit-Reset": str(reset + 86400),
        }

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        base = {
            "Content-Type": "application/json",
            "X-Axiom-Trace-Id": secrets.token_hex(16),
            "Vary": "Accept-Encoding",
            **self._limit_headers(),
            **(headers or {}),
        }
        for key, value in base.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps({"message": message}).encode(), headers)

    def do_GET(self) -> None:
        self._error(404, "not found")

    def do_POST(self) -> None:
        em = self.emulator
        started = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        record: dict[str, Any] = {"path": self.path}
        em.requests.append(record)
        split = urlsplit(self.path)
        if split.path != "/v1/datasets/_apl":
            record["status"] = 404
            return self._error(404, "not found")
        try:
            body = json.loads(raw)
            apl = body["apl"]
        except (ValueError, KeyError, TypeError):
            record["status"] = 400
            return self._error(400, "invalid request body")
        record.update(
            apl=apl,
            startTime=body.get("startTime"),
            endTime=body.get("endTime"),
            format=parse_qs(split.query).get("format", ["legacy"])[0],
            org_id=self.headers.get("X-Axiom-Org-Id"),
        )
        if self.headers.get("Authorization") != f"Bearer {em.token}":
            record["status"] = 401
            return self._error(401, "invalid token")
        if em.org_id is not None and self.headers.get("X-Axiom-Org-Id") != em.org_id:
            record["status"] = 403
            return self._error(403, "forbidden: missing or wrong organization id")
        try:
            query = parse_apl(apl)
        except APLError as exc:
            record["status"] = 400
            return self._error(400, f"invalid query: {exc}")
        record["dataset"] = query.dataset
        fault = em._take_fault(query.dataset)
        if fault is not None:
            record["fault"] = fault.kind
            if self._inject(fault, record):
                return
        try:
            start = time_ns(body["startTime"]) if body.get("startTime") else None
            end = time_ns(body["endTime"]) if body.get("endTime") else None
        except ValueError as exc:
            record["status"] = 400
            return self._error(400, f"invalid startTime/endTime: {exc}")
        try:
            names, events = em.run(query, start, end)
        except KeyError:
            record["status"] = 404
            return self._error(404, f"dataset {query.dataset!r} not found")
        elapsed = int((time.perf_counter() - started) * 1e6)
        answer = em.tabular(query, names, events, elapsed, start, end)
        if fault is not None and fault.kind == "partial":
            answer["status"]["isPartial"] = True
        payload = json.dumps(answer, separators=(",", ":")).encode()
        if fault is not None and fault.kind == "truncated":
            payload = payload[: max(1, len(payload) // 2)]
        record.update(status=200, rows=len(events))
        self._send(200, payload)

    def _inject(self, fault: Fault, record: dict) -> bool:
        """Answer with the fault; True when the request is done (False: go on and answer normally)."""
        kind, opts = fault.kind, fault.options
        if kind == "429":
            reset_in = float(opts.get("reset_in", 1))
            headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(math.ceil(time.time() + reset_in))}
            if opts.get("retry_after"):
                headers["Retry-After"] = str(math.ceil(reset_in))
            record["status"] = 429
            self._error(429, opts.get("message", "rate limit exceeded"), headers)
            return True
        if kind in ("500", "502", "503"):
            record["status"] = int(kind)
            self._error(
                int(kind),
                opts.get("message")
                or {"500": "internal server error", "502": "bad gateway", "503": "service unavailable"}[kind],
            )
            return True
        if kind in ("401", "403", "404"):
            record["status"] = int(kind)
            self._error(
                int(kind),
                opts.get("message") or {"401": "invalid token", "403": "forbidden", "404": "dataset not found"}[kind],
            )
            return True
        if kind == "slow":
            time.sleep(float(opts.get("delay", 2.0)))
            return False  # then answer (the client has usually given up by now)
        if kind == "unexpected":
            record["status"] = 200
            self._send(200, json.dumps({"status": {"rowsMatched": 0}, "matches": []}).encode())
            return True
        if kind == "drop":
            record["status"] = None
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return True
        if kind in ("truncated", "partial"):
            return False  # answered normally, then spoiled in do_POST
        raise ValueError(f"unknown fault {kind!r}")
