-- One row per run; the JSON columns typed as JSON for DuckDB's json functions (config->>'$.learning_rate').
-- last_step is the trainer's (trainer_steps), as every step of metrics and the marts.
with runs as (
    select * from {{ ref('stg_lake__runs') }}
),

trainer_steps as (
    select * from {{ ref('trainer_steps') }}
),

final as (
    select runs.* exclude (ingest_id) replace (  -- EXCLUDE names a column, not a reference -- noqa: RF02
        runs.config::json as config,
        runs.summary::json as summary,
        runs.step_offsets::json as step_offsets,
        coalesce(t.trainer_step, runs.last_step) as last_step
    )
    from runs
    left join trainer_steps as t on runs.run_key = t.run_key and runs.last_step = t.logged_step
)

select * from final
