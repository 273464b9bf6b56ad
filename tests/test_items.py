"""pipeline/_items.c against wandb's own protobuf classes and Python's json, on real and damaged records.

The C reader may decline any record (the caller then uses wandb's classes); what it accepts must be exactly what
wandb's classes read, and what it types must be exactly what json.loads gives.
"""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path

import pytest
from wandb.proto import wandb_internal_pb2 as pb

from pipeline._items import HistoryColumns, SummaryFold
from pipeline.sources import wandb_log
from pipeline.sources.wandb_records import SummaryUpdates, decode_history, peek_kind, timestamp_us
from pipeline.values import _loads, classify, decode_columns, logged_json
from tests.conftest import LENGTH_COLLAPSE
from tests.wandb_writer import write_run

REAL_RUN = LENGTH_COLLAPSE


def records(path: Path) -> list[bytes]:
    with open(path, "rb") as fh:
        wandb_log.check_header(fh)
        return [data for _, data in wandb_log.read_records(fh, 0, wandb_log.ReadResult())]


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, list[bytes]]:
    """History and summary records: the real verl run, and a run written here by wandb with every kind of value."""
    root = tmp_path_factory.mktemp("items")
    rows = [
        {
            "loss": 0.5 + i,
            "big": 2**53 + i,
            "nan": float("nan"),
            "inf": -math.inf,
            "text": f"é{i}",
            "nested": {"a": i, "b": {"c": 1.5}},
            "flag": True,
            "none": None,
            "list": [1, 2],
            "sparse": i,
        }
        if i % 3 == 0
        else {"loss": 0.25 * i, "wèird key\n\"'; DROP": -0.0}
        for i in range(12)
    ]
    folder = write_run(root, rows, run_id="items1")
    files = [next(folder.glob("run-*.wandb")), *REAL_RUN.rglob("run-*.wandb")]
    out: dict[str, list[bytes]] = {"history": [], "summary": []}
    for path in files:
        for data in records(path):
            kind = pb.Record.FromString(data).WhichOneof("record_type")
            if kind in out:
                out[kind].append(data)
    assert len(out["history"]) > 50 and len(out["summary"]) > 50
    return out


def decoded(keys: list[str], texts: list[str]):
    columns = HistoryColumns()
    columns.add(keys, texts)
    return decode_columns(columns.take())


def typed(keys: list[str], texts: list[str]) -> list[tuple]:
    cols, _ = decoded(keys, texts)
    return list(
        zip(*(cols[c].to_pylist() for c in ("key", "value", "value_int", "value_text", "value_type")), strict=True)
    )


def reference(keys: list[str], texts: list[str]) -> list[tuple]:
    from pipeline.values import flatten

    out = []
    for key, text in zip(keys, texts, strict=True):
        parsed = _loads(text)
        for sub_key, sub_value in flatten(key, parsed) if type(parsed) is dict else [(key, parsed)]:
            out.append((sub_key, *classify(sub_value)))
    return out


def same(a: list[tuple], b: list[tuple]) -> bool:
    """Row for row, with NaN equal to NaN and -0.0 told from 0.0."""

    def norm(row):
        return tuple(
            (
                "nan"
                if isinstance(v, float) and math.isnan(v)
                else (v, math.copysign(1, v))
                if isinstance(v, float)
                else v
            )
            for v in row
        )

    return sorted(map(norm, a), key=repr) == sorted(map(norm, b), key=repr)


