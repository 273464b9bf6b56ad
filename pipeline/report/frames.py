"""What a report knows about one run, read once from the warehouse (read-only) into polars frames.

Every query goes DuckDB → Arrow → polars (`.pl()`), never through Python lists, so a run of 10^6 values costs what
Arrow costs. A table a warehouse does not have yet (an older build, a mart added later) reads as an empty frame:
the report then says the section could not be judged instead of failing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import polars as pl

from pipeline.checks import ANOMALY_COLUMNS

# The curves a report reads and draws, in the order a practitioner reads them.
CORE_METRICS = (
    "reward_mean",
    "task_score",
    "kl",
    "grad_norm",
    "entropy",
    "response_length_mean",
    "response_clip_ratio",
    "loss",
    "clip_fraction",
    "frac_reward_zero_std",
    "reward_std",
)


@dataclass
class RunData:
    run: dict
    metrics: pl.DataFrame  # step, metric, value: every canonical metric of the run
    findings: list[dict]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)  # mart name -> this run's rows
    peers: pl.DataFrame | None = None  # run_key, name, tail reward of runs of the same group (or project)

    @property
    def steps(self) -> list[int]:
        return self.metrics.get_column("step").unique().sort().to_list() if self.metrics.height else []

    def metric(self, name: str) -> pl.DataFrame:
        """step, value of one canonical metric, sorted by step."""
        return self.metrics.filter(pl.col("metric") == name).select("step", "value").sort("step")

    def has(self, name: str) -> bool:
        return name in set(self.metrics.get_column("metric").unique().to_list()) if self.metrics.height else False

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())


def _tables(con) -> set[str]:
    return {name for (name,) in con.execute("select table_name from information_schema.tables").fetchall()}


def _frame(con, have: set[str], table: str, sql: str, params: dict) -> pl.DataFrame:
    if table not in have:
        return pl.DataFrame()
    return con.execute(sql, params).pl()


# This run's rows of each mart a report section reads (a mart per run, or the run's columns of a wider one).
_RUN_TABLES = {
    "elo_gap": "select step, gap, gap_se, gap_ci_low, gap_ci_high, best_checkpoint, base_model_rating, "
    "base_model_rating_is_seed, n_checkpoints from elo_gap where run_key = $run order by step",
    "elo_reference_trends": "select * exclude (run_key) from elo_reference_trends where run_key = $run order by player",
    "reward_components": "select * exclude (run_key) from reward_components where run_key = $run order by component",
    "step_time_breakdown": "select * exclude (run_key) from step_time_breakdown where run_key = $run "
    "order by rank_in_run",
    "cache_stats": "select * from cache_stats where run_key = $run",
    "power_law_fit": "select * exclude (run_key) from power_law_fit where run_key = $run",
    "eval_summary": "select * exclude (run_key) from eval_summary where run_key = $run order by key",
    "run_artifacts": "select * exclude (run_key) from run_artifacts where run_key = $run",
}


def load(con, run_key: str, findings: list[dict] | None = None) -> RunData:
    """Everything one report reads. ``findings``: the checks' rows for this run when the caller ran them; else the
    `anomalies` table's."""
    have = _tables(con)
    params = {"run": run_key}
    (run,) = [
        dict(zip([d[0] for d in cur.description], row, strict=True))
        for cur in [con.execute("select * from runs where run_key = $run", params)]
        for row in cur.fetchall()
    ]
    for key in ("config", "summary"):
        run[key] = _json(run.get(key))
    metrics = con.execute(
        "select step, metric, value from metrics where run_key = $run order by metric, step", params
    ).pl()
    if findings is None:
        columns = ", ".join(ANOMALY_COLUMNS)
        findings = (
            con.execute(f"select {columns} from anomalies where run_key = $run", params).fetchall()
            if "anomalies" in have
            else []
        )
        findings = [dict(zip(ANOMALY_COLUMNS, row, strict=True)) for row in findings]
    findings = [_finding(f) for f in findings if f.get("run_key") == run_key]
    tables = {name: _frame(con, have, name, sql, params) for name, sql in _RUN_TABLES.items()}
    tables["component_history"] = _component_history(con, have, run_key)
    tables["unread_keys"] = _frame(con, have, "history", _UNREAD_KEYS, params)
    tables["event_hours"] = _event_hours(con, have, run)
    return RunData(run, metrics, findings, tables, _peers(con, run))


