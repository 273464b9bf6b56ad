"""Jupyter notebooks (``*.ipynb``, nbformat 4) that ran a training, as GRPO runs are often published: what their
cells printed, and the training-progress tables transformers draws in a notebook instead of printing dicts.

- **Printed output** (``stream`` outputs, standard output and error as they came, and the ``text/plain`` of an
  ``execute_result``), in cell order, is the console the training would have had: the HF Trainer's dicts (a
  ``!python train.py`` cell, TRL's printing callback), verl's ``step:N - …`` lines, a hand-written trainer's pairs.
  pipeline.sources.trainer_logs reads it with the console reader, as it reads a console log.
- **Progress tables** (``text/html`` of a display): transformers' NotebookProgressCallback draws its log as an HTML
  table, first column ``Step``, one row per logged step, rewritten in place as training goes on, so the notebook
  saves its last state. Stock transformers writes ``Training Loss`` (and ``Validation Loss`` with the evaluation's
  metrics, title-cased: ``Accuracy`` is ``eval_accuracy``); Unsloth adds every metric TRL logs, its ``/`` spaced
  (``rewards / format_reward_func / mean``). Columns are named back as the Trainer logged them (``loss``,
  ``eval_loss``, ``rewards/format_reward_func/mean``); a cell that is no number (``No Log``) is no value. A table
  whose first column is ``Epoch`` (evaluation per epoch) numbers no steps and is said, not read. Each table is one
  training (Unsloth notebooks run SFT, then GRPO).

Pure functions of the notebook's bytes: the file is read whole each time it is saved, as Jupyter rewrites it
whole and a cell run again replaces its outputs.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from pipeline.sources.trainer_log_lines import integral, number
from pipeline.values import loads_checked

_TABLE = re.compile(r"<table\b[^>]*>(.*?)</table>", re.DOTALL | re.IGNORECASE)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.DOTALL | re.IGNORECASE)
_HEAD_CELL = re.compile(r"<th\b[^>]*>(.*?)</th>", re.DOTALL | re.IGNORECASE)
_CELL = re.compile(r"<td\b[^>]*>(.*?)</td>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")
# The bar above the table: `<progress value='300' max='300' …>`; reaching its total is the end of the training.
_PROGRESS = re.compile(r"<progress\s+value=['\"]?(\d+)['\"]?\s+max=['\"]?(\d+)", re.IGNORECASE)
_NAMED = {"Training Loss": "loss", "Validation Loss": "eval_loss"}


@dataclass
class ProgressTable:
    """One training's progress table: its rows (step, values) in the order drawn, and what was not read."""

    cell: int
    rows: list[tuple[int, dict]] = field(default_factory=list)
    finished: bool = False
    problems: list[str] = field(default_factory=list)


@dataclass
class Notebook:
    text: bytes  # what its cells printed, one console
    tables: list[ProgressTable]
    problems: list[str]  # tables that number no steps


def read(raw: bytes) -> Notebook:
    """A notebook's printed output and progress tables; ValueError, saying why, for a file that is no notebook."""
    doc = loads_checked(raw)
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        version = doc.get("nbformat") if isinstance(doc, dict) else None
        raise ValueError(f"no cells list (nbformat {version!r}; only nbformat 4 is read)")
    text: list[str] = []
    tables: list[ProgressTable] = []
    problems: list[str] = []
    for index, cell in enumerate(cells):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for output in outputs if isinstance(outputs, list) else []:
            if not isinstance(output, dict):
                continue
            data = output.get("data")
            data = data if isinstance(data, dict) else {}
            if output.get("output_type") == "stream":
                text.append(_joined(output.get("text")))
            elif output.get("output_type") == "execute_result":
                _end_line(text)
                text.append(_joined(data.get("text/plain")))
                _end_line(text)
            if "text/html" in data:
                found, why = _progress_tables(index, _joined(data["text/html"]))
                tables += found
                problems += why
        _end_line(text)  # a cell's last line ends with it
    return Notebook("".join(text).encode("utf-8", "replace"), tables, problems)


def _joined(value: object) -> str:
    """A notebook's multi-line string: one string, or a list of lines (each with its newline)."""
    if isinstance(value, list):
        return "".join(part for part in value if isinstance(part, str))
    return value if isinstance(value, str) else ""


def _end_line(text: list[str]) -> None:
    if text and text[-1] and not text[-1].endswith("\n"):
        text.append("\n")


def _cell_text(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment)).strip()


def _progress_tables(cell: int, page: str) -> tuple[list[ProgressTable], list[str]]:
    """The training-progress tables in one HTML output (any other table, a DataFrame's, is none), and why a table
    that looks like one is not read."""
    tables, problems = [], []
    bars = [(int(m.group(1)), int(m.group(2)), m.start()) for m in _PROGRESS.finditer(page)]
    for found in _TABLE.finditer(page):
        head = [_cell_text(c) for c in _HEAD_CELL.findall(found.group(1))]
        if not head or head[0] not in ("Step", "Epoch") or "Training Loss" not in head:
            continue
        if head[0] == "Epoch":
            problems.append(f"cell {cell}: a training table by epoch (evaluated each epoch) numbers no steps: not read")
            continue
        table = ProgressTable(cell)
        keys = [_key(name, "Validation Loss" in head) for name in head]
        for n, row in enumerate(_ROW.findall(found.group(1))):
            cells = [_cell_text(c) for c in _CELL.findall(row)]
            if not cells:
                continue  # the header's row
            step = integral(number(cells[0]))
            if step is None or len(cells) != len(head):
                table.problems.append(f"cell {cell}, row {n}: {len(cells)} cells, Step {cells[0][:20]!r}: not read")
                continue
            values = {}
            for key, text in zip(keys[1:], cells[1:], strict=True):
                value = number(text)
                if value is not None and key not in values:
                    values[key] = value
            table.rows.append((step, values))
        before = [bar for bar in bars if bar[2] < found.start()]
        table.finished = bool(before) and before[-1][0] == before[-1][1] > 0
        tables.append(table)
    return tables, problems


def _key(name: str, evaluates: bool) -> str:
    """A column's name as the Trainer logged it: ``Training Loss`` is ``loss``, Unsloth's ``completions / mean_length``
    is ``completions/mean_length``, and with a ``Validation Loss`` column, stock transformers' title-cased evaluation
    metrics (``Accuracy``, ``Mean Reward``) are ``eval_accuracy``, ``eval_mean_reward``."""
    if name in _NAMED:
        return _NAMED[name]
    if evaluates and "/" not in name and name[:1].isupper():
        return "eval_" + "_".join(name.lower().split())
    return name.replace(" / ", "/")
