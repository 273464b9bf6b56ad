"""Hostile input never stops an ingest: the bad line, entry, record or file is skipped and said (one line, one
``ingest_issues`` row), everything else lands, and a re-run after the input is fixed has every value once.

Every input is generated here (issue #11's classes 1-5, 9 and 10); the warehouse's de-duplication rule is
applied to the raw lake as staging applies it, so no dbt build is needed per case.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import time
from pathlib import Path

import duckdb
import pytest

from pipeline.sources import event_files, files, trainer_logs, wandb_offline
from tests import wandb_frames as wf
from tests.conftest import grpolens

DEEP = "[" * 5000 + "]" * 5000
DEEP_DICT = '{"a":' * 5000 + "1" + "}" * 5000


def read(lake: Path, table: str, where: str = "true") -> list[tuple]:
    if not any((lake / table).glob("*/part-*.parquet")):
        return []
    rel = duckdb.sql(f"select * from read_parquet('{lake}/{table}/*/part-*.parquet', union_by_name=true) where {where}")
    return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]


def values(lake: Path, key: str = "loss") -> dict[int, float]:
    """step -> value of ``key``, newest ingest winning, superseded reloads dropped: staging's rule on the raw lake."""
    reloads = {r["run_key"]: r["history_from_ingest"] for r in read(lake, "runs") if r.get("history_from_ingest")}
    rows = sorted(read(lake, "history", f"key = '{key}'"), key=lambda r: (r["ingest_id"], r["file_offset"]))
    out: dict[int, float] = {}
    for row in rows:
        if row["ingest_id"] >= reloads.get(row["run_key"], 0):
            out[row["step"]] = row["value"]
    return out


def issue_kinds(lake: Path) -> list[str]:
    return sorted(r["kind"] for r in read(lake, "ingest_issues"))


# ------------------------------------------------------------------------------------------ 1. hostile values

JSONL_CASES = {
    "step 1e300": ('{"step": 1e300, "loss": 9}', "bad_step"),
    "step 2**70": (f'{{"step": {2**70}, "loss": 9}}', "bad_step"),
    "step 20 digits": ('{"step": 99999999999999999999, "loss": 9}', "bad_step"),
    "value 2**70": (f'{{"step": 2, "loss": {2**70}}}', None),
    "timestamp 1e30": ('{"step": 2, "_timestamp": 1e30, "loss": 9}', "bad_time"),
    "surrogate key": ('{"step": 2, "\\ud800": 1, "loss": 9}', None),
    "surrogate value": ('{"step": 2, "note": "\\udc80x", "loss": 9}', None),
    "5000-deep list": (f'{{"step": 2, "x": {DEEP}}}', "bad_line"),
    "5000-deep dict": (f'{{"step": 2, "x": {DEEP_DICT}}}', "bad_line"),
    "int of 5000 digits": ('{"step": 2, "loss": %s}' % ("7" * 5000), "bad_line"),
    "not an object": ("[1, 2, 3]", "bad_line"),
    "bad utf-8": (b'{"step": 2, "loss": "\xff\xfe"}', "bad_line"),
}


@pytest.mark.parametrize("case", JSONL_CASES, ids=list(JSONL_CASES))
def test_hostile_jsonl_line_is_skipped_said_and_fixable(tmp_path, case):
    line, kind = JSONL_CASES[case]
    log = tmp_path / "logs" / "run-a" / "metrics.jsonl"
    log.parent.mkdir(parents=True)
    middle = line.encode() if isinstance(line, str) else line
    log.write_bytes(b'{"step": 1, "loss": 1.0}\n' + middle + b'\n{"step": 3, "loss": 3.0}\n')
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path / "logs"])
    got = values(tmp_path / "lake")
    assert got[1] == 1.0 and got[3] == 3.0, case
    if kind is None:  # storable after all: kept, nothing to say
        assert 2 in got and not report.issues
    else:
        assert kind in issue_kinds(tmp_path / "lake") and any(kind in said for said in report.lines())
        assert 2 not in got or kind == "bad_time"  # a row with an impossible time is kept, untimed
    # The producer's file is fixed in place: read again from its start, every value once.
    log.write_bytes(b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 2.0}\n{"step": 3, "loss": 3.0}\n')
    again = trainer_logs.ingest(tmp_path / "lake", [tmp_path / "logs"])
    assert values(tmp_path / "lake") == {1: 1.0, 2: 2.0, 3: 3.0}
    assert any("read" in n and "again" in n for n in again.notes)
    assert not trainer_logs.ingest(tmp_path / "lake", [tmp_path / "logs"]).changed


