-- response_length_collapse: mean response length drops to a small fraction of its recent level and stays there.
-- severity: error
-- reads: metrics
-- requires: response_length_mean
-- role: cause
-- advice: samples do: Read samples around the onset for the degenerate answers
-- advice: reward_design do: Check the reward for a length or format exploit
-- advice: learning_rate down: Lower the learning rate
-- param window = 20          -- logged steps in the trailing baseline (median; the step itself excluded)
-- param min_baseline = 5     -- logged steps needed before a baseline counts
-- param drop_ratio = 0.3     -- collapsed: below this share of the baseline median
-- param sustain = 3          -- for this many consecutive logged steps (judged against the onset's baseline)
-- param recover_ratio = 0.6  -- the episode ends when the length is back above this share of that baseline
-- param min_length = 16      -- ignore runs whose baseline is already this short (tokens)
-- A slow drift (1000 -> 600 tokens over 30 steps) is not a collapse; a fall to near-empty answers within a few
-- steps is. The baseline is frozen at the onset, so the episode lasts until the length really recovers.
with lengths as (
    select run_key, step, value, row_number() over (partition by run_key order by step) as idx
    from metrics
    where metric = 'response_length_mean' and isfinite(value)
),

baseline as (
    select
        *,
        median(value) over recent as base_median,
        count(*) over recent as base_n,
        max(value) over ahead as worst_ahead,
        count(*) over ahead as n_ahead
    from lengths
    window
        recent as (partition by run_key order by step rows between $window preceding and 1 preceding),
        ahead as (partition by run_key order by step rows between current row and $sustain - 1 following)
),

onsets as (
    select *
    from baseline
    where base_n >= $min_baseline
        and base_median >= $min_length
        and value < $drop_ratio * base_median
        and n_ahead = $sustain
        and worst_ahead < $drop_ratio * base_median
),

ends as (
    select
        o.run_key,
        o.step as onset,
        any_value(o.value) as onset_value,
        any_value(o.base_median) as base_median,
        min(l.step) filter (where l.value >= $recover_ratio * o.base_median) as recovered_at
    from onsets as o
    join lengths as l on l.run_key = o.run_key and l.step > o.step
    group by o.run_key, o.step
),

episodes as (
    select
        e.*,
        (select min(l.value) from lengths as l
         where l.run_key = e.run_key and l.step >= e.onset and l.step < coalesce(e.recovered_at, 9223372036854775807))
            as lowest,
        (select max(l.step) from lengths as l
         where l.run_key = e.run_key and l.step < coalesce(e.recovered_at, 9223372036854775807)) as last_low
    from ends as e
    -- an onset inside an earlier, unrecovered episode is the same collapse
    where not exists (
        select 1 from ends as prior
        where prior.run_key = e.run_key and prior.onset < e.onset
            and (prior.recovered_at is null or prior.recovered_at > e.onset)
    )
)

select
    run_key,
    'response_length_collapse' as check_name,
    'error' as severity,
    onset as step,
    case when recovered_at is not null then last_low end as step_end,
    'response_length_mean' as metric,
    lowest as value,
    $drop_ratio * base_median as threshold,
    printf('mean response length collapsed from a recent median of %.0f to %.0f tokens at step %d (lowest %.0f); '
           || 'the policy is degenerating to near-empty answers: inspect samples, check the reward for a '
           || 'length or format exploit, and lower the learning rate', base_median, onset_value, onset, lowest)
        as message
from episodes
