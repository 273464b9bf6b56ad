{{ config(materialized='view') }}
-- One row per run: how it ended on its primary metric (with an interval), what it cost, and how many flags the
-- last `grpolens check` raised on it. A view, so the flag counts follow the checks, which run after the build.
-- Primary metric: the Elo gap (best checkpoint − base model) for league runs, else the task score (an eval or
-- task metric: accuracy, pass@1, score) when it has at least 3 points, else the reward.
with runs as (
    select run_key, name, project, group_name, sweep_id, state, last_step
    from {{ ref('runs') }}
),

tails as (
    select * from {{ ref('int_metric__tails') }}
),

last_gap as (
    select run_key, step, gap, gap_se, gap_ci_low, gap_ci_high
    from {{ ref('elo_gap') }}
    qualify row_number() over (partition by run_key order by step desc) = 1
),

elo as (
    select
        run_key,
        'elo_gap' as primary_metric,
        gap as score,
        gap_se as score_se,
        gap_ci_low as ci_low,
        gap_ci_high as ci_high,
        1 as tail_points,
        step as tail_from_step
    from last_gap
),

by_tail as (
    select
        run_key,
        metric as primary_metric,
        tail_mean as score,
        tail_se as score_se,
        tail_ci_low as ci_low,
        tail_ci_high as ci_high,
        tail_points,
        tail_from_step
    from tails
    where metric = 'task_score' and points >= 3 or metric = 'reward_mean'
    qualify row_number() over (partition by run_key order by metric = 'task_score' desc) = 1
),

primary_metric as (
    select * from elo
    union all
    select * from by_tail where run_key not in (select run_key from elo)
),

cost as (
    select run_key, tokens, trajectories, wall_s, logged_steps
    from {{ ref('int_run__costs') }}
),

flags as (
    select
        run_key,
        count(*) filter (where severity in ('warn', 'error')) as flags,
        count(*) filter (where severity = 'error') as errors,
        string_agg(distinct check_name, ', ' order by check_name) filter (where severity in ('warn', 'error'))
            as flagged_checks
    from {{ source('checks', 'anomalies') }}
    where run_key is not null
    group by run_key
),

final as (
    select
        r.run_key,
        r.name,
        r.project,
        r.group_name,
        r.sweep_id,
        r.state,
        r.last_step,
        p.primary_metric,
        true as higher_is_better,
        p.score,
        p.score_se,
        p.ci_low,
        p.ci_high,
        p.tail_points,
        p.tail_from_step,
        c.logged_steps,
        c.tokens,
        c.trajectories,
        c.wall_s,
        coalesce(f.flags, 0) as flags,
        coalesce(f.errors, 0) as errors,
        f.flagged_checks
    from runs as r
    left join primary_metric as p using (run_key)
    left join cost as c using (run_key)
    left join flags as f using (run_key)
)

select * from final
