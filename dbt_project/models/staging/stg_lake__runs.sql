-- One row per run: the newest snapshot any ingest wrote for it.
with source as (
    {{ lake_union('runs') }}
),

renamed as (
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
        config,
        summary,
        last_step,
        history_rows,
        wandb_version,
        source_files,
        step_offsets,
        artifacts::json as artifacts,
        history_from_ingest,
        ingest_id,
        ingested_at
    from source
),

final as (
    select *
    from renamed
    qualify row_number() over (partition by run_key order by ingest_id desc, ingested_at desc) = 1
)

select * from final