EVENT_CASES = {
    "_time 1e300": ('{"_time": 1e300, "event": "x"}', "no_time"),
    "_time 2**70": (f'{{"_time": {2**70}, "event": "x"}}', "no_time"),
    "Feb 30": ('{"_time": "2024-02-30T00:00:00Z", "event": "x"}', "no_time"),
    "offset +99:99": ('{"_time": "2024-02-03T00:00:00+99:99", "event": "x"}', "no_time"),
    "year 0": ('{"_time": "0000-01-01T00:00:00Z", "event": "x"}', "no_time"),
    "surrogate in a column": ('{"_time": "2024-01-01T00:00:00Z", "event": "\\ud800"}', None),
    "surrogate in a field name": ('{"_time": "2024-01-01T00:00:00Z", "\\udc80": 1}', None),
    "5000-deep list": (f'{{"_time": "2024-01-01T00:00:00Z", "x": {DEEP}}}', "bad_line"),
    "5000-deep dict": (f'{{"_time": "2024-01-01T00:00:00Z", "x": {DEEP_DICT}}}', "bad_line"),
    "1e400": ('{"_time": "2024-01-01T00:00:00Z", "x": 1e400}', None),
}


@pytest.mark.parametrize("case", EVENT_CASES, ids=list(EVENT_CASES))
def test_hostile_event_line_is_skipped_said_and_fixable(tmp_path, case):
    line, kind = EVENT_CASES[case]
    path = tmp_path / "events" / "diplomacy.ndjson"
    path.parent.mkdir()
    good = [f'{{"_time": "2024-01-01T00:00:0{i}Z", "event": "ok", "n": {i}}}' for i in (1, 3)]
    path.write_text(f"{good[0]}\n{line}\n{good[1]}\n")
    report = event_files.ingest(tmp_path / "lake", [path.parent])
    events = read(tmp_path / "lake", "events")
    assert sum(e["event"] == "ok" for e in events) == 2, case
    if kind is None:
        assert len(events) == 3 and not report.issues
    else:
        assert issue_kinds(tmp_path / "lake") == [kind] and len(events) == 2
        assert report.bad_lines == 1 and any(kind in said for said in report.lines())
    path.write_text(f"{good[0]}\n" + '{"_time": "2024-01-01T00:00:02Z", "event": "ok", "n": 2}\n' + f"{good[1]}\n")
    event_files.ingest(tmp_path / "lake", [path.parent])
    ids = {e["event_id"] for e in read(tmp_path / "lake", "events") if e["event"] == "ok"}
    assert len(ids) == 3  # the three good events, each once after de-duplication


TRAINER_STATE_CASES = {
    "step 2**70": ({"log_history": [{"step": 2**70, "loss": 9}]}, "no_step"),
    "step 1e30": ({"log_history": [{"step": 1e30, "loss": 9}]}, "no_step"),
    "stateful_callbacks a list": ({"stateful_callbacks": [1, 2]}, None),
    "TrainerControl a string": ({"stateful_callbacks": {"TrainerControl": "x"}}, None),
    "TrainerControl args a list": ({"stateful_callbacks": {"TrainerControl": {"args": [1]}}}, None),
    "global_step a string, max_steps a list": ({"global_step": "x", "max_steps": [1]}, None),
    "an entry that is a list": ({"log_history": [[1, 2]]}, "no_step"),
    "a deep entry": ({"log_history": [json.loads("[" * 200 + "]" * 200)]}, "no_step"),
    "a deep value": ({"log_history": [{"step": 2, "x": json.loads("[" * 200 + "]" * 200)}]}, "bad_entry"),
    "a deep config section": ({"trial_params": json.loads('{"a":' * 200 + "1" + "}" * 200)}, "bad_entry"),
    "a surrogate": ({"best_model_checkpoint": "\ud800", "log_history": [{"step": 2, "\udc80": 1.0}]}, None),
}


