with runs as (
    select * from {{ ref('stg_lake__runs') }}
),

final as (
    select
        run_key,
        source,
        origin,
        entity,
        project,
        run_id,
        name,
        state,
        exit_code,
        tags,
        group_name,
        job_type,
        sweep_id,
        created_at,
        heartbeat_at,
        config::json as config,
        summary::json as summary,
        last_step,
        history_rows,
        wandb_version,
        source_files,
        step_offsets::json as step_offsets,
        ingested_at
    from runs
)

select * from final
