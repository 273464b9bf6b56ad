"""Sensors: start a refresh as soon as a source's files appear or grow (one stat per file; nothing is written),
and ingest W&B cloud runs that appeared or changed, one partition each."""

import hashlib
import os
from datetime import UTC, datetime

import dagster as dg

from pipeline.assets.wandb_cloud import wandb_cloud_runs
from pipeline.ingest import SOURCES, source_module
from pipeline.jobs import refresh_job, wandb_cloud_job
from pipeline.resources import GrpolensResource
from pipeline.sources import wandb_cloud


def files_sensor(name: str) -> dg.SensorDefinition:
    source = SOURCES[name]

    @dg.sensor(
        name=f"{name}_files_sensor",
        job=refresh_job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Requests a refresh when files under {source.variable} are new or have grown.",
    )
    def _sensor(context: dg.SensorEvaluationContext, grpolens: GrpolensResource):
        settings = grpolens.settings()
        roots = getattr(settings, source.setting)
        if not roots:
            return dg.SkipReason(f"{source.variable} is not set")
        pending = source_module(name).pending_files(settings.lake, roots)
        if not pending:
            return dg.SkipReason("no new or grown files")
        signature = hashlib.sha256(
            "\n".join(f"{p}:{os.path.getsize(p)}" for p in pending if os.path.exists(p)).encode()
        ).hexdigest()[:16]
        return dg.RunRequest(
            run_key=f"{name}-{signature}",
            tags={"grpolens/trigger": f"{name}_files", "grpolens/files": str(len(pending))},
        )

    return _sensor


# Every file-based source has one; Axiom is polled by the refresh schedule.
FILE_SENSORS = {name: files_sensor(name) for name, source in SOURCES.items() if source.files}


@dg.sensor(
    name="wandb_cloud_sensor",
    job=wandb_cloud_job,
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Adds a partition per new W&B cloud run and requests the runs updated since the last look.",
)
def wandb_cloud_sensor(context: dg.SensorEvaluationContext, grpolens: GrpolensResource):
    settings = grpolens.settings()
    if not settings.wandb_projects:
        return dg.SkipReason("GRPOLENS_WANDB_PROJECTS is not set")
    began = datetime.now(UTC)
    since = wandb_cloud.parse_time(context.cursor)
    try:
        listed, changed = wandb_cloud.list_changed(
            settings.lake, settings.wandb_projects, since - wandb_cloud.OVERLAP if since else None
        )
    except Exception as exc:  # the key or the server; the cursor stays, so the next look covers this one's span
        return dg.SkipReason(wandb_cloud.scrub_secret(f"listing failed: {type(exc).__name__}: {exc}"))
    partitions_name = wandb_cloud_runs.name
    assert partitions_name is not None  # the definition is created with a name
    known = set(context.instance.get_dynamic_partitions(partitions_name))
    new = sorted({ref.path for ref in listed} - known)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=ref.path, run_key=f"{ref.path}@{ref.signature}") for ref in changed],
        dynamic_partitions_requests=[wandb_cloud_runs.build_add_request(new)] if new else [],
        cursor=wandb_cloud.iso_z(began),
    )
