-- phase_bottleneck: one phase of the training step takes most of the step time.
-- severity: info
-- reads: metrics
-- requires: step_time_s
-- role: operations
-- advice: pipeline do: Speed up or overlap the dominant phase of the step
-- param max_share = 0.6      -- a phase above this share of the step is the bottleneck (reference: > 60%); a
--                               training-side phase (below) there is a warning
-- param warn_share = 0.85    -- a rollout-side phase this dominant is a warning too: everything else waits on it
-- param smooth = 5           -- judged on the median share over the last this many logged steps
-- param sustain = 5          -- for at least this many consecutive logged steps
-- param min_coverage = 0.5   -- phases logged on fewer than this share of the steps (checkpoint saves, validation)
--                               are periodic, not per-step, and are left to checkpoint_save_slow
-- Phases are the phase_<name>_s metrics (verl timing_s/*), the step is step_time_s (verl timing_s/step). A run
-- that logs no total step time (the Diplomacy trainer overlaps rollout and training) has no shares to judge.
-- Rollout-side phases (generation, rollout, sampling, the reward: an LLM judge) are info up to warn_share: long
-- responses make generation most of a healthy step (real verl runs log 50-80%), and a bottleneck there is where to
-- optimise, not a fault. A training-side phase (log-probs, reference, values, advantages, the actor or critic update)
-- has no such reason to take most of the step (reference: log-prob 20-40%, update 30-50%): past max_share it is a
-- warning (micro-batches too small, offloading, a recompute), whatever the rollouts cost.
with step_time as (
    select run_key, step, value as step_s
    from metrics
    where metric = 'step_time_s' and isfinite(value) and value > 0
),

phases as (
    select m.run_key, m.step, regexp_extract(m.metric, '^phase_(.*)_s$', 1) as phase, m.value / s.step_s as share
    from metrics as m
    join step_time as s using (run_key, step)
    where m.metric like 'phase\_%\_s' escape '\' and isfinite(m.value)
),

per_step as (
    select
        run_key, step, phase, share,
        row_number() over (partition by run_key, phase order by step) as idx,
        count(*) over (partition by run_key, phase) as n,
        median(share) over (partition by run_key, phase order by step rows between $smooth - 1 preceding
            and current row) as level
    from phases
),

step_counts as (
    select run_key, count(*) as steps
    from step_time
    group by run_key
),

regular as (
    select p.*
    from per_step as p
    join step_counts as t using (run_key)
    where p.n >= $min_coverage * t.steps
),

dominant as (
    select *, idx - row_number() over (partition by run_key, phase order by step) as episode
    from regular
    where level > $max_share
),

episodes as (
    select
        run_key,
        phase,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        median(level) as typical,
        max(level) as worst
    from dominant
    group by run_key, phase, episode
    having count(*) >= $sustain
)

select
    run_key,
    'phase_bottleneck' as check_name,
    case
        when worst > $warn_share or not regexp_matches(phase, '(gen|rollout|sampl|reward|judge)') then 'warn'
        else 'info'
    end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'phase_' || phase || '_s' as metric,
    typical as value,
    $max_share as threshold,
    printf('phase %s took %.0f%% of the step time (median; up to %.0f%%) from step %d for %d logged steps: it is '
           || 'the bottleneck; speed it up (or overlap it) before tuning anything else', phase, 100 * typical,
           100 * worst, onset, steps) as message
from episodes
