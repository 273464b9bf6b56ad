"""The shared detectors (sql/detectors.sql) against their plain definitions: a faster formulation must flag the
same steps. Run on an in-memory `metrics` table of random series, with the rules' thresholds and with permissive
ones (most points candidates), spikes planted, zeros and negative values included."""

from __future__ import annotations

import math
import random

import duckdb
import pyarrow as pa
import pytest

from pipeline.checks import DETECTORS

# log_spikes as first written: the median and MAD of every point's frame, as window aggregates (and, for a frame
# with values below 0, those of the values themselves).
REFERENCE_LOG_SPIKES = """
with series as (
    select run_key, step, value, ln(greatest(value, 1e-9)) as log_value,
        row_number() over (partition by run_key order by step) as idx
    from metrics
    where metric = $metric and isfinite(value) and (value > 0 or not $positive_only)
),
baselines as (
    select *,
        exp(median(log_value) over baseline) as level,
        median(log_value) over baseline as log_level,
        1.4826 * mad(log_value) over baseline as spread,
        count(*) over baseline as base_n,
        median(value) over baseline as linear_level,
        1.4826 * mad(value) over baseline as linear_spread,
        min(value) over baseline as frame_min
    from series
    window baseline as (
        partition by run_key order by step
        rows between $window preceding and $window * $centered::int following exclude current row
    )
),
spikes as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from baselines
    where base_n >= $min_baseline and value > $min_value and value >= $min_ratio * level
        and log_value > log_level + $mad_factor * greatest(spread, $min_spread)
        and (frame_min >= 0 or value > linear_level + $mad_factor * greatest(linear_spread, 1e-12))
)
select run_key, min(step), max(step), count(*), max(value), max(value / level), arg_min(level, step)
from spikes group by run_key, episode order by all
"""


@pytest.fixture(scope="module")
def con():
    rng = random.Random(7)
    rows = []
    for run in range(12):
        level, noise = rng.choice([0.01, 1.0, 50.0]), rng.choice([0.05, 0.4, 1.5])
        for step in range(0, rng.randint(30, 400), rng.choice([1, 1, 5])):
            for metric in ("grad_norm", "kl"):
                value = level * rng.lognormvariate(0, noise)
                if rng.random() < 0.02:
                    value *= rng.choice([3, 8, 40])  # a spike
                if rng.random() < 0.02:
                    value = rng.choice([0.0, -0.01 * level, float("nan")])
                rows.append((f"run{run}", step, metric, value))
    con = duckdb.connect()
    columns = zip(*rows, strict=True)
    con.register("series", pa.table(dict(zip(["run_key", "step", "metric", "value"], columns, strict=True))))
    con.execute("create table metrics as select * from series")
    con.execute(DETECTORS.read_text(encoding="utf-8"))
    yield con
    con.close()


@pytest.mark.parametrize(
    "metric, window, centered, mad_factor, min_spread, min_ratio, min_baseline, min_value, positive_only",
    [
        ("grad_norm", 20, False, 6, 0.05, 4, 10, 0, True),  # grad_norm_spike's thresholds
        ("kl", 10, True, 3, 0.1, 3, 5, 0.2, False),  # kl_spike's
        ("grad_norm", 20, False, 1, 0.05, 1.2, 10, 0, True),  # permissive: most points are candidates
        ("kl", 10, True, 0.5, 0.0, 1.0, 3, 0, False),
        ("kl", 5, False, 2, 0.1, 0, 3, -1, False),  # no ratio test at all
    ],
)
def test_log_spikes_flags_what_its_plain_definition_flags(
    con, metric, window, centered, mad_factor, min_spread, min_ratio, min_baseline, min_value, positive_only
):
    params = {
        "metric": metric,
        "window": window,
        "centered": centered,
        "mad_factor": mad_factor,
        "min_spread": min_spread,
        "min_ratio": min_ratio,
        "min_baseline": min_baseline,
        "min_value": min_value,
        "positive_only": positive_only,
    }
    expected = con.execute(REFERENCE_LOG_SPIKES, params).fetchall()
    got = con.execute(
        "select run_key, onset, step_end, steps, worst, ratio, level from log_spikes($metric, $window, $centered, "
        "$mad_factor, $min_spread, $min_ratio, $min_baseline, min_value := $min_value, "
        "positive_only := $positive_only) order by all",
        params,
    ).fetchall()
    assert len(expected) > 0  # the case flags something
    assert [r[:4] for r in got] == [r[:4] for r in expected]  # run, onset, end, steps
    assert [r[4:] for r in got] == [pytest.approx(r[4:], rel=1e-12) for r in expected]  # worst, ratio, level


def test_a_signed_kl_estimate_is_judged_on_its_values_not_its_floored_logs():
    """A k1 KL estimate swings around 0 and below it (a real custom trainer's kl_div: -0.6 to 0.3 most steps): its
    log level is the 1e-9 floor, so any value past kl_spike's 0.2 read as a spike a hundred million times its level.
    A frame with values below 0 needs the value beyond the values' own spread too: the noise peak at step 50 is not
    a spike, the jump to 3.0 at step 150 is."""
    con = duckdb.connect()
    values = [0.28 * math.sin(1.7 * i) - 0.1 for i in range(200)]
    values[50], values[150] = 0.25, 3.0
    con.execute("create table metrics (run_key varchar, step bigint, metric varchar, value double)")
    con.executemany("insert into metrics values ('k1', ?, 'kl', ?)", list(enumerate(values)))
    con.execute(DETECTORS.read_text(encoding="utf-8"))
    found = con.execute(
        "select onset, worst, level, linear_level from log_spikes('kl', 10, true, 3, 0.1, 3, 5, min_value := 0.2, "
        "positive_only := false)"
    ).fetchall()
    assert [(onset, worst) for onset, worst, _, _ in found] == [(150, 3.0)]
    assert found[0][2] == pytest.approx(1e-9) and -0.2 < found[0][3] < 0.1  # the log level floored; the values'
