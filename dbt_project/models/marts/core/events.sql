-- Every event once, as DESIGN.md names the columns; `fields` holds everything else the producer sent.
select dataset, "time", event, service, rollout_id, run_name, fields, event_id
from {{ ref('stg_lake__events') }}
