"""Bulk decoding of W&B's JSON value text into typed lake columns."""

import math

import pyarrow as pa

from pipeline._items import HistoryColumns
from pipeline.values import decode_columns


def decode_batch(keys: list[str], texts: list[str]):
    columns = HistoryColumns()
    columns.add(keys, texts)
    return decode_columns(columns.take())


def test_mixed_batch_keeps_row_order_and_types():
    keys = ["s", "old", "min64", "n", "bad", "t"]
    texts = ['"s\\u00e9"', '{"x": 1, "y": {"z": 2.5}}', "-9223372036854775808", "NaN", "Nope", "true"]
    cols, source_rows = decode_batch(keys, texts)
    rows = list(zip(source_rows.tolist(), *(cols[c].to_pylist() for c in ("key", "value", "value_int", "value_text", "value_type"))))
    by_key = {r[1]: r for r in rows}
    assert by_key["s"][2:] == (None, None, "sé", "string")
    assert by_key["min64"][3] == -(2**63)
    assert math.isnan(by_key["n"][2])
    assert by_key["bad"][4:] == ("Nope", "invalid_json")
    assert by_key["t"][2:] == (1.0, 1, None, "bool")
    # An old-format nested dict (key + JSON object) becomes one row per leaf, keyed as W&B shows it.
    assert by_key["old.x"][0] == by_key["old.y.z"][0] == 1 and by_key["old.y.z"][2] == 2.5
    assert "old" not in by_key


def test_all_numeric_batch_needs_no_row_mapping():
    cols, source_rows = decode_batch(["a", "b", "c"], ["1", "-Infinity", "1.795319913661443e+09"])
    assert source_rows is None
    assert cols["value"].to_pylist() == [1.0, -math.inf, 1795319913.661443]
    assert cols["value_int"].to_pylist() == [1, None, None]
