"""A W&B API on 127.0.0.1 that the real ``wandb`` client (0.31, through its wandb-core service) can be pointed at.

Why: the W&B cloud is unreachable from tests and CI, and the public API is a moving target (0.31 sends every call
through the Go ``wandb-core`` process, and ``scan_history`` reads exported Parquet files with a Rust reader). This
server speaks the wire protocol that client sends, so a test runs ``wandb.Api`` for real and sees what it would see
against the cloud, with faults on demand.

What it serves (found by logging every request the installed client sends; see ``test_wandb_emulator.py``):

* ``POST /graphql`` -- a small GraphQL executor (``graphql()``): it parses the document (operations, fragments,
  aliases, arguments, variables with defaults, ``@include``/``@skip``) and answers only the fields selected, the
  way a GraphQL server does, so the client's lazy loading behaves as against the cloud. A field this emulator does
  not know is a GraphQL error (``Cannot query field ...``), never a silent ``null``. Types and fields:
  ``viewer``; ``serverInfo { features }``; ``project(name, entityName) { internalId id name entityName readOnly
  runCount(filters) runs(filters, after, first, order) run(name) }``; ``Run { id name displayName state config
  summaryMetrics systemMetrics tags group jobType sweepName commit readOnly createdAt heartbeatAt updatedAt
  description notes historyLineCount historyKeys user projectId project history(minStep, maxStep, samples)
  sampledHistory(specs) parquetHistory(liveKeys) outputArtifacts/inputArtifacts(after, first) }``.
  Values are shaped as the W&B server sends them: ``config`` a JSON string of ``{key: {"value": v, "desc": null}}``
  (``_wandb`` included), ``summaryMetrics``/``systemMetrics`` JSON strings, ``historyKeys`` a JSON object with
  ``lastStep``, history rows JSON strings (``NaN``/``Infinity`` tokens as W&B writes them), timestamps
  ``YYYY-MM-DDTHH:MM:SS`` in UTC without a zone (second resolution, as the cloud answers).
* Runs listing: ``filters`` is evaluated server-side (MongoDB style: ``$gt $gte $lt $lte $eq $ne $in $nin
  $exists $and $or $nor``, plain equality; fields ``updatedAt createdAt heartbeatAt state name displayName group
  jobType tags sweep config.K(.value) summary_metrics.K``; timestamps compared as instants, ``Z``/offsets/naive
  UTC accepted). A filter it cannot evaluate is a GraphQL error, never ignored. ``order`` is ``[+-]field``
  (``created_at updated_at heartbeat_at name display_name state config.K.value summary_metrics.K``), ties broken
  by creation. Cursors are opaque keyset cursors (sort value + run), so a page boundary stays put while runs change.
* History, both paths of wandb-core's reader: ``parquetHistory(liveKeys)`` answers ``parquetUrls`` (the exported
  part of the history, as Parquet files this server serves itself at ``GET /files/...`` with ``HEAD`` and ``Range``
  support; signed like cloud URLs: a wrong signature is a 403) and ``liveData`` (rows not yet exported, projected on
  ``liveKeys``); ``history(minStep, maxStep, samples)`` answers rows in ``[minStep, maxStep)``. The export boundary
  is per run (``exported_fraction`` / ``export()``). Parquet files hold ``_step`` (int64) and one column per key;
  a column's type follows its values (int64, float64 with NaN/inf, string, bool, struct/list for nested values,
  JSON text when a key mixes types); a row without a key holds null there, which the client returns as ``None``.
  With ``history_includes_exported=True`` (the default, as the cloud's ``history`` field reads the full history)
  ``history`` also returns exported rows, so a scan page that straddles the boundary yields those rows twice (from
  Parquet and from ``history``): that is the client's behaviour, and grpolens has to deduplicate by ``_step``.
  Several Parquet files are listed in a shuffled order (the cloud promises none), so rows of one page may come out
  of step order.
* ``POST /sdk/otel/v1/metrics`` (wandb-core's telemetry): accepted and counted in ``telemetry``, not logged.

Auth: every request but file GETs (signed URLs) must carry ``Authorization: Basic base64("api:<key>")`` (or Bearer
``<key>``); otherwise 401 ``{"errors": [{"message": "user is not logged in"}]}``. The key never reaches the log.

Faults: ``fail(kind, times=1, operation=None, run_id=None, after=0, **options)`` queues a fault for the next
``times`` matching requests, after ``after`` matching requests were answered normally. ``operation`` is the GraphQL
operation name (``Viewer``, ``Runs``, ``Run``, ``RunHistoryKeys``, ``RunParquetHistory``, ``HistoryPage``,
``RunOutputArtifacts``, ``ServerFeaturesQuery`` ...) or ``"file"`` for Parquet downloads; ``run_id`` matches the
run named in the variables or the file path. Kinds: ``429`` (``retry_after`` seconds as ``Retry-After``, default 1;
``reset`` seconds as ``RateLimit-Reset`` with ``RateLimit-Remaining: 0``), ``500 502 503 504``, ``401 403 404``,
``slow`` (answers after ``delay`` seconds, default 2), ``timeout`` (the same with a default delay of 30 s, for a
client whose timeout is shorter), ``drop`` (closes the connection without an answer), ``truncated`` (a 200 whose body
is cut in half, honest Content-Length), ``graphql_error`` (a 200 with ``errors``, ``message`` option).

Concurrency: ``max_in_flight`` is the most GraphQL requests answered at once (``in_flight`` now).

Request log: ``requests`` holds one ``Request(operation, variables, status, method, path)`` per request (files too,
``operation="file"``); ``count(operation)`` and ``operations()`` summarise it.

Usage::

    with WandbEmulator() as emu:
        emu.add_offline_run(run_dir, entity="team", project="grpo", exported_fraction=0.5)
        emu.add_run("team", "grpo", "abc123", config={"lr": 1e-6}, history=[{"_step": 0, "loss": 1.0}])
        api = emu.api()        # wandb.Api(api_key=emu.api_key, overrides={"base_url": emu.base_url, ...})
        emu.fail("429", times=2, operation="HistoryPage", retry_after=1)
        emu.append_history("team", "grpo", "abc123", [{"_step": 1, "loss": 0.5}])
        emu.rewind("team", "grpo", "abc123", keep_steps_below=1)

The client side (``client_settings`` / ``api``): wandb.Api copies the process-wide wandb settings, so retry and
timeout knobs (``x_graphql_retry_max``, ``x_graphql_retry_wait_min_seconds``, ``x_graphql_retry_wait_max_seconds``,
``x_graphql_timeout_seconds``, ``x_file_transfer_*``) go in through ``wandb.setup(wandb.Settings(...))``; the base
URL and key are per Api object.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import math
import random
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, unquote, urlsplit

# ---------------------------------------------------------------------------------------------------------------
# GraphQL: a parser and an executor for the subset of the language the client sends.


class GraphQLError(Exception):
    pass


_TOKEN = re.compile(
    r'''
    (?P<ws>[\s,\ufeff]+|\#[^\n\r]*)
  | (?P<block>"""(?:[^"\\]|\\.|"(?!""))*""")
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<spread>\.\.\.)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<name>[_A-Za-z][_0-9A-Za-z]*)
  | (?P<punct>[!$&()\:=@\[\]{|}])
''',
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise GraphQLError(f"Syntax Error: Unexpected character {text[pos]!r} at {pos}.")
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            out.append((kind, m.group()))
    out.append(("eof", ""))
    return out


@dataclass
class Field:
    name: str
    alias: str
    args: dict  # name -> value AST: ("var", name) | ("lit", python value) | ("list", [...]) | ("obj", {...})
    directives: list
    selections: list | None


@dataclass
class Spread:
    fragment: str
    directives: list


@dataclass
class Inline:
    type_condition: str | None
    directives: list
    selections: list


@dataclass
class Operation:
    kind: str
    name: str | None
    defaults: dict
    selections: list


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        k, v = self.toks[self.i]
        return (value is None or v == value) and (kind is None or k == kind)

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        k, v = self.toks[self.i]
        if (value is not None and v != value) or (kind is not None and k != kind) or k == "eof":
            raise GraphQLError(f"Syntax Error: Expected {value or kind}, found {v or '<EOF>'!r}.")
        self.i += 1
        return v

    def document(self) -> tuple[list[Operation], dict[str, list]]:
        ops, frags = [], {}
        while not self.peek(kind="eof"):
            if self.peek("{"):
                ops.append(Operation("query", None, {}, self.selection_set()))
            elif self.peek("fragment"):
                self.take()
                name = self.take(kind="name")
                self.take("on")
                self.take(kind="name")
                self.directives()
                frags[name] = self.selection_set()
            elif self.peek("query") or self.peek("mutation") or self.peek("subscription"):
                kind = self.take()
                name = self.take(kind="name") if self.peek(kind="name") else None
                defaults = self.variable_definitions() if self.peek("(") else {}
                self.directives()
                ops.append(Operation(kind, name, defaults, self.selection_set()))
            else:
                raise GraphQLError(f"Syntax Error: Unexpected {self.toks[self.i][1]!r}.")
        return ops, frags

    def variable_definitions(self) -> dict:
        defaults = {}
        self.take("(")
        while not self.peek(")"):
            self.take("$")
            name = self.take(kind="name")
            self.take(":")
            self.type_ref()
            if self.peek("="):
                self.take()
                defaults[name] = self.value(const=True)
            self.directives()
        self.take(")")
        return defaults

    def type_ref(self) -> None:
        if self.peek("["):
            self.take()
            self.type_ref()
            self.take("]")
        else:
            self.take(kind="name")
        if self.peek("!"):
            self.take()

    def directives(self) -> list:
        out = []
        while self.peek("@"):
            self.take()
            name = self.take(kind="name")
            out.append((name, self.arguments() if self.peek("(") else {}))
        return out

    def arguments(self) -> dict:
        args = {}
        self.take("(")
        while not self.peek(")"):
            name = self.take(kind="name")
            self.take(":")
            args[name] = self.value()
        self.take(")")
        return args

    def value(self, const: bool = False):
        kind, text = self.toks[self.i]
        if text == "$" and not const:
            self.take()
            return ("var", self.take(kind="name"))
        if text == "[":
            self.take()
            items = []
            while not self.peek("]"):
                items.append(self.value(const))
            self.take("]")
            return ("list", items)
        if text == "{":
            self.take()
            items = {}
            while not self.peek("}"):
                name = self.take(kind="name")
                self.take(":")
                items[name] = self.value(const)
            self.take("}")
            return ("obj", items)
        self.i += 1
        if kind == "number":
            return ("lit", float(text) if any(c in text for c in ".eE") else int(text))
        if kind == "string":
            return ("lit", json.loads(text))
        if kind == "block":
            return ("lit", text[3:-3])
        if kind == "name":
            return ("lit", {"true": True, "false": False, "null": None}.get(text, text))
        raise GraphQLError(f"Syntax Error: Unexpected {text!r}.")

    def selection_set(self) -> list:
        self.take("{")
        out = []
        while not self.peek("}"):
            if self.peek(kind="spread"):
                self.take()
                if self.peek("on"):
                    self.take()
                    cond = self.take(kind="name")
                    out.append(Inline(cond, self.directives(), self.selection_set()))
                elif self.peek(kind="name"):
                    name = self.take()
                    out.append(Spread(name, self.directives()))
                else:
                    out.append(Inline(None, self.directives(), self.selection_set()))
                continue
            alias = name = self.take(kind="name")
            if self.peek(":"):
                self.take()
                name = self.take(kind="name")
            args = self.arguments() if self.peek("(") else {}
            directives = self.directives()
            sub = self.selection_set() if self.peek("{") else None
            out.append(Field(name, alias, args, directives, sub))
        self.take("}")
        return out


def parse(text: str) -> tuple[list[Operation], dict[str, list]]:
    return _Parser(text).document()


def operation_name(query: str) -> str | None:
    """The name of the (first) operation in a document, without executing it; None if it does not parse."""
    try:
        ops, _ = parse(query)
    except GraphQLError:
        return None
    return ops[0].name if ops else None


class Obj(dict):
    """A GraphQL object: field name -> value, or -> callable(args) computing it. ``typename`` names the type."""

    def __init__(self, typename: str, fields: dict):
        super().__init__(fields)
        self.typename = typename


def _arg_value(ast, variables: dict):
    kind, v = ast
    if kind == "var":
        return variables.get(v)
    if kind == "list":
        return [_arg_value(x, variables) for x in v]
    if kind == "obj":
        return {k: _arg_value(x, variables) for k, x in v.items()}
    return v


def _included(directives: list, variables: dict) -> bool:
    for name, args in directives:
        cond = _arg_value(args.get("if", ("lit", True)), variables)
        if name == "include" and not cond:
            return False
        if name == "skip" and cond:
            return False
    return True


def execute(query: str, variables: dict, root: Obj, operation: str | None = None) -> dict:
    ops, frags = parse(query)
    if not ops:
        raise GraphQLError("Must provide an operation.")
    op = next((o for o in ops if o.name == operation), None) if operation else ops[0]
    if op is None:
        raise GraphQLError(f'Unknown operation named "{operation}".')
    if op.kind != "query":
        raise GraphQLError(f"this emulator answers queries only, not {op.kind} {op.name or ''}".strip())
    bound = {k: _arg_value(v, {}) for k, v in op.defaults.items()}
    bound.update(variables or {})

    def resolve(obj: Obj, selections: list) -> dict:
        out: dict[str, Any] = {}
        for sel in selections:
            if not _included(sel.directives, bound):
                continue
            if isinstance(sel, Spread):
                if sel.fragment not in frags:
                    raise GraphQLError(f'Unknown fragment "{sel.fragment}".')
                out.update(resolve(obj, frags[sel.fragment]))
                continue
            if isinstance(sel, Inline):
                out.update(resolve(obj, sel.selections))
                continue
            if sel.name == "__typename":
                out[sel.alias] = obj.typename
                continue
            if sel.name not in obj:
                raise GraphQLError(f'Cannot query field "{sel.name}" on type "{obj.typename}".')
            value = obj[sel.name]
            if callable(value):
                value = value({k: _arg_value(v, bound) for k, v in sel.args.items()})
            out[sel.alias] = complete(value, sel)
        return out

    def complete(value, sel: Field):
        if value is None:
            return None
        if isinstance(value, list):
            return [complete(v, sel) for v in value]
        if isinstance(value, Obj):
            if sel.selections is None:
                raise GraphQLError(f'Field "{sel.name}" of type "{value.typename}" must have a selection of subfields.')
            return resolve(value, sel.selections)
        if sel.selections is not None and not isinstance(value, dict):
            raise GraphQLError(f'Field "{sel.name}" must not have a selection since it has no subfields.')
        return value

    return resolve(root, op.selections)


# ---------------------------------------------------------------------------------------------------------------
# Times, filters, ordering


def parse_time(value: Any) -> datetime:
    """ISO 8601 text (``Z``, an offset, or naive meaning UTC), epoch seconds, or a datetime -> aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    m = re.match(r"^(.*[T ]\d\d:\d\d:\d\d)\.(\d+)(.*)$", text)
    if m:  # fromisoformat wants 3 or 6 fraction digits before 3.11; be lenient about any count
        text = f"{m.group(1)}.{m.group(2)[:6].ljust(6, '0')}{m.group(3)}"
    dt = datetime.fromisoformat(text)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC)


