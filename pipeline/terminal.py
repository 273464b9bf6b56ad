"""Human output on a terminal: colour only where it is wanted, the width to fit, and tables that fit it.

Colour follows no-color.org: none when ``NO_COLOR`` is set to anything non-empty, when ``TERM`` is ``dumb``, or when
the stream is not a terminal (a pipe, a file). The width is ``COLUMNS`` when set, else the terminal's; output to a
pipe or a file is cut only to the width its caller gives (sql's table: 200 columns; check's lines: not at all).
Floats are rounded with the reports' ``fmt`` (significant digits), here to 4.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, TextIO

from pipeline.report.markdown import fmt

# Words grpolens prints that deserve a colour: severities and verdicts.
STYLES = {"error": "1;31", "unhealthy": "1;31", "warn": "33", "watch": "33", "info": "36", "healthy": "32", "bold": "1"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
ELLIPSIS = "…"
MIN_WIDTH = 16  # a column is not cut narrower than this (or its natural width): columns are left out instead


def colour_enabled(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        return False


def paint(text: str, style: str, enabled: bool) -> str:
    """``text`` in the colour of ``style`` (a key of STYLES, e.g. a severity or a verdict) when ``enabled``."""
    code = STYLES.get(style.lower())
    return f"\x1b[{code}m{text}\x1b[0m" if enabled and code else text


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def width(stream: TextIO, fallback: int | None = None) -> int | None:
    """Columns to fit: $COLUMNS, else the terminal's; ``fallback`` when the stream is not a terminal (None: do not
    cut)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else fallback
    except (AttributeError, ValueError, OSError):
        return fallback


def cut_middle(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, cut in the middle so both ends stay: run keys and names differ at
    their ends (``wandb:team/grpo-…/run-abc123``). The tail keeps the larger half."""
    if len(text) <= room:
        return text
    if room <= 1:
        return ELLIPSIS[:room]
    head = (room - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (room - 1 - head) :]


def cell(value: Any, digits: int = 4) -> str:
    """One value as a table shows it: floats to ``digits`` significant digits, NULL for nothing, ISO times."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return fmt(value, digits)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat(sep=" ", timespec="seconds") if isinstance(value, datetime) else value.isoformat()
    return str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    room: int | None,
    digits: int = 4,
    colour: bool = False,
    gap: int = 2,
) -> tuple[list[str], list[str]]:
    """Rows as aligned text lines fitting ``room`` columns (None: no limit), and the names of the columns left out
    because even cut down they did not fit. Text is cut in the middle; numbers are right-aligned; a cell holding
    several lines (an EXPLAIN plan) takes several lines."""
    texts = [[cell(v, digits).replace("\t", " ").splitlines() or [""] for v in row] for row in rows]
    numeric = [bool(rows) and all(is_number(r[i]) or r[i] is None for r in rows) for i in range(len(columns))]
    natural = [max([len(name)] + [len(line) for r in texts for line in r[i]]) for i, name in enumerate(columns)]
    widths, shown = _fit(natural, room, gap)
    hidden = [columns[i] for i in range(len(columns)) if i not in shown]

    def line(parts: list[str], align: list[bool]) -> str:
        out = [(p.rjust if right else p.ljust)(widths[i]) for p, i, right in zip(parts, shown, align, strict=True)]
        return (" " * gap).join(out).rstrip()

    header = [cut_middle(columns[i], widths[i]) for i in shown]
    lines = [
        paint(line(header, [numeric[i] for i in shown]), "bold", colour),
        (" " * gap).join("─" * widths[i] for i in shown),
    ]
    for r in texts:
        height = max(len(r[i]) for i in shown) if shown else 1
        for k in range(height):
            parts = [cut_middle(r[i][k], widths[i]) if k < len(r[i]) else "" for i in shown]
            lines.append(line(parts, [numeric[i] for i in shown]))
    return lines, hidden


def _fit(natural: list[int], room: int | None, gap: int) -> tuple[list[int], list[int]]:
    """Column widths and the columns shown: the natural widths when they fit, else the widest columns narrowed
    (none below min(natural, MIN_WIDTH): a column cut shorter says nothing), dropping the rightmost columns when
    even that does not fit."""
    shown = list(range(len(natural)))
    if room is None:
        return natural, shown
    floor = [min(n, MIN_WIDTH) for n in natural]
    while shown:
        budget = room - gap * (len(shown) - 1)
        if sum(floor[i] for i in shown) <= budget:
            break
        shown.pop()
    if not shown:  # not even one column fits: show the first, cut to the room there is
        return [max(1, room)] + natural[1:], [0]
    widths = list(natural)
    budget = room - gap * (len(shown) - 1)
    cap = min(max(natural[i] for i in shown), budget)
    while sum(widths[i] for i in shown) > budget and cap > 0:
        cap -= 1
        for i in shown:
            widths[i] = max(floor[i], min(natural[i], cap))
    return widths, shown


def check_table(rows: list[dict], labels: dict[str, str], room: int | None, colour: bool) -> list[str]:
    """The check table: severity, rule, run and steps on one line, the rule's sentence under it, both fitted to
    ``room`` columns (the run's name cut in the middle, the sentence wrapped)."""
    from pipeline import checks as checks_mod

    lines = []
    shown = [labels.get(r["run_key"]) or r["run_key"] for r in rows if r["run_key"] is not None]
    column = max(map(len, shown), default=0)  # the runs' names in one column, so the steps line up
    for row in rows:
        lead = f"{row['severity'].upper():<5} {row['check_name']:<28} "
        if row["run_key"] is None:  # a rule over the event marts: a dataset's hours
            where = f"dataset {row['dataset']}  {checks_mod.hours(row)}"
            where = cut_middle(where, max(12, room - len(lead))) if room else where
        else:
            steps = "whole run" if row["step"] is None else f"step {checks_mod.span(row)}"
            fits = min(column, max(12, room - len(lead) - len(steps) - 2)) if room else column
            where = f"{cut_middle(labels.get(row['run_key']) or row['run_key'], fits):<{fits}}  {steps}"
        lines.append(paint(lead[:5], row["severity"], colour) + lead[5:] + where)
        message = row["message"] or ""
        lines += (
            textwrap.wrap(
                message, max(26, room), initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False
            )
            if room
            else [" " * 6 + message]
        )
    return lines
