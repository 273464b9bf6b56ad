-- What each run cost: tokens (the largest cumulative count when the run logs one, else the sum of per-step
-- counts), trajectories, the seconds between its first and last logged metric, and how many steps logged any.
-- run_outcomes (a view, read by reports, sweeps and tests) joins it instead of aggregating every metric row of
-- every run each time it is read. Incremental: redoes the runs whose lake parts changed, keeps the others.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with metrics as (
    select run_key, step, ts, metric, value
    from {{ of_changed_runs(ref('metrics')) }}
    where isfinite(value) or metric not in ('tokens_cumulative', 'tokens', 'trajectories')
),

final as (
    select
        run_key,
        coalesce(max(value) filter (where metric = 'tokens_cumulative'),
                 sum(value) filter (where metric = 'tokens')) as tokens,
        sum(value) filter (where metric = 'trajectories') as trajectories,
        epoch(max(ts)) - epoch(min(ts)) as wall_s,
        count(distinct step) as logged_steps
    from metrics
    group by run_key
)

select * from final