@pytest.mark.parametrize("case", TRAINER_STATE_CASES, ids=list(TRAINER_STATE_CASES))
def test_hostile_trainer_state_entry_or_section_is_skipped_and_said(tmp_path, case):
    extra, kind = TRAINER_STATE_CASES[case]
    doc = {"global_step": 3, "max_steps": 3, **{k: v for k, v in extra.items() if k != "log_history"}}
    doc["log_history"] = [{"step": 1, "loss": 1.0}, *extra.get("log_history", []), {"step": 3, "loss": 3.0}]
    path = tmp_path / "out" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path / "out"])
    assert values(tmp_path / "lake") == {1: 1.0, 3: 3.0}, case
    assert (kind in issue_kinds(tmp_path / "lake")) if kind else not report.issues
    [run] = read(tmp_path / "lake", "runs")
    # a max_steps that is no count says nothing of where the run ends: its state is unknown, as a bare log_history's
    assert run["state"] == ("finished" if isinstance(doc["max_steps"], int) else "unknown")
    assert json.loads(run["config"])["max_steps"] == doc["max_steps"]


def test_deep_trainer_state_file_is_skipped_whole_and_the_rest_lands(tmp_path):
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "trainer_state.json").write_text(f'{{"log_history": {DEEP}}}')
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 1.0}]}))
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert values(tmp_path / "lake") == {1: 1.0}
    assert [i.kind for i in report.issues] == ["bad_file"] and "nested too deeply" in report.issues[0].message


@pytest.mark.parametrize("doc", ["[1, 2, 3]", "[]", "null", '"text"', '{"log_history": {"step": 1}}'])
def test_a_trainer_state_of_the_wrong_shape_is_skipped_and_makes_no_run(tmp_path, doc):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(doc)
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert [(i.kind, i.message) for i in report.issues] == [("bad_file", "no log_history list")]
    assert not read(tmp_path / "lake", "runs") and not read(tmp_path / "lake", "history")


def test_hostile_console_lines_are_skipped(tmp_path):
    verl = tmp_path / "verl" / "output.log"
    verl.parent.mkdir()
    verl.write_text(
        f"step:1 - loss:1.0\nstep:99999999999999999999 - loss:9\nstep:2 - loss:{'7' * 4050}\nstep:3 - loss:3.0\n"
    )  # 4050 digits: no int, a line W&B did not cut
    trl = tmp_path / "trl" / "train.log"
    trl.parent.mkdir()
    trl.write_text(
        "{'loss': 1.0, 'step': 1}\n{'loss': 9.0, 'note': '\\ud800', 'step': 2}\n"
        "{'loss': 9.0, 'x': %s, 'step': 4}\n{'loss': 3.0, 'step': 3}\n" % ("[" * 5000 + "]" * 5000)
    )
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    by_run = {}
    for row in read(tmp_path / "lake", "history", "key = 'loss'"):
        by_run.setdefault(row["run_key"], {})[row["step"]] = row["value"]
    assert sorted(map(sorted, by_run.values())) == [[1, 2, 3], [1, 2, 3]]
    assert report.values >= 6 and not [i for i in report.issues if i.kind == "failed"]
    notes = [r["value_text"] for r in read(tmp_path / "lake", "history", "key = 'note'")]
    assert notes == ["\\ud800"]  # kept, as its escape


