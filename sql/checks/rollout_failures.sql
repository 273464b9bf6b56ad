-- rollout_failures: rollouts failed (any failure is worth a look; the healthy count is 0).
-- severity: warn
-- reads: metrics
-- requires: rollout_failed_count
-- role: cause
-- advice: rollout_errors do: Read the rollout_error events (error, phase) for the cause
-- param max_failed = 0       -- failures per step above this are flagged (reference: failed rollouts, healthy 0)
-- param error_failed = 10    -- this many failures in one episode is an error
-- From W&B until rollout_error events are in the warehouse: rollout_failed_count is Diplomacy rollout/failed_count,
-- the failures of each step. Consecutive logged steps with failures are one episode.
select
    run_key,
    'rollout_failures' as check_name,
    case when total >= $error_failed then 'error' else 'warn' end as severity,
    onset as step,
    step_end,
    'rollout_failed_count' as metric,
    total as value,
    $max_failed as threshold,
    printf('%d rollout%s failed over %d logged step%s from step %d; failed rollouts shrink the batch and bias it '
           || 'towards the games that finish: look at the rollout_error events (error, phase) for the cause',
           total::bigint, case when total = 1 then '' else 's' end, steps, case when steps = 1 then '' else 's' end,
           onset) as message
from sustained_level('rollout_failed_count', $max_failed, true)