def wandb_time(dt: datetime | None) -> str | None:
    """How the W&B server writes createdAt/heartbeatAt/updatedAt: UTC, seconds, no zone."""
    return None if dt is None else dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


_TIME_FIELDS = {
    "updatedAt": "updated_at",
    "updated_at": "updated_at",
    "createdAt": "created_at",
    "created_at": "created_at",
    "heartbeatAt": "heartbeat_at",
    "heartbeat_at": "heartbeat_at",
}


class FilterError(GraphQLError):
    pass


def _field_value(run: EmuRun, name: str) -> tuple[bool, Any]:
    """(present, value) of a filterable run field."""
    if name in _TIME_FIELDS:
        return True, getattr(run, _TIME_FIELDS[name])
    simple = {
        "state": run.state,
        "name": run.run_id,
        "displayName": run.display_name,
        "display_name": run.display_name,
        "group": run.group,
        "jobType": run.job_type,
        "job_type": run.job_type,
        "tags": run.tags,
        "sweep": run.sweep,
        "sweepName": run.sweep,
        "username": run.user,
        "host": run.host,
    }
    if name in simple:
        return True, simple[name]
    for prefix, source in (
        ("config.", run.config),
        ("summary_metrics.", run.summary()),
        ("summaryMetrics.", run.summary()),
    ):
        if name.startswith(prefix):
            path = name[len(prefix) :].split(".")
            if prefix == "config." and path[-1] == "value" and len(path) > 1:
                path = path[:-1]
            value: Any = source
            for part in path:
                if not isinstance(value, dict) or part not in value:
                    return False, None
                value = value[part]
            return True, value
    raise FilterError(f"invalid filters: unknown run field {name!r}")


