-- grad_norm_spike: the gradient norm jumps far above the run's own recent baseline (compared on a log scale).
-- severity: warn
-- reads: metrics
-- requires: grad_norm
-- role: symptom
-- advice: grad_clip down: Clip gradients (max_grad_norm about 1.0)
-- advice: learning_rate down: Lower the learning rate
-- advice: bad_batch do: Look for a bad batch at the onset step
-- param window = 20          -- logged steps in the trailing baseline (the step itself excluded)
-- param mad_factor = 6       -- how far above the baseline median of log(grad_norm), in robust SDs (1.4826 MAD)
-- param min_ratio = 4        -- and at least this many times the baseline median (2x bumps are normal)
-- param error_ratio = 10     -- a spike this many times the baseline median is an error, not a warning
-- param min_baseline = 10    -- logged steps needed before a baseline counts
-- Grad norms are roughly log-normal, so the baseline lives in log space: a 2x bump on a noisy run and a 2x bump
-- on a quiet one are judged against each run's own spread. Consecutive spiking steps are one episode.
with grad as (
    select run_key, step, value, ln(value) as log_value, row_number() over (partition by run_key order by step) as idx
    from metrics
    where metric = 'grad_norm' and isfinite(value) and value > 0
),

baseline as (
    select
        *,
        median(log_value) over recent as base_log,
        1.4826 * mad(log_value) over recent as base_spread,
        count(*) over recent as base_n
    from grad
    window recent as (partition by run_key order by step rows between $window preceding and 1 preceding)
),

spikes as (
    select *, exp(base_log) as base_median, value / exp(base_log) as ratio
    from baseline
    where base_n >= $min_baseline
        and log_value > base_log + $mad_factor * greatest(base_spread, 0.05)
        and value >= $min_ratio * exp(base_log)
),

episodes as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from spikes
)

select
    run_key,
    'grad_norm_spike' as check_name,
    case when max(ratio) >= $error_ratio then 'error' else 'warn' end as severity,
    min(step) as step,
    max(step) as step_end,
    'grad_norm' as metric,
    max(value) as value,
    arg_min($min_ratio * base_median, step) as threshold,
    printf('grad norm jumped to %.3g at step %d, %.1fx its recent median of %.3g (%d logged step%s); clip '
           || 'gradients, lower the learning rate, and look for a bad batch or diverging KL at that step',
           max(value), min(step), max(ratio), arg_min(base_median, step), count(*),
           case when count(*) = 1 then '' else 's' end) as message
from episodes
group by run_key, episode
