"""The rules over the event marts (rollout_timing, health, extraction): each trouble period the demo's event
generator injects is flagged, named by dataset and hours, and no healthy hour is."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from pipeline import checks, warehouse
from pipeline.demo.events import write_demo_events
from pipeline.ingest import ingest
from pipeline.settings import Settings

# The kind of trouble each period is, and the rules that must see it.
EXPECTED = {
    "slow_rollouts": {"rollout_p95_slow"},
    "error_burst": {"error_rate_high"},
    "extraction_failures": {"extraction_rate_low", "extraction_empty_high"},
}


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    home = tmp_path_factory.mktemp("events-home")
    truths = []
    # Two days, periods cut differently by the clock hours (one starts on the hour, one at :37).
    for seed, start in ((7, datetime(2025, 3, 1, 8, 0, tzinfo=UTC)), (11, datetime(2025, 3, 3, 9, 37, tzinfo=UTC))):
        truths.append(write_demo_events(home / "events" / f"diplomacy-{seed}.ndjson", start, hours=6, seed=seed))
    settings = Settings(home=home, event_files=(home / "events",))
    ingest(settings, ("event_files",))
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        outcomes = checks.run_checks(con, checks.load_checks())
    finally:
        con.close()
    assert not [o.error for o in outcomes if o.error]
    rows = [r for o in outcomes for r in o.rows if r["run_key"] is None]
    periods = [
        (name, datetime.fromisoformat(p["start"]), datetime.fromisoformat(p["end"]))
        for truth in truths
        for name, p in truth["periods"].items()
    ]
    return rows, periods


def _overlaps(row: dict, start: datetime, end: datetime) -> bool:
    return row["started_at"] < end and row["ended_at"] > start


def test_every_trouble_period_is_flagged_by_its_rules(flagged):
    rows, periods = flagged
    for name, start, end in periods:
        seen = {r["check_name"] for r in rows if _overlaps(r, start, end)}
        assert EXPECTED[name] <= seen, (name, start, seen)
    for row in rows:
        assert row["dataset"] == "diplomacy" and row["step"] is None and row["severity"] in ("warn", "error")
        assert row["started_at"] < row["ended_at"] and row["message"] and "diplomacy" in row["message"]


def test_no_healthy_hour_is_flagged(flagged):
    rows, periods = flagged
    for row in rows:
        # A flagged hour must hold trouble of the rule's kind: its clock hours overlap such a period.
        kinds = {name for name, start, end in periods if _overlaps(row, start, end)}
        assert any(row["check_name"] in EXPECTED[k] for k in kinds), row
        hours = (row["ended_at"] - row["started_at"]) / timedelta(hours=1)
        assert hours <= 3, row  # the periods last 16-45 minutes: at most the hours they touch, and one more


def test_the_cli_names_dataset_hours_not_runs(tmp_path):
    row = {"started_at": datetime(2025, 3, 1, 10, tzinfo=UTC), "ended_at": datetime(2025, 3, 1, 12, tzinfo=UTC)}
    assert checks.hours(row) == "2025-03-01 10:00-12:00 UTC"


def test_a_nan_duration_is_left_out_of_the_rollout_timing_and_counted(tmp_path):
    """One rollout_complete whose total_duration_ms is NaN (json.dumps writes it so) must not make every quantile
    NaN: the figures are over the finite durations, and the NaN one is counted apart."""
    start = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)
    durations = [float(1000 * s) for s in range(10, 40)] + [math.nan]
    events = tmp_path / "events" / "diplomacy.ndjson"
    events.parent.mkdir()
    events.write_text(
        "".join(
            json.dumps(
                {
                    "_time": (start + timedelta(minutes=i)).isoformat(),
                    "event": "rollout_complete",
                    "service": "trainer",
                    "rollout_id": f"r{i}",
                    "trajectories_count": 7,
                    "total_duration_ms": ms,
                }
            )
            + "\n"
            for i, ms in enumerate(durations)
        )
    )
    settings = Settings(home=tmp_path / "home", event_files=(events.parent,))
    ingest(settings, ("event_files",))
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.sql(
            "select grain, rollouts_completed, rollouts_timed, rollouts_nonfinite, duration_p50_s, duration_p95_s, "
            "duration_max_s, missing_reason from rollout_timing order by grain"
        ).fetchall()
    finally:
        con.close()
    figures = (31, 30, 1, 24.5, pytest.approx(37.55), 39.0, None)
    assert rows == [("hour", *figures), ("overall", *figures)]
