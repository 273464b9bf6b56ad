"""Jobs: a refresh is every ingest asset followed by the dbt models and their checks."""

import dagster as dg

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.all(),
    description="Ingest what is new in every configured source, then build the warehouse and run its checks.",
)
