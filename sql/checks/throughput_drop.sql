-- throughput_drop: trajectories per second fall well below the run's own earlier rate and stay down.
-- severity: warn
-- reads: metrics, runs
-- requires:
-- role: operations
-- advice: pipeline do: Look for the phase that slowed down (step-time breakdown)
-- param window = 20          -- logged steps in the baseline (median)
-- param smooth = 5           -- the current rate is the median of the last this many logged steps
-- param min_baseline = 10    -- logged steps needed before a baseline counts
-- param max_drop = 0.3       -- a fall of this share below the baseline is a drop
-- param run_slowdown = 0.5   -- over the whole run: the last fifth's median rate at most this share of the first's
-- param sustain = 5          -- for this many consecutive logged steps (against the onset's baseline)
-- Throughput is trajectories per second of training: trajectories_per_s when a run logs it; else trajectories per
-- step (Diplomacy benchmark/trajectories, or verl's data.train_batch_size x rollout.n from the config, or 1) over
-- the step's seconds: step_time_s, or the Diplomacy phases rollout + training - pipeline overlap. Medians keep
-- periodic validation and checkpoint steps from counting. The baseline ends where the current window starts, and
-- is frozen at the onset so the episode lasts until the rate really recovers (to within half the drop). Slow
-- drifts (responses growing longer) move the baseline along and are not drops; a slowdown that adds up over the
-- run is the second finding: the rate of the last fifth at most `run_slowdown` times that of the first fifth
-- (step time grown 2x or more, #12 class 8), reported where the trailing median first fell `max_drop` below it.
-- With no count of trajectories per step (none logged, no verl batch config) the rate is steps per second, and the
-- flag says so: its unit and metric are steps/s and steps_per_s. `requires` is empty because the inputs are
-- alternatives (step_time_s, or phase_rollout_s + phase_training_s); no single metric is needed.
with per_step as (
    select
        run_key,
        step,
        max(value) filter (where metric = 'trajectories_per_s') as logged_rate,
        max(value) filter (where metric = 'trajectories') as trajectories,
        coalesce(
            max(value) filter (where metric = 'step_time_s'),
            max(value) filter (where metric = 'phase_rollout_s') + max(value) filter (where metric = 'phase_training_s')
                - coalesce(max(value) filter (where metric = 'phase_pipeline_overlap_s'), 0)
        ) as seconds
    from metrics
    where metric in ('trajectories_per_s', 'trajectories', 'step_time_s', 'phase_rollout_s', 'phase_training_s',
                     'phase_pipeline_overlap_s')
        and isfinite(value)
    group by run_key, step
),

batch as (
    select
        run_key,
        coalesce(
            try_cast(config ->> '$."data.train_batch_size"' as double)
                * try_cast(config ->> '$."actor_rollout_ref.rollout.n"' as double),
            try_cast(config -> '$.data' ->> '$.train_batch_size' as double)
                * try_cast(config -> '$.actor_rollout_ref' -> '$.rollout' ->> '$.n' as double)
        ) as per_step
    from runs
),

rates as (
    select
        p.run_key,
        p.step,
        coalesce(p.logged_rate, coalesce(p.trajectories, b.per_step, 1) / nullif(p.seconds, 0)) as rate,
        -- trajectories counted (a rate logged, a count per step), or else one per step: the rate is steps/s
        coalesce(p.logged_rate, p.trajectories, b.per_step) is not null as counted
    from per_step as p
    left join batch as b using (run_key)
),

units as (
    select
        run_key,
        case when bool_and(counted) then 'trajectories/s' else 'steps/s' end as unit,
        case when bool_and(counted) then 'trajectories_per_s' else 'steps_per_s' end as metric
    from rates
    group by run_key
),

smoothed as (
    select
        *,
        row_number() over (partition by run_key order by step) as idx,
        median(rate) over (partition by run_key order by step rows between $smooth - 1 preceding and current row)
            as current_rate
    from rates
    where rate is not null and isfinite(rate) and rate > 0
),

baseline as (
    select
        *,
        median(rate) over before as base_rate,
        count(*) over before as base_n,
        max(current_rate) over ahead as best_ahead,
        count(*) over ahead as n_ahead
    from smoothed
    window
        before as (partition by run_key order by step rows between $window + $smooth - 1 preceding
            and $smooth preceding),
        ahead as (partition by run_key order by step rows between current row and $sustain - 1 following)
),

onsets as (
    select *
    from baseline
    where base_n >= $min_baseline
        and current_rate < (1 - $max_drop) * base_rate
        and n_ahead = $sustain
        and best_ahead < (1 - $max_drop) * base_rate
),

ends as (
    select
        o.run_key,
        o.step as onset,
        any_value(o.base_rate) as base_rate,
        any_value(o.current_rate) as onset_rate,
        min(s.step) filter (where s.current_rate >= (1 - $max_drop / 2) * o.base_rate) as recovered_at
    from onsets as o
    left join smoothed as s on o.run_key = s.run_key and o.step < s.step
    group by o.run_key, o.step
),

episodes as (
    select
        e.*,
        u.unit,
        u.metric,
        (select min(s.current_rate) from smoothed as s
         where s.run_key = e.run_key and s.step >= e.onset
            and s.step < coalesce(e.recovered_at, 9223372036854775807)) as lowest,
        (select max(s.step) from smoothed as s
         where s.run_key = e.run_key and s.step < coalesce(e.recovered_at, 9223372036854775807)) as last_low
    from ends as e
    join units as u on e.run_key = u.run_key
    where not exists (
        select 1 from ends as previous
        where previous.run_key = e.run_key and previous.onset < e.onset
            and (previous.recovered_at is null or previous.recovered_at > e.onset)
    )
)

select
    run_key,
    'throughput_drop' as check_name,
    'warn' as severity,
    onset as step,
    case when recovered_at is not null then last_low end as step_end,
    metric,
    lowest as value,
    (1 - $max_drop) * base_rate as threshold,
    -- each figure with its own fall: the rate at the onset, then the lowest (the flag's value) when it went lower
    printf('throughput fell from %.3g to %.3g %s at step %d (-%.0f%%)%s%s; look for a slow phase '
           || '(step_time_breakdown), longer responses, inference queueing or a degraded node', base_rate,
           onset_rate, unit, onset, 100 * (1 - onset_rate / base_rate),
           case when lowest < onset_rate then printf(', %.3g at its lowest (-%.0f%%)', lowest,
                                                     100 * (1 - lowest / base_rate)) else '' end,
           case when recovered_at is not null then printf(', back from step %d', recovered_at) else '' end)
        as message
from episodes

union all by name

select
    run_key,
    'throughput_drop' as check_name,
    'warn' as severity,
    onset as step,
    null::bigint as step_end,
    metric,
    end_rate as value,
    $run_slowdown * start_rate as threshold,
    printf('throughput fell steadily over the run: %.3g %s over %s, %.3g over %s (step time '
           || 'x%.1f), below -%.0f%% from step %d; look at what grows with it (response length, a slow phase in '
           || 'step_time_breakdown, memory pressure) before the run gets slower still', start_rate, unit, start_span,
           end_rate, end_span, start_rate / end_rate, 100 * $max_drop::double, onset) as message
from (
    select
        s.run_key,
        any_value(u.unit) as unit,
        any_value(u.metric) as metric,
        any_value(f.start_rate) as start_rate,
        any_value(f.end_rate) as end_rate,
        any_value(f.start_span) as start_span,
        any_value(f.end_span) as end_span,
        min(s.step) filter (where s.recent <= (1 - $max_drop) * f.start_rate) as onset
    from (
        select run_key, step, median(rate) over (partition by run_key order by step
            rows between $smooth - 1 preceding and current row) as recent
        from rates where rate > 0 and isfinite(rate)
    ) as s
    join (
        select
            run_key,
            median(rate) filter (where idx <= greatest(3, n / 5)) as start_rate,
            median(rate) filter (where idx > n - greatest(3, n / 5)) as end_rate,
            -- the words for both parts: a fifth of a short run is fewer than the 3 points each takes
            span_words('first', count(*) filter (where idx <= greatest(3, n / 5)), floor(any_value(n) / 5),
                       'its first fifth', min(step), max(step) filter (where idx <= greatest(3, n / 5))) as start_span,
            span_words('last', count(*) filter (where idx > n - greatest(3, n / 5)), floor(any_value(n) / 5),
                       'its last', min(step) filter (where idx > n - greatest(3, n / 5)), max(step)) as end_span
        from (select run_key, step, rate, row_number() over (partition by run_key order by step) as idx,
                     count(*) over (partition by run_key) as n
              from rates where rate > 0 and isfinite(rate)) as numbered
        group by run_key
        having any_value(n) >= 10
    ) as f on s.run_key = f.run_key
    join units as u on s.run_key = u.run_key
    group by s.run_key
) as whole
where end_rate <= $run_slowdown * start_rate
    and run_key not in (select run_key from episodes)
