-- response_length_collapse: mean response length drops to a small fraction of its recent level and stays there.
-- severity: error
-- reads: metrics
-- requires: response_length_mean
-- role: cause
-- advice: samples do: Read samples around the onset for the degenerate answers
-- advice: reward_design do: Check the reward for a length or format exploit
-- advice: learning_rate down: Lower the learning rate
-- param window = 20          -- logged steps in the trailing baseline (median; the step itself excluded) ...
-- param lag = 10             -- ... ending this many logged steps before the step judged: a fall from 290 to 35 tokens
--                               over 30 steps drags a baseline that ends right before each step down with it, and
--                               was never three times below it
-- param min_baseline = 5     -- logged steps needed before a baseline counts
-- param drop_ratio = 0.3     -- collapsed: below this share of the baseline median
-- param sustain = 3          -- for this many consecutive logged steps (judged against the onset's baseline)
-- param recover_ratio = 0.6  -- the episode ends when the length is back above this share of that baseline, for
--                               `sustain` logged steps in a row (one normal answer among degenerate ones ends nothing)
-- param min_length = 16      -- ignore runs whose baseline is already this short (tokens)
-- A slow drift (1000 -> 600 tokens over 30 steps) is not a collapse; a fall to near-empty answers within a few
-- steps is, to lengths below the run's own p5 so far (a mean over 8 samples a step dips to a third of its median
-- for a few steps now and then). The baseline is frozen at the onset, so the episode lasts until the length really
-- recovers.
select
    run_key,
    'response_length_collapse' as check_name,
    'error' as severity,
    onset as step,
    case when recovered_at is not null then last_low end as step_end,
    'response_length_mean' as metric,
    lowest as value,
    bar as threshold,
    printf('mean response length collapsed from a recent median of %.0f to %.0f tokens at step %d (lowest %.0f); '
           || 'the policy is degenerating to near-empty answers: inspect samples, check the reward for a '
           || 'length or format exploit, and lower the learning rate', base_median, onset_value, onset, lowest)
        as message
from collapses('response_length_mean', $window, $lag, $min_baseline, $sustain, $drop_ratio, 0, 0,
               ($recover_ratio - $drop_ratio) / (1 - $drop_ratio), min_base := $min_length, new_low := true,
               recover_steps := $sustain)
