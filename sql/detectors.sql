-- Shared detectors for sql/checks: temporary macros the check runner (pipeline/checks.py) defines on its
-- connection before any rule runs, so a fix here fixes every rule that calls it.
-- Lint: sqlfluff parses a window frame offset only as a literal or a column, not as an expression of the macro's
-- arguments (`smooth - 1 preceding`), hence the `noqa: PRS` on those frames; `noqa: RF02` marks a macro argument
-- that RF02 takes for an unqualified column in a join.

-- Wilson score interval of a proportion k/n (z = 1.96: 95%). A rate judged against a threshold is flagged only when
-- the interval lies beyond it: 3 failures in 240 rollouts (1.25%) is not evidence of a rate above 1%,
-- 25 in 243 is evidence of one above 5%.
create or replace temp macro wilson_lower(k, n, z := 1.96) as
    case when n > 0 then
        (k / n + z * z / (2 * n) - z * sqrt((k / n) * (1 - k / n) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    end;

create or replace temp macro wilson_upper(k, n, z := 1.96) as
    case when n > 0 then
        (k / n + z * z / (2 * n) + z * sqrt((k / n) * (1 - k / n) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    end;

-- Consecutive hours as one episode: equal for hours that follow each other within one partition (use with
-- `row_number() over (partition by … order by hour)` as `idx`).
create or replace temp macro hour_episode(hour, idx) as hour - to_hours(idx::bigint);

-- What a rule averaged over at the start (`side` 'first') or the end ('last') of a run, in its message: `share_name`
-- ('the first tenth of the run') when its `points` logged steps are the `share_points` that share makes, else the
-- points themselves with their steps ('the first 3 logged steps (5-15)'). A floor on the points makes a part of a
-- short run larger than its name says: 3 of 10 points are a third, not a tenth.
create or replace temp macro span_words(side, points, share_points, share_name, from_step, to_step) as
    case
        when points > share_points then printf('the %s %d logged steps (%d-%d)', side, points, from_step, to_step)
        else share_name
    end;

-- Sustained level: the episodes in which a metric's rolling median (over the last `smooth` logged steps, the
-- step itself included) stays beyond `threshold` — above it (`above` true) or below it — for at least `sustain`
-- consecutive logged steps, after the first `warmup` logged steps. One row per episode: run_key, onset (first
-- step), last_step, step_end (null when the episode lasts to the run's last logged step: still going), steps,
-- typical (median level), worst (the most extreme level), total (sum of the raw values). `inclusive`: a level
-- equal to the threshold counts as beyond it.
create or replace temp macro sustained_level(metric_name, threshold, above, smooth := 1, warmup := 0, sustain := 1,
                                             inclusive := false) as table
with series as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n,
        median(value) over (
            partition by run_key order by step
            rows between smooth - 1 preceding and current row  -- noqa: PRS
        ) as level
    from metrics
    where metric = metric_name and isfinite(value)
),

beyond as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from series
    where idx > warmup and case
        when above and inclusive then level >= threshold
        when above then level > threshold
        when inclusive then level <= threshold
        else level < threshold
    end
)

select
    run_key,
    min(step) as onset,
    max(step) as last_step,
    case when max(idx) < any_value(n) then max(step) end as step_end,
    count(*) as steps,
    median(level) as typical,
    case when above then max(level) else min(level) end as worst,
    sum(value) as total
from beyond
group by run_key, episode
having count(*) >= sustain;

-- The steps whose reward groups were all tied (frac_reward_zero_std of 1, or a reward_std of 0): no group had an
-- advantage, so nothing was learnt from them and the gradient is another quantity (the KL term's alone, or none).
create or replace temp macro tied_steps() as table
select distinct run_key, step
from metrics
where isfinite(value)
    and ((metric = 'frac_reward_zero_std' and value >= 1 - 1e-9) or (metric = 'reward_std' and abs(value) < 1e-9));

-- Spikes against a robust baseline, in log space (grad norms and KL are roughly log-normal, so a 3x bump on a
-- noisy run and on a quiet one are each judged against the run's own spread): a logged value is a spike when it
-- is at least `min_ratio` times the baseline level, more than `mad_factor` robust standard deviations (1.4826 MAD
-- of the logs, never below `min_spread`) above it, and above `min_value`. The baseline is the `window` logged
-- steps before the step (`centered` false) or on both sides of it, the step excluded (`centered` true: a KL level
-- that moves slowly), and needs `min_baseline` of them. `positive_only`: zeros are not values of this metric
-- (they are left out, not read as log 1e-9). `skip_tied`: steps whose reward groups were all tied (tied_steps) are
-- a population of their own, for a metric that can be another quantity on such steps (the grad norm of the KL term
-- alone, a thousand times smaller): the other steps are judged against the others only, and a tied step against
-- both, the tied steps around it and the `window` ordinary steps nearest before it (and after it, `centered`),
-- each where it has `min_baseline` points. Against tied steps alone, a KL-only gradient twice its usual size read
-- as a spike though it stayed a hundred times below the ordinary steps around it (a real ms-swift run); against
-- ordinary steps alone, a run tied at nearly every step would have no baseline, and one that has just started to
-- solve every prompt none of its own. The level told is the higher baseline's, so the ratio is the smaller one.
-- A frame with values below 0 (a signed estimate: KL's k1 goes below 0, so its log level is 1e-9 and any positive
-- value would be a spike by the log criteria) also needs the value `mad_factor` robust standard deviations of the
-- values themselves above their median: a k1 KL swinging from -0.6 to 0.3 is noise (a real custom trainer's log).
-- Consecutive spiking steps are one episode: run_key, onset, step_end, steps, worst (largest value), ratio (largest
-- value / level), level (the baseline level at the onset), linear_level (the median of the values around it).
create or replace temp macro log_spikes(metric_name, window_steps, centered, mad_factor, min_spread, min_ratio,
                                        min_baseline, min_value := 0, positive_only := true,
                                        skip_tied := false, beyond_max := 0) as table
with tied as (
    select * from tied_steps() where skip_tied
),

series as (
    select metrics.run_key, metrics.step, metrics.value, ln(greatest(metrics.value, 1e-9)) as log_value,
        tied.step is not null as is_tied,
        row_number() over (partition by metrics.run_key, tied.step is not null order by metrics.step) as idx
    from metrics
    left join tied on metrics.run_key = tied.run_key and metrics.step = tied.step
    where metrics.metric = metric_name  -- noqa: RF02
        and isfinite(metrics.value) and (metrics.value > 0 or not positive_only)  -- noqa: RF02
),

framed as (
    select *, min(log_value) over baseline as min_log, count(*) over baseline as base_n
    from series
    -- the `window_steps` points before the step, and with `centered` as many after it
    window baseline as (
        partition by run_key, is_tied order by step
        rows between window_steps preceding and window_steps * centered::int following  -- noqa: PRS
        exclude current row
    )
),

-- The median and MAD over every point's frame were nearly all of the cost (1.7 s a rule at 3e7 values). A spike
-- is at least `min_ratio` times the median of its frame, which is at least the frame's minimum: points below
-- `min_ratio` times that minimum (streamed, cheap) cannot be spikes, and the holistic median and MAD are computed
-- for the rest only, from their frame's rows (idx: `metrics` holds one row per run, step and metric). The same
-- flags; 5-7x faster on the bench's runs with the rules' thresholds, ~25 % slower when thresholds near 1 make
-- most points candidates. The 1e-9 slack keeps a candidate whose median equals its minimum. A tied step without
-- a baseline of its own (its first few) is a candidate too: its ordinary frame judges it.
candidates as (
    select *
    from framed
    where value > min_value and (
        (base_n >= min_baseline and (min_ratio <= 0 or value >= min_ratio * exp(min_log) * (1 - 1e-9)))
        or (is_tied and base_n < min_baseline)
    )
),

ordinary as (
    select run_key, step, idx from series where not is_tied
),

-- a tied candidate's ordinary steps logged before it (the idx of the last of them): where its ordinary frame ends
tied_candidates as (
    select c.*, coalesce(o.idx, 0) as ordinary_before
    from candidates as c
    asof left join ordinary as o on c.run_key = o.run_key and c.step > o.step
    where c.is_tied
),

frames as (  -- each candidate with the log values of its frame among its own population, and a tied one's among
    -- the ordinary steps
    select
        c.run_key, c.is_tied, c.step, c.idx, c.value, c.log_value, false as ordinary, s.log_value as frame_log_value,
        s.value as frame_value
    from candidates as c
    join series as s
        on c.run_key = s.run_key and c.is_tied = s.is_tied
        and s.idx between c.idx - window_steps and c.idx + window_steps * centered::int  -- noqa: RF02
        and c.idx <> s.idx

    union all

    select
        c.run_key, c.is_tied, c.step, c.idx, c.value, c.log_value, true as ordinary, s.log_value as frame_log_value,
        s.value as frame_value
    from tied_candidates as c
    join series as s
        on c.run_key = s.run_key and not s.is_tied
        and s.idx between c.ordinary_before - window_steps + 1  -- noqa: RF02
        and c.ordinary_before + window_steps * centered::int  -- noqa: RF02
),

baselines as (
    select
        run_key, is_tied, step, idx, value, log_value, ordinary,
        exp(median(frame_log_value)) as level,
        median(frame_log_value) as log_level,
        1.4826 * mad(frame_log_value) as spread,
        max(frame_log_value) as max_log,
        median(frame_value) as linear_level,
        1.4826 * mad(frame_value) as linear_spread,
        min(frame_value) as frame_min
    from frames
    group by all
    having count(*) >= min_baseline
),

-- With `beyond_max` > 0, a point at least that many times the largest of its frame is a spike too: on a log whose
-- baseline is itself noisy (grad norms between 10 and 200) the robust spread hides a jump past everything the run
-- did lately (62x its median, 8x its largest), which no reading of noise explains. A point is a spike against
-- every baseline it has.
judged as (
    select
        run_key, is_tied, step, idx, value,
        max(level) as level,
        bool_and(
            value >= min_ratio * level
            and (log_value > log_level + mad_factor * greatest(spread, min_spread)
                or (beyond_max > 0 and log_value >= max_log + ln(greatest(beyond_max, 1e-9))))
            -- a frame holding values below 0 is a signed estimate (KL's k1, around 0 and below it): its noise is
            -- additive and its log level 1e-9, so it is judged on the values themselves
            and (frame_min >= 0 or value > linear_level + mad_factor * greatest(linear_spread, 1e-12))
        ) as spiked,
        min(linear_level) as linear_level
    from baselines
    group by run_key, is_tied, step, idx, value
),

spikes as (
    select *, idx - row_number() over (partition by run_key, is_tied order by step) as episode
    from judged
    where spiked
)

select
    run_key,
    min(step) as onset,
    max(step) as step_end,
    count(*) as steps,
    max(value) as worst,
    max(value / level) as ratio,
    arg_min(level, step) as level,
    arg_min(linear_level, step) as linear_level
from spikes
group by run_key, is_tied, episode;

-- Trend windows: at every logged step, the least-squares line through the metric's last `window_steps` logged
-- points (the step included), for drift rules (a KL climbing, a length growing). Per step: run_key, step, value,
-- idx, n (the run's points), k (points in the window), slope, slope_se (null under 3 points or when the window's
-- steps do not vary), start_step and start_idx (the window's first point), fitted_start, fitted_end (the line at
-- both ends), start_value (median of the window's first points: robust to one outlier at its start).
create or replace temp macro trend_windows(metric_name, window_steps) as table
with series as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = metric_name and isfinite(value)
),

windows as (
    select
        *,
        regr_count(value, step) over trend as k,
        regr_slope(value, step) over trend as slope,
        regr_intercept(value, step) over trend as intercept,
        regr_sxx(value, step) over trend as sxx,
        regr_syy(value, step) over trend as syy,
        regr_sxy(value, step) over trend as sxy,
        first_value(step) over trend as start_step,
        first_value(idx) over trend as start_idx,
        median(value) over head as start_value
    from series
    window
        trend as (
            partition by run_key order by step
            rows between window_steps - 1 preceding and current row  -- noqa: PRS
        ),
        head as (
            partition by run_key order by step
            rows between window_steps - 1 preceding and window_steps - 3 preceding  -- noqa: PRS
        )
)

select
    run_key, step, value, idx, n, k, slope, start_step, start_idx, start_value,
    intercept + slope * start_step as fitted_start,
    intercept + slope * step as fitted_end,
    case when k > 2 and sxx > 0 then sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx) end as slope_se
from windows;

-- Collapse: a metric falls below a bar set by its own recent baseline and stays there. The baseline is the median
-- of the `window_steps` logged points ending `lag` points before the step judged (a collapse that takes a few
-- steps to unfold is still compared with the level before it), counted once it has `min_baseline` points and a
-- median of at least `min_base`. The bar is the lowest of: `drop_ratio` times the baseline median, the median
-- minus `mad_factor` robust SDs (1.4826 MAD), the median minus `min_drop_share` of the run's p5..p95 range before
-- the baseline ends (pass 1, 0, 0 to leave a term out). An onset is a step below the bar whose next `sustain` - 1
-- points stay below it too; the episode lasts until the metric climbs back to bar + `recover_share` of the way to
-- the baseline. With `new_low`, those `sustain` points must also lie below the run's p5 before the baseline ends: a
-- level the run had hardly ever visited (a series as noisy as 8 samples a step dips that low now and then).
-- With `run_share`, `window_steps`, `lag` and `min_baseline` are each at most that share of the run's logged points
-- (at least 3, 1 and 3): a run of 40 points needs 30 before anything is judged otherwise, and a collapse in its
-- first quarter goes unseen. With `run_noise`, the robust SD is at least the run's own log-to-log noise (1.4826
-- times the median absolute difference of consecutive points, over sqrt 2): a baseline of three or four quiet
-- points, a short log's or a flat start's, understates how far the metric moves between two logs, and an ordinary
-- stretch of that noise would pass for a collapse. Onsets inside an earlier unrecovered episode are that episode.
-- One row per episode:
-- run_key, onset, onset_value, base_median, bar, recovered_at (null: still collapsed), lowest, collapsed_level
-- (median while collapsed), last_low (last step before the recovery).
create or replace temp macro collapses(metric_name, window_steps, lag, min_baseline, sustain, drop_ratio, mad_factor,
                                       min_drop_share, recover_share, min_base := -1e308, new_low := false,
                                       recover_steps := 1, run_share := 1e308, run_noise := false) as table
with points as (
    select run_key, step, value, count(*) over (partition by run_key) as n
    from metrics
    where metric = metric_name and isfinite(value)
),

series as (
    select
        run_key, step, value, row_number() over (partition by run_key order by step) as idx,
        least(window_steps, greatest(3, ceil(n * run_share)))::bigint as window_n,
        least(lag, greatest(1, ceil(n * run_share)))::bigint as lag_n,
        least(min_baseline, greatest(3, ceil(n * run_share)))::bigint as min_baseline_n,
        -- the lowest of this and the next recover_steps - 1 logged values: a recovery must last that long (one
        -- answer of normal length among degenerate ones ends nothing), or to the end of the run
        min(value) over (
            partition by run_key order by step rows between current row and recover_steps - 1 following  -- noqa: PRS
        ) as held,
        abs(value - lag(value) over (partition by run_key order by step)) as step_change
    from points
),

baseline as (
    select
        *,
        median(value) over recent as base_median,
        greatest(1.4826 * mad(value) over recent,
                 case when run_noise then 1.4826 * median(step_change) over (partition by run_key) / sqrt(2) end)
            as base_spread,
        count(*) over recent as base_n,
        quantile_cont(value, 0.95) over earlier - quantile_cont(value, 0.05) over earlier as prior_range,
        quantile_cont(value, 0.05) over earlier as prior_low,
        max(value) over ahead as worst_ahead,
        count(*) over ahead as n_ahead
    from series
    window
        recent as (
            partition by run_key order by step
            rows between window_n + lag_n preceding and lag_n + 1 preceding  -- noqa: PRS
        ),
        earlier as (
            partition by run_key order by step
            rows between unbounded preceding and lag_n + 1 preceding  -- noqa: PRS
        ),
        ahead as (
            partition by run_key order by step
            rows between current row and sustain - 1 following  -- noqa: PRS
        )
),

bars as (
    select
        *,
        least(drop_ratio * base_median,
              base_median - greatest(mad_factor * base_spread, min_drop_share * prior_range, 1e-9)) as bar
    from baseline
    where base_n >= min_baseline_n and base_median >= min_base
),

ends as (
    select
        o.run_key,
        o.step as onset,
        any_value(o.value) as onset_value,
        any_value(o.base_median) as base_median,
        any_value(o.bar) as bar,
        min(s.step) filter (
            where s.held >= o.bar + recover_share * (o.base_median - o.bar)  -- noqa: RF02
        ) as recovered_at
    from bars as o
    join series as s on o.run_key = s.run_key and o.step < s.step
    where o.value < o.bar and o.n_ahead = sustain and o.worst_ahead < o.bar  -- noqa: RF02
        and (not new_low or o.worst_ahead < o.prior_low)  -- noqa: RF02
    group by o.run_key, o.step
)

select
    e.*,
    (select min(s.value) from series as s
     where s.run_key = e.run_key and s.step >= e.onset and s.step < coalesce(e.recovered_at, 9223372036854775807))
        as lowest,
    (select median(s.value) from series as s
     where s.run_key = e.run_key and s.step >= e.onset and s.step < coalesce(e.recovered_at, 9223372036854775807))
        as collapsed_level,
    (select max(s.step) from series as s
     where s.run_key = e.run_key and s.step < coalesce(e.recovered_at, 9223372036854775807)) as last_low
from ends as e
where not exists (
    select 1 from ends as previous
    where previous.run_key = e.run_key and previous.onset < e.onset
        and (previous.recovered_at is null or previous.recovered_at > e.onset)
);