def _compare(op: str, have: Any, want: Any, is_time: bool) -> bool:
    if is_time:
        if have is None:
            return False
        try:
            want = (
                [parse_time(w) for w in want]
                if isinstance(want, list)
                else parse_time(want)
                if want is not None
                else None
            )
        except (ValueError, TypeError) as exc:
            raise FilterError(f"invalid filters: not a timestamp: {want!r} ({exc})") from None
    if op in ("$eq", "$ne"):
        hit = (want in have) if isinstance(have, list) and not isinstance(want, list) else have == want
        return hit if op == "$eq" else not hit
    if op in ("$in", "$nin"):
        if not isinstance(want, list):
            raise FilterError(f"invalid filters: {op} needs a list")
        hit = any(w in have for w in want) if isinstance(have, list) else have in want
        return hit if op == "$in" else not hit
    if have is None or want is None:
        return False
    try:
        return {"$gt": have > want, "$gte": have >= want, "$lt": have < want, "$lte": have <= want}[op]
    except KeyError:
        raise FilterError(f"invalid filters: unsupported operator {op!r}") from None
    except TypeError:
        return False


def run_matches(run: EmuRun, flt: Any) -> bool:
    if flt is None or flt == {}:
        return True
    if not isinstance(flt, dict):
        raise FilterError(f"invalid filters: expected an object, got {flt!r}")
    for key, cond in flt.items():
        if key in ("$and", "$or", "$nor"):
            if not isinstance(cond, list):
                raise FilterError(f"invalid filters: {key} needs a list")
            results = [run_matches(run, c) for c in cond]
            ok = all(results) if key == "$and" else any(results) if key == "$or" else not any(results)
            if not ok:
                return False
            continue
        if key.startswith("$"):
            raise FilterError(f"invalid filters: unsupported operator {key!r}")
        present, have = _field_value(run, key)
        is_time = key in _TIME_FIELDS
        conds = cond if isinstance(cond, dict) and cond and all(k.startswith("$") for k in cond) else {"$eq": cond}
        for op, want in conds.items():
            if op == "$exists":
                if bool(want) != (present and have is not None):
                    return False
            elif op == "$regex":
                if not isinstance(have, str) or not re.search(str(want), have):
                    return False
            elif not present or not _compare(op, have, want, is_time):
                return False
    return True


def _order_key(run: EmuRun, field_name: str):
    if field_name in _TIME_FIELDS:
        value = getattr(run, _TIME_FIELDS[field_name])
        return (0, value.timestamp() if value else 0.0)
    names = {
        "name": run.run_id,
        "display_name": run.display_name,
        "displayName": run.display_name,
        "state": run.state,
        "group": run.group or "",
        "job_type": run.job_type or "",
    }
    if field_name in names:
        return (1, names[field_name] or "")
    present, value = _field_value(run, field_name)
    if not present or value is None:
        return (3, 0)
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (2, str(value))


# ---------------------------------------------------------------------------------------------------------------
# Data


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _json(value: Any) -> str:
    """JSON the way W&B's server writes it: NaN and Infinity as bare tokens, no ASCII escaping."""
    return json.dumps(value, ensure_ascii=False, allow_nan=True, separators=(",", ":"))


@dataclass
class Artifact:
    name: str
    type: str
    version: int
    aliases: list[str]
    digest: str
    created_at: datetime
    description: str | None = None
    metadata: dict = field(default_factory=dict)
    size: int = 0
    file_count: int = 0
    history_step: int | None = None


@dataclass
class EmuRun:
    entity: str
    project: str
    run_id: str
    internal_id: int
    display_name: str
    config: dict
    summary_updates: dict
    tags: list[str]
    group: str | None
    job_type: str | None
    sweep: str | None
    state: str
    created_at: datetime
    heartbeat_at: datetime
    updated_at: datetime
    history: list[dict]  # sorted by _step
    notes: str | None = None
    description: str | None = None
    commit: str | None = None
    host: str | None = None
    user: str = "emulator-user"
    system_metrics: dict = field(default_factory=dict)
    artifacts: list[Artifact] = field(default_factory=list)
    export_boundary: int = 0  # rows with _step < boundary are exported to Parquet
    export_generation: int = 0
    parquet_files: list[bytes] = field(default_factory=list)
    url_order: list[int] = field(default_factory=list)

    @property
    def storage_id(self) -> str:
        return _b64(f"Run:v1:{self.run_id}:{self.project}:{self.entity}")

    @property
    def steps(self) -> list[int]:
        return [row["_step"] for row in self.history]

    def summary(self) -> dict:
        """What the server shows: each history key's latest value, then the explicit summary updates."""
        out: dict[str, Any] = {}
        for row in self.history:
            out.update(row)
        out.update(self.summary_updates)
        return out

    def history_keys(self) -> dict:
        keys: dict[str, dict] = {}
        for row in self.history:
            for k, v in row.items():
                kind = (
                    "number"
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else "boolean"
                    if isinstance(v, bool)
                    else "string"
                    if isinstance(v, str)
                    else "nil"
                    if v is None
                    else str(v.get("_type", "map"))
                    if isinstance(v, dict)
                    else "list"
                )
                counts = keys.setdefault(k, {"typeCounts": {}})["typeCounts"]
                counts[kind] = counts.get(kind, 0) + 1
        return {
            "lastStep": self.history[-1]["_step"] if self.history else -1,
            "keys": {
                k: {"typeCounts": [{"type": t, "count": c} for t, c in v["typeCounts"].items()]}
                for k, v in keys.items()
            },
        }


