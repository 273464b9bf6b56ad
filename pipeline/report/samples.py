"""A few logged completions just before and just after a root cause's onset, from the W&B tables a run logged.

Two layouts are read: one table file per logging with one row per sample (TRL's `completions`: step, prompt,
completion, reward…), and verl's cumulative wide tables (`val/generations`: step, input_1, output_1, score_1, …, one
row per validation step). Columns are found by name, so other trainers' spellings work too. The history holds each
table's reference (`value_text` = {"_type": "table-file", "path": "media/table/…"}); the file lives in the run folder,
`<folder of run-*.wandb>/files/<path>`. Nothing here raises on bad data: the answer says what was missing instead."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 50 * 2**20
NEAREST_FILES = 3  # table files read on each side of the onset (plus the latest, which holds a cumulative table)
_SUFFIX = re.compile(r"^(.*?)[_\-.]?(\d+)$")  # input_3 -> (input, 3)
_STEP = re.compile(r"^_?(global_?|train_?)?step$|^iteration$", re.I)
_PROMPT = re.compile(r"prompt|input|question|query|instruction", re.I)
_COMPLETION = re.compile(r"completion|output|response|generation|prediction", re.I)
_REWARD = re.compile(r"reward|score", re.I)
_TOTAL_REWARD = re.compile(r"^(total_?)?(rewards?|scores?)$", re.I)
_ADVANTAGE = re.compile(r"advantage", re.I)
_NOT_TEXT = re.compile(r"len|tokens?$|_ids?$|count|^num_", re.I)  # completion_length, prompt_ids: not the text
_KEY_HINT = re.compile(r"completion|generation|sample|rollout|output|response", re.I)


def _text(cell) -> str | None:
    """A cell as text: strings as they are, chat messages joined by their content, other structures as JSON."""
    if cell is None or isinstance(cell, float) and math.isnan(cell):
        return None
    if isinstance(cell, str):
        return cell
    if isinstance(cell, list) and cell and all(isinstance(m, dict) and "content" in m for m in cell):
        return "\n".join(f"{m.get('role', '')}: {_text(m['content']) or ''}".lstrip(": ") for m in cell)
    try:
        return json.dumps(cell, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(cell)


def _number(cell) -> float | None:
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and not isinstance(cell, bool) else None


def _step(cell) -> int | None:
    value = _number(cell)
    return int(value) if value is not None and value == int(value) else None


def _cut(text: str, max_chars: int, keep_end: bool = False) -> str:
    if len(text) <= max_chars:
        return text
    return "…" + text[len(text) - max_chars :] if keep_end else text[:max_chars] + "…"


def samples_from_table(table, default_step: int | None = None, max_chars: int = 600) -> tuple[list[dict], str | None]:
    """The samples in one W&B table (``{"columns": [...], "data": [[...], ...]}``) and, when there are none, why.
    Prompts keep their end (the question; a chat template's system prompt comes first), completions their start;
    ``length_chars`` is always the full length. Rows without a step column take ``default_step``."""
    if (
        not isinstance(table, dict)
        or not isinstance(table.get("columns"), list)
        or not isinstance(table.get("data"), list)
    ):
        return [], "not a W&B table (no columns and data)"
    columns = [str(c) for c in table["columns"]]
    step_col = next((i for i, c in enumerate(columns) if _STEP.match(c)), None)
    found = []  # (column, role, group): group "3" for verl's input_3/output_3/score_3
    for i, name in enumerate(columns):
        match = _SUFFIX.match(name)
        base, group = (match.group(1), match.group(2)) if match and match.group(1) else (name, "")
        text = not _NOT_TEXT.search(base)
        role = (
            "completion"
            if text and _COMPLETION.search(base)
            else "prompt"
            if text and _PROMPT.search(base)
            else "reward"
            if _REWARD.search(base)
            else "advantage"
            if _ADVANTAGE.search(base)
            else None
        )
        if role and i != step_col:
            found.append((i, role, group))
    wide = len({g for _, role, g in found if role == "completion"}) > 1
    groups: dict[str, dict[str, list[int]]] = {}  # group -> role -> columns
    for i, role, group in found:
        groups.setdefault(group if wide else "", {}).setdefault(role, []).append(i)
    groups = {g: roles for g, roles in groups.items() if "completion" in roles}
    if not groups:
        return [], f"no completion-like text column among {columns[:12]}"
    samples = []
    for row in table["data"]:
        if not isinstance(row, list) or len(row) != len(columns):
            continue
        step = _step(row[step_col]) if step_col is not None else default_step
        for roles in groups.values():
            completion = _text(row[roles["completion"][0]])
            if completion is None:
                continue
            prompt = _text(row[roles["prompt"][0]]) if "prompt" in roles else None
            rewards = roles.get("reward", [])
            total = [i for i in rewards if _TOTAL_REWARD.match(columns[i])]
            if total or len(rewards) == 1:
                reward = _number(row[(total or rewards)[0]])
            elif rewards:  # TRL logs one column per reward function and no total: their sum (default weights)
                parts = [_number(row[i]) for i in rewards]
                known = [p for p in parts if p is not None]
                reward = sum(known) if len(known) == len(parts) else None
            else:
                reward = _number(row[roles["advantage"][0]]) if "advantage" in roles else None
            samples.append(
                {
                    "step": step,
                    "prompt": None if prompt is None else _cut(prompt, max_chars, True),
                    "completion": _cut(completion, max_chars),
                    "reward": reward,
                    "length_chars": len(completion),
                }
            )
    return samples, None if samples else "the table has no rows with a completion"


def _pick(samples: list[dict], steps: list[int], per_side: int) -> list[dict]:
    """Up to per_side samples from the first of ``steps`` (then the next ones while short), in step order."""
    chosen: list[dict] = []
    for step in steps:
        chosen += [s for s in samples if s["step"] == step][: per_side - len(chosen)]
        if len(chosen) >= per_side:
            break
    return sorted(chosen, key=lambda s: s["step"])


def _from_key(
    folders: list[Path], refs: list[tuple[int, str]], key: str, onset: int | None, per_side: int, max_chars: int
) -> dict:
    """Read the nearest table files of one key (referenced by the history, or lying in the run folder) and pick."""
    files: dict[Path, int | None] = {}  # file -> the step it was logged at
    missing = 0
    for step, rel in refs:
        found = next((f / "files" / rel for f in folders if (f / "files" / rel).is_file()), None)
        if found is None:
            missing += 1
        else:
            files[found] = step
    pattern = re.compile(re.escape(key.rsplit("/", 1)[-1]) + r"_(\d+)_[0-9a-f]+\.table\.json$")
    unreferenced = 0
    for folder in folders:  # files the history does not reference (its copy ended before they were logged)
        directory = folder / "files" / "media" / "table" / Path(key).parent
        for path in sorted(directory.glob("*.table.json")) if directory.is_dir() else []:
            if (m := pattern.match(path.name)) and path not in files:
                files[path], unreferenced = int(m.group(1)), unreferenced + 1
    order = sorted(files, key=lambda p: (files[p] is None, files[p] or 0))
    if onset is None:
        chosen = order[-NEAREST_FILES:]
    else:
        earlier = [p for p in order if (at := files[p]) is not None and at < onset]
        chosen = earlier[-NEAREST_FILES:] + [p for p in order if p not in earlier][:NEAREST_FILES] + order[-1:]
    notes, samples, read, seen = [], [], [], set()
    for path in dict.fromkeys(chosen):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                notes.append(f"skipped {path.name} ({path.stat().st_size / 2**20:.0f} MB, over 50 MB)")
                continue
            with open(path, encoding="utf-8") as fh:
                table = json.load(fh)
        except (OSError, ValueError, RecursionError) as exc:
            notes.append(f"could not read {path.name} ({type(exc).__name__})")
            continue
        read.append(str(path))
        got, why = samples_from_table(table, files[path], max_chars)
        if why:
            notes.append(f"{path.name}: {why}")
        for s in got:  # cumulative tables repeat earlier rows in every file
            if (ident := (s["step"], s["prompt"], s["completion"])) not in seen:
                seen.add(ident)
                samples.append(s)
    if missing:
        notes.insert(
            0,
            f"{missing} of {len(refs)} table files of {key} referenced by the history were not found "
            f"under {' or '.join(str(f / 'files') for f in folders)}",
        )
    if unreferenced:
        notes.append(f"{unreferenced} table file(s) of {key} in the run folder are not in the history (read by name)")
    steps = sorted({s["step"] for s in samples if s["step"] is not None})
    if onset is None:
        before, after = [], _pick(samples, steps[::-1], per_side) or samples[-per_side:]
    else:
        before = _pick(samples, [s for s in steps if s < onset][::-1], per_side)
        after = _pick(samples, [s for s in steps if s >= onset], per_side)
    return {
        "available": bool(before or after),
        "key": key,
        "before": before,
        "after": after,
        "files": read,
        "note": "; ".join(notes) or None,
    }


def completion_samples(con, run_key: str, onset_step: int | None, per_side: int = 3, max_chars: int = 600) -> dict:
    """Samples of the run's logged completions around ``onset_step``: ``{"available", "key", "before", "after",
    "files", "note"}``, each sample ``{"step", "prompt", "completion", "reward", "length_chars"}``. Before: from the
    latest logged step < onset; after: from the earliest step >= onset (the latest samples when onset is None)."""
    empty: dict[str, Any] = {"available": False, "key": None, "before": [], "after": [], "files": [], "note": None}
    try:
        sources = con.execute("select source_files from runs where run_key = ?", [run_key]).fetchall()
        # on the trainer's steps (trainer_steps), as the findings' onsets, where the warehouse has them
        mapped = con.execute("select count(*) from duckdb_tables() where table_name = 'trainer_steps'").fetchone()
        step, join = ("h.step", "")
        if mapped and mapped[0]:
            step = "coalesce(t.trainer_step, h.step)"
            join = "left join trainer_steps t on t.run_key = h.run_key and t.logged_step = h.step "
        rows = con.execute(
            f"select h.key, {step} as step, h.value_text from history h {join}"
            "where h.run_key = ? and h.value_text like '%table-file%' order by step",
            [run_key],
        ).fetchall()
    except Exception as exc:  # a warehouse without these tables, or a closed connection
        return {**empty, "note": f"could not read the warehouse ({type(exc).__name__}: {exc})"}
    refs: dict[str, list[tuple[int, str]]] = {}
    for key, step, text in rows:
        try:
            ref = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(ref, dict) and "table-file" in str(ref.get("_type")) and isinstance(ref.get("path"), str):
            refs.setdefault(key, []).append((step, ref["path"]))
    if not refs:
        return {**empty, "note": "no W&B tables of completions were logged"}
    paths = [p for row in sources for p in (row[0] or []) if p]
    if not paths:
        return {
            **empty,
            "note": "the run is not from a W&B offline folder (no run-*.wandb file recorded), so its "
            "table files cannot be read",
        }
    folders = list(dict.fromkeys(Path(p).parent for p in paths))
    if not any(f.is_dir() for f in folders):
        return {**empty, "note": f"the run folder {folders[0]} no longer exists"}
    keys = sorted(refs, key=lambda k: (not _KEY_HINT.search(k), k))
    results = [_from_key(folders, refs[k], k, onset_step, per_side, max_chars) for k in keys]
    best = max(
        results,
        key=lambda r: (
            len(r["before"]) + len(r["after"]),  # then train before validation
            not re.match(r"(val|eval|test)", r["key"] or "", re.I),
        ),
    )
    others = [k for k in keys if k != best["key"]]
    if others:
        extra = f"other tables logged: {', '.join(others)}"
        best["note"] = f"{best['note']}; {extra}" if best["note"] else extra
    if not best["available"]:
        best["note"] = best["note"] or f"the tables of {best['key']} hold no samples"
    return best
