-- entropy_collapse: policy entropy falls toward zero and stays there (a sustained condition, not one low step).
-- severity: error
-- reads: metrics
-- requires: entropy
-- role: cause
-- advice: exploration up: Raise the sampling temperature or add an entropy bonus
-- param floor = 0.1            -- entropy below this is collapsed (reference: < 0.1)
-- param drop_ratio = 0.25      -- and below this share of the run's early entropy
-- param sustain = 5            -- for at least this many logged steps
-- param sustain_share = 0.01   -- or this share of the run's logged steps, if more: five steps of 2,000 are a dip
-- param early_share = 0.1      -- the first tenth of the run's logged steps sets "early" entropy
-- param early_cap = 10         -- but no more than this many: a long run can collapse within its first tenth
-- param back_factor = 2        -- once below the bar, the collapse lasts until entropy is back above this many bars
-- param fall_share = 0.5       -- the collapse began after the last logged step, before the bar was crossed, whose
--                                 entropy was still at least this share of the early entropy: a fall from 0.77 at
--                                 step 95 to 0.099 at step 135 started at step 100, not where it crossed 0.1
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
    where idx <= greatest(3, least($early_cap, ceil(n * $early_share)))
    group by run_key
),

bars as (
    select e.*, early.early_entropy, least($floor, $drop_ratio * early.early_entropy) as bar
    from entropy as e
    join early using (run_key)
),

-- Stretches below back_factor bars: entropy hovering at the bar (0.040, 0.044, 0.041 against 0.042) is one
-- collapse, not many short ones.
low as (
    select *, idx - row_number() over (partition by run_key order by step) as stretch
    from bars
    where value < $back_factor * bar
),

marked as (
    select *, min(step) filter (where value < bar) over (partition by run_key, stretch) as onset
    from low
),

stretches as (
    select
        run_key,
        any_value(onset) as onset,
        max(step) as last_low,
        count(*) filter (where value < bar) as steps_low,
        count(*) filter (where step >= onset) as after,
        min(value) as lowest,
        any_value(early_entropy) as early_entropy,
        any_value(bar) as bar,
        max(idx) as last_idx,
        any_value(n) as n
    from marked
    group by run_key, stretch
    having count(*) filter (where value < bar) >= greatest($sustain, ceil($sustain_share * any_value(n)))
),

-- where the fall began: the first step after the last one at fall_share of the early entropy before the onset
began as (
    select
        s.*,
        coalesce((
            select min(e.step) from entropy as e
            where e.run_key = s.run_key and e.step <= s.onset and e.step > coalesce((
                select max(e2.step) from entropy as e2
                where e2.run_key = s.run_key and e2.step < s.onset and e2.value >= $fall_share * s.early_entropy), -1)
        ), s.onset) as fell_from
    from stretches as s
)

select
    run_key,
    'entropy_collapse' as check_name,
    'error' as severity,
    fell_from as step,
    case when last_idx < n then last_low end as step_end,
    'entropy' as metric,
    lowest as value,
    bar as threshold,
    printf('entropy fell from %.3g to %.3g from step %d (below %.3g from step %d, on %d of the %d logged steps from '
           || 'there%s); raise the sampling temperature or add an entropy bonus',
           early_entropy, lowest, fell_from, bar, onset, steps_low, after,
           case when last_idx < n then printf(' to step %d, none of them back above %.3g', last_low, $back_factor * bar)
                else printf(', none of them back above %.3g', $back_factor * bar) end) as message
from began
