-- response_truncation: a sizeable share of responses is cut off at the maximum length.
-- severity: warn
-- reads: metrics, runs
-- requires: response_length_mean
-- role: cause
-- advice: length_limit up: Raise the response length limit (max_completion_length / max_response_length)
-- advice: length_penalty up: Add an overlong penalty or mask truncated samples
-- param warn_share = 0.05    -- truncated share worth a warning (reference: >= 5%)
-- param error_share = 0.15   -- serious (reference: >= 15%; > 50% means most samples are cut)
-- param smooth = 20          -- judged on the mean share of the last this many logged steps (a pooled share:
--                               sparse truncation, 1 of 2 samples on a few steps, still adds up)
-- param window_share = 0.05  -- ... or of this share of the run's logged steps when that is more: a finding is a
--                               share sustained over a stretch of the run, and when each step holds one prompt's
--                               group, three groups of long answers (all 8 cut) in 20 steps of a 2,400-step run
--                               make 15 % there while 1.6 % of the run's answers were cut
-- param sustain = 3          -- for at least this many consecutive logged steps
-- param min_window = 5       -- an episode's worst share counts windows of at least this many logged steps (the
--                               run's first steps have shorter ones: one cut batch at step 1 alone reads as 100 %)
-- param pinned_share = 0.95  -- without a truncation metric: mean length at this share of the maximum = pinned
-- param ceiling_steps = 3    -- without a configured limit: the mean length sitting exactly on its own maximum on
--                               this many logged steps (and 5% of them) reveals the cap (a free mean peaks once)
-- param ceiling_spread = 0.1 -- ... when the mean length was this share below that maximum at some step: one that
--                               never moves (a short answer of a fixed length, 5 tokens every step) shows no cap
-- The truncated share is response_clip_ratio (verl response_length/clip_ratio, TRL completions/clipped_ratio).
-- Runs that log no such metric fall back to "mean length pinned at the maximum": on a step whose mean length is at
-- the limit nearly every response was cut, and the share judged is that of such steps (the message says so when
-- not every step is one). The limit is the configured one (TRL max_completion_length, verl
-- data.max_response_length), else the longest response_length_max logged, else a ceiling the mean length itself
-- keeps hitting (older TRL logs only completion_length). Either way the flag's value is a share of cut responses
-- (or of steps whose responses were nearly all cut), so its metric is response_clip_ratio: a value of 1 under
-- response_length_mean would read as a length of 1 token; the message gives the length.
with clip as (
    select run_key, step, value
    from metrics
    where metric = 'response_clip_ratio' and isfinite(value)
),

ceilings as (  -- the mean length on its own maximum, to within 0.1%, on several steps, and below it elsewhere: a cap
    select run_key, max(value) as ceiling
    from (
        select
            run_key, value,
            max(value) over (partition by run_key) as top,
            min(value) over (partition by run_key) as bottom,
            count(*) over (partition by run_key) as n
        from metrics
        where metric = 'response_length_mean' and isfinite(value) and value > 0
    ) as lengths
    where value >= 0.999 * top
    group by run_key
    having count(*) >= greatest($ceiling_steps, 0.05 * any_value(n))
        and any_value(bottom) <= (1 - $ceiling_spread) * any_value(top)
),

limits as (
    select
        r.run_key,
        coalesce(
            try_cast(r.config ->> '$.max_completion_length' as double),
            try_cast(r.config ->> '$."data.max_response_length"' as double),
            try_cast(r.config -> '$.data' ->> '$.max_response_length' as double),
            (select max(m.value) from metrics as m
             where m.run_key = r.run_key and m.metric = 'response_length_max' and isfinite(m.value)),
            c.ceiling
        ) as max_length
    from runs as r
    left join ceilings as c using (run_key)
    where r.run_key not in (select run_key from clip)
),

-- the share of truncated responses, measured or (fallback) 1 when the mean is pinned at the limit, else 0
shares as (
    select run_key, step, value as share, true as measured, null::double as mean_length
    from clip
    union all
    select
        m.run_key, m.step,
        case when m.value >= $pinned_share * l.max_length then 1.0 else 0.0 end as share,
        false as measured,
        m.value as mean_length
    from metrics as m
    join limits as l on m.run_key = l.run_key and l.max_length > 0
    where m.metric = 'response_length_mean' and isfinite(m.value)
),

numbered as (
    select
        *,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from shares
),

smoothed as (
    select *, avg(share) over recent as level, count(*) over recent as k
    from numbered
    window recent as (
        partition by run_key order by step
        rows between greatest($smooth, round($window_share * n)) - 1 preceding and current row  -- noqa: PRS
    )
),

high as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from smoothed
    where level >= $warn_share
),

episodes as (
    select
        run_key,
        bool_and(measured) as measured,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        coalesce(max(level) filter (where k >= least($min_window, n)), max(level)) as worst,
        -- the window that worst share is the mean of (fewer steps than `smooth` at the start of a run), the widest
        -- of those that reach it: a run cut at 100 % throughout reaches it in its first window of `min_window` steps
        coalesce(arg_max(k, (level, k)) filter (where k >= least($min_window, n)), arg_max(k, (level, k)))
            as worst_k,
        max(mean_length) as mean_length
    from high
    group by run_key, episode
    having count(*) >= $sustain
)

select
    run_key,
    'response_truncation' as check_name,
    case when worst >= $error_share then 'error' else 'warn' end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'response_clip_ratio' as metric,
    worst as value,
    $warn_share as threshold,
    case
        when measured then
            printf('%.0f%% of responses were cut at the maximum length (in the worst %d-step window), %.0f%% or more '
                   || 'for %d logged steps from step %d%s; their rewards and advantages are computed on unfinished '
                   || 'answers: raise the length limit, add an overlong penalty, or mask truncated samples',
                   100 * worst, worst_k, 100 * $warn_share, steps, onset, until)
        when worst >= $pinned_share then
            printf('mean response length sat at the maximum (%.0f tokens) for %d logged steps from step %d%s: '
                   || 'nearly every response is cut off; raise the length limit or penalise overlong answers',
                   mean_length, steps, onset, until)
        else
            printf('mean response length was at the maximum (%.0f tokens) on up to %.0f%% of the logged steps (in '
                   || 'the worst %d-step window), %.0f%% or more for %d logged steps from step %d%s: on those steps '
                   || 'nearly every response was cut off; raise the length limit or penalise overlong answers',
                   mean_length, 100 * worst, worst_k, 100 * $warn_share, steps, onset, until)
    end as message
from (
    -- how long the share stayed at or above the warning line, said as such: an episode is not its worst window
    select *, case when last_idx < n then printf(' to step %d', last_step) else ' to the end of the run' end as until
    from episodes
) as told
