"""The shared detectors (sql/detectors.sql) against their plain definitions: a faster formulation must flag the
same steps. Run on an in-memory `metrics` table of random series, with the rules' thresholds and with permissive
ones (most points candidates), spikes planted, zeros and negative values included."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from pipeline.checks import DETECTORS

# log_spikes as first written: the median and MAD of every point's frame, as window aggregates.
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
        count(*) over baseline as base_n
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
