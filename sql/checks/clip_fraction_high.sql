-- clip_fraction_high: a large share of tokens hits the PPO ratio clip, step after step (updates too large).
-- severity: warn
-- reads: metrics
-- requires: clip_fraction
-- role: symptom
-- advice: learning_rate down: Lower the learning rate
-- advice: ppo_epochs down: Use fewer PPO epochs per batch
-- param max_fraction = 0.3   -- clip fraction above this is too high (reference: > 0.3, learning rate too high)
-- param error_fraction = 0.5 -- half of all tokens clipped: the update is mostly discarded
-- param smooth = 5           -- judged on the median of the last this many logged steps
-- param sustain = 3          -- for at least this many consecutive logged steps
-- clip_fraction is Diplomacy ppo/clip_fraction, verl actor/pg_clipfrac, TRL clip_ratio/region_mean.
select
    run_key,
    'clip_fraction_high' as check_name,
    case when worst > $error_fraction then 'error' else 'warn' end as severity,
    onset as step,
    step_end,
    'clip_fraction' as metric,
    worst as value,
    $max_fraction as threshold,
    printf('PPO clip fraction reached %.0f%% (median of %d steps) from step %d for %d logged steps: the policy '
           || 'moves too far per update and most of the gradient is clipped away; lower the learning rate or '
           || 'use fewer PPO epochs per batch', 100 * worst, $smooth::bigint, onset, steps) as message
from sustained_level('clip_fraction', $max_fraction, true, smooth := $smooth, sustain := $sustain)
