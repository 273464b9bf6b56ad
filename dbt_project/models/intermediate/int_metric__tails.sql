-- Every run's level on every canonical metric at the end of the run, with an honest interval: the mean of the
-- last `tail_share` of its logged points (at least `tail_min_points`), whose standard error uses the effective
-- number of points n·(1 − r1)/(1 + r1) under the tail's lag-1 autocorrelation r1 (clamped to [0, 0.95]):
-- consecutive training steps are not independent draws, and pretending they are makes every interval too narrow.
-- Incremental: the runs whose lake parts changed are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with metrics as (
    select run_key, metric, step, value
    from {{ of_changed_runs(ref('metrics')) }}
    where isfinite(value)
),

numbered as (
    select
        *,
        count(*) over (partition by run_key, metric) as points,
        row_number() over (partition by run_key, metric order by step desc) as from_end
    from metrics
),

tail as (
    select
        *,
        value - avg(value) over (partition by run_key, metric) as centred,
        lag(value) over (partition by run_key, metric order by step)
            - avg(value) over (partition by run_key, metric) as centred_before
    from numbered
    where from_end <= greatest(ceil(points * {{ var('tail_share') }}), {{ var('tail_min_points') }})
),

whole as (
    select
        run_key,
        metric,
        min(step) as first_step,
        max(step) as last_step,
        arg_min(value, step) as first_value,
        arg_max(value, step) as last_value,
        min(value) as min_value,
        max(value) as max_value
    from metrics
    group by run_key, metric
),

tail_stats as (
    select
        run_key,
        metric,
        any_value(points) as points,
        count(*) as tail_points,
        min(step) as tail_from_step,
        avg(value) as tail_mean,
        stddev_samp(value) as tail_sd,
        least(greatest(
            coalesce(sum(centred * centred_before) / nullif(sum(centred * centred), 0), 0), 0), 0.95) as tail_r1
    from tail
    group by run_key, metric
),

effective as (
    select
        *,
        tail_points * (1 - tail_r1) / (1 + tail_r1) as n_effective,
        greatest(floor(tail_points * (1 - tail_r1) / (1 + tail_r1)) - 1, 1) as df
    from tail_stats
),

final as (
    select
        e.run_key,
        e.metric,
        e.points,
        e.tail_points,
        e.tail_from_step,
        e.tail_mean,
        e.tail_sd,
        e.tail_r1,
        e.n_effective,
        e.tail_sd / sqrt(e.n_effective) as tail_se,
        e.tail_mean - {{ t_critical_975('e.df') }} * e.tail_sd / sqrt(e.n_effective) as tail_ci_low,
        e.tail_mean + {{ t_critical_975('e.df') }} * e.tail_sd / sqrt(e.n_effective) as tail_ci_high,
        w.first_step,
        w.last_step,
        w.first_value,
        w.last_value,
        w.min_value,
        w.max_value
    from effective as e
    join whole as w using (run_key, metric)
)

select * from final
