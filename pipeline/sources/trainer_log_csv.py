"""CSV metric logs: a header naming a step column and one column per metric, then one row per logged step, as verl's
and custom trainers' CSV loggers write them, and as W&B exports a run's history (``_step``) or a chart (``Step``).
How its header and each row are read; the file itself is read line by line from a byte offset, as a JSONL log is
(pipeline.sources.trainer_logs), and discovery reads the header first (``csv_step_column``), so a CSV that is a
dataset or a results table is left alone, and said."""

from __future__ import annotations

import csv
from dataclasses import dataclass

from pipeline.sources.trainer_log_lines import STEP_FIELDS, BadLine, integral, number, shown
from pipeline.values import time_us

# A JSONL log's step fields, first found wins, then W&B's chart export, whose first column is `Step`.
CSV_STEP_FIELDS = (*STEP_FIELDS, "Step")
HEAD_BYTES = 65536  # a header is a few kilobytes even with hundreds of metrics


@dataclass(frozen=True)
class CsvHeader:
    columns: list[str]
    step: int  # the index of the step column

    def to_state(self) -> dict:
        return {"columns": self.columns, "step": self.step}

    @classmethod
    def from_state(cls, data: dict) -> CsvHeader:
        return cls(data["columns"], data["step"])


def _fields(raw: bytes) -> list[str]:
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff").rstrip("\r")  # Excel writes a BOM
    return next(csv.reader([text]), [])


def header(raw: bytes) -> CsvHeader | None:
    """The first line's columns, or None when none of them is a step (CSV_STEP_FIELDS)."""
    columns = [name.strip() for name in _fields(raw)]
    found = next((field for field in CSV_STEP_FIELDS if field in columns), None)
    return None if found is None else CsvHeader(columns, columns.index(found))


def csv_step_column(head: bytes) -> str | None:
    """The step column the first line of a file's first bytes names, if any (discovery's test of a ``*.csv``)."""
    found = header(head.split(b"\n", 1)[0])
    return None if found is None else found.columns[found.step]


def row(raw: bytes, head: CsvHeader) -> tuple[int, int | None, dict] | None:
    """One row → (step, ts_us, values): a numeric cell is a number, an empty one no value, any other text kept as
    text (a phase, a run name); a column without a name (pandas' index) is no metric. None for a blank line; BadLine
    for a row that is not one of this header's (a field with a newline in it, a row cut short)."""
    if not raw.strip():
        return None
    cells = _fields(raw)
    if len(cells) != len(head.columns):
        raise BadLine("bad_line", f"{len(cells)} fields where the header has {len(head.columns)}")
    text = cells[head.step].strip()
    step = integral(number(text)) if text else None
    if step is None:
        kind = "bad_step" if text else "no_step"
        raise BadLine(kind, f"{head.columns[head.step]} {shown(text)} is not an integer within 64 bits")
    values: dict = {}
    for n, (column, cell) in enumerate(zip(head.columns, cells, strict=True)):
        cell = cell.strip()
        if n != head.step and cell and column and column not in values:  # "": the index pandas writes
            parsed = number(cell)
            values[column] = cell if parsed is None else parsed
    stamp = values.get("_timestamp")  # seconds, as W&B's export writes it
    ts_us = time_us(float(stamp)) if isinstance(stamp, (int, float)) and abs(stamp) < 1e300 else None
    return step, ts_us, values
