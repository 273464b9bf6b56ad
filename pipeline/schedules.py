"""Schedules: a periodic refresh for sources that no sensor watches (and as a safety net for those it does)."""

import dagster as dg

from pipeline.jobs import refresh_job

refresh_schedule = dg.ScheduleDefinition(
    name="hourly_refresh",
    job=refresh_job,
    cron_schedule="0 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
