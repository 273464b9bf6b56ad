-- One row per artifact a run logged (W&B cloud runs: the offline file does not list them), so "which
-- checkpoints did this run save, and which is `best`" is a plain query.
with runs as (
    select run_key, artifacts from {{ ref('stg_lake__runs') }}
    where artifacts is not null
),

unnested as (
    select run_key, unnest(cast(artifacts as json[])) as artifact
    from runs
),

final as (
    select
        run_key,
        artifact ->> '$.name' as artifact_name,
        artifact ->> '$.type' as artifact_type,
        artifact ->> '$.version' as version,
        cast(artifact -> '$.aliases' as varchar[]) as aliases
    from unnested
)

select * from final
