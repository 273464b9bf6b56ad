"""Sensors: start a refresh as soon as a W&B offline run file appears or grows."""


import hashlib
import os

import dagster as dg

from pipeline.jobs import refresh_job
from pipeline.resources import GrpolensResource
from pipeline.sources import wandb_offline


@dg.sensor(job=refresh_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def wandb_offline_files_sensor(context: dg.SensorEvaluationContext, grpolens: GrpolensResource):
    """One stat per run file; a run is requested only for files that changed since the last ingest."""
    settings = grpolens.settings()
    if not settings.wandb_dirs:
        return dg.SkipReason("GRPOLENS_WANDB_DIRS is not set")
    pending = wandb_offline.pending_files(settings.lake, settings.wandb_dirs)
    if not pending:
        return dg.SkipReason("no new or grown run files")
    signature = hashlib.sha256(
        "\n".join(f"{p}:{os.path.getsize(p)}" for p in pending if os.path.exists(p)).encode()
    ).hexdigest()[:16]
    return dg.RunRequest(run_key=f"wandb-offline-{signature}",
                         tags={"grpolens/trigger": "wandb_offline_files", "grpolens/files": str(len(pending))})