# The run's numeric keys under no canonical metric (run_hash first: history is clustered by it), for a report to name
# the ones that may be the task's score when no rule has one to read.
_UNREAD_KEYS = (
    "select distinct h.key from history as h where h.run_hash = md5_number_upper($run) and h.run_key = $run "
    "and isfinite(h.value) and h.key not in (select m.source_key from metrics as m where m.run_key = $run "
    "and m.source_key is not null) order by h.key"
)


def _json(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _finding(row: dict) -> dict:
    """An anomalies row in the report's vocabulary (`check`, not `check_name`), JSON-safe numbers."""

    def number(v):
        return None if v is None or v != v or v in (float("inf"), float("-inf")) else float(v)

    return {
        "check": row["check_name"],
        "severity": row["severity"],
        "step": row["step"],
        "step_end": row["step_end"],
        "metric": row["metric"],
        "value": number(row["value"]),
        "threshold": number(row["threshold"]),
        "message": row["message"],
    }


def _component_history(con, have: set[str], run_key: str) -> pl.DataFrame:
    """step, component, value of each per-function reward the reward_components mart found for the run, on the
    trainer's steps (trainer_steps) as every metric."""
    if not {"reward_components", "trainer_steps"} <= have:
        return pl.DataFrame()
    return con.execute(
        """
        select coalesce(t.trainer_step, h.step) as step, c.component, h.value
        from history h join reward_components c on c.run_key = h.run_key and c.key = h.key
        left join trainer_steps t on t.run_key = h.run_key and t.logged_step = h.step
        where h.run_key = $run and isfinite(h.value)
        order by step
    """,
        {"run": run_key},
    ).pl()


def _event_hours(con, have: set[str], run: dict) -> pl.DataFrame:
    """Event-mart hours that overlap the run's lifetime. Rollout events carry no W&B run name, so time is the only
    join there is (DESIGN.md, grpo-signals.md): the report says so where it shows them."""
    if not {"health", "rollout_timing"} <= have or run.get("created_at") is None or run.get("heartbeat_at") is None:
        return pl.DataFrame()
    return con.execute(
        """
        select h.dataset, h.hour, h.events, h.error_events, h.rollouts_completed, h.rollouts_failed, h.error_rate,
               h.status, t.duration_p50_s, t.duration_p95_s
        from health h
        left join (select dataset, hour, max(duration_p50_s) as duration_p50_s, max(duration_p95_s) as duration_p95_s
                   from rollout_timing where grain = 'hour' group by all) t
          on t.dataset = h.dataset and t.hour = h.hour
        where h.grain = 'hour' and h.hour >= date_trunc('hour', $start) and h.hour <= $end
        order by h.dataset, h.hour
    """,
        {"start": run["created_at"], "end": run["heartbeat_at"]},
    ).pl()


def _peers(con, run: dict) -> pl.DataFrame:
    """The tail reward (int_metric__tails, the number sweeps rank on) of every run in the same W&B group, else the
    same project (this run included)."""
    column, value = ("group_name", run.get("group_name")) if run.get("group_name") else ("project", run.get("project"))
    if value is None or "int_metric__tails" not in _tables(con):
        return pl.DataFrame()
    return (
        con.execute(
            f"""
        select r.run_key, r.name, t.tail_mean as tail_reward, t.points
        from runs as r join int_metric__tails as t on t.run_key = r.run_key and t.metric = 'reward_mean'
        where r.{column} = $value
    """,
            {"value": value},
        )
        .pl()
        .with_columns(pl.lit(column).alias("grouped_by"))
    )
