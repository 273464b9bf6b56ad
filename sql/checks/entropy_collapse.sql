-- entropy_collapse: policy entropy falls toward zero and stays there (a sustained condition, not one low step).
-- severity: error
-- reads: metrics
-- requires: entropy
-- role: cause
-- advice: exploration up: Raise the sampling temperature or add an entropy bonus
-- param floor = 0.1            -- entropy below this is collapsed (reference: < 0.1)
-- param drop_ratio = 0.25      -- and below this share of the run's early entropy
-- param sustain = 5            -- for at least this many consecutive logged steps
-- param early_share = 0.1      -- the first tenth of the run's logged steps sets "early" entropy
with entropy as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'entropy' and isfinite(value)
),

early as (
    select run_key, median(value) as early_entropy
    from entropy
    where idx <= greatest(3, ceil(n * $early_share))
    group by run_key
),

low as (
    select e.*, early.early_entropy, e.idx - row_number() over (partition by e.run_key order by e.step) as stretch
    from entropy as e
    join early using (run_key)
    where e.value < $floor and e.value < $drop_ratio * early.early_entropy
),

stretches as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_low,
        count(*) as steps_low,
        min(value) as lowest,
        any_value(early_entropy) as early_entropy,
        max(idx) as last_idx,
        any_value(n) as n
    from low
    group by run_key, stretch
    having count(*) >= $sustain
)

select
    run_key,
    'entropy_collapse' as check_name,
    'error' as severity,
    onset as step,
    case when last_idx < n then last_low end as step_end,
    'entropy' as metric,
    lowest as value,
    $floor as threshold,
    printf('entropy fell from %.3g to %.3g from step %d (%d logged steps below %.3g); raise the sampling '
           || 'temperature or add an entropy bonus', early_entropy, lowest, onset, steps_low, $floor::double) as message
from stretches