def test_history_records_read_as_wandb_reads_them(samples):
    accepted = 0
    for data in samples["history"]:
        columns = HistoryColumns()
        got = columns.history(data)
        row = decode_history(data)
        if got is None:
            continue
        accepted += 1
        step, stamp, n = got
        assert step == row.step and timestamp_us(stamp) == row.ts_us and n == len(row.keys)
        cols, _ = decode_columns(columns.take())
        assert cols["key"].to_pylist() == row.keys
        assert same(
            list(
                zip(
                    *(cols[c].to_pylist() for c in ("key", "value", "value_int", "value_text", "value_type")),
                    strict=True,
                )
            ),
            reference(row.keys, row.texts),
        )
    # Every record of the real run and of the plain rows is taken by the C reader; only the rows logging a nested
    # dict or media (several nested_key parts) go to wandb's classes.
    nested = sum(
        1 for d in samples["history"] if any(len(i.nested_key) > 1 for i in pb.Record.FromString(d).history.item)
    )
    assert nested > 0 and accepted == len(samples["history"]) - nested


def test_summary_fold_equals_the_fold_of_wandbs_records(samples):
    expected: dict = {}
    for data in samples["summary"]:
        summary = pb.Record.FromString(data).summary
        for item in summary.update:
            path = tuple(item.nested_key) or (item.key,)
            expected[path if len(path) > 1 else path[0]] = item.value_json
        for item in summary.remove:
            path = tuple(item.nested_key) or (item.key,)
            expected[path if len(path) > 1 else path[0]] = None
    updates = SummaryUpdates()
    fold = SummaryFold()
    for data in samples["summary"]:
        updates.add(data)
        fold.add(data)
    assert updates.take() == expected
    assert fold.count > 0 and dict(fold.drain()) == {k: v for k, v in expected.items() if v is not None}
    assert fold.count == 0 and fold.drain() == []


def test_a_declined_summary_record_keeps_the_order_of_updates():
    def record(*items, remove=()):
        rec = pb.Record()
        for key, value in items:
            rec.summary.update.add(key=key, value_json=value)
        for key in remove:
            rec.summary.remove.add(key=key)
        return rec.SerializeToString()

    updates = SummaryUpdates()
    updates.add(record(("a", "1"), ("b", "2")))  # folded in C
    updates.add(record(remove=["a"]))  # declined (a removal): wandb's classes, after what the fold holds
    updates.add(record(("b", "3")))
    assert updates.take() == {"a": None, "b": "3"}


def mutants(data: bytes, rng: random.Random, n: int):
    for _ in range(n):
        b = bytearray(data)
        how = rng.randrange(5)
        at = rng.randrange(len(b))
        if how == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif how == 1:
            b[at] = rng.choice([0x00, 0x02, 0x0A, 0x12, 0x7F, 0x80, 0x82, 0xC0, 0xFF])
        elif how == 2:
            del b[at:]
        elif how == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        else:
            del b[at : at + rng.randrange(1, 6)]
        yield bytes(b)


def test_damaged_records_are_declined_or_read_exactly(samples):
    """Random bit flips, cuts and insertions: whatever C accepts, wandb's classes decode to the same values."""
    rng = random.Random(20261122)
    accepted = declined = 0
    for data in rng.sample(samples["history"], 30):
        for bad in mutants(data, rng, 300):
            columns = HistoryColumns()
            got = columns.history(bad)
            if got is None:
                declined += 1
                continue
            accepted += 1
            row = decode_history(bad)  # must not raise: C accepted only what protobuf can read
            assert got[0] == row.step and got[2] == len(row.keys)
            cols, _ = decode_columns(columns.take())
            assert cols["key"].to_pylist() == row.keys
    for data in rng.sample(samples["summary"], 30):
        for bad in mutants(data, rng, 300):
            fold = SummaryFold()
            if not fold.add(bad):
                assert fold.count == 0  # declined with nothing folded
                continue
            summary = pb.Record.FromString(bad).summary
            expected = {}
            for item in summary.update:
                path = tuple(item.nested_key) or (item.key,)
                expected[path if len(path) > 1 else path[0]] = item.value_json
            assert not summary.remove and dict(fold.drain()) == expected
    assert accepted > 100 and declined > 1000


