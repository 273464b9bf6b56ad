"""The pieces of human and machine output on their own: cutting, fitting, rounding, colour rules, the JSON values."""

from __future__ import annotations

import io
import json
import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import numpy as np
import pytest

from pipeline import json_output, terminal


def test_cut_middle_keeps_both_ends_in_exactly_the_room():
    key = "wandb:my-team/grpo-qwen2.5-7b-math/run-abc123"
    for room in range(2, len(key)):
        cut = terminal.cut_middle(key, room)
        assert len(cut) == room and cut.count("…") == 1
        head, tail = cut.split("…")
        assert key.startswith(head) and key.endswith(tail) and len(tail) >= len(head)
    assert terminal.cut_middle(key, 20) == "wandb:my-…run-abc123"  # the distinguishing tail stays
    assert terminal.cut_middle(key, len(key)) == key and terminal.cut_middle("abc", 1) == "…"


def test_table_fits_the_room_narrows_the_widest_and_leaves_out_what_cannot_fit():
    columns = ["run_key", "name", "reward", "config"]
    rows = [
        ("wandb:team/project/" + "x" * 40 + "-run1", "short", 1 / 3, "{" + "a" * 300 + "}"),
        ("wandb:team/project/" + "x" * 40 + "-run2", "a-much-longer-run-name", 12345.678, None),
    ]
    natural, hidden = terminal.table(columns, rows, None)
    assert not hidden and max(map(len, natural)) > 300  # no room given: nothing is cut
    lines, hidden = terminal.table(columns, rows, 80)
    assert not hidden and all(len(line) <= 80 for line in lines)
    assert lines[2].split()[0].endswith("-run1") and lines[3].split()[0].endswith("-run2")
    assert "0.3333" in lines[2] and "1.235e+04" in lines[3] and "NULL" in lines[3]
    assert lines[2].index("0.3333") + len("0.3333") == lines[3].index("1.235e+04") + len("1.235e+04")  # numbers right
    lines, hidden = terminal.table(columns, rows, 40)
    assert hidden == ["reward", "config"] and all(len(line) <= 40 for line in lines)


def test_a_cell_with_several_lines_takes_several_lines():
    lines, _ = terminal.table(["plan"], [("┌─┐\n│x│\n└─┘",)], 80)
    assert lines[2:] == ["┌─┐", "│x│", "└─┘"]


def test_cells_round_floats_and_keep_integers_exact():
    assert terminal.cell(math.pi) == "3.142" and terminal.cell(2**53 + 1) == "9007199254740993"
    assert terminal.cell(None) == "NULL" and terminal.cell(True) == "true" and terminal.cell(Decimal("2.50")) == "2.5"
    assert terminal.cell(datetime(2025, 1, 2, 3, 4, 5, 678, tzinfo=UTC)) == "2025-01-02 03:04:05+00:00"


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_a_flags_steps_read_as_one_step_a_range_or_still_going():
    """A one-step episode (a grad-norm spike at step 205) reads `step 205`, not `step 205-205`; a range as a range;
    one not over when the run was last logged with a `+`. The check table and a report's findings table agree."""
    from pipeline.checks import span

    def flag(step, end):
        return {
            "run_key": "k",
            "check_name": "grad_norm_spike",
            "severity": "error",
            "step": step,
            "step_end": end,
            "message": "grad norm jumped",
        }

    assert [span(flag(205, 205)), span(flag(34, 123)), span(flag(41, None))] == ["205", "34-123", "41+"]
    assert span(flag(None, None)) == "whole run"  # a finding with no onset step, not "None+"
    lines = terminal.check_table([flag(205, 205), flag(34, 123), flag(41, None)], {"k": "run"}, None, False)
    assert [line.split("run")[-1].strip() for line in lines if line.startswith("ERROR")] == [
        "step 205",
        "step 34-123",
        "step 41+",
    ]
    (whole,) = [line for line in terminal.check_table([flag(None, None)], {"k": "r1"}, None, False) if "ERROR" in line]
    assert whole.rstrip().endswith("r1  whole run"), whole


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert terminal.colour_enabled(FakeTTY()) and not terminal.colour_enabled(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no-color.org says it does not count
    assert terminal.colour_enabled(FakeTTY())
    monkeypatch.setenv("NO_COLOR", "0")  # any non-empty value, even "0"
    assert not terminal.colour_enabled(FakeTTY())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not terminal.colour_enabled(FakeTTY())
    assert terminal.paint("error", "error", True) == "\x1b[1;31merror\x1b[0m"
    assert terminal.paint("x", "error", False) == "x"


def test_width_from_columns_else_none_for_a_pipe(monkeypatch):
    monkeypatch.setenv("COLUMNS", "77")
    assert terminal.width(io.StringIO()) == 77
    monkeypatch.delenv("COLUMNS")
    assert terminal.width(io.StringIO()) is None and terminal.width(io.StringIO(), fallback=200) == 200


def test_json_values_follow_the_convention():
    value = {
        "nan": math.nan,
        "inf": -math.inf,
        "np_float": np.float64(0.25),
        "np_int": np.int64(7),
        "np_nan": np.float32("nan"),
        "array": np.array([1.5, np.inf]),
        "decimal": Decimal("1.50"),
        "whole": Decimal("3"),
        "when": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        "day": date(2025, 1, 2),
        "span": timedelta(minutes=2),
        "blob": b"\x00\xff",
        "set": {3},
        "big": 2**63 + 1,
        "nested": [{"x": math.nan}],
    }
    text = json_output.dumps(value)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {
        "nan": None,
        "inf": None,
        "np_float": 0.25,
        "np_int": 7,
        "np_nan": None,
        "array": [1.5, None],
        "decimal": 1.5,
        "whole": 3,
        "when": "2025-01-02T03:04:05+00:00",
        "day": "2025-01-02",
        "span": 120.0,
        "blob": "AP8=",
        "set": [3],
        "big": 2**63 + 1,
        "nested": [{"x": None}],
    }


@pytest.mark.parametrize("rows", [[], [(1, '{"a": [1, 2]}', math.nan)], [(1, "not json", None), (2, None, 0.5)]])
def test_json_rows_are_one_array(rows):
    out = io.StringIO()
    json_output.write_rows(["id", "doc", "x"], iter(rows), out, json_columns=[False, True, False])
    parsed = json.loads(out.getvalue(), parse_constant=lambda token: pytest.fail(f"non-JSON token {token}"))
    expected = [
        {
            "id": i,
            "doc": json.loads(d) if d and d.startswith("{") else d,
            "x": None if isinstance(x, float) and math.isnan(x) else x,
        }
        for i, d, x in rows
    ]
    assert parsed == expected
