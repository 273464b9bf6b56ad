-- Where each run's reward came from: one row per reward component (the per-function rewards trainers log next to
-- the total: `rewards/<func>` or `rewards/<func>/mean`, with or without `train/`), compared with the total reward
-- (reward_mean) at the same steps, first third of the run against the last third.
--   gain          = the component's mean over the last third - over the first third
--   gain_t        = that gain in standard errors (Welch); total_t the same for the total reward
--   gain_share    = gain / the total's gain (when the reward is the sum of its terms, the shares add up to 1)
--   total_first_mean = the total reward's mean over the first third (the level its gain is judged against)
--   start_gain    = the last third's mean - the mean over the run's start (its first tenth, at least 3 points);
--                   total_start_gain the same for the total. Terms learnt in the first steps (the format and the
--                   answers together, then a plateau) mix both levels into the first third's mean, which hides
--                   what the task gained: from the start it shows
--   late_gain     = the last third's mean - the middle third's (mid_mean); late_gain_t, total_late_gain,
--                   total_mid_mean and total_late_t the same for the late part of the run. A term that starts
--                   to carry the reward after the task has been learnt (a late hack) gains little against the
--                   first third's task level: against the middle third it shows
--   variance_share = cov(component, total) / var(total): its share of the total's movement
--   onset_step    = where the component's move began: the first step after the last 10-point trailing mean short
--                   of a tenth of its move from its start (first tenth) to its last third; a noisy start
--                   makes it later, never earlier. late_onset_step the same from the middle third
--   last_nonzero_share = how often it still fired over the last third (0: it stopped)
-- A function logged with the total's value at every step beside other functions (a trainer whose reward_weights
-- let one aggregate function drive the training, the others logged for diagnosis) is the total itself: it has no
-- row, or the parts would add up to twice the reward. A run's only function is its reward, and keeps its row, as
-- does one beside functions that never fired (gave 0 at every step): it is the whole reward because they are 0.
-- `is_task` marks components that score the task (correctness, accuracy, answers, numbers, ...), `is_form` those
-- that score its form (format, XML tags, length, language): the vars `task_component_pattern` and
-- `form_component_pattern`. A component named for neither (`tool_use_reward_fn`) is neither.
-- Incremental: redoes the runs whose lake parts changed (pipeline/build_plan.py), keeps the others.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with component_rows as (
    select run_key, key, step, value
    from {{ of_changed_runs(ref('history')) }}
    -- the substring test first: it is cheap, and the regex then runs only on the few keys that pass it
    where contains(key, 'rewards/') and regexp_matches(key, '^(train/)?rewards/[^/]+(/mean)?$') and isfinite(value)
        and value_type is distinct from 'bool'  -- a flag logged under a reward's key is no reward (as in metrics)
),

components as (  -- on the trainer's steps, as metrics
    select
        run_key,
        regexp_extract(key, '^(?:train/)?rewards/([^/]+)(?:/mean)?$', 1) as component,
        key,
        step,
        value
    from {{ on_trainer_steps('component_rows') }} as rows_on_steps
),

chosen as (  -- `rewards/<f>/mean` over `rewards/<f>` when a trainer logs both
    select run_key, component, arg_min(key, case when key like '%/mean' then 0 else 1 end) as key
    from components
    group by run_key, component
),

paired_with_totals as (
    select
        c.run_key, c.component, c.key, c.step, c.value, r.value as total,
        row_number() over (partition by c.run_key, c.component order by c.step) as idx,
        count(*) over (partition by c.run_key, c.component) as n
    from components as c
    join chosen using (run_key, component, key)
    join {{ of_changed_runs(ref('metrics')) }} as r
        on c.run_key = r.run_key and c.step = r.step and r.metric = 'reward_mean'
    where isfinite(r.value)
),

runs_with_several as (
    select run_key
    from paired_with_totals
    group by run_key
    having count(distinct component) > 1
),

totals_as_components as (  -- a function whose value is the total's at every step, beside others, is the total
    select p.run_key, p.component
    from paired_with_totals as p
    semi join runs_with_several using (run_key)
    group by p.run_key, p.component
    having bool_and(abs(p.value - p.total) <= 1e-9 * greatest(1, abs(p.total)))
),

firing as (
    select run_key, component
    from paired_with_totals
    group by run_key, component
    having bool_or(abs(value) > 1e-12)
),

-- ... when another function of the run fired: beside functions that gave 0 at every step (an accuracy no answer
-- ever earned) the one that carries the whole reward is a part of it, the part that matters
totals_beside_parts as (
    select distinct t.run_key, t.component
    from totals_as_components as t
    join firing as f on t.run_key = f.run_key and t.component <> f.component
),

