-- response_length_growth: mean response length grows fast and steadily, much faster than the reward does.
-- severity: warn
-- reads: metrics
-- requires: response_length_mean
-- role: cause
-- advice: length_penalty up: Add a length penalty (or an overlong penalty)
-- advice: samples do: Check samples for truncation and repetition
-- param window = 20          -- logged steps in each trend window (OLS line length ~ step)
-- param min_points = 12      -- fewest finite points a window needs
-- param min_t = 4            -- the length slope must be this many standard errors above 0
-- param min_growth = 0.25    -- fitted growth across the window, as a share of the fitted length at its start
-- param reward_share = 0.5   -- "outruns": the reward's relative rise over the same steps is below this share of
--                               the length's (reward level floored at 0.1 so a reward near 0 cannot fake a rise)
-- param min_kept = 0.25      -- the growth held: the median length over the run's last `window` steps is still this
--                               share above the median over the `window` steps before the episode, and over the
--                               `window` steps right after it half this share (noise and bursts revert, verbosity
--                               does not; a burst that reverts at once is noise, whatever the length does later)
-- param run_growth = 1.0     -- also over the whole run: the median length of its last fifth at least doubled (+100%)
--                               against its first tenth, while the reward's relative rise from where the length began
--                               to grow (+min_growth) stayed under reward_share of that (slow growth on a dense log
--                               never shows within 20 points; a reward that rose before the length did not pay it)
-- param min_tokens = 16      -- and by at least this many tokens (a collapsed policy answering in 2 tokens that
--                               now answers in 4 has not become verbose)
-- param min_rise_points = 3  -- steadily: at least this many logged lengths lie between 25% and 75% of the rise (a
--                               jump to a new level, such as answers suddenly cut at the length limit, has one or
--                               two: that is response_truncation's finding, or a regime switch, not a growth; the
--                               middle half, as the noise on either level reaches past 10% or 90% of the rise) ...
-- param max_jump_share = 0.5 -- ... and no single step carries this share of the rise (the median of the three lengths
--                               from it on against the three before it): noise on the new level can fall in the
--                               middle half, a step that makes half the rise is a jump all the same
-- Length that grows with the reward is healthy (longer reasoning that pays); length that grows while the reward
-- barely moves is verbosity the reward does not ask for, and it runs into the length limit next. Reported where
-- the growth began: the first step after the last time the length's median over 5 logged steps was under a
-- tenth of the growth (the start of the first window showing it when it never was); windows less than a window
-- apart are one episode. The growth must also hold
-- to the end of the run and still outrun the reward there: from the `window` lengths before the episode (its first
-- five at the start of a run) to the run's last `window`, against the reward's change over the same steps. Without
-- a reward metric the length trend alone decides.
with lengths as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'response_length_mean' and isfinite(value)
),

growing as (
    select *, slope * (step - start_step) / greatest(fitted_start, 1) as growth
    from trend_windows('response_length_mean', $window)
    where k >= $min_points and slope_se is not null
        and slope > $min_t * greatest(slope_se, 1e-12)
        and slope * (step - start_step) >= $min_growth * greatest(fitted_start, 1)
),

-- the rise at each logged length of a run with a growing window: the median of it and the next two against the
-- median of the three before it
jumps as (
    select
        run_key, idx,
        median(value) over (partition by run_key order by idx rows between current row and 2 following)
        - median(value) over (partition by run_key order by idx rows between 3 preceding and 1 preceding) as jump
    from lengths
    where run_key in (select g.run_key from growing as g)
),

-- steadily: the lengths of the window that lie between 25% and 75% of its rise (first five against last five), and
-- the largest single-step rise inside it
window_points as (
    select
        g.run_key, g.step, l.value, l.idx,
        l.idx - g.start_idx as pos,
        g.idx - g.start_idx as last_pos
    from growing as g
    join lengths as l on g.run_key = l.run_key and l.idx between g.start_idx and g.idx
),

window_levels as (
    select
        run_key, step,
        median(value) filter (where pos < 5) as low,
        median(value) filter (where pos > last_pos - 5) as high
    from window_points
    group by run_key, step
),

