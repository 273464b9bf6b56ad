"""Logged values travel as JSON text (W&B's ``value_json``) and become typed lake columns in bulk.

Almost every logged value is a number, typed in C as the batch is gathered (pipeline/_items.c: strict JSON numbers
and the ``NaN``/``Infinity``/``-Infinity`` tokens W&B writes); only the rare other values (strings, booleans,
lists, media objects, nested dicts from older files) go through Python's json, here. Integers keep their exact value in
``value_int`` as well as the DOUBLE in ``value``: 2**53+1 survives.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline._items import KIND_FLOAT, KIND_INT
from pipeline.secrets import REDACTED_TYPE, redact, redact_text

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Times the lake stores, in microseconds since the epoch: years 1 to 9999 (RFC 3339's range; DuckDB's is wider).
TIME_US_MIN, TIME_US_MAX = -62_135_596_800_000_000, 253_402_300_799_999_999
MAX_DEPTH = 64  # nesting a logged value may have; deeper is a hostile or broken producer, not a metric
# JSON can spell a lone UTF-16 surrogate (\ud800), and json.loads lets one through from raw bytes too
# (surrogatepass); UTF-8, Arrow and DuckDB cannot hold one.
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")


def is_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def time_us(seconds: float | None) -> int | None:
    """Epoch seconds as the lake's microseconds; None when not finite or outside years 1-9999."""
    if seconds is None or not math.isfinite(seconds):
        return None
    us = int(round(seconds * 1_000_000))
    return us if TIME_US_MIN <= us <= TIME_US_MAX else None


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether JSON decoded from ``raw`` can contain a lone surrogate (cheap; most lines never do): only an escape
    or the byte 0xED can make one, and looking for those two first is 20x faster than the pattern on a metrics line."""
    return (b"\\" in raw or b"\xed" in raw) and _SURROGATE.search(raw) is not None


def without_surrogates(value: Any) -> Any:
    """Lone surrogates in strings and keys become their escape text (``\\ud800``), as the C reader stores them:
    kept, and storable."""
    kind = type(value)
    if kind is str:
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if kind is dict:
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if kind is list:
        return [without_surrogates(v) for v in value]
    return value


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and dicts nest in ``value`` (without recursion), counting at most to ``limit + 1``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if type(item) is dict:
            item = list(item.values())
        elif type(item) is not list:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        stack.extend((child, level) for child in item)
    return deepest


def too_deep(raw: bytes | str, value: Any) -> bool:
    """A decoded value nested beyond MAX_DEPTH; only values whose text has that many brackets are walked."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    return raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(value) > MAX_DEPTH


