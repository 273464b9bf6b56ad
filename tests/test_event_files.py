"""NDJSON event files, and the demo events: incremental reads, bad lines, one id for one event on both paths."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from pipeline.demo.events import serve_demo_events, write_demo_events
from pipeline.sources import axiom, event_files, files
from pipeline.sources.event_files import content_id, parse_time_ns

# grpo-signals.md §1a: each event's fields, exactly.
SPEC = {
    "rollout_start": {"rollout_id", "samples_per_group", "horizon_years", "horizon_type", "warmup_phases"},
    "rollout_complete": {"rollout_id", "trajectories_count", "total_inference_calls", "total_duration_ms"},
    "rollout_error": {"rollout_id", "error", "phase"},
    "rollout_metrics": {
        "rollout_id",
        "duration_ms",
        "inference_calls",
        "extraction_rate",
        "empty_responses",
        "partial_responses",
        "invalid_orders",
        "over_extracted",
    },
    "orders_extracted": {"rollout_id", "power_name", "orders_count", "expected_count", "status", "phase"},
    "orders_partial": {
        "rollout_id",
        "power_name",
        "orders_count",
        "expected_count",
        "status",
        "phase",
        "raw_response_preview",
        "raw_response_length",
    },
    "orders_empty": {
        "rollout_id",
        "power_name",
        "orders_count",
        "expected_count",
        "status",
        "phase",
        "raw_response_preview",
        "raw_response_length",
    },
    "inference_response": {"batch_size", "duration_ms", "tokens_generated", "tokens_per_second"},
    "inference_timing_breakdown": {
        "total_time_s",
        "generation_time_s",
        "adapter_load_time_s",
        "input_tokens_per_second",
        "output_tokens_per_second",
        "batch_size",
        "prefix_cache_hit_rate",
        "tokens_generated",
        "prompt_tokens",
        "lora_name",
    },
    "prefix_cache_stats": {"hit_rate", "queries", "hits", "prompt_tokens_total", "prompt_tokens_cached"},
    "span_duration": {"span_name", "duration_ms", "status"},
    "gpu_stats": {"gpu_utilization", "memory_utilization", "memory_used", "memory_total"},
    "sweep_run_started": {"run_name"},
    "sweep_run_completed": {"run_name"},
    "sweep_run_failed": {"run_name"},
}


def rows(lake: Path, source: str = "event_files") -> list[tuple]:
    return duckdb.sql(
        f"select dataset, time, event, service, rollout_id, run_name, fields, event_id, file_offset, "
        f"ingest_id from read_parquet('{lake}/events/source={source}/*.parquet') order by ingest_id, "
        "file_offset"
    ).fetchall()


def line(**event) -> str:
    return json.dumps(event) + "\n"


def test_incremental_by_byte_offset_complete_lines_only(tmp_path):
    folder = tmp_path / "events"
    folder.mkdir()
    path = folder / "trainer.ndjson"
    first = line(
        _time="2026-01-01T00:00:00.000001Z",
        event="rollout_start",
        service="w",
        rollout_id="r1",
        samples_per_group=8,
        horizon_years=2,
        horizon_type="fixed",
        warmup_phases=2,
    )
    second = line(
        _time="2026-01-01T00:00:01Z",
        event="gpu_stats",
        service="w",
        gpu_utilization=81.5,
        memory_utilization=70.0,
        memory_used=60000,
        memory_total=81920,
        extra={"nested": {"deep": 1}},
    )
    path.write_text(first + second[:30])  # the second line is still being written
    lake = tmp_path / "lake"
    assert event_files.pending_files(lake, [folder]) == [path]
    report = event_files.ingest(lake, [folder])
    assert report.events == 1 and any("incomplete line" in n for n in report.notes)
    assert report.lines()[0].startswith("event files: 1 file, 1 read, ")  # "1 file", not "1 files"
    got = rows(lake)
    assert got[0][0] == "diplomacy" and got[0][2] == "rollout_start" and got[0][4] == "r1" and got[0][8] == 0
    assert got[0][1] == datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert json.loads(got[0][6]) == {
        "samples_per_group": 8,
        "horizon_years": 2,
        "horizon_type": "fixed",
        "warmup_phases": 2,
    }
    assert event_files.pending_files(lake, [folder]) == []
    assert not event_files.ingest(lake, [folder]).changed  # nothing new: nothing read, nothing written

    with open(path, "a") as fh:
        fh.write(second[30:])
    report = event_files.ingest(lake, [folder])
    assert report.events == 1 and report.records == 1  # only the new line was read
    got = rows(lake)
    assert len(got) == 2 and got[1][8] == len(first) and got[1][9] == 2
    assert json.loads(got[1][6]) == {
        "gpu_utilization": 81.5,
        "memory_utilization": 70.0,
        "memory_used": 60000,
        "memory_total": 81920,
        "extra.nested.deep": 1,
    }

    path.write_text(second)  # rewritten shorter: read again from the start; the same event has the same id
    report = event_files.ingest(lake, [folder])
    assert any("shrank" in n for n in report.notes)
    got = rows(lake)
    assert got[-1][7] == got[1][7] and len({r[7] for r in got}) == 2


def test_a_quiet_files_last_line_without_newline_is_read_and_an_append_follows_it(tmp_path):
    path = tmp_path / "events.ndjson"
    first = line(_time="2026-01-01T00:00:00Z", event="rollout_start", service="w", rollout_id="r1")
    second = line(_time="2026-01-01T00:00:01Z", event="rollout_start", service="w", rollout_id="r2")
    third = line(_time="2026-01-01T00:00:02Z", event="rollout_start", service="w", rollout_id="r3")
    path.write_text(first + second.rstrip("\n"))  # the producer ended without a newline, long ago
    old = time.time() - 2 * files.QUIET_S
    os.utime(path, (old, old))
    report = event_files.ingest(tmp_path / "lake", [path])
    assert report.events == 2 and not report.notes
    with open(path, "a") as fh:  # written again later, right after that line
        fh.write(third)
    assert event_files.ingest(tmp_path / "lake", [path]).events == 1
    got = rows(tmp_path / "lake")
    assert [(r[4], r[8]) for r in got] == [("r1", 0), ("r2", len(first)), ("r3", len(first + second) - 1)]


def test_bad_lines_are_counted_reported_and_skipped(tmp_path):
    path = tmp_path / "diplomacy" / "events.jsonl"
    path.parent.mkdir()
    good = line(
        _time="2026-01-01T00:00:00Z", event="rollout_error", service="w", rollout_id="r9", error="boom", phase="S1901M"
    )
    lines = [
        good,
        "{not json\n",
        "[1, 2]\n",
        line(event="no time"),
        line(_time="yesterday", event="x"),
        "\n",
        b"\xff\xfe broken utf8\n".decode("latin-1"),
        good.replace("r9", "r10"),
    ]
    path.write_text("".join(lines), encoding="latin-1")
    report = event_files.ingest(tmp_path / "lake", [tmp_path])
    assert report.events == 2 and report.bad_lines == 5
    offsets = [sum(len(x.encode("latin-1")) for x in lines[:i]) for i in range(len(lines))]
    assert [(i.offset, i.kind) for i in report.issues] == [
        (offsets[1], "bad_line"),
        (offsets[2], "bad_line"),
        (offsets[3], "no_time"),
        (offsets[4], "no_time"),
        (offsets[6], "bad_line"),
    ]
    assert "not JSON" in report.issues[0].message and "'yesterday' is not a time" in report.issues[3].message
    assert any(said.startswith(f"  skipped: {path} @ byte {offsets[1]}: bad_line") for said in report.lines())
    stored = duckdb.sql(
        f'select path, "offset", kind from read_parquet(\'{tmp_path}/lake/ingest_issues/'
        'source=event_files/*.parquet\') order by "offset"'
    ).fetchall()
    assert stored == [
        (str(path), o, k)
        for o, k in [
            (offsets[1], "bad_line"),
            (offsets[2], "bad_line"),
            (offsets[3], "no_time"),
            (offsets[4], "no_time"),
            (offsets[6], "bad_line"),
        ]
    ]
    # The file is in a folder named after a configured dataset: that is its dataset.
    assert {r[0] for r in rows(tmp_path / "lake")} == {"diplomacy"}
    many = tmp_path / "many" / "noise.ndjson"
    many.parent.mkdir()
    many.write_text("garbage\n" * 50)
    report = event_files.ingest(tmp_path / "lake", [many], datasets=["other", "diplomacy"])
    assert report.bad_lines == 50 and len(report.issues) == event_files.DETAILED_BAD_LINES + 1
    assert "40 more bad lines" in report.issues[-1].message


def test_content_id_is_stable_across_representations():
    t = parse_time_ns("2026-01-01T00:00:00.5Z")
    assert t == parse_time_ns("2026-01-01T01:00:00.500000000+01:00") == parse_time_ns(1767225600.5)
    a = content_id(t, {"_time": "x", "event": "e", "n": 1.0, "v": [1.0, 2.5], "_sysTime": "y"})
    assert a == content_id(t, {"v": [1, 2.5], "n": 1, "event": "e", "_rowId": "z"})
    assert a != content_id(t + 1, {"v": [1, 2.5], "n": 1, "event": "e"})
    assert a != content_id(t, {"v": [1, 2.5], "n": 2, "event": "e"})
    # NaN is not JSON: written as the string W&B shows, in the id and in the fields alike.
    assert content_id(t, {"x": float("nan")}) == content_id(t, {"x": "NaN"})


def test_demo_events_have_every_event_type_and_read_the_same_both_ways(tmp_path):
    path = tmp_path / "events" / "diplomacy.ndjson"
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    truth = write_demo_events(path, start, hours=1.5, seed=7)
    assert truth["counts"].keys() == SPEC.keys()
    assert set(truth["periods"]) == {"slow_rollouts", "error_burst", "extraction_failures"}
    periods = truth["periods"]
    assert periods["slow_rollouts"]["rollout_p95_s"] > 120 > truth["normal"]["rollout_p95_s"]
    assert periods["error_burst"]["error_rate"] > 0.2 > truth["normal"]["error_rate"]
    assert periods["extraction_failures"]["orders_full_share"] < 0.8
    assert [r["status"] for r in truth["runs"]] == ["completed", "completed", "failed"]
    with open(path) as fh:
        events = [json.loads(line) for line in fh]
    assert len(events) == truth["events"]
    for event in events:  # exactly the fields the reference lists (a few more where it says "+ ..." or "*")
        fields = set(event) - {"_time", "event", "service"}
        assert SPEC[event["event"]] <= fields, event
    assert write_demo_events(tmp_path / "again.ndjson", start, hours=1.5, seed=7) | {"path": None} == truth | {
        "path": None
    }  # deterministic for a seed

    lake = tmp_path / "lake"
    started = time.perf_counter()
    report = event_files.ingest(lake, [path.parent])
    assert report.events == truth["events"] and report.bad_lines == 0
    with serve_demo_events(path, row_ids=False) as (url, token):
        report = axiom.ingest(lake, ["diplomacy"], url=url, token=token, page_size=5000)
    assert report.events == truth["events"] and not report.issues
    assert time.perf_counter() - started < 30
    from_files = {r[7]: r[:7] for r in rows(lake)}
    from_api = {r[7]: r[:7] for r in rows(lake, "axiom")}
    assert from_files == from_api  # one event, one id and one row, whichever way it was read
    sweeps = duckdb.sql(
        f"select run_name from read_parquet('{lake}/events/source=axiom/*.parquet') "
        "where event = 'sweep_run_started' order by time"
    ).fetchall()
    assert [s[0] for s in sweeps] == [r["run_name"] for r in truth["runs"]]
