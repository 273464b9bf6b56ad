-- history mapped onto the canonical vocabulary (seed metric_aliases, and grpolens.yaml's aliases). One series per
-- (run, metric): when a run logs several keys for one metric, the lowest-priority alias present in that run wins
-- for every step of it (alphabetical source_key breaks ties), so a series never mixes definitions.
-- The step is the trainer's (trainer_steps): a run that logs a trainer step counter is put on it, and when two
-- of its logged rows land on one trainer step, the later one's value is the step's.
-- Only numbers are values of a metric: a boolean logged under a metric's key (`"kl": true`) has value 1 or 0 in
-- history (value_type 'bool'), which no metric means, so it is left out (a KL of `true` is not a spike to 1).
-- Incremental: the runs history redid are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with history as (
    select run_key, step, ts, key, value
    from {{ of_changed_runs(ref('history')) }}
    where value is not null and value_type is distinct from 'bool'
),

-- grpolens.yaml's aliases (pipeline/aliases.py) replace the seed's mapping of their keys and win over the seed's
-- other keys of their metric
user_aliases as (
    select source_key, metric, 0 as priority, 1.0::double as scale, 0.0::double as shift from {{ user_aliases() }}
),

-- a seed alias may rescale what the trainer logs (scale, shift: Tinker's share of mixed groups is 1 - the tied share)
seed_aliases as (
    select source_key, metric, priority, coalesce(scale, 1.0) as scale, coalesce(shift, 0.0) as shift
    from {{ ref('metric_aliases') }}
    where source_key not in (select source_key from user_aliases)
),

-- a key spelt like a canonical metric (`clip_fraction`, `task_score`) is that metric, after every alias of it: a
-- custom trainer that names its keys after the vocabulary should not need an alias for each
canonical_names as (
    select distinct s.metric as source_key, s.metric, 9 as priority, 1.0::double as scale, 0.0::double as shift
    from seed_aliases as s
    anti join seed_aliases as named on s.metric = named.source_key
    anti join user_aliases as u on s.metric = u.source_key
),

-- a seed key with its slashes as underscores (`critic_score_mean`, `actor_grad_norm`, `timing_s_gen`): CSV and
-- TensorBoard exports and loggers that flatten names write verl's and TRL's keys so; after every key as the seed
-- spells it, and after the canonical names
flattened as (
    select distinct
        replace(s.source_key, '/', '_') as source_key, s.metric, s.priority + 10 as priority, s.scale, s.shift
    from seed_aliases as s
    anti join seed_aliases as named on replace(s.source_key, '/', '_') = named.source_key
    anti join user_aliases as u on replace(s.source_key, '/', '_') = u.source_key
    where contains(s.source_key, '/') and not contains(s.source_key, '%')
),

aliases as (
    select * from seed_aliases
    union all by name
    select * from canonical_names
    union all by name
    select * from flattened
    union all by name
    select source_key, metric, priority, scale, shift from user_aliases
),

run_keys as (
    select distinct run_key, key from history
),

matched as (
    select r.run_key, r.key as source_key, a.metric, a.priority, a.scale, a.shift
    from run_keys as r
    join aliases as a
        on (a.source_key not like '%\%%' escape '\' and r.key = a.source_key)
        or (a.source_key like '%\%%' escape '\' and r.key like a.source_key)
),

chosen as (
    select run_key, metric, source_key, scale, shift
    from matched
    qualify row_number() over (partition by run_key, metric order by priority, source_key) = 1
),

series as (
    select h.run_key, h.step, h.ts, c.metric, c.shift + c.scale * h.value as value, c.source_key
    from history as h
    join chosen as c on h.run_key = c.run_key and h.key = c.source_key
),

final as (
    select * from {{ on_trainer_steps('series', series='metric') }} as on_steps
)

select * from final