def test_hostile_wandb_records_are_skipped_and_the_run_lands(tmp_path):
    records = [
        wf.run_record("hostile1"),
        wf.config(lr="0.001", deep=DEEP_DICT, name='"\\ud800"'),
        wf.history("0", loss="1.0"),
        wf.history("1e300", loss="9.0"),
        wf.history("Infinity", loss="9.0"),
        wf.history('"text"', loss="9.0"),
        wf.history("1", loss="2.0", deep=DEEP, note='"\\udc80x"', nested='{"a": {"b": 1}}'),
        wf.summary(loss="2.0", odd='"\\ud800"', deep=DEEP),
        wf.history("2", loss="3.0"),
        wf.exit_record(0),
    ]
    wf.write(tmp_path / "runs", "hostile1", records)
    report = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert values(tmp_path / "lake") == {0: 1.0, 1: 2.0, 2: 3.0}
    assert issue_kinds(tmp_path / "lake").count("no_step") == 3
    [run] = read(tmp_path / "lake", "runs")
    assert run["state"] == "finished" and run["last_step"] == 2
    config, summary = json.loads(run["config"]), json.loads(run["summary"])
    assert config["lr"] == 0.001 and config["name"] == "\\ud800" and isinstance(config["deep"], str)
    assert summary["odd"] == "\\ud800" and summary["loss"] == 2.0
    kept = {r["key"]: r for r in read(tmp_path / "lake", "history", "step = 1")}
    assert kept["note"]["value_text"] == "\\udc80x" and kept["nested.a.b"]["value"] == 1.0
    assert kept["deep"]["value_type"] == "invalid_json"  # kept as its text: nested past what a metric has
    assert any("no_step" in line for line in report.lines())


def test_a_file_of_random_bytes_named_like_a_log_is_one_issue_not_one_per_line(tmp_path):
    noise = random.Random(6).randbytes(20_000)
    (tmp_path / "logs").mkdir()
    (tmp_path / "events").mkdir()
    for path in (
        tmp_path / "logs" / "metrics.jsonl",
        tmp_path / "logs" / "train.log",
        tmp_path / "events" / "e.ndjson",
    ):
        path.write_bytes(noise)
    logs = trainer_logs.ingest(tmp_path / "lake", [tmp_path / "logs"])
    events = event_files.ingest(tmp_path / "lake", [tmp_path / "events"])
    said = logs.issues + events.issues
    assert [(Path(i.path).name, i.kind, i.offset) for i in said] == [
        ("metrics.jsonl", "not_text", 0),
        ("train.log", "not_text", 0),
        ("e.ndjson", "not_text", 0),
    ]
    assert all(i.message.startswith("not a text file: a NUL byte at byte") for i in said) and not logs.notes
    assert not read(tmp_path / "lake", "runs") and not read(tmp_path / "lake", "events")
    assert not trainer_logs.ingest(tmp_path / "lake", [tmp_path / "logs"]).changed  # said once, until it changes
    assert not event_files.ingest(tmp_path / "lake", [tmp_path / "events"]).changed
    # A text log with a damaged line near its start (a crash's zeros, bytes that are not UTF-8) is still read.
    damaged = tmp_path / "damaged" / "metrics.jsonl"
    damaged.parent.mkdir()
    damaged.write_bytes(
        b'{"step": 1, "loss": 1.0}\n' + noise[:300].replace(b"\n", b"") + b'\n{"step": 3, "loss": 3.0}\n'
    )
    report = trainer_logs.ingest(tmp_path / "lake2", [damaged])
    assert [i.kind for i in report.issues] == ["bad_line"] and values(tmp_path / "lake2") == {1: 1.0, 3: 3.0}


