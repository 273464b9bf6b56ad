-- grad_norm_spike: the gradient norm jumps far above the run's own recent baseline (compared on a log scale).
-- severity: warn
-- reads: metrics
-- requires: grad_norm
-- role: symptom
-- advice: grad_clip down: Clip gradients below the spikes (max_grad_norm at most twice the usual grad norm)
-- advice: learning_rate down: Lower the learning rate
-- advice: bad_batch do: Look for a bad batch at the onset step
-- param window = 20          -- logged steps in the trailing baseline (the step itself excluded)
-- param mad_factor = 6       -- how far above the baseline median of log(grad_norm), in robust SDs (1.4826 MAD)
-- param min_ratio = 4        -- and at least this many times the baseline median (2x bumps are normal)
-- param error_ratio = 10     -- a spike this many times the baseline median is an error, not a warning
-- param min_baseline = 10    -- logged steps needed before a baseline counts
-- param beyond_max = 4       -- also a spike, whatever the baseline's spread: this many times the largest grad norm
--                               of its baseline window (and min_ratio times its median)
-- Grad norms are roughly log-normal, so the baseline lives in log space: a 2x bump on a noisy run and a 2x bump
-- on a quiet one are judged against each run's own spread. Consecutive spiking steps are one episode.
-- A step whose reward groups were all tied (frac_reward_zero_std 1, or reward_std 0) has no advantage, and its
-- gradient can be the KL term's alone, a thousand times smaller: the ordinary steps are judged against the ordinary
-- ones only (else, on a run that solves most prompts, those between tied steps read as spikes: a real TRL run had 17
-- false errors), and a tied step against the tied steps and the ordinary ones both (else a KL-only norm that jumps
-- 6x, still a hundred times below the ordinary steps, reads as the run's worst spike: a real ms-swift run); a run
-- tied at nearly every step still has a baseline to spike from.
-- The clip advised is at most twice the recent median, not a fixed 1.0: a max_grad_norm at or above a spike leaves
-- it as it was (a real TRL run spiked to 0.904 from a median of 0.18), twice the median leaves the normal 2x bumps
-- alone, and "at most" keeps a tighter clip the run may have (the logged norm is the one before clipping).
select
    run_key,
    'grad_norm_spike' as check_name,
    case when ratio >= $error_ratio then 'error' else 'warn' end as severity,
    onset as step,
    step_end,
    'grad_norm' as metric,
    worst as value,
    $min_ratio * level as threshold,
    printf('grad norm jumped to %.3g at step %d, %.1fx its recent median of %.3g (%d logged step%s); clip '
           || 'gradients below it (max_grad_norm at most %.2g, twice that median), lower the learning rate, and look '
           || 'for a bad batch or diverging KL at that step',
           worst, onset, ratio, level, steps, case when steps = 1 then '' else 's' end, 2 * level) as message
from log_spikes(
    'grad_norm', $window, false, $mad_factor, 0.05, $min_ratio, $min_baseline, skip_tied := true,
    beyond_max := $beyond_max
)
