"""Sensors: start a refresh as soon as a source's files appear or grow (one stat per file; nothing is written)."""

import hashlib
import importlib
import os

import dagster as dg

from pipeline.ingest import SOURCES
from pipeline.jobs import refresh_job
from pipeline.resources import GrpolensResource


def files_sensor(name: str) -> dg.SensorDefinition:
    source = SOURCES[name]

    @dg.sensor(name=f"{name}_files_sensor", job=refresh_job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Requests a refresh when files under {source.variable} are new or have grown.")
    def _sensor(context: dg.SensorEvaluationContext, grpolens: GrpolensResource):
        settings = grpolens.settings()
        roots = getattr(settings, source.setting)
        if not roots:
            return dg.SkipReason(f"{source.variable} is not set")
        pending = importlib.import_module(source.module).pending_files(settings.lake, roots)
        if not pending:
            return dg.SkipReason("no new or grown files")
        signature = hashlib.sha256(
            "\n".join(f"{p}:{os.path.getsize(p)}" for p in pending if os.path.exists(p)).encode()
        ).hexdigest()[:16]
        return dg.RunRequest(run_key=f"{name}-{signature}", tags={"grpolens/trigger": f"{name}_files",
                                                                 "grpolens/files": str(len(pending))})

    return _sensor


# Every file-based source has one; Axiom is polled by the refresh schedule.
FILE_SENSORS = {name: files_sensor(name) for name in SOURCES
                if hasattr(importlib.import_module(SOURCES[name].module), "pending_files")}
