-- kl_spike: KL to the reference jumps far above its level around that step, beyond the run's own noise.
-- severity: warn
-- reads: metrics
-- requires: kl
-- role: symptom
-- advice: learning_rate down: Lower the learning rate
-- advice: kl_penalty up: Raise the KL penalty (kl_beta / kl_coef)
-- advice: bad_batch do: Look for a bad batch at the onset step
-- param window = 10          -- logged steps on each side that make the level around a step (the step excluded)
-- param mad_factor = 3       -- how far above that level, in robust standard deviations of log KL (1.4826 MAD)
-- param min_ratio = 3        -- and at least this many times the level (KL's noise is multiplicative)
-- param min_kl = 0.2         -- and above this absolute KL (reference: spikes > 0.2)
-- param error_kl = 1.0       -- a spike above this is an error, not a warning
-- param min_baseline = 5     -- logged steps needed around a step before its level counts
-- A spike stands above the steps before AND after it: a KL that rises and stays is a drift (kl_drift), not a
-- spike, and a rising run must not be judged against its own lower past. Noise is measured on log KL, whose
-- spread is the same at 0.01 and at 0.2, so a heavy-tailed run needs a bigger jump than a smooth one.
select
    run_key,
    'kl_spike' as check_name,
    case when worst >= $error_kl then 'error' else 'warn' end as severity,
    onset as step,
    step_end,
    'kl' as metric,
    worst as value,
    level * $min_ratio as threshold,
    printf('KL spiked to %.3g at step %d, %s around that step; lower the learning rate or raise the KL penalty, and '
           || 'look for a bad batch at that step', worst, onset,
           case
               when level > 1e-8 then printf('%.0fx its level of %.3g', worst / level, level)
               else printf('against a level of %.3g (an estimate that goes below 0)', linear_level)
           end) as message
from log_spikes('kl', $window, true, $mad_factor, 0.1, $min_ratio, $min_baseline, min_value := $min_kl,
                positive_only := false)
