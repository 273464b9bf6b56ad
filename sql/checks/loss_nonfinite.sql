-- loss_nonfinite: the training loss is NaN or infinite.
-- severity: error
-- reads: metrics
-- requires: loss
-- role: cause
-- advice: checkpoint do: Resume from the last good checkpoint
-- advice: learning_rate down: Lower the learning rate
-- advice: precision do: Look for an fp16 overflow or an empty batch (bf16 avoids the first)
-- Every non-finite value counts (no threshold): consecutive non-finite logged steps are one episode, reported at
-- its first step; step_end is the last non-finite step when finite values came back, null when they never did.
with loss as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'loss' and value is not null
),

bad as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from loss
    where not isfinite(value)
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_bad,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps_bad,
        arg_min(value, step) as first_value
    from bad
    group by run_key, episode
)

select
    run_key,
    'loss_nonfinite' as check_name,
    'error' as severity,
    onset as step,
    case when last_idx < n then last_bad end as step_end,
    'loss' as metric,
    first_value as value,
    null::double as threshold,
    printf('loss was %s at step %d (%d logged step%s%s); training diverged: resume from the last good '
           || 'checkpoint with a lower learning rate, and look for an fp16 overflow or an empty batch',
           first_value::varchar, onset, steps_bad, case when steps_bad = 1 then '' else 's' end,
           case when last_idx < n then ', then finite again' else ', never finite again' end) as message
from episodes