def test_numbers_are_typed_exactly_as_json_reads_them():
    rng = random.Random(7)
    floats = [rng.uniform(-1e6, 1e6) for _ in range(2000)] + [
        rng.random() * 10.0 ** rng.randint(-320, 308) for _ in range(2000)
    ]
    texts = [repr(f) for f in floats] + [f"{f:.17g}" for f in floats[:500]] + [f"{f:.3e}" for f in floats[:500]]
    texts += [
        "0",
        "-0",
        "-0.0",
        "1e999",
        "-1e999",
        "5e-324",
        "2e-324",
        "1E5",
        "1e+5",
        "123456789012345678",
        "-12345678901234567",
        "1234567890123456789",
        "-9223372036854775808",
        "9223372036854775807",
        "18446744073709551616",
        "9007199254740993",
        "NaN",
        "Infinity",
        "-Infinity",
        "nan",
        "inf",
        "01",
        "1.",
        ".5",
        "+1",
        " 1",
        "1 ",
        "-",
        "",
        "true",
        "false",
        "null",
        '"1"',
        "[1,2]",
        '{"a":1,"b":{"c":2}}',
        '{"_type":"histogram","bins":[1]}',
        "{}",
        '"é\\u0000x"',
        "1e5x",
    ]
    keys = [f"k{i}" for i in range(len(texts))]
    got = typed(keys, texts)
    assert same(got, reference(keys, texts))
    exact = {row[0]: row for row in got}
    assert exact[f"k{texts.index('9007199254740993')}"][2] == 2**53 + 1
    assert exact[f"k{texts.index('-9223372036854775808')}"][2] == -(2**63)
    assert exact[f"k{texts.index('18446744073709551616')}"][3] == "18446744073709551616"


def test_values_from_python_are_checked_and_kept():
    columns = HistoryColumns()
    with pytest.raises(TypeError, match="must be str"):
        columns.add(["a"], [1.5])
    with pytest.raises(ValueError, match="differ in length"):
        columns.add(["a", "b"], ["1"])
    assert columns.count == 0  # nothing half-appended
    columns.add(["lone \ud800 surrogate"], ['"x"'])
    cols, _ = decode_columns(columns.take())
    assert cols["key"].to_pylist() == ["lone \\ud800 surrogate"]


def test_a_row_without_step_appends_nothing():
    rec = pb.Record()
    rec.history.item.add(nested_key=["loss"], value_json="0.5")
    columns = HistoryColumns()
    assert columns.history(rec.SerializeToString()) == (None, None, 0) and columns.count == 0
    rec.history.step.num = 7
    assert columns.history(rec.SerializeToString()) == (7, None, 1)
    rec.history.item.add(nested_key=["_step"], value_json="9")
    assert columns.history(rec.SerializeToString())[0] == 9  # the logged _step wins, as in wandb's reader
    assert peek_kind(rec.SerializeToString()) == "history"


def test_an_oversized_length_is_declined_not_read_past_the_end():
    rec = pb.Record()
    rec.history.item.add(nested_key=["loss"], value_json="0.5")
    rec.history.step.num = 1
    data = bytearray(rec.SerializeToString())
    at = data.index(b"0.5") - 1
    data[at] = 0x7F  # value_json claims 127 bytes
    assert HistoryColumns().history(bytes(data)) is None
    assert SummaryFold().add(struct.pack("B", 0x1A) + bytes([0xFF, 0xFF, 0x03])) is False


def test_mixed_batch_keeps_row_order_and_types():
    keys = ["s", "old", "min64", "n", "bad", "t"]
    texts = ['"s\\u00e9"', '{"x": 1, "y": {"z": 2.5}}', "-9223372036854775808", "NaN", "Nope", "true"]
    cols, source_rows = decoded(keys, texts)
    rows = list(
        zip(
            source_rows.tolist(),
            *(cols[c].to_pylist() for c in ("key", "value", "value_int", "value_text", "value_type")),
            strict=True,
        )
    )
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
    cols, source_rows = decoded(["a", "b", "c"], ["1", "-Infinity", "1.795319913661443e+09"])
    assert source_rows is None
    assert cols["value"].to_pylist() == [1.0, -math.inf, 1795319913.661443]
    assert cols["value_int"].to_pylist() == [1, None, None]


