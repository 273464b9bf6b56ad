-- Where does step time go? Per run and phase (the canonical phase_<name>_s metrics: verl timing_s/*, the
-- Diplomacy trainer's rollout and training times), the phase's total and mean seconds and its share
-- of the run's step time. Step time is step_time_s where the trainer logs it (verl timing_s/step), else the sum
-- of the phases logged at that step. Every phase's share has the same denominator, the run's total step time, so
-- a periodic phase (a checkpoint save every 10 steps) weighs what it costs the run, not what it costs the steps
-- it happens in, and the shares of phases that do not overlap add up to at most 1.
-- Rules of thumb: rollout 5-15%, log-prob (old + ref) 20-40%, actor update 30-50%, checkpoint < 10%;
-- any phase above 60% is the bottleneck.
-- Incremental: redoes the runs whose lake parts changed (pipeline/build_plan.py), keeps the others.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with phases as (
    select run_key, step, substr(metric, 7, length(metric) - 8) as phase, value as seconds
    from {{ of_changed_runs(ref('metrics')) }}
    where metric like 'phase\_%\_s' escape '\' and isfinite(value) and value >= 0
),

step_totals as (
    select
        p.run_key,
        p.step,
        coalesce(max(m.value), sum(p.seconds)) as step_seconds,
        max(m.value) is not null as step_time_logged
    from phases as p
    left join {{ of_changed_runs(ref('metrics')) }} as m
        on p.run_key = m.run_key and p.step = m.step and m.metric = 'step_time_s' and isfinite(m.value)
    group by p.run_key, p.step
),

run_totals as (
    select run_key, sum(step_seconds) as run_seconds
    from step_totals
    group by run_key
),

per_phase as (
    select
        p.run_key,
        p.phase,
        count(*) as steps,
        sum(p.seconds) as total_s,
        avg(p.seconds) as mean_s,
        sum(p.seconds) / nullif(any_value(r.run_seconds), 0) as share_of_step,
        bool_and(t.step_time_logged) as step_time_logged
    from phases as p
    join step_totals as t using (run_key, step)
    join run_totals as r using (run_key)
    group by p.run_key, p.phase
),

final as (
    select
        *,
        share_of_step > 0.6 as is_bottleneck,
        row_number() over (partition by run_key order by share_of_step desc) as rank_in_run
    from per_phase
)

select * from final
