-- error_rate_high: the share of rollouts that fail is above the healthy error rate.
-- severity: warn
-- reads: metrics, runs, health
-- requires: rollout_failed_count, trajectories
-- role: cause
-- advice: rollout_errors do: Read the rollout_error events of the flagged hours for the cause
-- param warn_rate = 0.01     -- degraded above this (reference: < 1% healthy)
-- param error_rate = 0.05    -- unhealthy above this (reference: < 5% degraded, else unhealthy)
-- param window = 10          -- the rate is summed over the last this many logged steps
-- param sustain = 3          -- for at least this many consecutive logged steps
-- The rate is failed rollouts among rollouts. From the events (below, the health mart): rollout_error over
-- rollout_start per dataset and hour, flagged when its 95% Wilson interval lies above the threshold (3 failures
-- in 240 rollouts is noise, 25 in 243 is a burst). From W&B: failed / (failed + completed rollouts), with completed
-- rollouts = trajectories per step / samples per rollout (config samples_per_group; 1 when the config does not
-- say, which can only understate the rate).
with failed as (
    select run_key, step, value as failed
    from metrics
    where metric = 'rollout_failed_count' and isfinite(value)
),

completed as (
    select
        m.run_key, m.step,
        m.value / greatest(coalesce(try_cast(r.config ->> '$.samples_per_group' as double), 1), 1) as completed
    from metrics as m
    join runs as r using (run_key)
    where m.metric = 'trajectories' and isfinite(m.value)
),

rates as (
    select
        f.run_key, f.step,
        row_number() over (partition by f.run_key order by f.step) as idx,
        count(*) over (partition by f.run_key) as n,
        sum(f.failed) over recent as failed_sum,
        sum(f.failed) over recent / nullif(sum(f.failed) over recent + sum(c.completed) over recent, 0) as rate
    from failed as f
    join completed as c using (run_key, step)
    window recent as (partition by f.run_key order by f.step rows between $window - 1 preceding and current row)
),

high as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from rates
    where rate > $warn_rate
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        max(rate) as worst
    from high
    group by run_key, episode
    having count(*) >= $sustain
)

select
    run_key,
    'error_rate_high' as check_name,
    case when worst > $error_rate then 'error' else 'warn' end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'rollout_failed_count' as metric,
    worst as value,
    $warn_rate as threshold,
    printf('rollout error rate reached %.1f%% (over %d steps) from step %d for %d logged steps (healthy < %.0f%%, '
           || 'unhealthy above %.0f%%): find the failing phase in the rollout_error events', 100 * worst,
           $window::bigint, onset, steps, 100 * $warn_rate::double, 100 * $error_rate::double) as message
from episodes

union all by name

select
    null as run_key,
    'error_rate_high' as check_name,
    case when max(lower) > $error_rate then 'error' else 'warn' end as severity,
    'rollout_error_rate' as metric,
    max(rate) as value,
    $warn_rate as threshold,
    printf('rollout errors: %d of %d rollouts failed in %s over %d hour(s), up to %.1f%% in one hour (healthy < '
           || '%.0f%%, unhealthy above %.0f%%): read the rollout_error events of those hours for the cause',
           sum(failed)::bigint, sum(started)::bigint, dataset, count(*), 100 * max(rate), 100 * $warn_rate::double,
           100 * $error_rate::double) as message,
    dataset,
    min(hour) as started_at,
    max(hour) + interval 1 hour as ended_at
from (
    select
        dataset, hour, rollouts_failed as failed, rollouts_started as started,
        rollouts_failed / rollouts_started as rate,
        wilson_lower(rollouts_failed, rollouts_started) as lower,
        hour_episode(hour, row_number() over (partition by dataset order by hour)) as episode
    from health
    where grain = 'hour' and rollouts_started > 0 and wilson_lower(rollouts_failed, rollouts_started) > $warn_rate
) as hourly
group by dataset, episode
