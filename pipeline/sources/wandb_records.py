"""Decoding W&B transaction-log records (``wandb_internal_pb2.Record``) into run metadata and history values.

Values arrive as JSON text. W&B writes NaN and ±inf as the bare tokens ``NaN``/``Infinity``/``-Infinity`` (which
Python's json reads), integers as exact decimal text (so 2**53+1 survives in ``value_int``), and nested dicts either
as one JSON object under ``key`` (older files) or as one item per leaf under ``nested_key`` (newer files). Nested keys
are joined with ``.`` as W&B shows them; a dict carrying ``_type`` (image-file, table-file, histogram, …) is one
media value, kept whole as JSON text with its type rather than spread over its fields.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SECRET_KEY = re.compile(r"(?i)(api[_-]?key|token|secret|passw(or)?d|credential|auth)")
REDACTED = "***redacted***"


@dataclass
class HistoryRow:
    step: int | None
    ts_us: int | None
    keys: list[str]
    values: list[float | None]
    ints: list[int | None]
    texts: list[str | None]
    types: list[str]


def _decode_values(jsons: list[str]) -> list[Any]:
    try:
        return json.loads("[" + ",".join(jsons) + "]")
    except ValueError:
        out = []
        for text in jsons:
            try:
                out.append(json.loads(text))
            except ValueError:
                out.append(_Undecodable(text))
        return out


class _Undecodable(str):
    """A value_json W&B wrote that is not JSON: kept as text, typed ``invalid_json``."""


def _media_prefixes(paths: list) -> set[tuple[str, ...]]:
    return {p[:-1] for p in paths if type(p) is tuple and p[-1] == "_type"}


def decode_history(history, redact: bool = False) -> HistoryRow:
    """One history record → the values of one logged row (``_step`` and ``_timestamp`` pulled out)."""
    paths: list = []
    jsons: list[str] = []
    for item in history.item:
        nested = item.nested_key
        if nested:
            paths.append(nested[0] if len(nested) == 1 else tuple(nested))
        else:
            paths.append(item.key)
        jsons.append(item.value_json)
    values = _decode_values(jsons)
    row = HistoryRow(None, None, [], [], [], [], [])
    media = _media_prefixes(paths) if any(type(p) is tuple for p in paths) else None
    grouped: dict[tuple[str, ...], dict] = {}
    for path, value in zip(paths, values):
        if type(path) is tuple:
            prefix = _media_prefix_of(path, media)
            if prefix is not None:
                _set_path(grouped.setdefault(prefix, {}), path[len(prefix):], value)
                continue
            key = ".".join(path)
        else:
            key = path
        if key == "_step":
            row.step = int(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            continue
        if key == "_timestamp" and isinstance(value, (int, float)) and math.isfinite(value):
            row.ts_us = int(round(value * 1_000_000))
        _append(row, key, value)
    for prefix, obj in grouped.items():
        _append(row, ".".join(prefix), obj)
    if row.step is None and history.HasField("step"):
        row.step = history.step.num
    return row


def _media_prefix_of(path: tuple, media: set | None) -> tuple | None:
    if not media:
        return None
    for cut in range(1, len(path)):
        if path[:cut] in media:
            return path[:cut]
    return None


def _set_path(obj: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        nxt = obj.get(part)
        if not isinstance(nxt, dict):
            nxt = obj[part] = {}
        obj = nxt
    obj[path[-1]] = value


def _append(row: HistoryRow, key: str, value: Any) -> None:
    kind = type(value)
    if kind is float:
        row.keys.append(key)
        row.values.append(value)
        row.ints.append(None)
        row.texts.append(None)
        row.types.append("number")
    elif kind is int:
        row.keys.append(key)
        row.values.append(float(value) if abs(value) < 1e308 else math.copysign(math.inf, value))
        exact = INT64_MIN <= value <= INT64_MAX
        row.ints.append(value if exact else None)
        row.texts.append(None if exact else str(value))
        row.types.append("number")
    elif kind is dict:
        if "_type" in value:
            _append_text(row, key, json_text(value), str(value["_type"]))
        else:
            for sub, subvalue in value.items():  # an old-format nested dict: flatten like nested_key
                _append(row, f"{key}.{sub}", subvalue)
    elif kind is bool:
        row.keys.append(key)
        row.values.append(1.0 if value else 0.0)
        row.ints.append(int(value))
        row.texts.append(None)
        row.types.append("bool")
    elif kind is str:
        _append_text(row, key, value, "string")
    elif kind is _Undecodable:
        _append_text(row, key, str(value), "invalid_json")
    elif value is None:
        _append_text(row, key, None, "null")
    else:
        _append_text(row, key, json_text(value), "list")


def _append_text(row: HistoryRow, key: str, text: str | None, kind: str) -> None:
    row.keys.append(key)
    row.values.append(None)
    row.ints.append(None)
    row.texts.append(text)
    row.types.append(kind)


def json_text(value: Any) -> str:
    """Strict JSON (DuckDB's JSON type rejects bare NaN): non-finite floats become the strings W&B shows."""
    return json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def redact_secrets(value: Any) -> Any:
    """Config and summary may carry API keys; none of them may reach the lake."""
    if isinstance(value, dict):
        return {k: (REDACTED if _SECRET_KEY.search(str(k)) and not isinstance(v, (dict, list)) else redact_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    return value


def _update_path(item) -> tuple[str, ...]:
    return tuple(item.nested_key) if item.nested_key else (item.key,)


@dataclass
class RunMeta:
    """Everything about a run except its history, merged across the records (and files) that describe it."""

    entity: str = ""
    project: str = ""
    run_id: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    group_name: str = ""
    job_type: str = ""
    sweep_id: str = ""
    created_at: float | None = None
    heartbeat_at: float | None = None
    state: str = "running"
    exit_code: int | None = None
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    last_step: int | None = None
    history_rows: int = 0
    wandb_version: str = ""
    source_files: list[str] = field(default_factory=list)
    step_offsets: dict = field(default_factory=dict)  # file -> shift applied to a resumed segment's _step

    @classmethod
    def from_state(cls, data: dict) -> "RunMeta":
        return cls(**data)

    def to_state(self) -> dict:
        return asdict(self)

    def apply_run(self, run) -> None:
        self.run_id = run.run_id or self.run_id
        self.entity = run.entity or self.entity
        self.project = run.project or self.project
        self.name = run.display_name or self.name or run.run_id
        if run.tags:
            self.tags = list(run.tags)
        self.group_name = run.run_group or self.group_name
        self.job_type = run.job_type or self.job_type
        self.sweep_id = run.sweep_id or self.sweep_id
        if run.HasField("start_time"):
            started = run.start_time.seconds + run.start_time.nanos / 1e9
            self.created_at = started if self.created_at is None else min(self.created_at, started)
            self.touch(started)
        if run.config.update or run.config.remove:
            self.apply_config(run.config)
        if run.telemetry.cli_version:
            self.wandb_version = run.telemetry.cli_version
        self.state, self.exit_code = "running", None  # until this segment's exit record; a resumed run runs again

    def apply_config(self, config) -> None:
        for item in config.update:
            path = _update_path(item)
            if path[0] == "_wandb":
                continue
            _set_path(self.config, path, _finite(redact_secrets(_loads(item.value_json))))
        for item in config.remove:
            _pop_path(self.config, _update_path(item))

    def apply_summary(self, summary, pending: dict) -> None:
        """Summary records repeat every key each step: keep the newest raw text, decode once in ``finish``."""
        for item in summary.update:
            path = _update_path(item)
            if path[0] != "_wandb":
                pending[path] = item.value_json
        for item in summary.remove:
            path = _update_path(item)
            pending.pop(path, None)
            _pop_path(self.summary, path)

    def finish_summary(self, pending: dict) -> None:
        for path, text in pending.items():
            _set_path(self.summary, path, _finite(redact_secrets(_loads(text))))
        pending.clear()

    def apply_exit(self, exit_record) -> None:
        self.exit_code = exit_record.exit_code
        self.state = "finished" if exit_record.exit_code == 0 else "failed"

    def touch(self, when: float | None) -> None:
        if when is not None and (self.heartbeat_at is None or when > self.heartbeat_at):
            self.heartbeat_at = when


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pop_path(obj: dict, path: tuple) -> None:
    for part in path[:-1]:
        obj = obj.get(part)
        if not isinstance(obj, dict):
            return
    obj.pop(path[-1], None)