steady as (
    select p.run_key, p.step
    from window_points as p
    join window_levels as v on p.run_key = v.run_key and p.step = v.step
    join jumps as j on p.run_key = j.run_key and p.idx = j.idx
    group by p.run_key, p.step, v.low, v.high
    having count(*) filter (
        where p.value > v.low + 0.25 * (v.high - v.low) and p.value < v.low + 0.75 * (v.high - v.low)
    ) >= $min_rise_points
        and coalesce(max(j.jump) filter (where p.pos >= 3 and p.pos <= p.last_pos - 2), 0)
        < $max_jump_share * (v.high - v.low)
),

-- the reward's fitted relative rise over the same span of steps
reward_rise as (
    select
        g.run_key,
        g.step,
        regr_slope(r.value, r.step) * (g.step - g.start_step)
            / greatest(abs(median(r.value)), 0.1) as reward_growth,
        count(r.value) as reward_points
    from growing as g
    join metrics as r
        on g.run_key = r.run_key and r.metric = 'reward_mean' and isfinite(r.value)
        and r.step between g.start_step and g.step
    group by g.run_key, g.step, g.start_step
),

outrunning as (
    select g.*, rr.reward_growth
    from growing as g
    semi join steady as s on g.run_key = s.run_key and g.step = s.step
    left join reward_rise as rr on g.run_key = rr.run_key and g.step = rr.step and rr.reward_points >= 3
    where rr.reward_growth is null or rr.reward_growth < $reward_share * g.growth
),

gaps as (
    select *, idx - lag(idx) over (partition by run_key order by step) as gap
    from outrunning
),

numbered as (
    select *, count(*) filter (where gap is null or gap > $window) over (partition by run_key order by step) as episode
    from gaps
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        -- observed (a fitted start can fall below 0 after a collapse); a window shorter than `window` points, at
        -- the start of the run, has no head to take it from: its fitted start, floored at 0
        arg_min(greatest(coalesce(start_value, fitted_start), 0), step) as from_length,
        arg_min(start_step, step) as from_step,
        max(value) as to_length,
        arg_min(growth, step) as growth,
        arg_min(reward_growth, step) as reward_growth
    from numbered
    group by run_key, episode
),

-- where the growth is judged to have held: the `window` lengths before the episode (its first five at the start of
-- a run, which has none before it) against the run's last `window`, and the `window` right after the episode
episode_starts as (
    select e.run_key, e.onset, min(l.idx) as from_idx
    from episodes as e
    join lengths as l on e.run_key = l.run_key and e.from_step <= l.step
    group by e.run_key, e.onset
),

spans as (
    select
        e.*,
        case when x.from_idx > 5 then greatest(x.from_idx - $window, 1) else x.from_idx end as before_lo,
        case when x.from_idx > 5 then x.from_idx - 1 else x.from_idx + 4 end as before_hi,
        case when e.last_idx + $window <= e.n then e.last_idx + 1 else greatest(e.n - $window + 1, 1) end as after_lo,
        least(e.last_idx + $window, e.n) as after_hi
    from episodes as e
    join episode_starts as x on e.run_key = x.run_key and e.onset = x.onset
),

held as (
    select
        s.run_key, s.onset,
        median(l.value) filter (where l.idx between s.before_lo and s.before_hi) as before_length,
        min(l.step) filter (where l.idx between s.before_lo and s.before_hi) as before_from,
        max(l.step) filter (where l.idx between s.before_lo and s.before_hi) as before_to,
        median(l.value) filter (where l.idx between s.after_lo and s.after_hi) as after_length,
        median(l.value) filter (where l.idx > s.n - $window) as final_length,
        min(l.step) filter (where l.idx > s.n - $window) as final_from
    from spans as s
    join lengths as l on s.run_key = l.run_key
    group by s.run_key, s.onset
),

-- the reward's relative change over the same steps
held_reward as (
    select
        h.run_key, h.onset,
        (median(r.value) filter (where r.step >= h.final_from)
            - median(r.value) filter (where r.step between h.before_from and h.before_to))
            / greatest(abs(median(r.value) filter (where r.step between h.before_from and h.before_to)), 0.1)
            as reward_change
    from held as h
    join metrics as r on h.run_key = r.run_key and r.metric = 'reward_mean' and isfinite(r.value)
    group by h.run_key, h.onset
),