class Request(NamedTuple):
    operation: str | None  # GraphQL operation name, "file" for a history file, or the path
    variables: dict
    status: int | None
    method: str
    path: str
    at: float = 0.0  # time.monotonic() when the answer was sent


@dataclass
class Fault:
    kind: str
    times: int = 1
    operation: str | None = None
    run_id: str | None = None
    after: int = 0
    options: dict = field(default_factory=dict)


def _column(values: list):
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if not present:
        return pa.array(values, pa.null())
    if all(isinstance(v, bool) for v in present):
        return pa.array(values, pa.bool_())
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        if all(-(2**63) <= v < 2**63 for v in present):
            return pa.array(values, pa.int64())
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if all(isinstance(v, str) for v in present):
        return pa.array(values, pa.string())
    if all(isinstance(v, (dict, list)) for v in present):
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
    return pa.array([None if v is None else _json(v) for v in values], pa.string())


def parquet_bytes(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = ["_step"] + sorted({k for r in rows for k in r} - {"_step"})
    table = pa.table(
        {
            k: (pa.array([r["_step"] for r in rows], pa.int64()) if k == "_step" else _column([r.get(k) for r in rows]))
            for k in keys
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _decode_value(item) -> Any:
    """A history/config/summary item's value: value_json, or (newer writers) the typed oneof."""
    if item.value_json:
        return json.loads(item.value_json)  # Python's json reads W&B's NaN/Infinity tokens
    which = item.WhichOneof("value") if "value" in {o.name for o in item.DESCRIPTOR.oneofs} else None
    if which is None or which == "none":
        return None
    if which == "json":
        return json.loads(item.json)
    return getattr(item, which)


def _item_path(item) -> tuple[str, ...]:
    return (item.key,) if item.key else tuple(item.nested_key)


def _put(obj: dict, item) -> None:
    """Set an item's value; a ``nested_key`` item (how wandb-core writes a logged dict such as a media object's
    fields) becomes a nested object, the way the server hands such a value back."""
    path = _item_path(item)
    for part in path[:-1]:
        nxt = obj.get(part)
        if not isinstance(nxt, dict):
            nxt = obj[part] = {}
        obj = nxt
    obj[path[-1]] = _decode_value(item)


def _drop(obj: dict, item) -> None:
    path = _item_path(item)
    for part in path[:-1]:
        obj = obj.get(part)
        if not isinstance(obj, dict):
            return
    obj.pop(path[-1], None)


def read_offline_run(path: str | Path) -> dict:
    """Decode a run-*.wandb file (or the run folder holding one) into what the server would hold.

    Independent of grpolens' own decoder on purpose (only the block framing reader is shared): the emulator is a
    cross-check of it."""
    from wandb.proto import wandb_internal_pb2 as pb

    from pipeline.sources import wandb_log

    path = Path(path)
    if path.is_dir():
        path = next(path.glob("run-*.wandb"))
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": [], "artifacts": [], "exit_code": None}
    with open(path, "rb") as fh:
        wandb_log.check_header(fh)
        for _, data in list(wandb_log.read_records(fh, 0, wandb_log.ReadResult())):
            record = pb.Record.FromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
                out.update(
                    run_id=run.run_id,
                    entity=run.entity,
                    project=run.project,
                    display_name=run.display_name or None,
                    tags=list(run.tags),
                    group=run.run_group or None,
                    job_type=run.job_type or None,
                    sweep=run.sweep_id or None,
                    notes=run.notes or None,
                    host=run.host or None,
                )
                if run.start_time.seconds:
                    out["start_time"] = datetime.fromtimestamp(run.start_time.ToSeconds(), UTC)
                for item in run.config.update:
                    _put(out["config"], item)
                for item in run.summary.update:
                    _put(out["summary"], item)
            elif kind == "config":
                for item in record.config.update:
                    _put(out["config"], item)
                for item in record.config.remove:
                    _drop(out["config"], item)
            elif kind == "summary":
                for item in record.summary.update:
                    _put(out["summary"], item)
                for item in record.summary.remove:
                    _drop(out["summary"], item)
            elif kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    _put(row, item)
                if "_step" not in row:
                    row["_step"] = record.history.step.num
                out["history"].append(row)
            elif kind == "exit":
                out["exit_code"] = record.exit.exit_code
            elif kind == "artifact":
                a = record.artifact
                out["artifacts"].append(
                    {
                        "name": a.name,
                        "type": a.type,
                        "aliases": list(a.aliases),
                        "digest": a.digest,
                        "description": a.description or None,
                    }
                )
    return out


# ---------------------------------------------------------------------------------------------------------------
# The emulator


class WandbEmulator:
    def __init__(
        self,
        api_key: str | None = None,
        viewer_entity: str = "emulator-user",
        history_includes_exported: bool = True,
        rows_per_parquet_file: int | None = None,
        shuffle_parquet_urls: bool = True,
        seed: int = 0,
    ):
        self.api_key = api_key or secrets.token_hex(20)
        self.viewer_entity = viewer_entity
        self.history_includes_exported = history_includes_exported
        self.rows_per_parquet_file = rows_per_parquet_file
        self.shuffle_parquet_urls = shuffle_parquet_urls
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._projects: dict[tuple[str, str], dict[str, EmuRun]] = {}
        self._project_ids: dict[tuple[str, str], int] = {}
        self._faults: list[Fault] = []
        self._last_time = datetime(2000, 1, 1, tzinfo=UTC)
        self._clock_offset = timedelta(0)
        self._sign_key = secrets.token_bytes(16)
        self._stop = threading.Event()
        self._seq = 0
        self.features: dict[str, bool] = {}
        self.requests: list[Request] = []
        self.telemetry = 0
        self.in_flight = 0  # GraphQL requests being answered right now, and the most at once: a client's concurrency
        self.max_in_flight = 0
        self.unknown: list[str] = []  # GraphQL errors the emulator raised (unknown fields, bad filters ...)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- clock

    def now(self) -> datetime:
        """Wall-clock UTC plus ``advance()``s, strictly increasing between calls (every change gets its own time)."""
        with self._lock:
            t = datetime.now(UTC) + self._clock_offset
            if t <= self._last_time:
                t = self._last_time + timedelta(microseconds=1)
            self._last_time = t
            return t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._clock_offset += timedelta(seconds=seconds)

    # -- data

    def _project(self, entity: str, project: str) -> dict[str, EmuRun]:
        key = (entity, project)
        if key not in self._projects:
            self._projects[key] = {}
            self._project_ids[key] = len(self._project_ids) + 1
        return self._projects[key]

    def add_run(
        self,
        entity: str,
        project: str,
        run_id: str,
        *,
        name: str | None = None,
        config: dict | None = None,
        summary: dict | None = None,
        tags: Iterable[str] = (),
        group: str | None = None,
        job_type: str | None = None,
        sweep: str | None = None,
        state: str = "finished",
        history: Iterable[dict] = (),
        artifacts: Iterable[dict] = (),
        exported_fraction: float = 0.0,
        created_at=None,
        updated_at=None,
        heartbeat_at=None,
        notes: str | None = None,
        host: str | None = None,
        system_metrics: dict | None = None,
    ) -> EmuRun:
        """Store a run as the server holds it. ``history`` rows need ``_step`` (or get 0, 1, ...); ``artifacts``
        are dicts with ``name``, ``type`` and optional ``aliases``, ``version``, ``digest``, ``description``."""
        with self._lock:
            runs = self._project(entity, project)
            now = self.now()
            created = parse_time(created_at) if created_at is not None else now
            updated = parse_time(updated_at) if updated_at is not None else max(created, now)
            heartbeat = parse_time(heartbeat_at) if heartbeat_at is not None else updated
            rows = []
            for i, row in enumerate(history):
                row = dict(row)
                row.setdefault("_step", i)
                rows.append(row)
            rows.sort(key=lambda r: r["_step"])
            self._seq += 1
            run = EmuRun(
                entity=entity,
                project=project,
                run_id=run_id,
                internal_id=self._seq,
                display_name=name or run_id,
                config=dict(config or {}),
                summary_updates=dict(summary or {}),
                tags=list(tags or []),
                group=group,
                job_type=job_type,
                sweep=sweep,
                state=state,
                created_at=created,
                heartbeat_at=heartbeat,
                updated_at=updated,
                history=rows,
                notes=notes,
                host=host,
                system_metrics=dict(system_metrics or {}),
            )
            for a in artifacts:
                self._add_artifact(run, a)
            runs[run_id] = run
            self.export(entity, project, run_id, fraction=exported_fraction, touch=False)
            return run

    def _add_artifact(self, run: EmuRun, a: dict) -> None:
        name = a["name"].split(":")[0]
        earlier = sum(1 for r in self._all_runs() for x in r.artifacts if x.name == name) + sum(
            1 for x in run.artifacts if x.name == name
        )
        version = a.get("version", earlier)
        aliases = list(a.get("aliases") or [])
        if "latest" not in aliases:
            aliases.append("latest")
        for r in list(self._all_runs()) + [run]:  # "latest" moves to the newest version
            for x in r.artifacts:
                if x.name == name and "latest" in x.aliases:
                    x.aliases.remove("latest")
        run.artifacts.append(
            Artifact(
                name=name,
                type=a.get("type", "dataset"),
                version=version,
                aliases=aliases,
                digest=a.get("digest") or hashlib.md5(f"{name}:{version}".encode()).hexdigest(),
                created_at=self.now(),
                description=a.get("description"),
                metadata=dict(a.get("metadata") or {}),
                size=int(a.get("size", 0)),
                history_step=a.get("history_step"),
            )
        )

    def add_artifact(self, entity: str, project: str, run_id: str, artifact: dict) -> None:
        with self._lock:
            run = self.get_run(entity, project, run_id)
            self._add_artifact(run, artifact)
            self._touch(run)

    def add_offline_run(
        self,
        path: str | Path,
        *,
        entity: str | None = None,
        project: str | None = None,
        run_id: str | None = None,
        exported_fraction: float = 0.5,
        state: str | None = None,
        **overrides: Any,
    ) -> EmuRun:
        """Load a run from its offline ``.wandb`` file (or run folder), as if it had been synced."""
        d = read_offline_run(path)
        if state is None:
            state = "running" if d["exit_code"] is None else "finished" if d["exit_code"] == 0 else "failed"
        kwargs = dict(
            name=d.get("display_name"),
            config=d["config"],
            summary=d["summary"],
            tags=d.get("tags", []),
            group=d.get("group"),
            job_type=d.get("job_type"),
            sweep=d.get("sweep"),
            state=state,
            history=d["history"],
            artifacts=d["artifacts"],
            exported_fraction=exported_fraction,
            created_at=d.get("start_time"),
            notes=d.get("notes"),
            host=d.get("host"),
        )
        kwargs.update(overrides)
        return self.add_run(
            entity or d.get("entity") or "testers",
            project or d.get("project") or "uncategorized",
            run_id or d["run_id"],
            **kwargs,
        )

    def _all_runs(self) -> Iterable[EmuRun]:
        for runs in self._projects.values():
            yield from runs.values()

    def get_run(self, entity: str, project: str, run_id: str) -> EmuRun:
        return self._projects[(entity, project)][run_id]

    def _touch(self, run: EmuRun, heartbeat: bool = True) -> None:
        run.updated_at = self.now()
        if heartbeat:
            run.heartbeat_at = run.updated_at

    def update_run(self, entity: str, project: str, run_id: str, **changes: Any) -> EmuRun:
        """Change a run's fields (``state``, ``tags``, ``config``, ``summary`` (merged), ``name`` ...); bumps
        updatedAt."""
        with self._lock:
            run = self.get_run(entity, project, run_id)
            for key, value in changes.items():
                if key == "summary":
                    run.summary_updates.update(value)
                elif key == "name":
                    run.display_name = value
                elif key in ("created_at", "updated_at", "heartbeat_at"):
                    setattr(run, key, parse_time(value))
                else:
                    setattr(run, key, value)
            if "updated_at" not in changes:
                self._touch(run, heartbeat=False)
            return run

    def append_history(self, entity: str, project: str, run_id: str, rows: Iterable[dict]) -> EmuRun:
        """New rows logged by a running run: live (not exported) data; bumps updatedAt and heartbeatAt."""
        with self._lock:
            run = self.get_run(entity, project, run_id)
            nxt = run.history[-1]["_step"] + 1 if run.history else 0
            for row in rows:
                row = dict(row)
                row.setdefault("_step", nxt)
                nxt = row["_step"] + 1
                run.history.append(row)
            run.history.sort(key=lambda r: r["_step"])
            self._touch(run)
            return run

    def rewind(self, entity: str, project: str, run_id: str, keep_steps_below: int) -> EmuRun:
        """The run's history got shorter (W&B "rewind"/resume from an earlier step): rows at and after the step
        are gone, the export too if it covered them; bumps updatedAt."""
        with self._lock:
            run = self.get_run(entity, project, run_id)
            run.history = [r for r in run.history if r["_step"] < keep_steps_below]
            if run.export_boundary > keep_steps_below:
                self._export(run, boundary=keep_steps_below)
            self._touch(run)
            return run

    def export(
        self,
        entity: str,
        project: str,
        run_id: str,
        *,
        fraction: float | None = None,
        upto_step: int | None = None,
        touch: bool = False,
    ) -> EmuRun:
        """(Re)write the run's Parquet export: the first ``fraction`` of its rows, or the rows below ``upto_step``
        (all rows when neither is given). The server does this in the background some time after logging."""
        with self._lock:
            run = self.get_run(entity, project, run_id)
            steps = run.steps
            if upto_step is not None:
                boundary = upto_step
            elif fraction is None or fraction >= 1:
                boundary = steps[-1] + 1 if steps else 0
            else:
                k = int(len(steps) * max(0.0, fraction))
                boundary = steps[k] if k < len(steps) else (steps[-1] + 1 if steps else 0)
            self._export(run, boundary)
            if touch:
                self._touch(run, heartbeat=False)
            return run

    def _export(self, run: EmuRun, boundary: int) -> None:
        run.export_boundary = boundary
        run.export_generation += 1
        exported = [r for r in run.history if r["_step"] < boundary]
        if not exported:
            run.parquet_files = []
        else:
            size = self.rows_per_parquet_file or max(1, math.ceil(len(exported) / 2))
            run.parquet_files = [parquet_bytes(exported[i : i + size]) for i in range(0, len(exported), size)]
        run.url_order = list(range(len(run.parquet_files)))
        if self.shuffle_parquet_urls and len(run.url_order) > 1:
            while run.url_order == sorted(run.url_order):
                self._rng.shuffle(run.url_order)

    def exported_rows(self, entity: str, project: str, run_id: str) -> list[dict]:
        run = self.get_run(entity, project, run_id)
        return [r for r in run.history if r["_step"] < run.export_boundary]

    # -- faults

    def fail(
        self,
        kind: str,
        times: int = 1,
        operation: str | None = None,
        run_id: str | None = None,
        after: int = 0,
        **options: Any,
    ) -> None:
        with self._lock:
            self._faults.append(Fault(str(kind), times, operation, run_id, after, options))

    def pending_faults(self) -> int:
        return sum(f.times for f in self._faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, operation: str | None, run_id: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.operation not in (None, operation):
                    continue
                if fault.run_id is not None and fault.run_id != run_id:
                    continue
                if fault.after > 0:
                    fault.after -= 1
                    return None
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # -- request log

    def history_requests(self) -> int:
        """Requests that read a run's details or history (what an unchanged run must not cost)."""
        return sum(self.count(op) for op in HISTORY_OPERATIONS)

    def count(self, operation: str) -> int:
        return sum(1 for r in self.requests if r.operation == operation)

    def operations(self) -> list[str | None]:
        return [r.operation for r in self.requests]

    # -- GraphQL schema

    def _file_url(self, run: EmuRun, index: int) -> str:
        path = (
            f"/files/{quote(run.entity, safe='')}/{quote(run.project, safe='')}/{quote(run.run_id, safe='')}"
            f"/history/{run.export_generation}/{index}.parquet"
        )
        expires = int(time.time()) + 3600
        sig = hmac.new(self._sign_key, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()
        return f"{self.base_url}{path}?X-Goog-Expires={expires}&X-Goog-Signature={sig}"

    def _check_signature(self, path: str, query: str) -> bool:
        q = parse_qs(query)
        try:
            expires = int(q["X-Goog-Expires"][0])
            sig = q["X-Goog-Signature"][0]
        except (KeyError, ValueError, IndexError):
            return False
        good = hmac.new(self._sign_key, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(sig, good) and expires >= time.time()

    def _root(self) -> Obj:
        return Obj(
            "Query",
            {
                "viewer": lambda args: self._viewer(),
                "serverInfo": lambda args: Obj(
                    "ServerInfo",
                    {
                        "features": [
                            Obj("ServerFeature", {"name": k, "isEnabled": v}) for k, v in self.features.items()
                        ],
                        "latestLocalVersionInfo": None,
                        "cliVersionInfo": "{}",
                        "availableBucketProviders": [],
                    },
                ),
                "project": lambda args: self._project_obj(
                    args.get("entityName") or self.viewer_entity, args.get("name")
                ),
                "entity": lambda args: Obj(
                    "Entity", {"name": args.get("name"), "id": _b64(f"Entity:{args.get('name')}")}
                ),
            },
        )

    def _viewer(self) -> Obj:
        teams = sorted({e for e, _ in self._projects} - {self.viewer_entity})
        return Obj(
            "User",
            {
                "id": _b64(f"User:{self.viewer_entity}"),
                "entity": self.viewer_entity,
                "username": self.viewer_entity,
                "email": f"{self.viewer_entity}@example.invalid",
                "name": self.viewer_entity,
                "admin": False,
                "flags": "{}",
                "userInfo": None,
                "defaultFramework": None,
                "teams": Obj(
                    "EntityConnection",
                    {"edges": [Obj("EntityEdge", {"node": Obj("Entity", {"name": t})}) for t in teams]},
                ),
            },
        )

    def _project_obj(self, entity: str, name: str | None) -> Obj | None:
        key = (entity, name)
        if key not in self._projects:
            return None
        pid = self._project_ids[key]
        runs = self._projects[key]
        return Obj(
            "Project",
            {
                "id": _b64(f"Project:v1:{name}:{entity}"),
                "internalId": str(pid),
                "name": name,
                "entityName": entity,
                "entity": Obj("Entity", {"name": entity, "id": _b64(f"Entity:{entity}")}),
                "readOnly": False,
                "createdAt": wandb_time(min((r.created_at for r in runs.values()), default=self.now())),
                "runCount": lambda args: sum(1 for r in runs.values() if run_matches(r, self._filters(args))),
                "runs": lambda args: self._runs_connection(key, args),
                "run": lambda args: self._run_obj(runs[args["name"]]) if args.get("name") in runs else None,
            },
        )

    @staticmethod
    def _filters(args: dict) -> Any:
        raw = args.get("filters")
        if raw is None or raw == "":
            return {}
        if isinstance(raw, str):
            try:
                return json.loads(raw)
            except ValueError:
                raise FilterError(f"invalid filters: not JSON: {raw[:80]!r}") from None
        return raw

    def _runs_connection(self, key: tuple[str, str], args: dict) -> Obj:
        flt = self._filters(args)
        order = args.get("order") or "+created_at"
        desc = order.startswith("-")
        field_name = order.lstrip("+-")
        matched = [r for r in self._projects[key].values() if run_matches(r, flt)]
        sort_key = {r.run_id: (_order_key(r, field_name), r.internal_id) for r in matched}
        matched.sort(key=lambda r: sort_key[r.run_id], reverse=desc)
        after = args.get("after")
        if after:
            try:
                pos = json.loads(base64.b64decode(after))
                ck = (tuple(pos[0]), pos[1])
            except (ValueError, TypeError, IndexError):
                raise GraphQLError(f"invalid cursor {after!r}") from None
            matched = [r for r in matched if (sort_key[r.run_id] < ck if desc else sort_key[r.run_id] > ck)]
        first = args.get("first")
        page = matched if first is None else matched[: max(0, int(first))]
        edges = [
            Obj(
                "RunEdge",
                {
                    "node": self._run_obj(r),
                    "cursor": base64.b64encode(
                        json.dumps([list(sort_key[r.run_id][0]), sort_key[r.run_id][1]], default=str).encode()
                    ).decode(),
                },
            )
            for r in page
        ]
        return Obj(
            "RunConnection",
            {
                "edges": edges,
                "totalCount": len(matched),
                "pageInfo": Obj(
                    "PageInfo",
                    {
                        "endCursor": edges[-1]["cursor"] if edges else after,
                        "hasNextPage": len(matched) > len(page),
                        "startCursor": edges[0]["cursor"] if edges else None,
                        "hasPreviousPage": bool(after),
                    },
                ),
            },
        )

    def _run_obj(self, run: EmuRun) -> Obj:
        config = {k: {"value": v, "desc": None} for k, v in run.config.items()}
        project = self._project_obj(run.entity, run.project)
        return Obj(
            "Run",
            {
                "id": run.storage_id,
                "name": run.run_id,
                "displayName": run.display_name,
                "state": run.state,
                "config": _json(config),
                "summaryMetrics": _json(run.summary()),
                "systemMetrics": _json(run.system_metrics),
                "tags": list(run.tags),
                "group": run.group,
                "jobType": run.job_type,
                "sweepName": run.sweep,
                "sweep": None
                if run.sweep is None
                else Obj(
                    "Sweep",
                    {
                        "name": run.sweep,
                        "id": _b64(f"Sweep:{run.sweep}"),
                        "displayName": run.sweep,
                        "state": "FINISHED",
                    },
                ),
                "commit": run.commit,
                "readOnly": False,
                "createdAt": wandb_time(run.created_at),
                "heartbeatAt": wandb_time(run.heartbeat_at),
                "updatedAt": wandb_time(run.updated_at),
                "description": run.description,
                "notes": run.notes,
                "host": run.host,
                "historyLineCount": len(run.history),
                "historyKeys": run.history_keys(),
                "user": Obj("User", {"name": run.user, "username": run.user, "id": _b64(f"User:{run.user}")}),
                "projectId": self._project_ids[(run.entity, run.project)],
                "project": project,
                "history": lambda args: self._history(run, args),
                "sampledHistory": lambda args: self._sampled_history(run, args),
                "parquetHistory": lambda args: self._parquet_history(run, args),
                "outputArtifacts": lambda args: self._artifacts(run, args),
                "inputArtifacts": lambda args: self._artifacts(run, args, used=True),
                "stopped": False,
                "runInfo": None,
                "wandbConfig": None,
            },
        )

    def _history(self, run: EmuRun, args: dict) -> list[str]:
        lo = args.get("minStep")
        hi = args.get("maxStep")
        samples = args.get("samples")
        rows = [
            r
            for r in run.history
            if (lo is None or r["_step"] >= lo)
            and (hi is None or r["_step"] < hi)
            and (self.history_includes_exported or r["_step"] >= run.export_boundary)
        ]
        if samples is not None and len(rows) > samples:
            rows = rows[: max(0, int(samples))]
        return [_json(r) for r in rows]

    def _sampled_history(self, run: EmuRun, args: dict) -> list[list[dict]]:
        out = []
        for spec in args.get("specs") or []:
            spec = json.loads(spec) if isinstance(spec, str) else spec
            keys = spec.get("keys") or []
            lo, hi = spec.get("minStep"), spec.get("maxStep")
            rows = [
                {k: r[k] for k in keys if k in r}
                for r in run.history
                if all(k in r for k in keys) and (lo is None or r["_step"] >= lo) and (hi is None or r["_step"] <= hi)
            ]  # the server treats maxStep as inclusive here
            samples = spec.get("samples")
            if samples and len(rows) > samples:
                idx = sorted({round(i * (len(rows) - 1) / max(1, samples - 1)) for i in range(samples)})
                rows = [rows[i] for i in idx]
            out.append(rows)
        return out

    def _parquet_history(self, run: EmuRun, args: dict) -> Obj:
        live_keys = args.get("liveKeys") or []
        live = [{k: r[k] for k in live_keys if k in r} for r in run.history if r["_step"] >= run.export_boundary]
        return Obj("ParquetHistory", {"parquetUrls": [self._file_url(run, i) for i in run.url_order], "liveData": live})

    def _artifacts(self, run: EmuRun, args: dict, used: bool = False) -> Obj:
        items = [] if used else list(run.artifacts)
        start = int(base64.b64decode(args["after"]).decode()) if args.get("after") else 0
        first = args.get("first")
        page = items[start:] if first is None else items[start : start + int(first)]
        project = Obj(
            "Project",
            {
                "id": _b64(f"Project:v1:{run.project}:{run.entity}"),
                "internalId": str(self._project_ids[(run.entity, run.project)]),
                "name": run.project,
                "entityName": run.entity,
                "entity": Obj("Entity", {"name": run.entity, "id": _b64(f"Entity:{run.entity}")}),
            },
        )
        edges = []
        for i, a in enumerate(page, start):
            seq = Obj(
                "ArtifactSequence", {"name": a.name, "project": project, "id": _b64(f"ArtifactSequence:{a.name}")}
            )
            node = Obj(
                "Artifact",
                {
                    "id": _b64(f"Artifact:{run.entity}/{run.project}/{a.name}:v{a.version}"),
                    "artifactSequence": seq,
                    "versionIndex": a.version,
                    "artifactType": Obj("ArtifactType", {"name": a.type}),
                    "description": a.description,
                    "metadata": _json(a.metadata),
                    "ttlDurationSeconds": -2,
                    "ttlIsInherited": True,
                    "tags": [],
                    "historyStep": a.history_step,
                    "state": "COMMITTED",
                    "size": a.size,
                    "digest": a.digest,
                    "digestAlgorithm": "MANIFEST_MD5",
                    "commitHash": a.digest[:12],
                    "fileCount": a.file_count,
                    "createdAt": wandb_time(a.created_at),
                    "updatedAt": None,
                    "aliases": [
                        Obj(
                            "ArtifactAlias",
                            {"id": _b64(f"ArtifactAlias:{a.name}:{al}"), "alias": al, "artifactCollection": seq},
                        )
                        for al in a.aliases
                    ],
                },
            )
            edges.append(Obj("ArtifactEdge", {"node": node, "cursor": _b64(str(i + 1))}))
        return Obj(
            "ArtifactConnection",
            {
                "totalCount": len(items),
                "edges": edges,
                "pageInfo": Obj(
                    "PageInfo",
                    {
                        "endCursor": edges[-1]["cursor"] if edges else args.get("after"),
                        "hasNextPage": start + len(page) < len(items),
                    },
                ),
            },
        )

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        """Answer a GraphQL request body as the server would: ``{"data": ...}`` or ``{"errors": [...]}``."""
        try:
            with self._lock:
                return {"data": execute(query, variables or {}, self._root())}
        except GraphQLError as exc:
            self.unknown.append(str(exc))
            return {"errors": [{"message": str(exc)}], "data": None}

    # -- client helpers

    @staticmethod
    def client_settings(retry_max: int = 2, wait_seconds: int = 1, timeout_seconds: int = 5) -> None:
        """Make wandb-core give up quickly. Process-wide: wandb.Api copies the global settings when it is created,
        so this applies to Api objects made afterwards. wandb-core reads these settings as *whole seconds*
        (``time.Second * time.Duration(v)``), so 0.5 means 0, which means "use the default" (backoff from ~2 s,
        ~20 retries): waits and timeouts below 1 s are impossible."""
        import wandb

        wait, timeout = max(1, int(wait_seconds)), max(1, int(timeout_seconds))
        wandb.setup(
            wandb.Settings(
                x_graphql_retry_max=retry_max,
                x_graphql_retry_wait_min_seconds=wait,
                x_graphql_retry_wait_max_seconds=wait,
                x_graphql_timeout_seconds=timeout,
                x_file_transfer_retry_max=retry_max,
                x_file_transfer_retry_wait_min_seconds=wait,
                x_file_transfer_retry_wait_max_seconds=wait,
                x_file_transfer_timeout_seconds=timeout,
            )
        )

    def api(self, entity: str | None = None, api_key: str | None = None, timeout: int | None = 30):
        import wandb

        return wandb.Api(
            api_key=api_key or self.api_key,
            timeout=timeout,
            overrides={"base_url": self.base_url, "entity": entity or self.viewer_entity},
        )

    # -- server

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the emulator first (use it as a context manager)"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> WandbEmulator:
        emulator = self

        class Handler(_Handler):
            pass

        Handler.emulator = emulator
        self._stop.clear()
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="wandb-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes "slow"/"timeout" handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WandbEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# The operations behind run details and history: Run, lastHistoryStep, and scan_history's three paths.
HISTORY_OPERATIONS = ("Run", "RunHistoryKeys", "RunParquetHistory", "HistoryPage", "file")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


_FILE_PATH = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/history/(\d+)/(\d+)\.parquet$")


class _Handler(BaseHTTPRequestHandler):
    emulator: WandbEmulator
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "wandb-emulator"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    _pending: tuple | None = None  # (operation, variables, method, path) of the request being answered

    def _log(self, status: int | None) -> None:
        """Log the request once, before its answer goes out (a client may act on the answer at once)."""
        if self._pending is not None:
            op, variables, method, path = self._pending
            self._pending = None
            self.emulator.requests.append(Request(op, variables, status, method, path, time.monotonic()))

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        head: bool = False,
    ) -> None:
        self._log(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps({"errors": [{"message": message}]}).encode(), headers)

    def _authorized(self) -> bool:
        key = self.emulator.api_key
        auth = self.headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            try:
                user_pass = base64.b64decode(auth[6:]).decode()
            except ValueError:
                return False
            return hmac.compare_digest(user_pass.partition(":")[2], key)
        if auth.startswith("Bearer "):
            return hmac.compare_digest(auth[7:], key)
        return False

    def _apply_fault(self, fault: Fault, record: list) -> bool:
        """Answer with the fault; True when the request is done (no normal answer follows)."""
        kind = fault.kind
        opts = fault.options
        if kind in ("slow", "timeout"):
            delay = float(opts.get("delay", 2.0 if kind == "slow" else 30.0))
            self.emulator._stop.wait(delay)
            return False
        if kind == "drop":
            record[0] = 0
            self._log(0)
            self.close_connection = True
            try:
                import socket

                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        if kind == "429":
            headers = {"Retry-After": str(opts.get("retry_after", 1))}
            if "reset" in opts:
                headers.update(
                    {"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": str(opts["reset"])}
                )
            record[0] = 429
            self._error(429, opts.get("message", "rate limit exceeded"), headers)
            return True
        if kind in ("500", "502", "503", "504", "401", "403", "404"):
            record[0] = int(kind)
            self._error(
                int(kind),
                opts.get(
                    "message",
                    {"401": "user is not logged in", "403": "permission denied", "404": "not found"}.get(
                        kind, "internal server error"
                    ),
                ),
            )
            return True
        if kind == "graphql_error":
            record[0] = 200
            self._send(
                200, json.dumps({"errors": [{"message": opts.get("message", "emulated error")}], "data": None}).encode()
            )
            return True
        if kind == "truncated":
            return False  # handled where the body is known
        raise ValueError(f"unknown fault kind {kind!r}")

    def do_HEAD(self) -> None:
        self._file(head=True)

    def do_GET(self) -> None:
        self._file(head=False)

    def _file(self, head: bool) -> None:
        em = self.emulator
        split = urlsplit(self.path)
        m = _FILE_PATH.match(split.path)
        status = [404]
        run_id = unquote(m.group(3)) if m else None
        self._pending = (
            "file",
            {"run": run_id, "path": split.path, "range": self.headers.get("Range")},
            "HEAD" if head else "GET",
            split.path,
        )
        try:
            if not m:
                return self._error(404, "not found")
            fault = em._take_fault("file", run_id) if not head else None
            if fault and self._apply_fault(fault, status):
                return
            if not em._check_signature(split.path, split.query):
                status[0] = 403
                return self._send(
                    403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>", content_type="application/xml"
                )
            entity, project = unquote(m.group(1)), unquote(m.group(2))
            gen, index = int(m.group(4)), int(m.group(5))
            with em._lock:
                try:
                    run = em.get_run(entity, project, run_id)
                except KeyError:
                    run = None
                data = (
                    run.parquet_files[index]
                    if run and run.export_generation == gen and index < len(run.parquet_files)
                    else None
                )
            if data is None:
                status[0] = 404
                return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", content_type="application/xml")
            if fault and fault.kind == "truncated":
                data = data[: len(data) // 2]
            headers = {"Accept-Ranges": "bytes", "ETag": f'"{hashlib.md5(data).hexdigest()}"'}
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                first, _, last = rng[6:].split(",")[0].strip().partition("-")
                size = len(data)
                if first == "":
                    start, end = max(0, size - int(last)), size - 1
                else:
                    start, end = int(first), min(int(last), size - 1) if last else size - 1
                if start >= size or start > end:
                    status[0] = 416
                    return self._send(
                        416,
                        b"",
                        {"Content-Range": f"bytes */{size}"},
                        content_type="application/octet-stream",
                        head=head,
                    )
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
                status[0] = 206
                return self._send(206, data[start : end + 1], headers, "application/octet-stream", head)
            status[0] = 200
            self._send(200, data, headers, "application/octet-stream", head)
        finally:
            self._log(status[0])

    def do_POST(self) -> None:
        em = self.emulator
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        if split.path.startswith("/sdk/otel/"):
            em.telemetry += 1
            return self._send(200, b"", content_type="application/x-protobuf")
        if split.path != "/graphql":
            self._pending = (split.path, {}, "POST", split.path)
            return self._error(404, "not found")
        try:
            body = json.loads(raw)
            query = body["query"]
            variables = body.get("variables") or {}
        except (ValueError, KeyError, TypeError):
            self._pending = (None, {}, "POST", split.path)
            return self._error(400, "invalid request body")
        op = operation_name(query) or body.get("operationName") or None
        status = [200]
        self._pending = (op, variables, "POST", split.path)
        with em._lock:
            em.in_flight += 1
            em.max_in_flight = max(em.max_in_flight, em.in_flight)
        try:
            if not self._authorized():
                status[0] = 401
                return self._error(401, "user is not logged in")
            run_id = variables.get("name") or variables.get("runName") or variables.get("run")
            fault = em._take_fault(op, run_id)
            if fault and self._apply_fault(fault, status):
                return
            answer = json.dumps(em.graphql(query, variables), allow_nan=True).encode()
            if fault and fault.kind == "truncated":
                answer = answer[: len(answer) // 2]
            self._send(200, answer)
        finally:
            with em._lock:
                em.in_flight -= 1
            self._log(status[0])