# ------------------------------------------------------------------------------------------ 2. special files


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@pytest.mark.timeout(120)
def test_fifos_and_sockets_named_like_inputs_are_skipped_not_opened(tmp_path):
    runs = tmp_path / "runs"
    wf.write(runs, "good1", [wf.run_record("good1"), wf.history("0", loss="1.0"), wf.exit_record()])
    fifo_run = _fifo(runs / "run-20250101_000001-fifo1" / "run-fifo1.wandb")
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    (logs / "a" / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    _fifo(logs / "b" / "metrics.jsonl")
    events = tmp_path / "events"
    events.mkdir()
    (events / "diplomacy.ndjson").write_text('{"_time": "2024-01-01T00:00:00Z", "event": "ok"}\n')
    _fifo(events / "more.ndjson")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(events / "sock.ndjson"))
    try:
        offline = wandb_offline.ingest(tmp_path / "lake", [runs])
        logs_report = trainer_logs.ingest(tmp_path / "lake", [logs])
        events_report = event_files.ingest(tmp_path / "lake", [events])
    finally:
        sock.close()
    assert [(i.path, i.kind) for i in offline.issues] == [(str(fifo_run), "not_regular")]
    assert "FIFO" in offline.issues[0].message and offline.files_read == 1
    assert [i.kind for i in logs_report.issues] == ["not_regular"] and logs_report.files_read == 1
    assert sorted(i.kind for i in events_report.issues) == ["not_regular", "not_regular"]
    assert {"socket", "FIFO"} == {next(w for w in ("socket", "FIFO") if w in i.message) for i in events_report.issues}
    assert len(read(tmp_path / "lake", "events")) == 1 and values(tmp_path / "lake") == {0: 1.0, 1: 1.0}


