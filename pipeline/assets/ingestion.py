"""Ingest assets, one per source: each materialization appends what is new in that source to the lake. Their
asset keys are the dbt sources' tables (lake/<source>_<table>), so the dbt models run after them."""

from typing import Any

import dagster as dg

from pipeline.ingest import SOURCES, ingest_source
from pipeline.resources import GrpolensResource


def lake_asset(name: str) -> dg.AssetsDefinition:
    source = SOURCES[name]

    @dg.multi_asset(
        name=f"{name}_lake",
        specs=[
            dg.AssetSpec(
                ["lake", f"{name}_{table}"],
                group_name="lake",
                kinds={"parquet"},
                description=f"Lake table `{table}`, appended by the {source.label} ingest.",
            )
            for table in source.tables
        ],
        can_subset=False,
        description=f"Append what is new under {source.variable} to the lake.",
    )
    def _ingest(context: dg.AssetExecutionContext, grpolens: GrpolensResource):
        report = ingest_source(grpolens.settings(), name, progress=context.log.info)
        metadata: dict[str, Any] = {"configured": report is not None}
        if report is not None:
            metadata.update(
                {
                    "files_seen": report.files_seen,
                    "files_read": report.files_read,
                    "values": report.values,
                    "runs_updated": len(report.runs_touched),
                    "issues": len(report.issues),
                    "ingest_id": report.ingest_id if report.ingest_id is not None else dg.MetadataValue.null(),
                    "seconds": round(report.seconds, 3),
                }
            )
        for table in source.tables:
            yield dg.MaterializeResult(asset_key=["lake", f"{name}_{table}"], metadata=metadata)

    return _ingest


# W&B cloud runs are partitioned per run (pipeline.assets.wandb_cloud); every other source is one asset.
LAKE_ASSETS = {name: lake_asset(name) for name in SOURCES if name != "wandb_cloud"}