def test_logged_json_is_what_json_dumps_writes():
    for value in (
        0.1,
        -0.0,
        1e-300,
        2.5e17,
        math.nan,
        math.inf,
        -math.inf,
        0,
        -7,
        2**64 + 1,
        True,
        None,
        "a\nb",
        [1.5, math.nan],
        {"x": 1},
    ):
        assert logged_json(value) == json.dumps(value)


def test_a_decoded_dict_is_appended_as_its_json_texts_would_be():
    """add_decoded types floats and int64 integers itself; every column must equal what add() makes of the same values'
    texts (logged_json), row for row, for every kind of value json.loads can give."""
    rng = random.Random(20261127)
    edge = [
        0.0,
        -0.0,
        5e-324,
        1e308,
        -1e-300,
        float("nan"),
        math.inf,
        -math.inf,
        1e16,
        0.1,
        2.5,
        0,
        -1,
        999_999_999_999_999_999,  # 18 characters: C types the text exactly
        1_000_000_000_000_000_000,  # 19: Python types the text (still int64)
        -99_999_999_999_999_999,
        -100_000_000_000_000_000,
        2**63 - 1,
        2**63,  # beyond int64: Python keeps it as text
        -(2**63),
        -(2**63) - 1,
        2**70,
        True,
        False,
        None,
        "text",
        "lone \ud800",
        [1, 2.5, None],
        {"a": 1, "b": {"c": 2.5}},
        {},
    ]
    rows = [{f"k{i}": value for i, value in enumerate(edge)}, {"lone \udc00 key": 1.5, "é": 2}]
    for _ in range(300):
        values = edge + [rng.uniform(-1e6, 1e6), rng.random() * 10.0 ** rng.randint(-320, 308), rng.getrandbits(70)]
        rows.append({f"m{j}": rng.choice(values) for j in range(rng.randint(1, 40))})
    direct, via_text = HistoryColumns(), HistoryColumns()
    for row in rows:
        assert direct.add_decoded(row, logged_json) == len(row)
        via_text.add(list(row), [logged_json(v) for v in row.values()])
    got, got_rows = decode_columns(direct.take())
    want, want_rows = decode_columns(via_text.take())
    assert (got_rows is None) == (want_rows is None) and (got_rows is None or list(got_rows) == list(want_rows))
    columns = ("key", "value", "value_int", "value_text", "value_type")
    got_table = list(zip(*(got[c].to_pylist() for c in columns), strict=True))
    want_table = list(zip(*(want[c].to_pylist() for c in columns), strict=True))
    assert len(got_table) == len(want_table) > 3000
    for a, b in zip(got_table, want_table, strict=True):  # in order, NaN equal to NaN, -0.0 told from 0.0
        assert same([a], [b]), (a, b)


def test_a_decoded_dict_that_fails_midway_appends_nothing():
    columns = HistoryColumns()
    columns.add_decoded({"a": 1.5}, logged_json)

    def refuse(value):
        raise ValueError("no text for this")

    with pytest.raises(ValueError, match="no text"):
        columns.add_decoded({"b": 2.5, "c": "text", "d": 3.5}, refuse)
    with pytest.raises(TypeError, match="must be str"):
        columns.add_decoded({"e": 1.0, 7: 2.0}, logged_json)  # json.loads never makes such a key
    with pytest.raises(TypeError, match="must be str"):
        columns.add_decoded({"f": "x"}, lambda value: 1)
    assert columns.count == 1
    cols, _ = decode_columns(columns.take())
    assert cols["key"].to_pylist() == ["a"] and cols["value"].to_pylist() == [1.5]
