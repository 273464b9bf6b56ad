-- elo_gap_shrinking: the league Elo gap best checkpoint - base_model falls well below its earlier peak.
-- severity: warn
-- reads: elo_gap
-- requires:
-- role: outcome
-- advice: checkpoint do: Resume from the best checkpoint
-- param smooth = 20          -- the gap's level is the mean of its as-of value over the last this many steps
-- param z = 1.5              -- shrinking: the level is more than z gap standard errors below its running peak
-- param sustain = 10         -- for at least this many consecutive steps
-- param min_checkpoints = 2  -- a gap with a single checkpoint has no "best" yet
-- elo_gap is read as of each step (best checkpoint and base_model both at their last known rating) with its standard
-- error gap_se = sqrt(sigma_best^2 + sigma_base^2). A level that wanders by less than the ratings' own uncertainty
-- is noise; one that falls by more, and stays down, means newer checkpoints lose ground to the base model
-- (forgetting, a collapse, or a league that over-fits to its own checkpoints). The running peak is a peak of
-- smoothed levels, so one lucky step cannot set it.
with gap as (
    select
        run_key,
        step,
        gap,
        coalesce(gap_se, 0) as gap_se,
        avg(gap) over recent as level,
        median(coalesce(gap_se, 0)) over recent as level_se,
        count(*) over recent as level_n,
        n_checkpoints
    from elo_gap
    window recent as (partition by run_key order by step rows between $smooth - 1 preceding and current row)
),

peaks as (
    select
        *,
        max(level) over history as peak,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from gap
    where level_n = $smooth and n_checkpoints >= $min_checkpoints
    window history as (partition by run_key order by step rows between unbounded preceding and current row)
),

shrunk as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from peaks
    where peak - level > $z * greatest(level_se, 1e-9)
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        arg_min(peak, step) as peak,
        min(level) as lowest,
        arg_min(level_se, step) as level_se
    from shrunk
    group by run_key, episode
    having count(*) >= $sustain
)

select
    run_key,
    'elo_gap_shrinking' as check_name,
    'warn' as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'elo_gap' as metric,
    lowest as value,
    peak - $z * level_se as threshold,
    printf('the Elo gap best checkpoint - base_model fell from a peak of %.0f to %.0f (standard error %.0f) from '
           || 'step %d for %d steps: newer checkpoints are losing ground to the base model; look for a collapse '
           || '(length, entropy, reward) and consider resuming from the best checkpoint', peak, lowest, level_se,
           onset, steps) as message
from episodes
