-- loss_nonfinite: the training loss is NaN or infinite, or its gradient norm is, step after step.
-- severity: error
-- reads: metrics
-- requires: loss | grad_norm
-- role: cause
-- advice: checkpoint do: Resume from the last good checkpoint
-- advice: learning_rate down: Lower the learning rate
-- advice: precision do: Look for an fp16 overflow or an empty batch (bf16 avoids the first)
-- param grad_sustain = 10    -- a gradient norm NaN or infinite on this many consecutive logged steps: with fp16, a
--                               loss scaler skips a step whose gradient overflows and halves its scale, so an
--                               overflow passes within a few steps (the start-up's from a 2^16 scale too); ten
--                               halvings in a row would be a scale 1,000 times smaller, beyond any overflow ...
-- param grad_share = 0.5     -- ... or on more than this share of the run's logged gradient norms (scattered over
--                               the run: the scaler never settles) ...
-- param grad_min = 5         -- ... and on at least this many of them (a short run's start-up overflows are not
--                               most of a run)
-- Every non-finite loss counts (no threshold): consecutive non-finite logged steps are one episode, reported at
-- its first step; step_end is the last non-finite step when finite values came back, null when they never did.
-- A non-finite gradient norm under a finite loss is judged on its own: the optimizer skipped those steps (an fp16
-- loss scaler) or applied a broken update; one or a few are the scaler doing its job. At steps where the loss is
-- non-finite too, the loss's row says it.
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
),

grads as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'grad_norm' and value is not null
),

bad_grads as (  -- consecutive logged gradient norms that are not finite, at steps whose loss is not flagged
    select g.*, g.idx - row_number() over (partition by g.run_key order by g.step) as episode
    from grads as g
    anti join bad as b on g.run_key = b.run_key and g.step = b.step
    where not isfinite(g.value)
),

grad_episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_bad,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps_bad,
        arg_min(value, step) as first_value
    from bad_grads
    group by run_key, episode
    having count(*) >= $grad_sustain
),

grad_runs as (  -- scattered over most of the run, where no stretch was long enough to be flagged on its own
    select
        run_key,
        min(step) as onset,
        max(step) as last_bad,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps_bad,
        arg_min(value, step) as first_value
    from bad_grads
    where run_key not in (select e.run_key from grad_episodes as e)
    group by run_key
    having count(*) >= $grad_min and count(*) > $grad_share * any_value(n)
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

union all by name

select
    run_key,
    'loss_nonfinite' as check_name,
    'error' as severity,
    onset as step,
    case when last_idx < n then last_bad end as step_end,
    'grad_norm' as metric,
    first_value as value,
    $grad_sustain::double as threshold,
    printf('gradient norm was %s on %d logged steps in a row from step %d%s, longer than an fp16 loss scaler '
           || 'takes to recover from an overflow; those updates were skipped or broken: resume from the last good '
           || 'checkpoint with a lower learning rate, and look for an fp16 overflow or a NaN in the weights or the '
           || 'loss terms', first_value::varchar, steps_bad, onset,
           case when last_idx < n then printf(' (to step %d, then finite again)', last_bad)
                else ', never finite again' end) as message
from grad_episodes

union all by name

select
    run_key,
    'loss_nonfinite' as check_name,
    'error' as severity,
    onset as step,
    case when last_idx < n then last_bad end as step_end,
    'grad_norm' as metric,
    first_value as value,
    $grad_share::double as threshold,
    printf('gradient norm was NaN or infinite on %d of the run''s %d logged values (%.0f%%, from step %d to step '
           || '%d), far more often than an fp16 loss scaler skips an overflow; most updates were skipped or broken: '
           || 'resume from the last good checkpoint with a lower learning rate, and look for an fp16 overflow or a '
           || 'NaN in the weights or the loss terms', steps_bad, n, 100 * steps_bad / n, onset, last_bad) as message
from grad_runs