def loads_checked(raw: bytes | str) -> Any:
    """``json.loads`` for input nobody vouches for: a ValueError (with a reason) for text that is not JSON, is
    nested beyond MAX_DEPTH or beyond what the decoder can take; lone surrogates escaped."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    if too_deep(raw, value):
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    if may_hold_surrogates(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")):
        value = without_surrogates(value)
    return value


def json_text(value: Any) -> str:
    """Strict JSON (DuckDB's JSON type rejects bare NaN): non-finite floats become the strings W&B shows."""
    return json.dumps(finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def logged_json(value: Any) -> str:
    """A decoded logged value as the JSON text ``json.dumps`` writes (NaN/Infinity tokens, as W&B writes them),
    numbers without its cost: how sources that decode their input hand values to the history buffer."""
    kind = type(value)
    if kind is float:
        if math.isfinite(value):
            return float.__repr__(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if kind is int:
        return int.__repr__(value)
    return json.dumps(value, default=repr)


def finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class _Undecodable(str):
    """A value_json that is not JSON: kept as text, typed ``invalid_json``."""


def _loads(text: str) -> Any:
    try:
        return loads_checked(text)
    except (ValueError, TypeError):
        return _Undecodable(text)


def classify(value: Any) -> tuple[float | None, int | None, str | None, str]:
    """One decoded JSON value → (value, value_int, value_text, value_type). Dicts here are media objects."""
    kind = type(value)
    if kind is _Undecodable:
        return None, None, str(value), "invalid_json"
    if kind is float:
        return value, None, None, "number"
    if kind is int:
        exact = INT64_MIN <= value <= INT64_MAX
        as_float = float(value) if abs(value) < 1e308 else math.copysign(math.inf, value)
        return as_float, (value if exact else None), (None if exact else str(value)), "number"
    if kind is bool:
        return (1.0 if value else 0.0), int(value), None, "bool"
    if kind is str:
        return None, None, value, "string"
    if value is None:
        return None, None, None, "null"
    if kind is dict:
        return None, None, json_text(value), str(value.get("_type", "dict"))
    return None, None, json_text(value), "list"


def classify_redacted(value: Any) -> tuple[float | None, int | None, str | None, str]:
    """``classify`` after the value rule of pipeline.secrets: a string that held a credential keeps what else it
    said, typed ``redacted``; lists and media objects are cleaned inside. (Numbers are never secrets; a value
    logged under a credential name is replaced by ``secrets.redact_history``, whatever it is.)"""
    kind = type(value)
    if kind is str or kind is _Undecodable:
        clean = redact_text(value)
        if clean is not value:
            return None, None, clean, REDACTED_TYPE
    elif kind is dict or kind is list:
        value = redact(value)
    return classify(value)


def flatten(key: str, value: Any) -> list[tuple[str, Any]]:
    """A nested dict that is not a media object is several values, keyed ``a.b.c`` as W&B shows them."""
    if type(value) is dict and "_type" not in value:
        out: list[tuple[str, Any]] = []
        for sub, subvalue in value.items():
            out += flatten(f"{key}.{sub}", subvalue)
        return out
    return [(key, value)]


def decode_columns(taken: tuple) -> tuple[dict[str, pa.Array], np.ndarray | None]:
    """``HistoryColumns.take()`` (pipeline/_items.c) → the typed history columns.

    The C side has typed every integer and NaN/±inf token and gathered the other numbers' text for Arrow's cast
    (correctly rounded, like json.loads); the values it handed back by row index (strings, booleans, lists, media
    objects, nested dicts from older files, integers too long for its exact path) are classified here. Returns the
    columns and, when nested dicts expanded into several rows, the index of the input row each output row came from
    (None when output rows are the input rows).
    """
    (
        n,
        key_offsets,
        key_data,
        value_bytes,
        int_bytes,
        kind_bytes,
        float_offsets,
        float_data,
        other_bytes,
        other_texts,
    ) = taken
    keys = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)])
    kind = np.frombuffer(kind_bytes, dtype=np.uint8)
    value_np = np.frombuffer(value_bytes, dtype=np.float64)
    floats = kind == KIND_FLOAT
    n_floats = len(float_offsets) // 4 - 1
    if n_floats:
        float_texts = pa.Array.from_buffers(
            pa.string(), n_floats, [None, pa.py_buffer(float_offsets), pa.py_buffer(float_data)]
        )
        value_np = value_np.copy()
        value_np[floats] = pc.cast(float_texts, pa.float64()).to_numpy()
    value = pa.array(value_np)
    value_int = pa.array(np.frombuffer(int_bytes, dtype=np.int64), mask=kind != KIND_INT)
    value_text = pa.nulls(n, pa.string())
    value_type = pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array(["number"]))
    others = np.frombuffer(other_bytes, dtype=np.int64)
    columns = {"key": keys, "value": value, "value_int": value_int, "value_text": value_text, "value_type": value_type}
    if not len(others):
        return columns, None
    replaced: list[tuple] = []
    drop = np.zeros(n, dtype=bool)
    extra_src: list[int] = []
    extra_rows: list[tuple] = []
    for i, text in zip(others.tolist(), other_texts, strict=True):
        parsed = _loads(text)
        key = keys[i].as_py()
        if type(parsed) is dict:
            parsed = redact(parsed)  # before it is spread: a credential's key hides all under it
        parts = flatten(key, parsed) if type(parsed) is dict else [(key, parsed)]
        if len(parts) == 1 and parts[0][0] == key:
            replaced.append(classify_redacted(parsed))
            continue
        replaced.append((None, None, None, "dict"))
        drop[i] = True
        for sub_key, sub_value in parts:
            extra_src.append(i)
            extra_rows.append((sub_key, *classify_redacted(sub_value)))
    mask = np.zeros(n, dtype=bool)
    mask[others] = True
    mask = pa.array(mask)
    cols = list(zip(*replaced, strict=True))
    columns["value_type"] = pa.repeat(pa.scalar("number"), n)  # plain while rows are replaced and added
    for name, pos, typ in (
        ("value", 0, pa.float64()),
        ("value_int", 1, pa.int64()),
        ("value_text", 2, pa.string()),
        ("value_type", 3, pa.string()),
    ):
        columns[name] = pc.replace_with_mask(columns[name], mask, pa.array(cols[pos], typ))
    source_rows = None
    if extra_rows or drop.any():
        keep = np.flatnonzero(~drop)
        extra: list[Any] = list(zip(*extra_rows, strict=True)) if extra_rows else [[], [], [], [], []]
        for pos, name in enumerate(columns):
            columns[name] = pa.concat_arrays(
                [columns[name].take(pa.array(keep)), pa.array(extra[pos], columns[name].type)]
            )
        source_rows = np.concatenate([keep, np.array(extra_src, dtype=np.int64)])
    columns["value_type"] = pc.dictionary_encode(columns["value_type"])
    return columns, source_rows
