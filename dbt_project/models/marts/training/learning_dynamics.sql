-- Is the model learning, and how? One row per (run, step) at which any learning signal was logged,
-- canonical metrics side by side. Values are as logged: a metric not logged at a step stays null
-- (nothing is forward-filled or interpolated); the rolling means cover the last 10 rows of the run.
-- Incremental: redoes the runs whose lake parts changed (pipeline/build_plan.py), keeps the others.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with metrics as (
    select * from {{ of_changed_runs(ref('metrics')) }}
),

pivoted as (
    select
        run_key,
        step,
        max(ts) as ts,
        max(value) filter (where metric = 'reward_mean') as reward_mean,
        max(value) filter (where metric = 'reward_std') as reward_std,
        max(value) filter (where metric = 'frac_reward_zero_std') as frac_reward_zero_std,
        max(value) filter (where metric = 'task_score') as task_score,
        max(value) filter (where metric = 'kl') as kl,
        max(value) filter (where metric = 'kl_max') as kl_max,
        max(value) filter (where metric = 'entropy') as entropy,
        max(value) filter (where metric = 'grad_norm') as grad_norm,
        max(value) filter (where metric = 'loss') as loss,
        max(value) filter (where metric = 'response_length_mean') as response_length_mean,
        max(value) filter (where metric = 'response_clip_ratio') as response_clip_ratio,
        max(value) filter (where metric = 'clip_fraction') as clip_fraction,
        max(value) filter (where metric = 'learning_rate') as learning_rate
    from metrics
    where metric in (
        'reward_mean', 'reward_std', 'frac_reward_zero_std', 'task_score', 'kl', 'kl_max', 'entropy',
        'grad_norm', 'loss', 'response_length_mean', 'response_clip_ratio', 'clip_fraction', 'learning_rate'
    )
    group by run_key, step
),

final as (
    select
        *,
        step::double / nullif(max(step) over (partition by run_key), 0) as progress,
        avg(reward_mean) over last_10 as reward_mean_rolling10,
        avg(kl) over last_10 as kl_rolling10,
        avg(entropy) over last_10 as entropy_rolling10,
        avg(response_length_mean) over last_10 as response_length_rolling10,
        reward_mean - lag(reward_mean) over by_step as reward_mean_change
    from pivoted
    window
        by_step as (partition by run_key order by step),
        last_10 as (partition by run_key order by step rows between 9 preceding and current row)
)

select * from final
