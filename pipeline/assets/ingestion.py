"""Ingest assets, one per source: each materialization appends what is new in that source to the lake. Their
asset keys are the dbt sources' tables (lake/<source>_<table>), so the dbt models run after them."""

import importlib

import dagster as dg

from pipeline.ingest import SOURCES
from pipeline.resources import GrpolensResource

TABLES = ("runs", "history", "ingest_issues")


def lake_asset(name: str) -> dg.AssetsDefinition:
    source = SOURCES[name]

    @dg.multi_asset(
        name=f"{name}_lake",
        specs=[
            dg.AssetSpec(["lake", f"{name}_{table}"], group_name="lake", kinds={"parquet"},
                         description=f"Lake table `{table}`, appended by the {source.label} ingest.")
            for table in TABLES
        ],
        can_subset=False,
        description=f"Append what is new under {source.variable} to the lake.",
    )
    def _ingest(context: dg.AssetExecutionContext, grpolens: GrpolensResource):
        settings = grpolens.settings()
        roots = getattr(settings, source.setting)
        if not roots:
            context.log.info(f"{source.label}: skipped, {source.variable} is not set")
        report = importlib.import_module(source.module).ingest(settings.lake, roots, progress=context.log.debug)
        for line in report.lines():
            context.log.info(line)
        metadata = {
            "files_seen": report.files_seen,
            "files_read": report.files_read,
            "values": report.values,
            "runs_updated": len(report.runs_touched),
            "issues": len(report.issues),
            "ingest_id": report.ingest_id if report.ingest_id is not None else dg.MetadataValue.null(),
            "seconds": round(report.seconds, 3),
        }
        for table in TABLES:
            yield dg.MaterializeResult(asset_key=["lake", f"{name}_{table}"], metadata=metadata)

    return _ingest


wandb_offline_lake = lake_asset("wandb_offline")
trainer_log_lake = lake_asset("trainer_log")
