-- kl_spike: KL to the reference jumps far above the run's own recent baseline.
-- severity: warn
-- reads: metrics
-- requires: kl
-- param window = 20          -- logged steps in the trailing baseline (the step itself excluded)
-- param mad_factor = 6       -- how far above the baseline median, in robust standard deviations (1.4826 MAD)
-- param min_kl = 0.2         -- and above this absolute KL (reference: spikes > 0.2)
-- param error_kl = 1.0       -- a spike above this is an error, not a warning
-- param min_baseline = 5     -- logged steps needed before a baseline counts
with kl as (
    select run_key, step, value, row_number() over (partition by run_key order by step) as idx
    from metrics
    where metric = 'kl' and isfinite(value)
),

baseline as (
    select
        *,
        median(value) over recent as base_median,
        1.4826 * mad(value) over recent as base_spread,
        count(value) over recent as base_n
    from kl
    window recent as (partition by run_key order by step rows between $window preceding and 1 preceding)
),

limits as (
    select *, base_median + $mad_factor * greatest(base_spread, 0.01 * abs(base_median), 1e-6) as limit_value
    from baseline
    where base_n >= $min_baseline
),

spikes as (
    select * from limits where value > limit_value and value > $min_kl
),

-- consecutive spiking steps are one episode, reported at its onset with its worst value
episodes as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from spikes
)

select
    run_key,
    'kl_spike' as check_name,
    case when max(value) >= $error_kl then 'error' else 'warn' end as severity,
    min(step) as step,
    max(step) as step_end,
    'kl' as metric,
    max(value) as value,
    arg_min(limit_value, step) as threshold,
    printf('KL spiked to %.3g at step %d against a baseline median of %.3g; lower the learning rate or raise '
           || 'the KL penalty, and look for a bad batch at that step', max(value), min(step),
           arg_min(base_median, step)) as message
from episodes
group by run_key, episode
