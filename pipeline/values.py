"""Logged values travel as JSON text (W&B's ``value_json``) and become typed lake columns in bulk.

Almost every logged value is a number, so a batch is decoded with Arrow's vectorised string casts (which read the
``NaN``/``Infinity``/``-Infinity`` tokens W&B writes) and only the rare other values (strings, booleans, lists,
media objects, nested dicts from older files) go through Python's json. Integers keep their exact value in
``value_int`` as well as the DOUBLE in ``value``: 2**53+1 survives.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NUMBER_START = pa.array(list("-0123456789NI"))
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def json_text(value: Any) -> str:
    """Strict JSON (DuckDB's JSON type rejects bare NaN): non-finite floats become the strings W&B shows."""
    return json.dumps(finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


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
        return json.loads(text)
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


def flatten(key: str, value: Any) -> list[tuple[str, Any]]:
    """A nested dict that is not a media object is several values, keyed ``a.b.c`` as W&B shows them."""
    if type(value) is dict and "_type" not in value:
        out: list[tuple[str, Any]] = []
        for sub, subvalue in value.items():
            out += flatten(f"{key}.{sub}", subvalue)
        return out
    return [(key, value)]


def decode_batch(keys: pa.Array, text: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray | None]:
    """Decode parallel lists of keys and JSON texts into the typed history columns.

    Returns the columns and, when nested dicts expanded into several rows or rows were dropped, the index of the
    input row each output row came from (None when output rows are the input rows).
    """
    n = len(text)
    try:  # the common case: every value in the batch is a number
        value = pc.cast(text, pa.float64())
        numeric_np = np.ones(n, dtype=bool)
        as_number = text
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        numeric = pc.fill_null(pc.is_in(pc.utf8_slice_codeunits(text, 0, 1), value_set=_NUMBER_START), False)
        as_number = pc.if_else(numeric, text, "0")
        try:
            value = pc.cast(as_number, pa.float64())
            numeric_np = numeric.to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # number-like but not a number: all in Python
            value = pa.nulls(n, pa.float64())
            numeric_np = np.zeros(n, dtype=bool)
            as_number = pa.repeat(pa.scalar(""), n)
    digits = pc.ascii_is_decimal(pc.ascii_ltrim(as_number, "-"))
    short = pc.less_equal(pc.binary_length(as_number), 18)  # at most 18 characters always fits int64
    is_int = pc.and_(digits, short)
    value_int = pc.if_else(is_int, pc.cast(pc.if_else(is_int, as_number, "0"), pa.int64()), pa.scalar(None, pa.int64()))
    value_text = pa.nulls(n, pa.string())
    value_type = pa.repeat(pa.scalar("number"), n)
    long_ints = np.flatnonzero(pc.and_(digits, pc.invert(short)).to_numpy(zero_copy_only=False))
    slow = np.flatnonzero(~numeric_np)
    mask = np.zeros(n, dtype=bool)
    repl: dict[int, tuple] = {}  # replace_with_mask takes replacements in row order
    key_col = keys
    drop = np.zeros(n, dtype=bool)
    extra_src: list[int] = []
    extra_rows: list[tuple] = []
    for i in long_ints:
        parsed = _loads(text[int(i)].as_py())
        if type(parsed) is int:
            mask[i] = True
            repl[int(i)] = classify(parsed)
    for i in slow:
        key = keys[int(i)].as_py()
        parsed = _loads(text[int(i)].as_py())
        mask[i] = True
        parts = flatten(key, parsed) if type(parsed) is dict else [(key, parsed)]
        if len(parts) == 1 and parts[0][0] == key:
            repl[int(i)] = classify(parsed)
            continue
        repl[int(i)] = (None, None, None, "dict")
        drop[i] = True
        for sub_key, sub_value in parts:
            extra_src.append(int(i))
            extra_rows.append((sub_key, *classify(sub_value)))
    if repl:
        m = pa.array(mask)
        cols = list(zip(*(repl[i] for i in sorted(repl))))
        value = pc.replace_with_mask(value, m, pa.array(cols[0], pa.float64()))
        value_int = pc.replace_with_mask(value_int, m, pa.array(cols[1], pa.int64()))
        value_text = pc.replace_with_mask(value_text, m, pa.array(cols[2], pa.string()))
        value_type = pc.replace_with_mask(value_type, m, pa.array(cols[3], pa.string()))
    columns = {"key": key_col, "value": value, "value_int": value_int, "value_text": value_text, "value_type": value_type}
    if not extra_rows and not drop.any():
        return columns, None
    keep = np.flatnonzero(~drop)
    extra = list(zip(*extra_rows)) if extra_rows else [[], [], [], [], []]
    types = {"key": pa.string(), "value": pa.float64(), "value_int": pa.int64(), "value_text": pa.string(), "value_type": pa.string()}
    for pos, name in enumerate(columns):
        columns[name] = pa.concat_arrays([columns[name].take(pa.array(keep)), pa.array(extra[pos], types[name])])
    return columns, np.concatenate([keep, np.array(extra_src, dtype=np.int64)])
