"""Run the configured ingest sources; an unconfigured source is skipped with one line saying so."""

from __future__ import annotations

from typing import Callable

from pipeline.settings import Settings

SOURCES = ("wandb_offline",)


def ingest(settings: Settings, sources: tuple[str, ...] = SOURCES,
           progress: Callable[[str], None] | None = None) -> dict[str, object]:
    """Returns each source's report (or the reason it was skipped), in order."""
    say = progress or (lambda _msg: None)
    reports: dict[str, object] = {}
    for name in sources:
        if name == "wandb_offline":
            if not settings.wandb_dirs:
                reports[name] = "skipped: GRPOLENS_WANDB_DIRS is not set"
                say(f"wandb offline: {reports[name]}")
                continue
            from pipeline.sources import wandb_offline

            report = wandb_offline.ingest(settings.lake, settings.wandb_dirs, progress=say)
            reports[name] = report
            for line in report.lines():
                say(line)
        else:
            raise ValueError(f"unknown source {name!r}; known: {', '.join(SOURCES)}")
    return reports

