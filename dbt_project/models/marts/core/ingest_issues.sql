select * from {{ ref('stg_lake__ingest_issues') }}
