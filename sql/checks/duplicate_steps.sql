-- duplicate_steps: the same step was logged more than once (a resumed run re-logging steps, or two log calls per
-- trainer step), which double-counts rows and makes per-step plots and sums wrong.
-- severity: warn
-- reads: history, trainer_steps
-- requires:
-- role: operations
-- advice: logging do: Check that a resumed run continued from the checkpoint of the step it restarted at
-- param min_repeats = 1      -- trainer steps logged twice before it is worth a flag
-- Two signs, each reported once per run:
-- * history.versions > 1: one (run, step, key) arrived more than once, e.g. a trainer restarted from a checkpoint
--   that appends the same steps to its log again (staging keeps the newest value; this counts what it dropped).
--   Versions count the producer's records, not ingests: rows an interrupted ingest wrote twice, a trainer_state.json
--   read again after a checkpoint rewrote it (its entries keep their places), or one run read from its file and
--   from the W&B cloud, are one version. Evaluation values (`eval_*`, `eval/*`, `test`, `val`) are left out: an
--   evaluation run again at a step that had one (Trainer.evaluate() after the last step's) is no repeated step.
-- * a trainer step counter whose value repeats across different W&B steps, with some other key logged at two of
--   them: the trainer called log twice for one step. A counter is any key named like one (`global_step`, `step`,
--   `*_step`: train/global_step, benchmark/step, trainer/step; not W&B's own `_step`) whose values are integers that
--   never decrease over the run (`timing_s/step` is a duration, not a counter). TRL's evaluation rows repeat
--   train/global_step too, but share no key with the training row except the counter and the epoch, so they are
--   not duplicates; nor are TRL's `profiling/Time taken: ...` timings, logged once per call by design (several
--   calls a step: a public TRL RAG run logs 1,297 rows over 80 steps so).
with repeated_rows as (  -- on the trainer's steps (trainer_steps), as every metric
    select
        h.run_key,
        count(*) as values_repeated,
        count(distinct coalesce(t.trainer_step, h.step)) as steps_repeated,
        min(coalesce(t.trainer_step, h.step)) as first_step,
        max(coalesce(t.trainer_step, h.step)) as last_step,
        max(h.versions) as most
    from history as h
    left join trainer_steps as t on h.run_key = t.run_key and h.step = t.logged_step
    where h.versions > 1 and not regexp_matches(h.key, '^(eval|test|val|validation)[_/]')
    group by h.run_key
),

named as (
    select run_key, step, key, value
    from history
    -- ends_with first: it is cheap, and the regex then runs only on the keys that end in `step`
    where ends_with(key, 'step') and regexp_matches(key, '(^|[/.])([a-z]+_)?step$') and key <> '_step'
        and isfinite(value)
),

counter_keys as (  -- integers that never decrease over the run's W&B steps
    select run_key, key
    from (select *, value - lag(value) over (partition by run_key, key order by step) as change from named) as changes
    group by run_key, key
    having bool_and(value = floor(value)) and coalesce(min(change), 0) >= 0 and count(*) >= 2
),

counter as (
    select n.run_key, n.step, n.key as counter_key, n.value as trainer_step
    from named as n
    join counter_keys using (run_key, key)
),

shared_steps as (  -- trainer steps that span more than one W&B step
    select run_key, counter_key, trainer_step
    from counter
    group by run_key, counter_key, trainer_step
    having count(*) > 1
),

double_logged as (
    select c.run_key, c.counter_key, c.trainer_step, min(h.step) as first_step, max(h.step) as last_step
    from counter as c
    join shared_steps using (run_key, counter_key, trainer_step)
    join history as h on c.run_key = h.run_key and c.step = h.step
    where h.key not in (select k.key from counter_keys as k where k.run_key = c.run_key)
        and h.key not like '%epoch' and not starts_with(h.key, '_') and not starts_with(h.key, 'profiling/')
    group by c.run_key, c.counter_key, c.trainer_step
    having count(*) > count(distinct h.key)  -- some key appears at two of those W&B steps
),

double_summary as (
    select
        run_key,
        any_value(counter_key) as counter_key,
        count(*) as trainer_steps,
        min(first_step) as first_step,
        max(last_step) as last_step,
        min(trainer_step) as first_trainer_step
    from double_logged
    group by run_key
    having count(*) >= $min_repeats
)

select
    run_key,
    'duplicate_steps' as check_name,
    'warn' as severity,
    first_step as step,
    last_step as step_end,
    'history.versions' as metric,
    values_repeated as value,
    1 as threshold,
    printf('%d values at %d steps (%d..%d) were logged more than once (up to %d times): the run was probably '
           || 'restarted and logged steps it had already written again; the warehouse keeps the newest value, but '
           || 'check that the resumed run really continued from the checkpoint of that step',
           values_repeated, steps_repeated, first_step, last_step, most) as message
from repeated_rows

union all

select
    d.run_key,
    'duplicate_steps' as check_name,
    'warn' as severity,
    coalesce(t_first.trainer_step, d.first_step) as step,  -- the trainer's step where trainer_steps has the run
    coalesce(t_last.trainer_step, d.last_step) as step_end,
    d.counter_key as metric,
    d.trainer_steps as value,
    $min_repeats as threshold,
    printf('%d trainer steps (%s, first %d) were logged in more than one W&B row with the same keys (W&B steps '
           || '%d..%d): two log calls per training step double the row count and skew per-step plots; log once '
           || 'per step, or pass step= so W&B merges them', d.trainer_steps, d.counter_key,
           d.first_trainer_step::bigint, d.first_step, d.last_step) as message
from double_summary as d
left join trainer_steps as t_first on d.run_key = t_first.run_key and d.first_step = t_first.logged_step
left join trainer_steps as t_last on d.run_key = t_last.run_key and d.last_step = t_last.logged_step
