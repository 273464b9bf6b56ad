-- reward_collapse: the reward falls to (or below) its floor within a few steps and stays there.
-- severity: error
-- reads: metrics
-- requires: reward_mean
-- role: outcome
-- advice: checkpoint do: Resume from a checkpoint before the collapse
-- advice: learning_rate down: Lower the learning rate
-- param window = 20          -- logged steps in the baseline (median and MAD)
-- param lag = 10             -- the baseline ends this many logged steps before the step judged, so a collapse
--                               that takes a few steps to unfold is still compared with the level before it
-- param min_baseline = 10    -- logged steps needed before a baseline counts
-- param mad_factor = 3       -- the drop must exceed this many robust SDs (1.4826 MAD) of the baseline, or of the
--                               run's log-to-log noise when that is larger (a short log's baseline of three or four
--                               points can be quieter than the reward ever is again)
-- param min_drop_share = 0.75 -- and this share of the run's range before the baseline's end (p5..p95): a dip
--                               of a few percent on a quiet run is not a collapse, a fall back below where the
--                               run started is
-- param sustain = 5          -- every one of this many consecutive logged steps stays below the onset's bar
-- param min_low = 10         -- a fall the reward came back from within fewer logged steps than this is a dip of a
--                               noisy run, not a policy that degenerated (one still down at the run's end counts)
-- param min_low_share = 0.05 -- ... or within this share of the run's logged steps, if more: on a long run a few
--                               dozen steps of a lower reward that then came back are a passing disturbance (a
--                               harder stretch of data), not a collapse
-- param run_share = 0.1      -- window, lag and min_baseline are at most this share of the run's logged points: a
--                               40-point log would otherwise be blind until its 31st point
-- The episode ends when the reward climbs back above the midpoint between the bar and the old baseline.
with reward as (
    select run_key, step, value
    from metrics
    where metric = 'reward_mean' and isfinite(value)
),

episodes as (
    select *
    from collapses('reward_mean', $window, $lag, $min_baseline, $sustain, 1, $mad_factor, $min_drop_share, 0.5,
                   run_share := $run_share, run_noise := true)
),

-- The onset is walked back over the low points before the one judged first: a coarse log (logging_steps=10) needs
-- `min_baseline + lag` points before any is judged, but the collapse started at its first low point (#12 class 2).
walked as (
    select
        e.* exclude (onset),
        coalesce((
            select min(r.step) from reward as r
            where r.run_key = e.run_key and r.step <= e.onset and r.step > coalesce((
                select max(r2.step) from reward as r2
                where r2.run_key = e.run_key and r2.step < e.onset and r2.value >= e.bar), -1)
        ), e.onset) as onset
    from episodes as e
),

-- the episodes that lasted: still down, or down for at least min_low logged steps (min_low_share of the run)
-- before the reward came back
lasting as (
    select w.*
    from walked as w
    where w.recovered_at is null
        or (select count(*) from reward as r
            where r.run_key = w.run_key and r.step >= w.onset and r.step < w.recovered_at)
            >= greatest($min_low, $min_low_share * (select count(*) from reward as r where r.run_key = w.run_key))
)

select
    run_key,
    'reward_collapse' as check_name,
    'error' as severity,
    onset as step,
    case when recovered_at is not null then last_low end as step_end,
    'reward_mean' as metric,
    collapsed_level as value,
    bar as threshold,
    printf('reward collapsed from an earlier median of %.3g to %.3g at step %d and stayed near %.3g%s; the policy '
           || 'has degenerated: look for a length or entropy collapse or a KL blow-up at the same steps, and '
           || 'resume from a checkpoint before step %d with a lower learning rate', base_median, onset_value,
           onset, collapsed_level, case when recovered_at is not null then printf(' until step %d', recovered_at)
           else '' end, onset) as message
from lasting