paired as (
    select p.*
    from paired_with_totals as p
    anti join totals_beside_parts using (run_key, component)
),

stats as (
    select
        run_key,
        component,
        any_value(key) as key,
        regexp_matches(lower(component), '{{ var("task_component_pattern") }}')
            and not regexp_matches(lower(component), '{{ var("form_component_pattern") }}') as is_task,
        regexp_matches(lower(component), '{{ var("form_component_pattern") }}') as is_form,
        count(*) as points,
        count(*) filter (where value <> 0) as nonzero_points,
        count(*) filter (where value <> 0 and idx > n - n / 3) / nullif(count(*) filter (where idx > n - n / 3), 0)
            as last_nonzero_share,
        min(step) as first_step,
        max(step) as last_step,
        avg(value) filter (where idx <= n / 3) as first_mean,
        avg(value) filter (where idx <= greatest(3, n / 10)) as start_mean,
        avg(value) filter (where idx > n - n / 3) as last_mean,
        {{ welch_t('value', 'idx <= n / 3', 'idx > n - n / 3') }} as gain_t,
        avg(value) filter (where idx > n / 3 and idx <= n - n / 3) as mid_mean,
        {{ welch_t('value', 'idx > n / 3 and idx <= n - n / 3', 'idx > n - n / 3') }} as late_gain_t,
        avg(total) filter (where idx <= n / 3) as total_first_mean,
        avg(total) filter (where idx > n / 3 and idx <= n - n / 3) as total_mid_mean,
        {{ welch_t('total', 'idx > n / 3 and idx <= n - n / 3', 'idx > n - n / 3') }} as total_late_t,
        avg(total) filter (where idx <= greatest(3, n / 10)) as total_start_mean,
        avg(total) filter (where idx > n - n / 3) as total_last_mean,
        {{ welch_t('total', 'idx <= n / 3', 'idx > n - n / 3') }} as total_t,
        covar_samp(value, total) / nullif(var_samp(total), 0) as variance_share
    from paired
    group by run_key, component
),

rolling as (
    select
        p.run_key, p.component, p.step,
        avg(p.value) over last10 as recent,
        count(p.value) over last10 as window_n,
        s.start_mean, s.mid_mean, s.last_mean, s.points
    from paired as p
    join stats as s using (run_key, component)
    window last10 as (partition by p.run_key, p.component order by p.step rows between 9 preceding and current row)
),

-- each full window: past a tenth of the move to the last third's level, from the start and from the middle third
marked as (
    select
        run_key, component, step,
        case when last_mean >= start_mean then recent >= start_mean + 0.1 * (last_mean - start_mean)
            else recent <= start_mean + 0.1 * (last_mean - start_mean) end as moved,
        case when last_mean >= mid_mean then recent >= mid_mean + 0.1 * (last_mean - mid_mean)
            else recent <= mid_mean + 0.1 * (last_mean - mid_mean) end as moved_late
    from rolling
    where window_n >= least(10, points)
),

shortfalls as (
    select
        run_key,
        component,
        max(step) filter (where not moved) as last_short,
        max(step) filter (where not moved_late) as last_short_late
    from marked
    group by run_key, component
),

onsets as (  -- where the move began: the first window after the last one short of it
    select
        m.run_key,
        m.component,
        min(m.step) filter (where m.moved and (s.last_short is null or m.step > s.last_short)) as onset_step,
        min(m.step) filter (where m.moved_late and (s.last_short_late is null or m.step > s.last_short_late))
            as late_onset_step
    from marked as m
    join shortfalls as s using (run_key, component)
    group by m.run_key, m.component
),

final as (
    select
        s.run_key,
        s.component,
        s.key,
        s.is_task,
        s.is_form,
        s.points,
        s.nonzero_points,
        s.last_nonzero_share,
        s.first_step,
        s.last_step,
        s.first_mean,
        s.last_mean,
        s.last_mean - s.first_mean as gain,
        s.gain_t,
        s.total_first_mean,
        s.total_last_mean - s.total_first_mean as total_gain,
        (s.last_mean - s.first_mean) / nullif(s.total_last_mean - s.total_first_mean, 0) as gain_share,
        s.last_mean - s.start_mean as start_gain,
        s.total_last_mean - s.total_start_mean as total_start_gain,
        s.total_t,
        s.mid_mean,
        s.last_mean - s.mid_mean as late_gain,
        s.late_gain_t,
        s.total_mid_mean,
        s.total_last_mean - s.total_mid_mean as total_late_gain,
        s.total_late_t,
        s.variance_share,
        coalesce(o.onset_step, s.first_step) as onset_step,
        coalesce(o.late_onset_step, o.onset_step, s.first_step) as late_onset_step
    from stats as s
    left join onsets as o using (run_key, component)
)

select * from final