kept as (
    select e.*, h.before_length, h.final_length
    from episodes as e
    join held as h on e.run_key = h.run_key and e.onset = h.onset
    left join held_reward as hr on e.run_key = hr.run_key and e.onset = hr.onset
    where h.final_length >= (1 + $min_kept) * h.before_length
        and h.after_length >= (1 + $min_kept / 2) * h.before_length
        and h.final_length - h.before_length >= $min_tokens
        and (hr.reward_change is null or hr.reward_change < $reward_share * (h.final_length / h.before_length - 1))
),

-- where a growth began: the first step after the last time the length's median over 5 logged steps was under a
-- tenth of the growth (from the lengths before the episode to the run's last ones)
recent_lengths as (
    select run_key, step, median(value) over (partition by run_key order by step rows between 4 preceding
        and current row) as recent
    from lengths
),

kept_lows as (
    select
        k.run_key,
        k.onset,
        max(r.step) filter (where r.recent <= k.before_length + 0.1 * (k.final_length - k.before_length)) as last_low
    from kept as k
    join recent_lengths as r on k.run_key = r.run_key and k.onset >= r.step
    group by k.run_key, k.onset
),

kept_began as (  -- the first step after the last low one (the onset itself when the length was still low there)
    select o.run_key, o.onset, coalesce(min(r.step), o.onset) as began_step
    from kept_lows as o
    left join recent_lengths as r on o.run_key = r.run_key and o.last_low < r.step and o.onset >= r.step
    where o.last_low is not null
    group by o.run_key, o.onset
),

growths as (
    select k.*, coalesce(b.began_step, k.from_step) as began_step
    from kept as k
    left join kept_began as b using (run_key, onset)
),

-- over the whole run: the first tenth against the last fifth, and where the trailing median first stood min_growth
-- above the first tenth (where the growth began to show)
whole as (
    select
        l.run_key,
        any_value(l.n) as n,
        median(l.value) filter (where l.idx <= greatest(5, l.n / 10)) as start_length,
        count(*) filter (where l.idx <= greatest(5, l.n / 10)) as start_k,
        min(l.step) as first_step,
        max(l.step) filter (where l.idx <= greatest(5, l.n / 10)) as start_end,
        median(l.value) filter (where l.idx > l.n - greatest(5, l.n / 5)) as end_length
    from lengths as l
    group by l.run_key
    having any_value(l.n) >= 40
),

trailing_lengths as (
    select run_key, step, median(value) over (partition by run_key order by step
        rows between $window - 1 preceding and current row) as lvl
    from lengths
),

whole_onsets as (
    select w.run_key, min(x.step) filter (where x.lvl >= (1 + $min_growth) * w.start_length) as onset
    from whole as w
    join trailing_lengths as x on w.run_key = x.run_key
    group by w.run_key
),

-- the reward's relative change from the `window` logs before that onset (the run's first tenth when it came
-- earlier) to the run's last fifth: a reward that rose before the length did, then stayed, did not pay for it
whole_rewards as (
    select
        r.run_key, r.step, r.value,
        row_number() over (partition by r.run_key order by r.step) as idx,
        count(*) over (partition by r.run_key) as n
    from metrics as r
    semi join whole_onsets as o on r.run_key = o.run_key
    where r.metric = 'reward_mean' and isfinite(r.value)
),

reward_spans as (  -- the last reward log before the onset (the run's first tenth's last when that is later)
    select
        w.run_key,
        greatest(count(*) filter (where w.step < o.onset), greatest(5, any_value(w.n) / 10)) as before_hi
    from whole_rewards as w
    join whole_onsets as o on w.run_key = o.run_key
    group by w.run_key
),

whole_reward as (
    select
        w.run_key,
        (median(w.value) filter (where w.idx > w.n - greatest(5, w.n / 5))
            - median(w.value) filter (where w.idx between b.before_hi - $window + 1 and b.before_hi))
            / greatest(abs(median(w.value) filter (where w.idx between b.before_hi - $window + 1 and b.before_hi)),
                       0.1) as reward_growth
    from whole_rewards as w
    join reward_spans as b on w.run_key = b.run_key
    group by w.run_key
),

whole_lows as (  -- where it began, as for an episode above: from the first tenth's length to the last fifth's
    select
        w.run_key,
        max(r.step) filter (where r.recent <= w.start_length + 0.1 * (w.end_length - w.start_length)) as last_low
    from whole as w
    join whole_onsets as o on w.run_key = o.run_key
    join recent_lengths as r on w.run_key = r.run_key and o.onset >= r.step
    group by w.run_key
),

