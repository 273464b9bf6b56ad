"""Decoding W&B transaction-log records (``wandb_internal_pb2.Record``) into run metadata and history values.

Values arrive as JSON text. W&B writes NaN and ±inf as the bare tokens ``NaN``/``Infinity``/``-Infinity`` (which
Python's json reads), integers as exact decimal text (so 2**53+1 survives in ``value_int``), and nested dicts either
as one JSON object under ``key`` (older files) or as one item per leaf under ``nested_key`` (newer files). Nested keys
are joined with ``.`` as W&B shows them; a dict carrying ``_type`` (image-file, table-file, histogram, …) is one
media value, kept whole as JSON text with its type rather than spread over its fields.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any

from wandb.proto import wandb_internal_pb2 as _pb

from pipeline._items import SummaryFold
from pipeline.secrets import redact, redact_name
from pipeline.values import finite, is_int64, json_text, loads_checked, time_us

pb: Any = _pb  # its message classes are built at import time by protobuf, so mypy sees none of them

_TYPED = ("none", "boolean", "integer", "number", "text", "json")


def _wire_tag(field) -> bytes:
    return bytes([(field.number << 3) | 2])  # length-delimited; both field numbers are below 16


_NUM_TAG = bytes([(pb.Record.DESCRIPTOR.fields_by_name["num"].number << 3) | 0])
_FAST_KINDS = {_wire_tag(pb.Record.DESCRIPTOR.fields_by_name[name]): name for name in ("history", "summary")}


def peek_kind(data: bytes) -> str | None:
    """'history' or 'summary' when the record's first field after ``num`` says so (wandb writes fields in number
    order); None means: parse the record with wandb's class to find out. The two kinds that make up most of a
    file go to the C reader (pipeline/_items.c) without a protobuf parse."""
    i = 0
    if data[:1] == _NUM_TAG:
        i = 1
        while i < len(data) and data[i] & 0x80:
            i += 1
        i += 1
    return _FAST_KINDS.get(data[i : i + 1])


@dataclass
class HistoryRow:
    step: int | None
    ts_us: int | None
    keys: list[str]
    texts: list[str]  # JSON text per value, decoded in bulk by pipeline.values


timestamp_us = time_us  # a history row's _timestamp (epoch seconds) as the lake's microseconds


def decode_history(data: bytes) -> HistoryRow:
    """One history record's bytes → the row's keys and JSON values, ``_step`` pulled out, with wandb's classes.

    For the records ``HistoryColumns.history`` (pipeline/_items.c) declines: nested dicts and media, typed values,
    anything odd; a damaged record raises protobuf's DecodeError here.
    """
    record = pb.Record.FromString(data)
    keys, texts = _history_items(record.history.item)
    row = HistoryRow(None, None, keys, texts)
    if "_step" in keys:
        at = keys.index("_step")
        keys.pop(at)
        step_text = texts.pop(at)
        try:
            step = int(float(step_text))
        except (ValueError, OverflowError):  # text, NaN, ±inf
            step = None
        row.step = step if step is not None and is_int64(step) else None
    elif record.history.HasField("step"):
        row.step = record.history.step.num
    if "_timestamp" in keys:
        with contextlib.suppress(ValueError):
            row.ts_us = timestamp_us(float(texts[keys.index("_timestamp")]))
    return row


def _history_items(items) -> tuple[list[str], list[str]]:
    """Items one by one: nested keys (dicts, media objects), the older ``key`` form, typed values."""
    paths: list[tuple[str, ...]] = []
    texts: list[str] = []
    for item in items:
        paths.append(tuple(item.nested_key) if item.nested_key else (item.key,))
        texts.append(item.value_json if item.value_json else _typed_json(item))
    media = {p[:-1] for p in paths if len(p) > 1 and p[-1] == "_type"}
    keys: list[str] = []
    out: list[str] = []
    grouped: dict[tuple[str, ...], dict] = {}
    for path, text in zip(paths, texts, strict=True):
        prefix = next((path[:cut] for cut in range(1, len(path)) if path[:cut] in media), None)
        if prefix is not None:
            _set_path(grouped.setdefault(prefix, {}), path[len(prefix) :], _loads(text))
            continue
        keys.append(".".join(path))
        out.append(text)
    for prefix, obj in grouped.items():
        keys.append(".".join(prefix))
        out.append(json_text(obj))
    return keys, out


def _typed_json(item) -> str:
    """Newer writers may fill a typed field instead of value_json."""
    which = next((name for name in _TYPED if item.HasField(name)), None) if hasattr(item, "HasField") else None
    if which is None or which == "none":
        return "null"
    if which == "json":
        return item.json
    return json_text(getattr(item, which))


def _set_path(obj: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        nxt = obj.get(part)
        if not isinstance(nxt, dict):
            nxt = obj[part] = {}
        obj = nxt
    obj[path[-1]] = value


def _clean(path: tuple[str, ...], text: str) -> Any:
    """A config or summary value as stored: decoded, secrets redacted (by a key on its path, keys inside it, or
    what its strings look like)."""
    name = ".".join(path)  # the name W&B shows, as a history key would have it: hub.hf_token
    return finite(redact({name: _loads(text)})[name])


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
    # file -> [history rows, last step] it added, so that a file read again from its start replaces its own count
    file_history: dict = field(default_factory=dict)

    @classmethod
    def from_state(cls, data: dict) -> RunMeta:
        return cls(**data)

    def to_state(self) -> dict:
        return asdict(self)

    def apply_run(self, run) -> None:
        self.run_id = run.run_id or self.run_id
        self.entity = run.entity or self.entity
        self.project = run.project or self.project
        self.name = redact_name(run.display_name) or self.name or run.run_id
        if run.tags:
            self.tags = [redact_name(tag) for tag in run.tags]
        self.group_name = redact_name(run.run_group) or self.group_name
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
            _set_path(self.config, path, _clean(path, item.value_json))
        for item in config.remove:
            _pop_path(self.config, _update_path(item))

    def apply_summary(self, summary: SummaryUpdates) -> None:
        for entry, text in summary.take().items():
            path = (entry,) if type(entry) is str else entry
            if path[0] == "_wandb":
                continue
            if text is None:
                _pop_path(self.summary, path)
            else:
                _set_path(self.summary, path, _clean(path, text))

    def apply_exit(self, exit_record) -> None:
        self.exit_code = exit_record.exit_code
        self.state = "finished" if exit_record.exit_code == 0 else "failed"

    def touch(self, when: float | None) -> None:
        if when is not None and (self.heartbeat_at is None or when > self.heartbeat_at):
            self.heartbeat_at = when


def _loads(text: str) -> Any:
    try:
        return loads_checked(text)
    except ValueError:
        return text


def _pop_path(obj: dict, path: tuple) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


class SummaryUpdates:
    """The newest raw value_json per summary key over a file's summary records, decoded once at the end.

    wandb writes summary records every step (restating the row's items in no fixed order), so they are folded in C
    (pipeline/_items.c) with no Python object per value; a record it declines (a removal, a nested path it cannot
    hold, damage) goes through wandb's classes, after what the fold holds, so the order of updates is kept. A key is
    a str, a nested path a tuple; None marks a removal.
    """

    def __init__(self) -> None:
        self._fold = SummaryFold()
        self._pending: dict = {}

    def add(self, data: bytes) -> None:
        if self._fold.add(data):
            return
        summary = pb.Record.FromString(data).summary  # raises on damage, before anything changes
        self._pending.update(self._fold.drain())
        for item in summary.update:
            path = _update_path(item)
            self._pending[path if len(path) > 1 else path[0]] = item.value_json
        for item in summary.remove:
            path = _update_path(item)
            self._pending[path if len(path) > 1 else path[0]] = None

    def take(self) -> dict:
        self._pending.update(self._fold.drain())
        pending, self._pending = self._pending, {}
        return pending
