-- grad_norm_vanishing: the gradient norm sits near zero (the policy stops receiving any update).
-- severity: warn
-- reads: metrics, runs
-- requires: grad_norm
-- role: symptom
-- advice: reward_signal do: Check that the loss depends on the policy and that advantages are non-zero (reward variance within groups)
-- param floor = 0.0001       -- a grad norm below this is vanishing (reference: < 1e-4)
-- param sustain = 5          -- for at least this many consecutive logged steps
-- param zero_share = 0.2     -- or exactly 0, beyond what tied groups explain, on at least this share of the run's
--                               logged steps (and >= sustain steps)
-- Isolated tiny norms are normal in GRPO; a stretch of them, or a run where exact zeros are common, means the
-- loss is disconnected from the policy. A step whose reward groups were all tied (tied_steps: frac_reward_zero_std
-- 1, or a reward_std of 0) has no advantage to follow and is not judged here: reward_zero_variance names that cause.
-- It still breaks a stretch, and the share of zeros is of the other steps.
-- A grad norm logged every N > 1 optimizer steps is the last step's, while the tied share is the mean over all N:
-- a window whose share is below 1 may end on a step whose groups all tied (a real TRL run logging every 10 steps,
-- 2 groups a step and 70 % of them tied, had a zero on 59 of its 120 logged steps and no broken loss). At most the
-- window's tied share of its steps tied whole, which bounds the chance that its zero is a tie (tie_chance): 1 when
-- no share is logged, 0 when the value is one optimizer step's (the trainer's step moved by one since the last;
-- not the line count a console log without steps is read by). Zeros count towards zero_share only beyond those
-- chances summed, or where no tie can explain them. A stretch is judged as before: a policy that ends `sustain`
-- logged windows in a row without an update is not being updated, whatever the cause (a real TRL run with one
-- group a step, labelled vanishing: 8 such windows in a row, 70-90 % of their groups tied).
with logged as (
    select
        m.run_key, m.step, m.value, t.step is not null as is_tied,
        row_number() over (partition by m.run_key order by m.step) as idx,
        count(*) over (partition by m.run_key) as n,
        -- the optimizer steps the logged value closes: since the previous logged grad norm
        m.step - coalesce(lag(m.step) over (partition by m.run_key order by m.step), 0) as span
    from metrics as m
    left join tied_steps() as t on m.run_key = t.run_key and m.step = t.step
    where m.metric = 'grad_norm' and isfinite(m.value)
),

grad as (
    select
        l.*,
        case
            when l.span <= 1 and coalesce(r.config ->> '$.step_source', '') <> 'ordinal' then 0
            else coalesce(least(greatest(f.value, 0), 1), 1)
        end as tie_chance
    from logged as l
    left join runs as r on l.run_key = r.run_key
    left join metrics as f
        on l.run_key = f.run_key and l.step = f.step and f.metric = 'frac_reward_zero_std' and isfinite(f.value)
    where not l.is_tied
),

low as (
    select *, idx - row_number() over (partition by run_key order by step) as stretch
    from grad
    where abs(value) < $floor
),

stretches as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_low,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps_low,
        max(abs(value)) as highest
    from low
    group by run_key, stretch
    having count(*) >= $sustain
),

zeros as (
    select
        run_key,
        min(step) filter (where value = 0) as first_zero,
        count(*) filter (where value = 0) as zero_steps,
        count(*) as n,
        sum(tie_chance) as tie_zeros,
        -- the zeros no tie explains: those of windows that had none, or those beyond the ties' chances summed
        greatest(count(*) filter (where value = 0 and tie_chance = 0),
                 count(*) filter (where value = 0) - sum(tie_chance)) as unexplained
    from grad
    group by run_key
),

many_zeros as (
    select * from zeros
    where unexplained >= greatest($sustain, $zero_share * n)
)

select
    run_key,
    'grad_norm_vanishing' as check_name,
    'warn' as severity,
    onset as step,
    case when last_idx < n then last_low end as step_end,
    'grad_norm' as metric,
    highest as value,
    $floor as threshold,
    printf('grad norm stayed below %.3g for %d logged steps from step %d; the policy is not being updated: '
           || 'check that the loss depends on the policy, that advantages are non-zero (reward variance), and '
           || 'that the learning rate is not zero', $floor::double, steps_low, onset) as message
from stretches

union all

select
    run_key,
    'grad_norm_vanishing' as check_name,
    'warn' as severity,
    first_zero as step,
    null as step_end,
    'grad_norm' as metric,
    unexplained / n as value,
    $zero_share as threshold,
    printf('grad norm was exactly 0 on %d of %d logged steps with a reward signal (first at step %d)%s; those '
           || 'steps changed nothing: look for a loss detached from the policy or skipped optimizer steps',
           zero_steps, n, first_zero,
           case when tie_zeros > 0 then printf(', %d more than tied reward groups can explain', round(unexplained)::int)
               else '' end) as message
from many_zeros
where run_key not in (select run_key from stretches)