def test_a_configured_root_that_is_missing_or_loops_is_said_and_fails_the_command(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    report = trainer_logs.ingest(tmp_path / "lake", [logs, tmp_path / "missing", loop])
    assert sorted(i.kind for i in report.issues) == ["bad_root", "missing_root"]
    assert values(tmp_path / "lake") == {1: 1.0}
    home = tmp_path / "home"
    proc = grpolens(
        "ingest",
        env={
            "GRPOLENS_HOME": str(home),
            "GRPOLENS_TRAINER_LOGS": str(logs),
            "GRPOLENS_WANDB_DIRS": str(tmp_path / "nowhere"),
        },
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("grpolens ingest: GRPOLENS_WANDB_DIRS names") and "does not exist" in last
    assert "trainer logs: 1 file, 1 read" in proc.stderr  # the other source still ran


# ----------------------------------------------------------------------------------------- 3. rewritten files


def test_logs_rewritten_in_place_are_read_again_from_the_start(tmp_path):
    events = tmp_path / "events" / "diplomacy.ndjson"
    events.parent.mkdir()
    line = '{"_time": "2024-01-01T00:%02d:%02dZ", "event": "%s", "i": %d}\n'
    events.write_text("".join(line % (i // 60, i % 60, "old", i) for i in range(50)))
    log = tmp_path / "logs" / "metrics.jsonl"
    log.parent.mkdir()
    log.write_text("".join(f'{{"step": {s}, "loss": {s}}}\n' for s in range(50)))
    console = tmp_path / "logs" / "verl" / "output.log"
    console.parent.mkdir()
    console.write_text("".join(f"step:{s} - loss:{s}\n" for s in range(50)))
    event_files.ingest(tmp_path / "lake", [events.parent])
    trainer_logs.ingest(tmp_path / "lake", [log.parent])
    # Overwritten (not appended) with more, different content: 80 events, 80 steps of other values.
    events.write_text("".join(line % (i // 60, i % 60, "new", 1000 + i) for i in range(80)))
    log.write_text("".join(f'{{"step": {s}, "loss": {-s}}}\n' for s in range(80)))
    console.write_text("".join(f"step:{s} - loss:{-s}\n" for s in range(80)))
    ev = event_files.ingest(tmp_path / "lake", [events.parent])
    tl = trainer_logs.ingest(tmp_path / "lake", [log.parent])
    assert any("rewritten" in n for n in ev.notes) and sum("rewritten" in n for n in tl.notes) == 2
    new = [e for e in read(tmp_path / "lake", "events") if e["event"] == "new"]
    assert len({e["event_id"] for e in new}) == 80
    for run in read(tmp_path / "lake", "runs"):
        steps = {
            r["step"]: r["value"]
            for r in read(tmp_path / "lake", "history", f"run_key = '{run['run_key']}'")
            if r["ingest_id"] >= (run["history_from_ingest"] or 0)
        }
        assert steps == {s: -float(s) for s in range(80)}


def test_wandb_file_with_changed_earlier_bytes_of_the_same_size_is_read_again(tmp_path):
    records = [wf.run_record("same1"), *[wf.history(str(s), loss=f"{s}.5") for s in range(20)], wf.exit_record()]
    path = wf.write(tmp_path / "runs", "same1", records)
    wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    data = path.read_bytes()
    at = data.index(b"3.5")
    path.write_bytes(frame_same_size(records, 3))
    assert path.stat().st_size == len(data) and path.read_bytes()[at : at + 3] == b"3.7"
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    report = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert report.changed and any("rewritten" in n for n in report.notes)
    assert values(tmp_path / "lake")[3] == 3.7 and len(values(tmp_path / "lake")) == 20


def test_a_wandb_file_read_again_from_the_start_counts_its_rows_once(tmp_path):
    """runs.history_rows after a re-read: the file's earlier count is replaced, not added to, also for one segment
    of a resumed run (the other segment's rows stay counted); and that segment keeps its shift."""
    first = [wf.run_record("twice1"), *[wf.history(str(s), loss=f"{s}.25") for s in range(20)], wf.exit_record()]
    wf.write(tmp_path / "runs", "twice1", first)
    resumed = [wf.run_record("twice1"), *[wf.history(str(s), loss=f"{s}.5") for s in range(6)], wf.exit_record()]
    path = tmp_path / "runs" / "run-20250102_000000-twice1" / "run-twice1.wandb"
    path.parent.mkdir()
    path.write_bytes(wf.frame(resumed))
    lake = tmp_path / "lake"
    wandb_offline.ingest(lake, [tmp_path / "runs"])
    assert latest_run(lake)[:2] == (26, 25)  # the resumed segment restarted _step at 0: shifted to 20..25
    path.write_bytes(frame_same_size(resumed, 3))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    report = wandb_offline.ingest(lake, [tmp_path / "runs"])
    assert any("rewritten" in n for n in report.notes)
    assert latest_run(lake)[:2] == (26, 25)
    resumed_values = {20 + s: s + (0.7 if s == 3 else 0.5) for s in range(6)}
    assert values(lake) == {**{s: s + 0.25 for s in range(20)}, **resumed_values}
    path.write_bytes(wf.frame(resumed[:4]))  # cut back to its first three steps: read again, shrunk
    report = wandb_offline.ingest(lake, [tmp_path / "runs"])
    assert any("shrank" in n for n in report.notes)
    assert latest_run(lake)[:2] == (23, 22)


def test_a_lake_from_before_per_file_counts_still_counts_a_reread_single_file_run_once(tmp_path):
    records = [wf.run_record("older1"), *[wf.history(str(s), loss=f"{s}.5") for s in range(20)], wf.exit_record()]
    path = wf.write(tmp_path / "runs", "older1", records)
    lake = tmp_path / "lake"
    wandb_offline.ingest(lake, [tmp_path / "runs"])
    state_file = lake / "_state" / "wandb_offline.json"
    state = json.loads(state_file.read_text())
    for run in state["runs"].values():
        del run["file_history"]  # as an earlier version saved it
    state_file.write_text(json.dumps(state))
    path.write_bytes(frame_same_size(records, 3))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    wandb_offline.ingest(lake, [tmp_path / "runs"])
    assert latest_run(lake)[:2] == (20, 19)


def latest_run(lake: Path) -> tuple:
    """(history_rows, last_step, ingest_id) of the lake's newest runs row."""
    row = max(read(lake, "runs"), key=lambda r: r["ingest_id"])
    return row["history_rows"], row["last_step"], row["ingest_id"]


def frame_same_size(records: list[bytes], step: int) -> bytes:
    changed = [
        r if r != wf.history(str(step), loss=f"{step}.5") else wf.history(str(step), loss=f"{step}.7") for r in records
    ]
    return wf.frame(changed)


# ---------------------------------------------------------------------------- 4. damage near a .wandb file's end


def test_a_corrupt_chunk_in_the_last_block_is_damage_and_the_exit_record_is_kept(tmp_path):
    records = [wf.run_record("tail1"), *[wf.history(str(s), loss=f"{s}.0") for s in range(5)]]
    path = wf.write(tmp_path / "runs", "tail1", [*records, wf.history("5", loss="5.0"), wf.exit_record(0)])
    data = bytearray(path.read_bytes())
    cut = len(wf.frame(records))  # the header of step 5's chunk: its length now runs past the end of the file
    data[cut + 4 : cut + 6] = (30000).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    report = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert [i.kind for i in report.issues] == ["bad_chunk"] and "next intact chunk" in report.issues[0].message
    [run] = read(tmp_path / "lake", "runs")
    assert run["state"] == "finished" and set(values(tmp_path / "lake")) == {0, 1, 2, 3, 4}


def test_an_incomplete_last_record_is_a_live_write_until_the_file_goes_quiet(tmp_path):
    records = [wf.run_record("quiet1"), *[wf.history(str(s), loss=f"{s}.0") for s in range(5)]]
    path = wf.write(tmp_path / "runs", "quiet1", records)
    whole = path.read_bytes()
    path.write_bytes(whole + wf.frame([wf.history("5", loss="5.0")])[len(wf.frame([])) :][:-3])  # cut mid-record
    live = wandb_offline.ingest(tmp_path / "live", [tmp_path / "runs"])
    assert not live.issues and any("incomplete record" in n for n in live.notes)
    old = time.time() - 2 * files.QUIET_S
    os.utime(path, (old, old))
    quiet = wandb_offline.ingest(tmp_path / "quiet", [tmp_path / "runs"])
    assert [i.kind for i in quiet.issues] == ["bad_chunk"]
    assert set(values(tmp_path / "quiet")) == set(values(tmp_path / "live")) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("head", [b"", b":W&"])
def test_a_run_file_without_its_header_waits_while_new_and_is_said_once_when_quiet(tmp_path, head):
    """wandb creates the file, then writes its header: a file caught between waits. One left so for half an hour
    is a run that died as it started: said once, as one issue, not every ingest as a write in progress."""
    path = tmp_path / "runs" / "run-20250101_000000-dead" / "run-dead.wandb"
    path.parent.mkdir(parents=True)
    path.write_bytes(head)
    fresh = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert not fresh.issues and [n for n in fresh.notes if "still being created" in n]
    old = time.time() - 2 * files.QUIET_S
    os.utime(path, (old, old))
    quiet = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert [(i.kind, i.message) for i in quiet.issues] == [
        ("empty_run_file", f"{len(head)} bytes, no .wandb header, untouched for over 30 minutes: no run")
    ]
    again = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert not again.issues and not again.notes and again.files_read == 0
    assert wf.write(tmp_path / "runs", "dead", [wf.run_record("dead"), wf.history("0", loss="1.0")]) == path
    revived = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])  # it changed: read again
    assert not revived.issues and revived.values == 1


# ------------------------------------------------------------------------------------------------ 5. leftovers


def test_temporary_parts_of_dead_ingests_are_removed_and_live_ones_kept(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    trainer_logs.ingest(tmp_path / "lake", [logs])
    folder = tmp_path / "lake" / "history" / "source=trainer_log"
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    leftovers = [folder / f".part-00000009-x.parquet.abcd1234.{dead}.tmp", folder / ".part-00000008-y.parquet.tmp"]
    for path in leftovers:
        path.write_bytes(b"\0" * 2**20)
    old = time.time() - 7200
    os.utime(leftovers[1], (old, old))
    live = folder / f".part-00000010-z.parquet.abcd1234.{os.getpid()}.tmp"
    live.write_bytes(b"x")
    (logs / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 2.0}\n')
    report = trainer_logs.ingest(tmp_path / "lake", [logs])
    assert not any(p.exists() for p in leftovers) and live.exists()
    assert any("removed 2 temporary file(s) (2.0 MiB)" in n for n in report.notes)


# ----------------------------------------------------------------------------------------- 9. identical copies


def test_byte_identical_copies_of_a_run_folder_are_one_run_read_once(tmp_path):
    records = [wf.run_record("copy1"), *[wf.history(str(s), loss=f"{s}.0") for s in range(300)], wf.exit_record()]
    original = wf.write(tmp_path / "runs", "copy1", records).parent
    for n in range(30):
        shutil.copytree(original, tmp_path / "runs" / f"copies{n:02d}" / original.name)
    report = wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"])
    assert report.files_seen == 31 and sum("byte-identical copy" in n for n in report.notes) == 30
    assert len(read(tmp_path / "lake", "runs")) == 1
    assert values(tmp_path / "lake") == {s: float(s) for s in range(300)}  # not shifted 30 times
    assert len(read(tmp_path / "lake", "history", "key = 'loss'")) == 300
    assert not wandb_offline.ingest(tmp_path / "lake", [tmp_path / "runs"]).changed


# --------------------------------------------------------------------------------------- end to end, in the CLI


def test_refresh_over_every_kind_of_hostile_input_builds_and_says_what_it_skipped(tmp_path):
    """All the above at once through `grpolens refresh`: exit 0, one line per skip, no traceback, and the
    warehouse (dbt on DuckDB) takes every value that was kept, escaped surrogates and all."""
    runs, logs, events = tmp_path / "runs", tmp_path / "logs", tmp_path / "events"
    wf.write(
        runs,
        "mixed1",
        [
            wf.run_record("mixed1"),
            wf.config(deep=DEEP_DICT, name='"\\ud800"'),
            wf.history("0", loss="1.0"),
            wf.history("1e300", loss="9.0"),
            wf.history("1", loss="2.0", note='"\\udc80x"', deep=DEEP),
            wf.exit_record(),
        ],
    )
    (logs / "a").mkdir(parents=True)
    (logs / "a" / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 1.0}\n{"step": 1e300, "loss": 9}\n'
        f'{{"step": 2, "\\ud800": 1, "loss": 2.0}}\n{{"step": 3, "x": {DEEP}}}\n'
    )
    (logs / "b").mkdir()
    (logs / "b" / "trainer_state.json").write_text(
        json.dumps({"stateful_callbacks": [1], "log_history": [{"step": 2**70, "loss": 1}, {"step": 5, "loss": 0.5}]})
    )
    events.mkdir()
    (events / "diplomacy.ndjson").write_text(
        '{"_time": "2024-02-30T00:00:00Z", "event": "x"}\n'
        '{"_time": "2024-01-01T00:00:00Z", "event": "\\ud800"}\n'
        f'{{"_time": "2024-01-01T00:00:01Z", "event": "ok", "x": {DEEP}}}\n'
        '{"_time": "2024-01-01T00:00:02Z", "event": "ok"}\n'
    )
    env = {
        "GRPOLENS_HOME": str(tmp_path / "home"),
        "GRPOLENS_WANDB_DIRS": str(runs),
        "GRPOLENS_TRAINER_LOGS": str(logs),
        "GRPOLENS_EVENT_FILES": str(events),
    }
    proc = grpolens("refresh", env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if line.strip().startswith("skipped:")]
    assert len(skipped) == 6, skipped  # .wandb: 1e300; jsonl: 1e300, deep line; trainer_state: 2**70; events: 2
    out = grpolens(
        "sql",
        "select run_key like 'wandb:%' as wandb, step, value from history where key = 'loss' order by all",
        "--format",
        "csv",
        env=env,
        check=True,
    )
    assert out.stdout.splitlines()[1:] == ["False,1,1.0", "False,2,2.0", "False,5,0.5", "True,0,1.0", "True,1,2.0"]
    out = grpolens(
        "sql", "select event, count(*) from events group by all order by all", "--format", "csv", env=env, check=True
    )
    assert out.stdout.splitlines()[1:] == ["\\ud800,1", "ok,1"]
    issues = grpolens("sql", "select count(*) from ingest_issues", "--format", "csv", env=env, check=True)
    assert issues.stdout.splitlines()[1] == "6"
