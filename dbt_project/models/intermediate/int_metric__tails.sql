-- Every run's level on every canonical metric at the end of the run, with an honest interval: the mean of the
-- last `tail_share` of its logged points (at least `tail_min_points`), whose standard error uses the effective
-- number of points n·(1 − r1)/(1 + r1) under lag-1 autocorrelation r1 (clamped to [0, 0.95]): consecutive training
-- steps are not independent draws, and pretending they are makes every interval too narrow.
-- r1 is the run's noise's, not the tail's: from 5 tail points it is mostly chance (standard error ~0.45) and
-- biased low, so autocorrelated runs' intervals held their level only 80–90% of the time. The run's first
-- differences, less their 9-difference rolling mean, are its noise without its level or its trend (a learning
-- curve); their lag-1 autocorrelation under AR(1) noise is −(1 − r1)/2, so r1 = 1 + 2·that. From fewer than 25
-- pairs of them (a run under 35 points) this is no surer than the tail's own, which a short run keeps.
-- The t quantile's degrees of freedom are those of the tail's standard deviation under that r1 (Satterthwaite),
-- not n_effective − 1: that fell to 1 (t = 12.7) for 5 points at r1 = 0.27, an interval 4 times too wide, where
-- the true quantile is 2.9. On simulated runs (independent and AR(1) noise with r1 up to 0.6, flat or rising,
-- 35 to 300 points) the interval holds the true level 93–97% of the time (tests/test_sweep.py holds it to that).
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

noise as (
    -- A difference x[t] − x[t−1] less the mean of the 9 around it, (x[t+4] − x[t−5]) / 9 (they telescope), and the
    -- one before it, from one window pass; the runs' edges, where the 9 are not all there, are left out.
    select
        run_key,
        metric,
        (value - lag(value) over w) - (lead(value, 4) over w - lag(value, 5) over w) / 9 as wiggle,
        (lag(value) over w - lag(value, 2) over w) - (lead(value, 3) over w - lag(value, 6) over w) / 9 as wiggle_before
    from metrics
    window w as (partition by run_key, metric order by step)
),

run_noise as (
    select
        run_key,
        metric,
        count(*) as pairs,
        1 + 2 * coalesce(sum(wiggle * wiggle_before) / nullif(sum(wiggle * wiggle), 0), -0.5) as run_r1
    from noise
    where wiggle is not null and wiggle_before is not null
    group by run_key, metric
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
        coalesce(sum(centred * centred_before) / nullif(sum(centred * centred), 0), 0) as own_r1
    from tail
    group by run_key, metric
),

autocorrelated as (
    select
        t.*,
        least(greatest(case when n.pairs >= 25 then n.run_r1 else t.own_r1 end, 0), 0.95) as tail_r1
    from tail_stats as t
    left join run_noise as n using (run_key, metric)
),

effective as (
    select
        *,
        tail_points * (1 - tail_r1) / (1 + tail_r1) as n_effective,
        -- Over the tail's correlation matrix C[i, j] = r1^|i − j| (geometric series, summed in closed form): the
        -- sum of its entries, of its squared entries, and of its squared row sums.
        tail_points + 2 * tail_r1 * (tail_points * (1 - tail_r1) - (1 - pow(tail_r1, tail_points)))
        / pow(1 - tail_r1, 2) as c_sum,
        tail_points + 2 * pow(tail_r1, 2) * (tail_points * (1 - pow(tail_r1, 2)) - (1 - pow(tail_r1, 2 * tail_points)))
        / pow(1 - pow(tail_r1, 2), 2) as c_squares,
        tail_points * pow((1 + tail_r1) / (1 - tail_r1), 2)
        - 4 * (1 + tail_r1) * tail_r1 * (1 - pow(tail_r1, tail_points)) / pow(1 - tail_r1, 3)
        + (2 * pow(tail_r1, 2) * (1 - pow(tail_r1, 2 * tail_points)) / (1 - pow(tail_r1, 2))
            + 2 * tail_points * pow(tail_r1, tail_points + 1)) / pow(1 - tail_r1, 2) as c_row_squares
    from autocorrelated
),

satterthwaite as (
    -- The degrees of freedom of the tail's sample variance under that autocorrelation (Satterthwaite:
    -- tr(BC)² / tr(BCBC), B the centring matrix), floored, at least 1 (a 1-point tail has no interval anyway).
    select
        *,
        greatest(coalesce(floor(
            pow(tail_points - c_sum / tail_points, 2)
            / nullif(c_squares - 2 * c_row_squares / tail_points + pow(c_sum / tail_points, 2), 0)
        ), 1), 1) as df
    from effective
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
    from satterthwaite as e
    join whole as w using (run_key, metric)
)

select * from final