whole_began as (
    select o.run_key, min(r.step) as began_step
    from whole_lows as o
    join whole_onsets as wo on o.run_key = wo.run_key
    join recent_lengths as r on o.run_key = r.run_key and o.last_low < r.step and wo.onset >= r.step
    group by o.run_key
),

grown_whole as (
    select w.*, o.onset, coalesce(b.began_step, o.onset) as began, wr.reward_growth
    from whole as w
    join whole_onsets as o on w.run_key = o.run_key
    left join whole_began as b on w.run_key = b.run_key
    left join whole_reward as wr on w.run_key = wr.run_key
    where w.end_length >= (1 + $run_growth) * w.start_length
        and w.end_length - w.start_length >= $min_tokens
        and (wr.reward_growth is null or wr.reward_growth < $reward_share * (w.end_length / w.start_length - 1))
        and w.run_key not in (select k.run_key from kept as k)
)
,

-- the same rise over `window` lengths on either side (a tenth of the run's, at least 5, when that is fewer), for the
-- whole-run branch: over a whole run, noise gives a few large three-point rises among hundreds of points; on a
-- coarse log (80 points) 20 on either side span half the run, and a steady growth over 40 of them reads as a jump
wide_lengths as (
    select *, least($window, greatest(5, n // 10)) as wide, least($window, greatest(5, n // 10)) - 1 as wide_ahead
    from lengths
    where run_key in (select g.run_key from grown_whole as g)
),

wide_jumps as (
    select
        run_key, idx,
        median(value) over (partition by run_key order by idx rows between current row and wide_ahead following)
        - median(value) over (partition by run_key order by idx rows between wide preceding and 1 preceding)
            as wide_jump
    from wide_lengths
    qualify idx > wide and idx + wide - 1 <= n  -- whole frames: at a run's edge one point's noise reads as a jump
)

select
    run_key,
    'response_length_growth' as check_name,
    'warn' as severity,
    began_step as step,
    case when last_idx < n then last_step end as step_end,
    'response_length_mean' as metric,
    to_length as value,
    $min_growth as threshold,
    printf('mean response length grew from about %.0f tokens at step %d to %.0f by step %d (+%.0f%% over %d '
           || 'steps) while the reward moved %s; the policy is getting verbose without being paid for it: add a '
           || 'length penalty or check for truncation and repetition', from_length, from_step, to_length, last_step,
           100 * (to_length / greatest(from_length, 1) - 1), last_step - from_step,
           coalesce(printf('%+.0f%%', 100 * reward_growth), 'unknown (no reward logged)')) as message
from growths

union all by name

select
    g.run_key,
    'response_length_growth' as check_name,
    'warn' as severity,
    g.began as step,
    null::bigint as step_end,
    'response_length_mean' as metric,
    g.end_length as value,
    $run_growth as threshold,
    printf('mean response length grew from about %.0f tokens over %s to %.0f over the last fifth, +%.0f%%, '
           || 'past +%.0f%% from step %d, while the reward moved %s from then on; the policy is getting verbose '
           || 'without being paid for it: add a length penalty or check for truncation and repetition',
           g.start_length,
           span_words('first', g.start_k, floor(g.n / 10), 'the first tenth of the run', g.first_step, g.start_end),
           g.end_length, 100 * (g.end_length / g.start_length - 1), 100 * $min_growth::double,
           g.onset, coalesce(printf('%+.0f%%', 100 * g.reward_growth), 'unknown (no reward logged)')) as message
from grown_whole as g
join lengths as x on g.run_key = x.run_key
join wide_jumps as j on x.run_key = j.run_key and x.idx = j.idx
group by all
-- steadily: a twentieth of a long run's lengths in the middle half of the rise (outliers on either level are none),
-- and no step that makes half of it
having count(*) filter (
    where x.value > g.start_length + 0.25 * (g.end_length - g.start_length)
        and x.value < g.start_length + 0.75 * (g.end_length - g.start_length)
) >= greatest($min_rise_points, any_value(g.n) / 20)
    and coalesce(max(j.wide_jump), 0) < $max_jump_share * (g.end_length - g.start_length)
